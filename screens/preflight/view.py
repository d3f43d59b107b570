"""The preflight screen: the checklist filling in as checks finish, a summary line, and the details
(evidence, threshold, fix) of the check under the cursor.

It only draws what the app hands it (`show_plan`, `show_started`, `show_finished`,
`show_summary`); the app runs the checks on its threads.
"""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import Screen
from textual.widgets import OptionList, Static

from cockpit.preflight.checks.base import STATUSES, CheckResult, exit_code
from widgets.check_details import CheckDetails
from widgets.check_list import GLYPHS, STATUS_STYLES, CheckList, Row
from widgets.footer import Footer


def summary_content(
    quick: bool, results: Sequence[CheckResult], running: int, elapsed_s: float | None, done: bool
) -> Content:
    """`Preflight full · ✓ 9 pass  ! 2 warn  ✗ 1 fail  - 1 skip · 4.1 s · exit 2` (fits 80 columns)."""
    mode = "quick" if quick else "full"
    parts: list[Content | str | tuple[str, str]] = [(f"Preflight {mode}", "bold"), " · "]
    counts = {status: sum(r.status == status for r in results) for status in STATUSES}
    for index, status in enumerate(STATUSES):
        style = STATUS_STYLES[status] if counts[status] else ""
        parts.append((("  " if index else "") + f"{GLYPHS[status]} {counts[status]} {status}", style))
    if elapsed_s is not None:
        parts.append(f" · {elapsed_s:.1f} s")
    if running:
        parts.append((f" · {GLYPHS['running']} {running} running", STATUS_STYLES["running"]))
    elif done:
        parts.append((f" · exit {exit_code(list(results))}", "bold"))
    return Content.assemble(*parts)


class PreflightView(Screen):
    CSS_PATH = "view.tcss"
    AUTO_FOCUS = "#checks"

    def __init__(self, quick: bool):
        super().__init__()
        self.quick = quick

    def compose(self) -> ComposeResult:
        yield Static(summary_content(self.quick, [], 0, None, False), id="summary")
        yield CheckList(id="checks")
        with VerticalScroll(id="details-pane") as pane:
            pane.border_title = "Details"
            yield CheckDetails(id="details")
        yield Footer()

    @property
    def check_list(self) -> CheckList:
        return self.query_one(CheckList)

    # ---- what the app hands in

    def show_plan(self, checks: Sequence) -> None:
        self.check_list.plan(checks)
        self._show_details()

    def show_started(self, check_id: str) -> None:
        self.check_list.started(check_id)
        self._show_details()

    def show_finished(self, check, results: Sequence[CheckResult]) -> None:
        self.check_list.finished(check, results)
        self._show_details()

    def show_summary(self, elapsed_s: float | None, done: bool) -> None:
        checks = self.check_list
        content = summary_content(self.quick, checks.results, len(checks.running_checks), elapsed_s, done)
        self.query_one("#summary", Static).update(content)

    # ---- the details follow the cursor

    def on_option_list_option_highlighted(self, _event: OptionList.OptionHighlighted) -> None:
        self._show_details()

    def _show_details(self) -> None:
        row: Row | None = self.check_list.selected_row
        answered = 1
        if row is not None:
            answered = sum(r.check_id == row.check_id for r in self.check_list.rows.values())
        self.query_one(CheckDetails).show(row, answered)
