"""The details of one preflight check: verdict, what was measured, the threshold, the fix, the evidence."""

from __future__ import annotations

import json
from typing import Any

from textual.content import Content
from textual.widgets import Static

from widgets.check_list import GLYPHS, STATUS_STYLES, Row

LABEL_WIDTH = 10
EVIDENCE_VALUE_CHARS = 400  # a traceback or a long list is cut here; the exported report has it whole


def _evidence_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= EVIDENCE_VALUE_CHARS else text[: EVIDENCE_VALUE_CHARS - 1] + "…"


def details_content(row: Row | None, answered_with: int = 1) -> Content:
    """What the pane shows for `row`; `answered_with` counts the rows its check answered."""
    if row is None:
        return Content.styled("No check selected.", "$text-muted")
    parts: list[Content | str | tuple[str, str]] = [
        (f"{GLYPHS[row.status]} {row.status.upper()}  ", STATUS_STYLES[row.status]),
        (row.title, "bold"),
    ]
    result = row.result
    if result is None:
        parts.append(("\nrunning; its answer appears here when it finishes", "$text-muted"))
        return Content.assemble(*parts)
    where = f"\n{result.id} · took {result.duration_s:.2f} s"
    if answered_with > 1:  # one measurement answers them all: a re-run repeats it whole
        where += f" · r re-runs check '{row.check_id}' ({answered_with} rows)"
    parts.append((where, "$text-muted"))
    if row.running:
        parts.append(("\nrunning again; the answer below is the last one", "$text-accent"))

    def line(label: str, value: str, style: str = "") -> None:
        parts.append((f"\n{label:<{LABEL_WIDTH}}", "$text-muted"))
        parts.append((value, style))

    line("measured", result.value or "-")
    if result.threshold:
        line("expected", result.threshold)
    if result.fix:
        line("fix", result.fix, "bold")
    for index, (key, value) in enumerate(result.evidence.items()):
        line("evidence" if index == 0 else "", f"{key}: {_evidence_value(value)}")
    return Content.assemble(*parts)


class CheckDetails(Static):
    """Shows `details_content` for the row it is handed."""

    def show(self, row: Row | None, answered_with: int = 1) -> None:
        self.update(details_content(row, answered_with))
