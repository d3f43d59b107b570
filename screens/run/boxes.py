"""The run screen's bordered boxes that come and go: the GPU and host panels (`TelemetryBox`), the
doctor's findings (`DoctorBox`) and an ended run's summary (`SummaryBox`).

Each holds what it shows in reactive attributes; the run screen sets them and a watcher redraws
the box when, and only when, one changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.reactive import var
from textual.widgets import Static

from cockpit import fmt
from cockpit.doctor.multi_gpu import rank_pids
from cockpit.run.state import RunState
from screens.run.telemetry_feed import SeriesBook
from widgets.doctor_panel import DoctorPanel
from widgets.gpu_panel import GpuPanel, GpuView, gpu_title, torch_text
from widgets.host_panel import HostPanel

MANY_GPUS = 2  # more GPUs than this: one row each at any size

# the summary's lines whose head is bold: where the weights are, what to run next, how it ended
SUMMARY_HEADS = ("adapter", "adapter (newest checkpoint)", "next", "on_end", "error")


@dataclass(frozen=True)
class Panels:
    """What the GPU and host panels draw. Two are equal, so nothing is drawn again, unless a new
    sample came (its sparklines end at its time), the span, the layout, the trainer's ranks or
    torch's memory counters changed; the fields not compared are read when drawing."""

    sample: Any
    span: tuple[float, float] | None
    pid: int | None
    compact: bool  # one row per GPU
    ranks: frozenset  # several GPUs: which of them the run uses
    torch: str | None  # torch's counters as the GPU panel writes them
    book: SeriesBook = field(compare=False)
    span_s: float | None = field(compare=False)
    memory: dict = field(compare=False)
    short: bool = field(compare=False)


class TelemetryBox(Vertical):
    """The GPU panel and the host panel, under a title that names the GPU and says the span."""

    panels: var[Panels | None] = var(None, init=False)
    caption: var[tuple[str, str]] = var(("", ""), init=False)  # border title and subtitle

    def compose(self) -> ComposeResult:
        yield GpuPanel(id="gpus")
        yield HostPanel(id="host")

    def show(
        self,
        sample: Any,
        book: SeriesBook,
        state: RunState,
        *,
        span_s: float | None,
        short: bool,
        late_s: float | None,
        error: str | None,
    ) -> None:
        """The newest sample, the sparklines' history over the last `span_s` (None: all of it), the
        trainer's state (its pid, ranks and torch counters); `short`: a row per GPU; how late the
        watch is or why it failed, in the subtitle."""
        span = book.span(span_s)
        pid = sample.host.trainer_pid if sample is not None else None
        if pid is None and state.attempts:
            pid = state.attempts[-1].pid
        many = sample is not None and len(sample.gpus) > MANY_GPUS
        self.set_class(many, "-many")  # eight GPUs, their spread and the host fit at 80x24
        ranks, torch = frozenset(rank_pids(state)), torch_text(state.memory)
        self.panels = Panels(
            sample, span, pid, short or many, ranks, torch, book, span_s, state.memory, short
        )
        subtitle = ""
        if span is not None:
            subtitle = f"last {fmt.duration(span[1] - span[0])}" if span_s else "whole run"
        if late_s is not None:
            subtitle = f"no new sample for {late_s:.0f} s · {subtitle}".rstrip(" ·")
        if error is not None:
            subtitle = f"{error} · {subtitle}".rstrip(" ·")
        self.caption = (f"{gpu_title(sample)} · host", subtitle)

    def watch_panels(self, panels: Panels | None) -> None:
        if panels is None:
            return
        book, span = panels.book, panels.span
        sliding = book.sliding(panels.span_s)
        view = GpuView(
            panels.sample, book, span, panels.memory, panels.pid, panels.compact, panels.ranks, sliding
        )
        self.query_one(GpuPanel).show(view)
        cpu = book.get("host.cpu")
        cpu_spark = (cpu, span, sliding) if cpu is not None and span is not None else None
        host = panels.sample.host if panels.sample is not None else None
        self.query_one(HostPanel).show(host, cpu_spark, panels.short)

    def watch_caption(self, caption: tuple[str, str]) -> None:
        self.border_title, self.border_subtitle = caption


class DoctorBox(VerticalScroll):
    """The doctor's findings, shown only while some hold; its border takes the colour of the worst.
    `brief` (a short terminal): one line per finding."""

    brief: var[bool] = var(False, init=False, toggle_class="-short")

    def compose(self) -> ComposeResult:
        yield DoctorPanel(id="doctor")

    def show(self, findings: Sequence[Any]) -> None:
        if self.query_one(DoctorPanel).show(findings, brief=self.brief):
            self.display = bool(findings)
            severity = findings[0].severity if findings else "info"
            for each in ("alarm", "warn", "info"):  # set_class: the box keeps its -short
                self.set_class(each == severity, f"-{each}")
            self.border_title = f"doctor: {len(findings)} finding{'s' if len(findings) != 1 else ''}"

    def watch_brief(self, brief: bool) -> None:
        panel = self.query_one(DoctorPanel)
        panel.show(panel.findings, brief=brief)


class SummaryBox(VerticalScroll):
    """An ended run's summary (`texts`: whole, and in one line), whole or `folded` to its line."""

    texts: var[tuple[Text, Text] | None] = var(None, init=False)
    folded: var[bool] = var(False, init=False)

    def compose(self) -> ComposeResult:
        yield Static("", id="summary-text")

    def watch_texts(self) -> None:
        self._fold()

    def watch_folded(self) -> None:
        self._fold()

    def _fold(self) -> None:
        if self.texts is None:
            return
        self.set_class(self.folded, "-folded")
        text = self.texts[self.folded]
        static = self.query_one("#summary-text", Static)
        if static.content != text:
            static.update(text)


def summary_texts(lines: Sequence[str]) -> tuple[Text, Text]:
    """An ended run's summary (cockpit.results.summary's lines) whole, and in one line."""
    whole = Text()
    whole.append(lines[0] + "\n", style="bold")
    for line in lines[1:]:
        head, sep, rest = line.partition(": ")
        if sep and head in SUMMARY_HEADS:
            whole.append(head + sep, style="bold")
            whole.append(rest + "\n")
        else:
            whole.append(line + "\n")
    whole.rstrip()
    folded = Text(lines[0], style="bold")
    folded.append(" · f: the whole summary", style="dim")
    return whole, folded
