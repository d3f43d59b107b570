"""The run screen: one training run's status, figures, loss, checkpoints and events.

Every figure comes from the run's events folded into a `RunState`; cost and elapsed time
take "now" from the app's clock while the trainer runs and the last event's time once it
has ended. The app's follow thread reads the events; this screen only draws what it is
handed (`show`) and sends the user's commands.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Static
from textual.worker import Worker, WorkerState

from cockpit import fmt, supervisor
from cockpit.headless import describe
from cockpit.protocol import Fault
from cockpit.runstate import RunState
from cockpit.session import RunSession
from screens.confirm import Confirm
from widgets.event_log import EventLog
from widgets.loss_plot import LossPlot
from widgets.progress import StepProgress
from widgets.stats import Row, StatsPanel

MAX_LOG_LINES = 1000
ERROR_MESSAGE_CHARS = 300
CLIENT_LINE_INDENT = " " * len("0:00:00 ")  # this client's own lines carry no event time
STOP_QUESTION = "Stop the run? A checkpoint is saved first."


# ---------------------------------------------------------------- figures (pure)


def param_count(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f}{unit}"
    return str(n)


def byte_size(n_bytes: int | None) -> str:
    if n_bytes is None:
        return "-"
    return f"{n_bytes / 2**20:.1f} MiB" if n_bytes < 2**30 else fmt.gib(n_bytes)


def memory_rows(state: RunState) -> list[Row]:
    memory, total = state.memory, state.device.get("total_bytes")
    if "mem_allocated_bytes" in memory:
        of_total = f" of {fmt.gib(total, 1)}" if total else ""
        reserved = memory.get("mem_reserved_bytes")
        return [
            ("GPU alloc/res", f"{memory['mem_allocated_bytes'] / 2**30:.2f} / {fmt.gib(reserved)}"),
            ("GPU peak", f"{fmt.gib(memory.get('mem_peak_bytes'))}{of_total}"),
        ]
    if "rss_bytes" in memory:
        return [("memory", f"{fmt.gib(memory['rss_bytes'])} RSS (host)")]
    return [("memory", "-")]


def stat_rows(state: RunState, now_ts: float | None) -> list[Row]:
    """The stats panel: training figures first, then what runs where on what data."""
    drop = state.loss_drop()
    loss = fmt.loss(state.loss)
    if drop is not None:
        loss += f", {-drop:+.1%} from first"
    rows: list[Row] = [
        ("loss", loss),
        ("learning rate", fmt.sci(state.learning_rate)),
        ("grad norm", fmt.rate(state.grad_norm)),
        ("tokens/s", fmt.rate(state.tokens_per_s)),
        ("samples/s", fmt.rate(state.samples_per_s)),
        ("step time", fmt.rate(state.step_time_s, " s")),
        ("ETA", fmt.duration(state.eta_s()) + (" once resumed" if state.status == "paused" else "")),
        ("elapsed", f"{fmt.duration(state.billed_s(now_ts))} billed"),
    ]
    if state.price_per_hour is None:
        rows.append(("cost", Text("- (set cost.price_per_hour)", style="dim")))
    else:
        rows.append(
            ("cost", f"{fmt.money(state.cost_so_far(now_ts))} at {fmt.money(state.price_per_hour)}/h")
        )
        rows.append(("projected", f"~{fmt.money(state.cost_projected(now_ts))} for the run"))
    rows.extend(memory_rows(state))
    device = state.device
    if device:
        rows.append(("device", f"{device.get('kind')} {device.get('name')}"))
        rows.append(("precision", state.precision or "-"))
    model = state.model
    if model:
        rows.append(("model", f"{model.get('name')} ({model.get('method')})"))
        trainable, total = model.get("params_trainable"), model.get("params_total")
        share = f" ({trainable / total:.1%})" if trainable and total else ""
        rows.append(("trainable", f"{param_count(trainable)} of {param_count(total)}{share}"))
    data = state.data
    if data:
        rows.append(("data", f"{data.get('samples')} samples, {data.get('truncated')} truncated"))
        rows.append(
            (
                "tokens",
                f"{data.get('tokens_min')}-{data.get('tokens_max')}, mean {data.get('tokens_mean')}, "
                f"p95 {data.get('tokens_p95')}",
            )
        )
    return rows


def checkpoint_rows(state: RunState) -> list[Row]:
    if not state.checkpoints:
        return [("", Text("none yet", style="dim"))]
    width = max(len(str(c.get("step"))) for c in state.checkpoints)
    return [
        (c["name"], f"step {c.get('step')!s:<{width}}  {byte_size(c.get('bytes'))}")
        for c in state.checkpoints
    ]


def error_text(state: RunState, interrupted: bool = False) -> Text | None:
    """What went wrong, what to do, and that the checkpoints are intact; None while nothing did.

    `interrupted`: a replayed run whose trainer is gone without a final event (killed, rebooted).
    """
    if state.status != "failed" and not interrupted:
        return None
    text = Text()
    error = state.error
    if error:
        phase = str(error.get("phase") or "").replace("_", " ")
        step = error.get("step")
        where = (f" at step {step}" if step else "") + (f" while {phase}" if phase else "")
        message = str(error.get("message", ""))
        if len(message) > ERROR_MESSAGE_CHARS:
            message = message[:ERROR_MESSAGE_CHARS] + "… (the events log has all of it)"
        text.append(
            f"{str(error.get('kind', 'error')).upper()}{where}: ",
            style="bold",
        )
        text.append(f"{message}\n")
        if error.get("hint"):
            text.append("fix: ", style="bold")
            text.append(f"{error['hint']}\n")
        names = error.get("checkpoints") or []
    else:  # the trainer ended without a final event; a client may have written down how
        outcome = state.outcome or {
            "reason": "the trainer is gone without a final event (killed, crashed, or the machine rebooted)"
        }
        text.append(f"{outcome.get('reason', 'the trainer exited without a final event')}\n", style="bold")
        tail = [line for line in str(outcome.get("log_tail") or "").splitlines() if line.strip()][-3:]
        for line in tail:
            text.append(f"{line}\n", style="dim")
        names = [c["name"] for c in state.checkpoints]
    if names:
        text.append(f"checkpoints intact: {', '.join(names)}", style="bold")
        text.append(f"; continue with: cockpit restart {state.run_id}")
    else:
        text.append("no complete checkpoint: a restart begins from step 0")
    return text


def item_type(item: dict | Fault) -> str | None:
    return item.get("type") if isinstance(item, dict) else None


class EventLines:
    """Lines for the events log, each stamped with the run time since its first event."""

    def __init__(self) -> None:
        self.first_ts: float | None = None
        self.last_ts: float | None = None

    def lines(self, items: list[dict | Fault]) -> list[str]:
        out = []
        for item in items:
            ts = item.get("ts") if isinstance(item, dict) else None
            if isinstance(ts, (int, float)):
                self.first_ts = ts if self.first_ts is None else self.first_ts
                self.last_ts = ts
            line = describe(item)
            if not line:
                continue
            if item_type(item) == "error":
                line = line.splitlines()[0]  # the error panel shows the fix
            stamp = fmt.duration(self.last_ts - self.first_ts) if self.first_ts is not None else "-:--:--"
            out.extend(f"{stamp} {part}" for part in line.splitlines())
        return out


# ---------------------------------------------------------------- the screen


class RunView(Screen):
    CSS_PATH = "run_view.tcss"
    AUTO_FOCUS = "#events"  # arrow keys and PgUp scroll the event history
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("s", "save", "Save checkpoint"),
        Binding("p", "pause", "Pause"),
        Binding("p", "resume", "Resume"),
        Binding("x", "stop", "Stop"),
    ]

    class StopSaid(Message):
        """A line from the stop thread (`supervisor.stop` says what it escalates to)."""

        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    def __init__(self, session: RunSession, clock: Callable[[], float]):
        super().__init__()
        self.session = session
        self.clock = clock
        self.status = "starting"
        self.live = not session.replay  # until the first update says otherwise
        self.stopping = False
        self.updates_shown = 0
        self._losses_shown = -1

    def compose(self) -> ComposeResult:
        with Horizontal(id="header"):
            yield Static(self.session.run.run_id, id="run-id")
            yield Static("", id="status")
            yield Static("", id="phase")
            yield Static("REPLAY", id="replay")
        yield StepProgress(id="progress")
        with VerticalScroll(id="error"):
            yield Static("", id="error-text")
        with Horizontal(id="body"):
            with VerticalScroll(id="stats-box"):
                yield StatsPanel(id="stats")
            with Vertical(id="right"):
                yield LossPlot(id="loss-plot")
                yield StatsPanel(id="checkpoints")
                yield EventLog(id="events", max_lines=MAX_LOG_LINES)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#stats-box").border_title = "run"
        self.query_one("#loss-plot").border_title = "loss"
        self.query_one("#checkpoints").border_title = "checkpoints"
        self.query_one("#events").border_title = "events"
        self.query_one("#replay").display = self.session.replay

    # ------------------------------------------------------------ drawing

    def show(self, lines: list[str]) -> None:
        """Redraw from the session's state; called from the app's handler while the follow thread waits."""
        session, state = self.session, self.session.state
        ended = session.ended or state.ended
        self.live = not session.replay and not ended
        interrupted = session.replay and session.trainer_gone and not state.ended
        status = "interrupted" if interrupted else state.status
        if self.status != status:
            self.status = status
            self.refresh_bindings()
        now_ts = state.last_ts if ended or session.trainer_gone else self.clock()
        self._show_status()
        phase = state.phase.replace("_", " ")
        self.query_one("#phase", Static).update(
            f"{phase}: {state.phase_message}" if state.phase_message else phase
        )
        self.query_one(StepProgress).show(
            state.step, state.total_steps, state.epoch, state.plan.get("epochs")
        )
        self.query_one("#stats", StatsPanel).show_rows(stat_rows(state, now_ts))
        self.query_one("#checkpoints", StatsPanel).show_rows(checkpoint_rows(state))
        if len(state.losses) != self._losses_shown:
            self._losses_shown = len(state.losses)
            self.query_one(LossPlot).plot(state.losses)
        error = error_text(state, interrupted)
        self.set_class(error is not None, "-failed")
        if error is not None:
            self.query_one("#error").border_title = "the trainer is gone" if interrupted else "the run failed"
            self.query_one("#error-text", Static).update(error)
        log = self.query_one(EventLog)
        for line in lines:
            log.write(line)
        self.updates_shown += 1

    def _show_status(self) -> None:
        label = "stopping…" if self.stopping and self.live else self.status
        status = self.query_one("#status", Static)
        status.update(f" {label} ")
        status.set_classes("-stopping" if label == "stopping…" else f"-{self.status}")

    # ------------------------------------------------------------ commands

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "pause":
            return self.status != "paused"
        if action == "resume":
            return self.status == "paused"
        return True

    def _refusal(self, command: str) -> str | None:
        if self.session.replay:
            return f"this is a replay of a recorded run: '{command}' needs a live trainer"
        if not self.live:
            return f"the run has ended ({self.status}): nothing to {command}"
        if self.stopping:
            return f"the run is stopping: '{command}' is not sent"
        return None

    def _send(self, command: str, sent: str) -> None:
        refusal = self._refusal(command)
        if refusal:
            self.notify(refusal, severity="warning")
            return
        try:
            self.session.send(command)
        except (supervisor.NotRunning, OSError) as exc:
            self.notify(f"'{command}' was not sent: {exc}", severity="error")
            return
        self.notify(sent)

    def action_save(self) -> None:
        self._send("save", "asked for a checkpoint after the current step")

    def action_pause(self) -> None:
        self._send("pause", "asked the trainer to pause after the current step")

    def action_resume(self) -> None:
        self._send("resume", "asked the trainer to resume")

    def action_stop(self) -> None:
        refusal = self._refusal("stop")
        if refusal:
            self.notify(refusal, severity="warning")
            return
        self.app.push_screen(Confirm(STOP_QUESTION), self._stop_confirmed)

    def _stop_confirmed(self, confirmed: bool | None) -> None:
        if not confirmed:
            return
        refusal = self._refusal("stop")  # the run may have ended while the question was open
        if refusal:
            self.notify(refusal, severity="warning")
            return
        self.stopping = True
        self._show_status()
        self.query_one(EventLog).write(f"{CLIENT_LINE_INDENT}stopping: asked for a checkpoint, then a stop")
        self.run_worker(self._stop, thread=True, group="stop", exit_on_error=False)

    def _stop(self) -> str:
        # blocks for up to STOP_GRACE_S + TERM_GRACE_S while the trainer checkpoints and exits
        return supervisor.stop(self.session.run, say=lambda text: self.post_message(self.StopSaid(text)))

    def on_run_view_stop_said(self, message: StopSaid) -> None:
        self.query_one(EventLog).write(f"{CLIENT_LINE_INDENT}stopping: {message.text}")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group != "stop" or event.state not in (WorkerState.SUCCESS, WorkerState.ERROR):
            return
        self.stopping = False
        if event.state == WorkerState.SUCCESS:
            self.notify(f"stop: {event.worker.result}")
        else:
            self.notify(f"stop failed: {event.worker.error}", severity="error")
        self._show_status()
