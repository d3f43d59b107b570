"""`cockpit preflight`'s TUI: runs a `cockpit.preflight.runner.Preflight` off the UI thread and shows it.

The preflight (its plan, checks and report metadata) is handed in, so tests give it fake checks.
Checks run on daemon threads (a GPU probe that hangs never keeps the app from exiting); each
finished check is posted as a message and only the handlers touch the screen. `run()` returns
the CLI's exit code for what was found: 0 all pass, 1 warnings, 2 failures (quitting before every
check has answered is at least 1: nothing said it all passed).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from textual.app import App
from textual.binding import Binding, BindingType
from textual.message import Message

from cockpit.preflight.checks.base import CheckResult, exit_code
from cockpit.preflight.runner import Check, Preflight, report
from screens.hangup import leave_when_terminal_goes
from screens.preflight.export import ExportReport
from screens.preflight.view import PreflightView
from widgets.toast import toast_text

SUMMARY_TICK_S = 1.0  # the elapsed time moves while checks run


class PlanMade(Message):
    def __init__(self, checks: list[Check]) -> None:
        super().__init__()
        self.checks = checks


class CheckFinished(Message):
    def __init__(self, check: Check, results: list[CheckResult]) -> None:
        super().__init__()
        self.check = check
        self.results = results


class RunEnded(Message):
    """A whole run ended; `error` says why it could not run (its plan could not be built)."""

    def __init__(self, error: str | None = None) -> None:
        super().__init__()
        self.error = error


class PreflightApp(App[int]):
    TITLE = "lora-cockpit preflight"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "rerun", "Re-run check"),
        Binding("a", "rerun_all", "Re-run all"),
        Binding("e", "export", "Export report"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(
        self,
        preflight: Preflight,
        *,
        quick: bool = False,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], dt.datetime] | None = None,
        export_dir: Path | None = None,
    ):
        super().__init__()
        self._terminal = None  # watches for the terminal going away (screens/hangup.py)
        self.preflight = preflight
        self.quick = quick
        self.clock = clock
        self.now = now or (lambda: dt.datetime.now(dt.timezone.utc))
        self.export_dir = export_dir
        self.view = PreflightView(quick)
        self.running_all = False
        self.started_at: float | None = None
        self.ended_at: float | None = None
        self.last_export: Path | None = None
        self._reruns: set[str] = set()  # check ids running on their own
        self._order: dict[str, int] = {}  # check id -> its place in the plan (for the report)

    async def on_mount(self) -> None:
        self._terminal = leave_when_terminal_goes(self, self.exit_code)  # an SSH drop: leave, as q does
        await self.push_screen(self.view)
        self.set_interval(SUMMARY_TICK_S, self._tick)
        self.action_rerun_all()

    # ---- the threads: they post, never touch widgets

    def _run_all(self) -> None:
        try:
            checks = self.preflight.plan()
        except Exception as exc:  # a plan that cannot be built is said on screen, not a crash
            self.post_message(RunEnded(f"could not plan the checks: {type(exc).__name__}: {exc}"))
            return
        self.post_message(PlanMade(checks))
        self.preflight.run(checks, on_check=lambda c, rs: self.post_message(CheckFinished(c, rs)))
        self.post_message(RunEnded())

    def _run_one(self, result_id: str) -> None:
        self.preflight.rerun(result_id, on_check=lambda c, rs: self.post_message(CheckFinished(c, rs)))

    def _start_thread(self, target: Callable, *args) -> None:
        threading.Thread(target=target, args=args, name="preflight", daemon=True).start()

    # ---- the handlers

    def on_plan_made(self, message: PlanMade) -> None:
        self._order = {check.id: index for index, check in enumerate(message.checks)}
        self.view.show_plan(message.checks)
        self._tick()

    def on_check_finished(self, message: CheckFinished) -> None:
        self._reruns.discard(message.check.id)
        self._order.setdefault(message.check.id, len(self._order))
        self.view.show_finished(message.check, message.results)
        self._tick()

    def on_run_ended(self, message: RunEnded) -> None:
        self.running_all = False
        self.ended_at = self.clock()
        if message.error:
            self.notify(message.error, severity="error", timeout=10)
        self._tick()

    def _tick(self) -> None:
        if self.started_at is None:
            return
        busy = self.running_all or bool(self._reruns)
        end = self.clock() if self.running_all or self.ended_at is None else self.ended_at
        self.view.show_summary(end - self.started_at, done=not busy)

    # ---- the keys

    def action_rerun(self) -> None:
        row = self.view.check_list.selected_row
        if row is None:  # no plan yet, or it could not be made
            self.notify("No check is listed yet: nothing to re-run.")
            return
        if row.result is None or row.running:
            self.notify("That check is still running; it can be run again once it has answered.")
            return
        if self.preflight.check_of(row.result.id) is None:
            self.notify(f"{row.result.id}: no check answers it any more; re-run all (a) instead.")
            return
        self._reruns.add(row.check_id)
        self.view.show_started(row.check_id)
        self._tick()
        self._start_thread(self._run_one, row.result.id)

    def action_rerun_all(self) -> None:
        if self.running_all:
            self.notify("The checks are running; re-run all once they have finished.")
            return
        self.running_all = True
        self.started_at, self.ended_at = self.clock(), None
        self._start_thread(self._run_all)

    def action_export(self) -> None:
        if self.running_all or self._reruns:
            self.notify("Checks are still running; export the report once they have finished.")
            return
        if not self.view.check_list.results:
            self.notify("No check has answered yet: nothing to export.")
            return
        self.push_screen(ExportReport(str(self.default_export_path())), self._export_to)

    def default_export_path(self) -> Path:
        stamp = self.now().strftime("%Y%m%d-%H%M%S")
        return (self.export_dir or Path.cwd()) / f"preflight-{stamp}.json"

    def report(self) -> dict:
        """The report of what is on screen: the schema of `cockpit preflight --json`."""
        meta = self.preflight.meta()
        if self.started_at is not None and self.ended_at is not None:
            meta["duration_s"] = round(self.ended_at - self.started_at, 2)
        return report(self.results(), meta, now=self.now())

    def results(self) -> list[CheckResult]:
        """What the screen shows, in plan order."""
        rows = sorted(
            (r for r in self.view.check_list.rows.values() if r.result is not None),
            key=lambda r: (self._order.get(r.check_id, len(self._order)), r.order[1]),
        )
        return [row.result for row in rows]

    def _export_to(self, path: str | None) -> None:
        if not path:
            return
        target = Path(os.path.expanduser(path))
        if not target.is_absolute():
            target = (self.export_dir or Path.cwd()) / target
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(self.report(), indent=1) + "\n", encoding="utf-8")
        except (OSError, ValueError) as exc:  # ValueError: a pasted path with a NUL byte
            self.notify(
                toast_text(
                    f"could not write {target}: {getattr(exc, 'strerror', None) or exc}; "
                    "press e and give another path",
                    self.size.width,
                ),
                severity="error",
                timeout=10,
            )
            return
        self.last_export = target.resolve()
        self.notify(toast_text(f"report written to {self.last_export}", self.size.width), timeout=8)

    async def action_quit(self) -> None:
        self.exit(self.exit_code())

    def on_unmount(self) -> None:
        if self._terminal is not None:
            self._terminal.stop()

    def exit_code(self) -> int:
        code = exit_code(self.view.check_list.results)
        unfinished = self.running_all or self._reruns or self.started_at is None
        return max(code, 1) if unfinished else code
