"""Where the memory goes: each part of a memory estimate with its size, a bar against the card's
memory and its note, then the peak against the card and the peak while loading; sizes in the
units `cockpit estimate` writes them (`fmt.gib_or_mib`: MiB for a small part)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import ClassVar

from rich.text import Text
from textual import events
from textual.containers import VerticalScroll
from textual.widgets import Static

from cockpit import fmt
from cockpit.fmt import GIB
from cockpit.models.memory import SAFETY_MARGIN, Part

BAR_CELLS = 12  # the whole bar is the card's memory


class MemoryBreakdown(Static):
    """The parts' rows, each with its note beside it where the width allows, else in the notes
    under all the rows (wrapped): nothing is cut, and the figures come first. The screen puts it
    in a scrolling box (`BreakdownBox`)."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"breakdown--bar", "breakdown--note", "breakdown--over"}

    _shown: tuple | None = None

    def show(
        self, parts: Sequence[Part], vram_bytes: int, load_peak_bytes: int, unsure: Sequence = ()
    ) -> None:
        self._shown = (tuple(parts), vram_bytes, load_peak_bytes, tuple(unsure))
        self._draw()

    def on_resize(self, _event: events.Resize) -> None:
        if self._shown is not None:
            self._draw()

    def _draw(self) -> None:
        width = self.content_size.width
        parts, vram_bytes, load_peak_bytes, unsure = self._shown
        bar_style = self.get_component_rich_style("breakdown--bar")
        note_style = self.get_component_rich_style("breakdown--note")
        label_width = max((len(p.label) for p in parts), default=0)
        rows: list[tuple[Text, str, str]] = []  # (figures, note, what the note is about)
        for part in parts:
            line = Text(no_wrap=True, overflow="ellipsis", end="")
            line.append(f"{part.label:<{label_width}} {fmt.gib_or_mib(part.bytes, 7)} ")
            cells = min(BAR_CELLS, round(part.bytes / vram_bytes * BAR_CELLS)) if vram_bytes else 0
            if part.bytes > 0 and cells == 0:
                line.append("▏".ljust(BAR_CELLS), bar_style)
            else:
                line.append(("█" * cells).ljust(BAR_CELLS), bar_style)
            rows.append((line, part.note, part.label))
        peak = sum(p.bytes for p in parts)
        free = vram_bytes - peak
        total = Text(no_wrap=True, overflow="ellipsis", end="")
        total.append(
            f"{'peak (as nvidia-smi shows it)':<{label_width}} {fmt.gib_or_mib(peak, 7)} of "
            f"{vram_bytes / GIB:.1f}: {free / GIB:+.2f} GiB free",
            self.get_component_rich_style("breakdown--over") if free < vram_bytes * SAFETY_MARGIN else "",
        )
        rows.append((total, f"; while loading {fmt.gib_or_mib(load_peak_bytes)}", "peak"))
        for band in unsure:  # where the model is unsure: the top of the band, which "fits" counts
            line = Text(no_wrap=True, overflow="ellipsis", end="")
            top = peak + sum(b.bytes for b in unsure)
            line.append(
                f"{'band top (' + band.key + ')':<{label_width}} {fmt.gib_or_mib(band.bytes, 7, sign=True)} "
            )
            rows.append(
                (
                    line,
                    f"-> {fmt.gib_or_mib(top)} of {vram_bytes / GIB:.1f}: {band.note}",
                    f"band top ({band.key})",
                )
            )
        # a note goes beside its figures where it fits, else into the notes under all the figures
        lines, notes = [], []
        for line, note, about in rows:
            joined = note if note.startswith(";") else f" {note}"
            if width <= 0 or line.cell_len + len(joined) <= width:
                line.append(joined, note_style)
            else:
                notes.append(f"{about}: {note.removeprefix('; ')}")
            lines.append(line)
        for note in notes:
            wrapped = textwrap.wrap(note, max(10, width), subsequent_indent="  ")
            lines.extend(Text(part, note_style) for part in wrapped)
        self.update(Text("\n", no_wrap=True, overflow="ellipsis").join(lines))
        if isinstance(self.parent, BreakdownBox):
            self.call_after_refresh(self.parent.say_it_scrolls)


class BreakdownBox(VerticalScroll):
    """The breakdown's frame: taller than its room (80x24), it scrolls, and its border says how
    (Tab reaches it; the arrows, PgUp/PgDn, Home/End scroll it)."""

    def say_it_scrolls(self) -> None:
        subtitle = "Tab, then ↑↓: the rest" if self.max_scroll_y > 0 else ""
        if (self.border_subtitle or "") != subtitle:
            self.border_subtitle = subtitle
