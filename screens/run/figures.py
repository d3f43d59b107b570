"""The run screen's figures, as plain rows and text: what a run's `RunState` says, formatted.

Pure: a state (and "now" for the clock-bound figures) in, rows out; the screen draws them.
"""

from __future__ import annotations

import math

from rich.text import Text

from cockpit import fmt
from cockpit.live import preference_text
from cockpit.live.event_text import describe
from cockpit.paths import cockpit_command
from cockpit.protocol.wire import Fault
from cockpit.run.state import RunState
from cockpit.sync.text import panel_text as sync_text
from widgets.stats import Row

ERROR_MESSAGE_CHARS = 300
BEST_MARK = "★"  # the checkpoint with the lowest eval loss
CLIENT_LINE_INDENT = " " * len("0:00:00 ")  # the events log's lines of this client carry no event time


def param_count(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f}{unit}"
    return str(n)


def phase_text(state: RunState, interrupted: bool = False) -> str:
    """The header's account of where the run is; an ended run says how it ended, not its last phase."""
    if state.status == "failed" or interrupted:
        error = state.error or {}
        phase = str(error.get("phase") or state.phase).replace("_", " ")
        step = error.get("step") or (state.step if state.step else None)
        how = "the trainer is gone" if interrupted else "failed"
        return f"{how} while {phase}" + (f" at step {step}" if step else "")
    if state.status in ("finished", "stopped"):
        return f"{state.status} at step {state.step}"
    phase = state.phase.replace("_", " ")
    return f"{phase}: {state.phase_message}" if state.phase_message else phase


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


def eta_text(state: RunState) -> str | Text:
    if state.ended:
        return "-"
    if state.eta_s() is None:
        return Text("estimating" if state.total_steps else "-", style="dim")
    return fmt.duration(state.eta_s()) + (" once resumed" if state.status == "paused" else "")


def tokens_text(state: RunState) -> str:
    """Real tokens/s, and the model FLOPs utilisation they give on this card (when it is known)."""
    mfu = state.mfu
    rate = fmt.rate(state.tokens_per_s)
    return rate if mfu is None else f"{rate}, MFU {fmt.share(mfu)}"


def preference_rows(state: RunState) -> list[Row]:
    """A preference run's last logged figures, its held-out reward accuracy and its reference."""
    pref = state.preference
    if pref.objective is None:
        return []
    rows: list[Row] = []
    parts = preference_text.status_parts(pref)
    if parts:
        rows.append((str(pref.objective), "  ".join(parts)))
    held = pref.last_eval.get("accuracy")
    if isinstance(held, (int, float)):
        rows.append(("held-out acc", f"{fmt.share(held)} at step {pref.last_eval.get('step')}"))
    if pref.setup.get("reference"):
        rows.append(("reference", str(pref.setup["reference"])))
    return rows


def eval_text(state: RunState) -> str:
    """The last eval loss and the best one, short enough for the stats panel at 80 columns."""
    best = state.best_eval
    if not best or best["eval_loss"] == state.eval_loss:
        return fmt.loss(state.eval_loss) + (", the best" if best else "")
    return f"{fmt.loss(state.eval_loss)}, best {fmt.loss(best['eval_loss'])} at {best['step']}"


def stat_rows(state: RunState, now_ts: float | None) -> list[Row]:
    """The stats panel: training figures first, then what runs where on what data."""
    drop = state.loss_drop()
    loss = fmt.loss(state.loss)
    if drop is not None and math.isfinite(drop):  # a nan or inf loss has no change to show
        loss += f", {-drop:+.1%} from first"
    rows: list[Row] = [("step loss", loss)]  # the last step's; the done line gives the mean over the run
    if state.eval_loss is not None:
        rows.append(("eval loss", eval_text(state)))
    rows += preference_rows(state)
    rows += [
        ("learning rate", fmt.sci(state.learning_rate)),
        ("grad norm", fmt.rate(state.grad_norm)),
        ("tokens/s", tokens_text(state)),
        ("samples/s", fmt.rate(state.samples_per_s)),
        ("step time", fmt.rate(state.step_time_s, " s")),
        ("ETA", eta_text(state)),
        ("elapsed", f"{fmt.duration(state.billed_s(now_ts))} billed"),
    ]
    if state.price_per_hour is None:
        rows.append(("cost", Text("- set cost.price_per_hour", style="dim")))  # fits 80x24
    else:
        rows.append(
            ("cost", f"{fmt.money(state.cost_so_far(now_ts))} at {fmt.money(state.price_per_hour)}/h")
        )
        projected = state.cost_projected(now_ts)
        if projected is None:
            rows.append(("projected", Text("estimating", style="dim")))
        else:
            rows.append(("projected", f"~{fmt.money(projected)} for the run"))
        if state.max_usd is not None:  # cost.max_usd: the trainer stops with a checkpoint there
            left = state.max_usd - (state.cost_so_far(now_ts) or 0.0)
            rows.append(("budget", f"{fmt.money(state.max_usd)}, {fmt.money(max(0.0, left))} left"))
    if state.sync:  # output.sync: what is off the machine
        rows.append(("sync", sync_text(state.sync, now_ts)))
    rows.extend(memory_rows(state))
    device = state.device
    if device:
        kind, name = device.get("kind"), device.get("name")
        # a CUDA card's name says what it is ("NVIDIA H100 80GB HBM3"); "cuda" before it cost the
        # row its end at 80 columns
        rows.append(("device", str(name) if kind == "cuda" and name else f"{kind} {name}"))
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
    rows: list[Row] = []
    for c in state.checkpoints:
        # checkpoint-N is named by its step (`export --checkpoint N`): "step N" alone leaves the size
        # and the eval loss their room at 80 columns, where "checkpoint-N  step N" cut them
        value = fmt.size(c.get("bytes"))
        if c.get("eval_loss") is not None:
            value += f"  {fmt.loss(c['eval_loss'])}"  # the panel's title says it is the eval loss
        named = str(c["name"])
        label = f"step {c.get('step')}" if named.endswith(f"-{c.get('step')}") else named
        # the mark leads the name, so a narrow panel that cuts the row still shows it
        name = f"{BEST_MARK} {label}" if named == state.best_checkpoint else label
        rows.append((name, value))
    return rows


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
        text.append(f"; continue with: {cockpit_command()} restart {state.run_id}")
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
