"""The preflight checklist: one row per check (status glyph, name, measured value), in groups.

Rows come from plain data: `plan(checks)` lists every planned check as waiting, `started(...)`
marks a check as running again, `finished(check, results)` puts in what the check answered (a
check may answer several rows: the GPU probe answers every GPU row). Groups keep the order of
`GROUPS`; rows within a group keep the plan's order, whatever order the checks finish in. Group
headings are disabled options, so the cursor moves over checks only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from textual.content import Content
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from cockpit.preflight.checks.base import CheckResult

GROUPS = ("gpu", "performance", "host", "disk", "network", "software")
GROUP_TITLES = {
    "gpu": "GPU",
    "performance": "Performance",
    "host": "Host",
    "disk": "Disk",
    "network": "Network",
    "software": "Software",
}
GLYPHS = {"pass": "✓", "warn": "!", "fail": "✗", "skip": "-", "running": "…"}
STATUS_STYLES = {
    "pass": "$text-success",
    "warn": "$text-warning bold",
    "fail": "$text-error bold",
    "skip": "$text-muted",
    "running": "$text-accent",
}
NAME_WIDTH = 30  # before the list knows its width; then 40% of it, 20 to 40 columns


@dataclass
class Row:
    key: str  # "r:<result id>" for an answer, "p:<check id>" for a check that has not answered
    check_id: str
    group: str
    title: str
    order: tuple[int, int]  # (the check's place in the plan, the result's place in its answer)
    result: CheckResult | None = None
    running: bool = True

    @property
    def status(self) -> str:
        return "running" if self.running or self.result is None else self.result.status


def name_width(list_width: int, longest_title: int = 40) -> int:
    """The titles' column: as wide as the longest title, up to half the list (20 to 40 columns),
    so that at 80 columns no title is cut and the values keep 40 columns."""
    if list_width <= 0:
        return NAME_WIDTH
    return min(40, longest_title, max(20, (list_width - 2) // 2))


def row_prompt(row: Row, width: int = NAME_WIDTH) -> Content:
    title = row.title if len(row.title) <= width else row.title[: width - 1] + "…"
    if row.result is None:
        value = "running"
    elif row.running:
        value = f"running again (was: {row.result.value or row.result.status})"
    else:
        value = row.result.value or row.result.status
    return Content.assemble(
        (f"{GLYPHS[row.status]} ", STATUS_STYLES[row.status]),
        f"{title:<{width}} ",
        (value, "$text-muted" if row.running else ""),
    )


def group_order(group: str) -> tuple[int, str]:
    return (GROUPS.index(group) if group in GROUPS else len(GROUPS), group)


class CheckList(OptionList):
    """The checklist; `selected_row` is the row under the cursor."""

    def __init__(self, *, id: str | None = None, classes: str | None = None):
        super().__init__(id=id, classes=classes)
        self.rows: dict[str, Row] = {}
        self._plan_order: dict[str, int] = {}

    # ---- what the screen hands in

    def plan(self, checks: Sequence) -> None:
        """Every planned check (id, group, title) as a waiting row; forgets earlier rows."""
        self.rows = {}
        self._plan_order = {}
        for index, check in enumerate(checks):
            self._plan_order[check.id] = index
            key = f"p:{check.id}"
            group = check.group or check.id.split(".", 1)[0]
            self.rows[key] = Row(key, check.id, group, check.title or check.id, (index, 0))
        self._redraw(keep=self._highlighted_key())

    def started(self, check_id: str) -> None:
        """The check runs again: its rows say so and keep the last answer until the new one."""
        for row in self.rows.values():
            if row.check_id == check_id:
                row.running = True
        self._redraw(keep=self._highlighted_key())

    def finished(self, check, results: Sequence[CheckResult]) -> None:
        """What `check` answered replaces its waiting row and its earlier answers."""
        keep = self._highlighted_key()
        index = self._plan_order.setdefault(check.id, len(self._plan_order))
        old = [key for key, row in self.rows.items() if row.check_id == check.id]
        for key in old:
            del self.rows[key]
        for place, result in enumerate(results):
            key = f"r:{result.id}"
            self.rows[key] = Row(key, check.id, result.group, result.title, (index, place), result, False)
        if keep in old and keep not in self.rows and results:
            keep = f"r:{results[0].id}"  # the cursor stays on what this check answered
        self._redraw(keep=keep)

    # ---- what the screen asks

    @property
    def results(self) -> list[CheckResult]:
        """Every answer, in the order shown."""
        return [row.result for row in self._ordered() if row.result is not None]

    @property
    def running_checks(self) -> set[str]:
        return {row.check_id for row in self.rows.values() if row.running}

    @property
    def selected_row(self) -> Row | None:
        key = self._highlighted_key()
        return self.rows.get(key) if key else None

    def select_key(self, key: str) -> None:
        self.highlighted = self.get_option_index(key)

    # ---- drawing

    def _ordered(self) -> list[Row]:
        return sorted(self.rows.values(), key=lambda r: (group_order(r.group), r.order))

    def _highlighted_key(self) -> str | None:
        option = self.highlighted_option
        return option.id if option is not None else None

    def on_resize(self) -> None:
        self._redraw(keep=self._highlighted_key())

    def _redraw(self, keep: str | None) -> None:
        width = name_width(self.size.width, max((len(r.title) for r in self.rows.values()), default=20))
        options: list[Option] = []
        group = None
        for row in self._ordered():
            if row.group != group:
                group = row.group
                heading = Content.styled(GROUP_TITLES.get(group, group.title()), "bold")
                options.append(Option(heading, id=f"g:{group}", disabled=True))
            options.append(Option(row_prompt(row, width), id=row.key))
        self.clear_options()
        self.add_options(options)
        keys = [o.id for o in options if not o.disabled]
        if keys:
            self.highlighted = self.get_option_index(keep if keep in keys else keys[0])
