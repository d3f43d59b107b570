"""Where the memory goes: each part of a memory estimate with its size, a bar against the card's
memory and its note, then the peak against the card and the peak while loading."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.text import Text
from textual.widgets import Static

from cockpit.fmt import GIB
from cockpit.models.memory import SAFETY_MARGIN, Part

BAR_CELLS = 12  # the whole bar is the card's memory


class MemoryBreakdown(Static):
    COMPONENT_CLASSES: ClassVar[set[str]] = {"breakdown--bar", "breakdown--note", "breakdown--over"}

    def show(
        self, parts: Sequence[Part], vram_bytes: int, load_peak_bytes: int, unsure: Sequence = ()
    ) -> None:
        bar_style = self.get_component_rich_style("breakdown--bar")
        note_style = self.get_component_rich_style("breakdown--note")
        label_width = max((len(p.label) for p in parts), default=0)
        lines = []
        for part in parts:
            line = Text(no_wrap=True, overflow="ellipsis", end="")
            line.append(f"{part.label:<{label_width}} {part.bytes / GIB:7.2f} GiB ")
            cells = min(BAR_CELLS, round(part.bytes / vram_bytes * BAR_CELLS)) if vram_bytes else 0
            if part.bytes > 0 and cells == 0:
                line.append("▏".ljust(BAR_CELLS), bar_style)
            else:
                line.append(("█" * cells).ljust(BAR_CELLS), bar_style)
            line.append(f" {part.note}", note_style)
            lines.append(line)
        peak = sum(p.bytes for p in parts)
        free = vram_bytes - peak
        total = Text(no_wrap=True, overflow="ellipsis", end="")
        total.append(
            f"{'peak (as nvidia-smi shows it)':<{label_width}} {peak / GIB:7.2f} GiB of "
            f"{vram_bytes / GIB:.1f}: {free / GIB:+.2f} GiB free",
            self.get_component_rich_style("breakdown--over") if free < vram_bytes * SAFETY_MARGIN else "",
        )
        total.append(f"; while loading {load_peak_bytes / GIB:.2f} GiB", note_style)
        lines.append(total)
        for band in unsure:  # where the model is unsure: the top of the band, which "fits" counts
            line = Text(no_wrap=True, overflow="ellipsis", end="")
            top = peak + sum(b.bytes for b in unsure)
            line.append(f"{'band top (' + band.key + ')':<{label_width}} {band.bytes / GIB:+7.2f} GiB ")
            line.append(f"-> {top / GIB:.2f} GiB of {vram_bytes / GIB:.1f}: {band.note}", note_style)
            lines.append(line)
        self.update(Text("\n", no_wrap=True, overflow="ellipsis").join(lines))
