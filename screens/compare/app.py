"""The compare screen (`cockpit compare RUN RUN ...` on a terminal): the runs' training loss and
eval loss overlaid, one colour a run, by step, by tokens or by dollars (`s`, `t`, `d`), and below
them the final figures and what the configs set differently (cockpit.results.compare's text)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Static

from cockpit import fmt
from cockpit.results import compare
from cockpit.results.compare import RunCurves
from screens.hangup import TerminalWatch, leave_when_terminal_goes
from widgets.footer import Footer
from widgets.overlay_plot import COLOURS, OverlayPlot


class CompareApp(App[int]):
    TITLE = "lora-cockpit compare"
    CSS_PATH = "compare.tcss"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("s", "axis('step')", "By step"),
        Binding("t", "axis('tokens')", "By tokens"),
        Binding("d", "axis('usd')", "By dollars"),
        Binding("q", "quit", "Quit"),
        Binding("escape", "quit", "Quit", show=False),
    ]

    def __init__(self, runs: list[RunCurves], axis: str = "step") -> None:
        super().__init__()
        self.runs, self.axis = runs, axis
        self._terminal: TerminalWatch | None = None

    def compose(self) -> ComposeResult:
        head = Text("compare: ")
        for i, run in enumerate(self.runs):
            head.append(("  " if i else "") + f"■ {run.run_id}", style=COLOURS[i % len(COLOURS)])
        yield Static(head, id="compare-head")
        yield OverlayPlot(id="train-plot")
        yield OverlayPlot(id="eval-plot")
        with VerticalScroll(id="compare-figures"):
            yield Static(id="figures-text")
        yield Footer()

    def on_mount(self) -> None:
        self._terminal = leave_when_terminal_goes(self, lambda: 0)  # as `q`, when the SSH link drops
        self.action_axis(self.axis)

    def on_unmount(self) -> None:
        if self._terminal is not None:
            self._terminal.stop()

    def action_axis(self, axis: str) -> None:
        self.axis = axis
        words = compare.AXIS_WORDS[axis]

        def curve(points: list[compare.Point]) -> list[tuple[float, float]]:
            out = []
            for p in points:
                x = p.x(axis)
                if x is not None:
                    out.append((x, p.loss))
            return out

        def x_words(x: float) -> str:
            shown = compare.x_words(x, axis)
            return {"step": f"step {shown}", "tokens": f"{shown} tokens"}.get(axis, shown)

        for plot_id, title, pick in (
            ("#train-plot", "training loss", lambda r: r.train),
            ("#eval-plot", "eval loss", lambda r: r.evals),
        ):
            plot = self.query_one(plot_id, OverlayPlot)
            series = [curve(pick(r)) for r in self.runs]
            missing = " (no price set)" if axis == "usd" and not any(series) else ""
            plot.border_title = f"{title} by {words}{missing}"
            plot.show(series, x_words, fmt.loss)
        lines = _until_table(compare.text_lines(self.runs, axis))
        self.query_one("#figures-text", Static).update("\n".join(lines))


def _until_table(lines: list[str]) -> list[str]:
    """The figures and the config difference: the text's loss table is what the plots draw."""
    for i, line in enumerate(lines):
        if line.startswith("loss by "):
            return lines[: max(0, i - 1)]
    return lines


def run_compare_app(runs: list[RunCurves], axis: str = "step") -> int:
    return CompareApp(runs, axis).run() or 0
