"""The details of one preflight check: verdict, what was measured, the threshold, the fix, the evidence."""

from __future__ import annotations

import json
from typing import Any

from textual.content import Content
from textual.widgets import Static

from widgets.check_list import GLYPHS, STATUS_STYLES, Row
from widgets.hanging import HangingLines

LABEL_WIDTH = 10
EVIDENCE_VALUE_CHARS = 400  # a traceback or a long list is cut here; the exported report has it whole


def _evidence_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= EVIDENCE_VALUE_CHARS else text[: EVIDENCE_VALUE_CHARS - 1] + "…"


def details_content(row: Row | None, answered_with: int = 1) -> Content | HangingLines:
    """What the pane shows for `row`; `answered_with` counts the rows its check answered. A long
    value wraps under itself, not under its label."""
    if row is None:
        return Content.styled("No check selected.", "$text-muted")
    lines: list[tuple[Content | str, Content | str]] = [
        (
            Content.styled(f"{GLYPHS[row.status]} {row.status.upper()}  ", STATUS_STYLES[row.status]),
            Content.styled(row.title, "bold"),
        )
    ]
    result = row.result
    if result is None:
        lines.append(("", Content.styled("running; its answer appears here when it finishes", "$text-muted")))
        return HangingLines(lines)
    where = f"{result.id} · took {result.duration_s:.2f} s"
    if answered_with > 1:  # one measurement answers them all: a re-run repeats it whole
        where += f" · r re-runs check '{row.check_id}' ({answered_with} rows)"
    lines.append(("", Content.styled(where, "$text-muted")))
    if row.running:
        lines.append(("", Content.styled("running again; the answer below is the last one", "$text-accent")))

    def line(label: str, value: str, style: str = "") -> None:
        lines.append((Content.styled(f"{label:<{LABEL_WIDTH}}", "$text-muted"), Content.styled(value, style)))

    line("measured", result.value or "-")
    if result.threshold:
        line("expected", result.threshold)
    if result.fix:
        line("fix", result.fix, "bold")
    for index, (key, value) in enumerate(result.evidence.items()):
        line("evidence" if index == 0 else "", f"{key}: {_evidence_value(value)}")
    return HangingLines(lines)


class CheckDetails(Static):
    """Shows `details_content` for the row it is handed."""

    def show(self, row: Row | None, answered_with: int = 1) -> None:
        self.update(details_content(row, answered_with))
