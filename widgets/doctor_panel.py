"""The doctor's findings: what slows the run down or burns money, the numbers that show it, and
the fix. Alarms first; the panel is empty (and the screen hides it) while nothing holds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from rich.style import Style
from rich.text import Text

from widgets.styled import StyledWidget

MARKS = {"alarm": "▲ ALARM", "warn": "● WARN", "info": "○ INFO"}


def findings_text(
    findings: Sequence[Any], styles: dict[str, Style] | None = None, brief: bool = False
) -> Text:
    """Per finding: its severity and title, then the evidence, then the fix; the panel wraps them.
    `brief` (a short terminal, where the loss plot needs the rows): one line per finding, title
    and fix, cut at the panel's edge (the events log has the whole finding)."""
    get = (styles or {}).get
    text = Text(no_wrap=brief, overflow="ellipsis")
    for n, finding in enumerate(findings):
        if n:
            text.append("\n")
        severity = finding.severity if finding.severity in MARKS else "info"
        style = get(severity, Style(bold=True))
        text.append(f"{MARKS[severity]} ", style)
        text.append(finding.title, style + Style(bold=True))
        if not brief:
            text.append(f"\n  {finding.evidence}", get("evidence", Style(dim=True)))
        text.append(" · fix: " if brief else "\n  fix: ", get("fix-label", Style(bold=True)))
        text.append(finding.fix)
    return text


def finding_log_line(finding: Any) -> str:
    """The events log's line for a finding when it first holds: all of it, wrapped by the log."""
    mark = MARKS.get(finding.severity, MARKS["info"])
    return f"doctor: {mark} {finding.title}: {finding.evidence}. fix: {finding.fix}"


class DoctorPanel(StyledWidget):
    """`show(findings)` hands it the doctor's current findings (cockpit.doctor.window.Finding)."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "doctor-panel--alarm",
        "doctor-panel--warn",
        "doctor-panel--info",
        "doctor-panel--evidence",
        "doctor-panel--fix-label",
    }

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None):
        super().__init__(name=name, id=id, classes=classes)
        self._findings: tuple[Any, ...] = ()
        self._brief = False

    @property
    def findings(self) -> tuple[Any, ...]:
        return self._findings

    def show(self, findings: Sequence[Any], brief: bool | None = None) -> bool:
        """True when the findings changed. `brief`: leave the evidence out (None: as before)."""
        findings = tuple(findings)
        brief = self._brief if brief is None else brief
        if findings == self._findings and brief == self._brief:
            return False
        changed = findings != self._findings
        self._findings, self._brief = findings, brief
        self.refresh(layout=True)
        return changed

    def render(self) -> Text:
        names = ("alarm", "warn", "info", "evidence", "fix-label")
        styles = {n: self.component_style(f"doctor-panel--{n}") for n in names}
        return findings_text(self._findings, styles, self._brief)
