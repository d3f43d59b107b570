"""`--no-ui`: a live status for tmux when stdout is a terminal, plain timestamped lines when not.

Never imports textual (a test proves it). Ctrl-C detaches: training goes on.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from types import FrameType
from typing import TYPE_CHECKING, NoReturn, TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from cockpit import fmt
from cockpit.doctor.multi_gpu import rank_pids
from cockpit.doctor.window import Finding
from cockpit.live import preference_text
from cockpit.live.event_text import describe
from cockpit.live.stall import Stall, StallNotices, find_stall
from cockpit.live.trainer_seen import TrainerLook
from cockpit.live.watch import LiveWatch, finding_line, gpu_status
from cockpit.money import idle
from cockpit.paths import cockpit_command
from cockpit.plain import wrapped
from cockpit.results import summary
from cockpit.run.exit_codes import EXIT_DETACHED, exit_code
from cockpit.run.state import RunState
from cockpit.telemetry.sampler import Sample

if TYPE_CHECKING:
    from cockpit.live.sources import RunSource

POLL_S = 0.1
REFRESH_PER_S = 2
END_COMMAND_WAIT_S = 15.0  # for cost.on_end's first event after the trainer's end
IDLE_POLL_S = 1.0


def status_line(state: RunState, now_ts: float | None) -> str:
    parts = [f"loss {fmt.loss(state.loss)}"]
    if state.eval_loss is not None:
        parts.append(f"eval {fmt.loss(state.eval_loss)}")
    parts += [
        *preference_text.status_parts(state.preference),
        f"lr {fmt.sci(state.learning_rate)}",
        f"tok/s {fmt.rate(state.tokens_per_s)}",
        *([f"MFU {fmt.share(state.mfu)}"] if state.mfu is not None else []),
        f"ETA {'estimating' if state.estimating and state.total_steps else fmt.duration(state.eta_s())}",
        f"elapsed {fmt.duration(state.billed_s(now_ts))}",
    ]
    if state.price_per_hour is not None:
        projected = state.cost_projected(now_ts)
        of = "" if projected is None else f" (of ~{fmt.money(projected)})"
        parts.append(f"cost {fmt.money(state.cost_so_far(now_ts))}{of}")
        if state.max_usd is not None:
            parts.append(f"budget {fmt.money(state.max_usd)}")
    return "  ".join(parts)


def log_line(state: RunState, now_ts: float | None) -> str:
    total = state.total_steps or "?"
    return f"step {state.step}/{total} epoch {state.epoch or 0:.2f}  {status_line(state, now_ts)}"


def detached_text(run_id: str, paused: bool, width: int) -> str:
    """What goes on after a detach, and the commands for it, wrapped to `width` with each command
    whole: a paused run stays paused until resumed."""
    attach, stop, resume = (f"{cockpit_command()} {verb} {run_id}" for verb in ("attach", "stop", "resume"))
    steps = [f"Watch: {attach}", f"Stop: {stop}"]
    if paused:
        steps.insert(0, f"Resume: {resume}")
        said = "detached; the run stays paused. " + "   ".join(steps)
    else:
        said = "detached; training goes on. " + "   ".join(steps)
    # each step whole where it fits, else at least its command
    return "\n".join(wrapped([said], width, keep=(*steps, attach, stop, resume)))


class _Detach(Exception):
    pass


def follow(
    session: RunSource,
    out: TextIO | None = None,
    log_every_s: float = 10.0,
    force_terminal: bool | None = None,
) -> int:
    """Show the run until it ends (exit code by its ending) or the user detaches (Ctrl-C)."""
    out = out or sys.stdout
    console = Console(file=out, force_terminal=force_terminal)

    def on_interrupt(_signum: int, _frame: FrameType | None) -> NoReturn:
        raise _Detach

    previous = signal.signal(signal.SIGINT, on_interrupt)
    watch = None
    settings = idle.settings_of(session.run.config_path)
    alarm = idle.IdleAlarm(settings, session.run.log_path)
    if session.mode == "live" and not session.trainer_gone:
        record = session.run.read_trainer() or {}
        watch = LiveWatch(record.get("pid"), doctor=settings.doctor()).start()
    ended = False
    try:
        if console.is_terminal:
            code = _follow_live(session, console, watch, alarm)
        else:
            code = _follow_plain(session, out, log_every_s, watch, alarm)
        ended = True
        _after_end(session, out, watch, alarm)
        return code
    except _Detach:
        run = session.run.run_id
        if ended:  # watching for an idle GPU after the end: leaving it is no detach
            print("\nleft the idle watch", file=out, flush=True)
            return exit_code(session.state)
        if session.mode != "live":  # a recording (or a run that no longer trains): nothing goes on
            said = (
                f"\nleft the recording of {run}; it is not training (`{cockpit_command()} runs` shows its "
                "status)"
            )
        else:
            said = "\n" + detached_text(run, session.state.status == "paused", console.width)
        print(said, file=out, flush=True)
        return EXIT_DETACHED
    finally:
        signal.signal(signal.SIGINT, previous)
        if watch is not None:
            watch.stop()
        session.close()


def _alarm(alarm: idle.IdleAlarm, findings: list[Finding], out: TextIO) -> None:
    text = alarm.update(findings)
    if text:
        idle.ring(out)
        stamp = datetime.now().isoformat(timespec="seconds")
        print(f"{stamp} {text}", file=out, flush=True)


def _after_end(session: RunSource, out: TextIO, watch: LiveWatch | None, alarm: idle.IdleAlarm) -> None:
    """The end command's first word (it runs once the trainer's processes are gone), the summary,
    then, with cost.on_idle set, the idle watch until its alarm went off or Ctrl-C."""
    end_command = summary.configured_on_end(session.run)
    if end_command and session.mode == "live" and (session.state.end_command or {}).get("state") is None:
        deadline = time.monotonic() + END_COMMAND_WAIT_S
        while time.monotonic() < deadline:
            for item in session.poll():
                line = describe(item)
                if line:
                    stamp = datetime.now().isoformat(timespec="seconds")
                    print(f"{stamp} {line}", file=out, flush=True)
            if (session.state.end_command or {}).get("state") in ("finished", "failed"):
                break
            time.sleep(POLL_S)
    lines = summary.run_summary_lines(session.run, session.state, session.next_commands)
    print("\n".join(["summary:", *lines]), file=out, flush=True)
    if watch is None or not alarm.settings.on_idle:
        return
    print(
        f"the run ended; watching the GPU for cost.on_idle (after {alarm.settings.idle_minutes:g} min idle): "
        "Ctrl-C to leave",
        file=out,
        flush=True,
    )
    while alarm.spells == 0:
        _sample, findings = watch.update(session.state)
        _alarm(alarm, findings, out)
        time.sleep(IDLE_POLL_S)


def _follow_plain(
    session: RunSource, out: TextIO, log_every_s: float, watch: LiveWatch | None, alarm: idle.IdleAlarm
) -> int:
    # lines are printed message by message, so a replayed history reads as it happened
    view = RunState(run_id=session.run.run_id)
    last_log, last_step = -1e18, None
    shown: dict[str, Finding] = {}
    stalls, stall_of = StallNotices(), _StallWatch(session)
    while True:
        items = session.poll()
        sample, findings = watch.update(session.state) if watch else (None, [])
        _print_changes(shown, findings, out)
        _alarm(alarm, findings, out)
        said = stalls.update(stall_of())
        if said:
            print(f"{datetime.now().isoformat(timespec='seconds')} {said}", file=out, flush=True)
        for item in items:
            view.apply(item)
            ts = item.get("ts") if isinstance(item, dict) else None
            stamp = datetime.fromtimestamp(ts if isinstance(ts, (int, float)) else time.time()).isoformat(
                timespec="seconds"
            )
            if isinstance(item, dict) and item.get("type") == "log":
                due = ts is None or ts - last_log >= log_every_s or view.step == view.total_steps
                if due and view.step != last_step:
                    last_log, last_step = ts or time.time(), view.step
                    pids = _trainer_pids(watch, session.state)
                    ok = sample is not None and sample.nvml == "ok"
                    gpu = f"  {gpu_status(sample, pids)}" if ok else ""
                    print(f"{stamp} {log_line(view, ts)}{gpu}", file=out, flush=True)
                continue
            line = describe(item)
            if line:
                print(f"{stamp} {line}", file=out, flush=True)
        if session.ended or (session.trainer_gone and not items):
            return exit_code(session.state)
        if not items:
            time.sleep(POLL_S)


class _StallWatch:
    """A live trainer gone quiet (cockpit.live.stall), judged with a look at its process (its state
    letter, its CPU use: cockpit.live.trainer_seen); a replay's silences are in its recording."""

    def __init__(self, session: RunSource) -> None:
        self.session = session
        self.look: TrainerLook | None = None

    def __call__(self) -> Stall | None:
        session = self.session
        if session.mode != "live" or session.trainer_gone:
            return None
        if self.look is None:
            pid = (session.run.read_trainer() or {}).get("pid")
            self.look = TrainerLook(pid) if isinstance(pid, int) else None
        seen = self.look.look() if self.look is not None else None
        return find_stall(session.state, _now(session), seen)


def _now(session: RunSource) -> float:
    """The live session's clock (RunSession.now_ts: not stepped with the wall clock), else the wall's."""
    now_ts = getattr(session, "now_ts", None)
    return now_ts() if now_ts is not None else time.time()


def _print_changes(shown: dict[str, Finding], findings: list[Finding], out: TextIO) -> None:
    """A line when the doctor finds something, and one when it no longer holds."""
    stamp = datetime.now().isoformat(timespec="seconds")
    current = {f.rule: f for f in findings}
    for rule, finding in current.items():
        if rule not in shown:
            print(f"{stamp} {finding_line(finding)}", file=out, flush=True)
    for rule, finding in shown.items():
        if rule not in current:
            print(f"{stamp} doctor: no longer holds: {finding.title}", file=out, flush=True)
    shown.clear()
    shown.update(current)


def _trainer_pids(watch: LiveWatch | None, state: RunState) -> set[int]:
    """The trainer and, on several GPUs, its ranks: the GPUs they hold are the run's."""
    return {*([watch.trainer_pid] if watch is not None and watch.trainer_pid else []), *rank_pids(state)}


def _render(
    state: RunState,
    now_ts: float | None,
    sample: Sample | None = None,
    findings: Sequence[Finding] = (),
    watching: bool = False,
    pids: set[int] | frozenset[int] = frozenset(),
) -> Group:
    head = Table.grid(expand=True, padding=(0, 1))
    head.add_column(ratio=1)
    head.add_column(width=40)
    head.add_column(justify="right")
    total = state.total_steps or 0
    bar = ProgressBar(total=max(total, 1), completed=min(state.step, total) if total else 0, width=40)
    head.add_row(
        Text(f"{state.run_id}  [{state.status}] {state.phase}", style="bold"),
        bar,
        f"{state.step}/{total or '?'}",
    )
    lines: list[RenderableType] = [head, Text(status_line(state, now_ts))]
    if watching:
        lines.append(Text(gpu_status(sample, pids)))
        for finding in findings:
            style = {"alarm": "bold red", "warn": "yellow"}.get(finding.severity, "cyan")
            lines.append(Text(finding_line(finding), style=style))
    return Group(*lines)


def _follow_live(session: RunSource, console: Console, watch: LiveWatch | None, alarm: idle.IdleAlarm) -> int:
    stalls, stall_of = StallNotices(), _StallWatch(session)
    with Live(console=console, refresh_per_second=REFRESH_PER_S, transient=False) as live:
        while True:
            items = session.poll()
            state = session.state
            sample, findings = watch.update(state) if watch else (None, [])
            sounded = alarm.update(findings)
            if sounded:
                idle.ring(console.file)
                live.console.print(sounded, markup=False, highlight=False, style="bold red")
            for item in items:
                line = describe(item)
                if line:
                    live.console.print(line, markup=False, highlight=False)
            now = state.last_ts if session.trainer_gone else _now(session)
            said = stalls.update(stall_of())
            if said:
                live.console.print(said, markup=False, highlight=False)
            group = _render(state, now, sample, findings, watch is not None, _trainer_pids(watch, state))
            if stalls.current is not None:
                group.renderables.append(Text(stalls.current.text(), style="bold red"))
            live.update(group)
            if session.ended or (session.trainer_gone and not items):
                return exit_code(state)
            if not items:
                time.sleep(POLL_S)
