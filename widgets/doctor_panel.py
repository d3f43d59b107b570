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
    """Per finding: its severity and title, then the evidence (unless `brief`: a short terminal),
    then the fix; the panel wraps them."""
    get = (styles or {}).get
    text = Text()
    for n, finding in enumerate(findings):
        if n:
            text.append("\n")
        severity = finding.severity if finding.severity in MARKS else "info"
        style = get(severity, Style(bold=True))
        text.append(f"{MARKS[severity]} ", style)
        text.append(finding.title, style + Style(bold=True))
        if not brief:
            text.append(f"\n  {finding.evidence}", get("evidence", Style(dim=True)))
        text.append("\n  fix: ", get("fix-label", Style(bold=True)))
        text.append(finding.fix)
    return text


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
