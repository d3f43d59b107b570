"""One line of training progress: a bar as wide as the terminal allows, then step, epoch and percent."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text

from widgets.styled import StyledWidget

PARTIAL_BLOCKS = " ▏▎▍▌▋▊▉"  # eighths of a cell, so a slow run's bar still moves
MIN_BAR_WIDTH = 8


def progress_label(step: int, total: int | None, epoch: float | None, epochs: float | None) -> str:
    parts = [f"step {step}/{total}" if total else f"step {step}"]
    if epoch is not None:
        # a total only where epochs bound the run: with max_steps the run may pass it (16.67/1)
        bounded = epochs and epoch <= epochs + 1e-6
        parts.append(f"epoch {epoch:.2f}" + (f"/{epochs:g}" if bounded else ""))
    if total:
        parts.append(f"{min(100.0, 100 * step / total):.0f}%")
    return " · ".join(parts)


def bar_cells(fraction: float, width: int) -> tuple[str, str]:
    """(done, to do) parts of a bar `width` cells wide."""
    eighths = round(max(0.0, min(1.0, fraction)) * width * 8)
    full, part = divmod(eighths, 8)
    done = "█" * full + (PARTIAL_BLOCKS[part] if part else "")
    return done, " " * (width - len(done))


class StepProgress(StyledWidget):
    """`show()` hands it the step, the total steps (None before training) and the epoch."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "step-progress--done",
        "step-progress--todo",
        "step-progress--label",
    }

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None):
        super().__init__(name=name, id=id, classes=classes)
        self.step = 0
        self.total: int | None = None
        self.epoch: float | None = None
        self.epochs: float | None = None

    def show(self, step: int, total: int | None, epoch: float | None, epochs: float | None) -> None:
        if (step, total, epoch, epochs) != (self.step, self.total, self.epoch, self.epochs):
            self.step, self.total, self.epoch, self.epochs = step, total, epoch, epochs
            self.refresh()

    @property
    def label(self) -> str:
        return progress_label(self.step, self.total, self.epoch, self.epochs)

    def render(self) -> Text:
        label = " " + self.label
        width = self.content_size.width - len(label)
        text = Text(no_wrap=True, overflow="ellipsis")
        if width >= MIN_BAR_WIDTH:
            done, todo = bar_cells(self.step / self.total if self.total else 0.0, width)
            text.append(done, self.component_style("step-progress--done"))
            text.append(todo, self.component_style("step-progress--todo"))
        text.append(label, self.component_style("step-progress--label"))
        return text
