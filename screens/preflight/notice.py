"""What the quick preflight found wrong at a training start, in a modal the user dismisses.

The run has started already (a start is never blocked): the notice says what to look at before
the run costs much, and Enter or Escape goes back to the run screen.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

from cockpit.paths import cockpit_command
from cockpit.preflight.checks.base import CheckResult
from widgets.check_list import GLYPHS, STATUS_STYLES
from widgets.footer import Footer
from widgets.hanging import HangingLines


def hint() -> str:
    return f"The run goes on. `{cockpit_command()} preflight` runs every check; --skip-preflight skips these."


def notice_text(problems: Sequence[CheckResult]) -> HangingLines:
    """Each problem: its title and what was measured, then its fix, each wrapped under its text; no
    blank line between problems (each starts at its glyph), so that at 80x24 four problems with
    their fixes fit without a scroll."""
    lines: list[tuple[Content | str, Content | str]] = []
    for result in problems:
        glyph = Content.styled(f"{GLYPHS[result.status]} ", STATUS_STYLES[result.status])
        lines.append((glyph, Content.assemble((result.title, "bold"), f": {result.value}")))
        if result.fix:
            lines.append((Content.styled("  fix: ", "bold"), result.fix))
    return HangingLines(lines)


def counted(problems: Sequence[CheckResult]) -> str:
    """`1 failed, 3 warned`, naming them, so that the title says what the list holds."""
    fails = [r for r in problems if r.status == "fail"]
    warns = [r for r in problems if r.status != "fail"]
    return ", ".join(f"{len(rs)} {word}" for rs, word in ((fails, "failed"), (warns, "warned")) if rs)


class PreflightNotice(ModalScreen[None]):
    CSS_PATH = "notice.tcss"
    AUTO_FOCUS = "#notice-body"  # arrows scroll a long list
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "dismiss_notice", "Go on"),
        Binding("escape", "dismiss_notice", "Go on", show=False),
    ]

    def __init__(self, problems: Sequence[CheckResult]):
        super().__init__()
        self.problems = list(problems)

    def compose(self) -> ComposeResult:
        with Vertical(id="notice"):
            yield Static(f"Quick preflight before this run: {counted(self.problems)}", id="notice-title")
            with VerticalScroll(id="notice-body"):
                yield Static(notice_text(self.problems), id="notice-problems")
            yield Static(hint(), id="notice-hint")
            yield Static("Enter or Esc: back to the run", id="notice-keys")
        yield Footer()  # the keys of this notice, not those of the screen under it

    def action_dismiss_notice(self) -> None:
        self.dismiss(None)
