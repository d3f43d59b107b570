"""The GPUs of a run: utilisation, memory and power with gauges and sparklines, temperature,
SM clock and throttle reasons, one block per GPU (three rows), or one row per GPU when compact.
With two GPUs or more, one row more: what joins them (NVLink or PCIe only) and how evenly they
work (the spread of util, memory and power across the trainer's GPUs, cockpit.telemetry.spread), in the
warning colour when one works much less than the others.

A GPU that is lost or stalled says so on its row; a box without a usable NVIDIA driver says that
instead of showing zeros. Memory used (NVML, the whole device) sits next to what torch allocated
and reserved (the trainer's own counters) on the GPU the trainer runs on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rich.style import Style
from rich.text import Text

from cockpit import fmt
from cockpit.telemetry.spread import (
    SPREAD_WINDOW_S,
    GpuSpread,
    counted_gpus,
    gpu_spread,
    mem_words,
    power_words,
    scope_words,
    util_words,
    window_mean,
)
from widgets.progress import bar_cells
from widgets.sparkline import grid_span, spark
from widgets.styled import LinePanel

GAUGE_WIDTH = 10
VALUE_WIDTH = 15
LABEL_WIDTH = 6  # "power "
SPARK_MIN = 8
SPARK_MAX = 120
EXTRA_MAX = 34
COMPACT_SPARK_MAX = 40
COMPACT_SPARK_MIN = 6
COMPACT_TAIL_MIN = 16  # "throttle: sw_the…" still says which
QUIET_REASONS = {"gpu_idle"}  # an idle GPU lowers its clocks: that is no throttle


@dataclass
class GpuView:
    """What the panel draws: the newest sample, the sparkline histories and the torch counters."""

    sample: Any = None  # cockpit.telemetry.sampler.Sample, or None before the first one
    book: Any = None  # screens.run.telemetry_feed.SeriesBook
    span: tuple[float, float] | None = None  # the sparklines' time span
    torch_memory: dict = field(default_factory=dict)  # RunState.memory
    trainer_pid: int | None = None
    compact: bool = False
    rank_pids: frozenset[int] = frozenset()  # several GPUs: the trainer's rank processes on this node
    sliding: bool = False  # the span is the last N seconds of a longer history (sparkline.grid_span)


def gib(value: float | None, unit: str = " GiB") -> str:
    return fmt.gib(value, 1, unit)


def throttle_text(gpu: Any) -> str:
    reasons = [r for r in (gpu.throttle_reasons or []) if r not in QUIET_REASONS]
    return f"throttle: {', '.join(reasons)}" if reasons else ""


def torch_gpu_index(gpus: Sequence[Any], trainer_pid: int | None) -> int | None:
    """The GPU whose process list holds the trainer; the only GPU when there is one."""
    for gpu in gpus:
        if trainer_pid is not None and any(p.get("pid") == trainer_pid for p in gpu.processes or []):
            return gpu.index
    return gpus[0].index if len(gpus) == 1 else None


def torch_text(memory: dict) -> str:
    if "mem_allocated_bytes" not in memory:
        return ""
    reserved = memory.get("mem_reserved_bytes")
    return f"torch {gib(memory['mem_allocated_bytes'], '')}/{gib(reserved)} alloc/res"


def gpu_title(sample: Any) -> str:
    if sample is None or sample.nvml != "ok" or not sample.gpus:
        return "GPU"
    names = {gpu.name for gpu in sample.gpus if gpu.name}
    title = "GPU" + (f" · {names.pop()}" if len(names) == 1 else "")
    if len(sample.gpus) > 1:
        title += f" ×{len(sample.gpus)}"
    if sample.gpu_source == "fake":
        title += " · FAKE test data"
    elif sample.gpu_source == "recorded":
        title += " · as recorded"
    return title


def trainer_pids(view: GpuView) -> set[int]:
    return {*view.rank_pids, *([view.trainer_pid] if view.trainer_pid is not None else [])}


def has_spread_row(view: GpuView) -> bool:
    """Two GPUs or more of the run report figures: the spread row follows the GPUs."""
    sample = view.sample
    if sample is None or sample.nvml not in ("ok", "stalled") or len(sample.gpus) < 2:
        return False
    return len(counted_gpus(sample.gpus, trainer_pids(view))[0]) >= 2


def view_spread(view: GpuView) -> GpuSpread | None:
    """The spread across the run's GPUs in the newest sample, with each one's mean util over the
    last SPREAD_WINDOW_S of the sparkline history."""
    if not has_spread_row(view):
        return None
    sample, book = view.sample, view.book
    window_util, window_s = None, None
    if book is not None and book.last_ts is not None and book.first_ts is not None:
        t1 = book.last_ts
        t0 = max(book.first_ts, t1 - SPREAD_WINDOW_S)
        window_s = t1 - t0
        window_util = {}
        for gpu in sample.gpus:
            series = book.get(f"gpu{gpu.index}.util")
            window_util[gpu.index] = window_mean(series.points, t0, t1) if series is not None else None
    return gpu_spread(sample.gpus, trainer_pids(view), window_util, window_s)


def row_count(view: GpuView) -> int:
    sample = view.sample
    if sample is None:
        return 1
    if sample.nvml not in ("ok", "stalled"):
        return 1 if view.compact else 2
    header = 1 if sample.nvml == "stalled" else 0
    footer = 1 if has_spread_row(view) else 0
    if view.compact:
        return header + len(sample.gpus) + footer
    return header + sum(1 if gpu.state == "lost" else 3 for gpu in sample.gpus) + footer


def still_signature(view: GpuView) -> tuple | None:
    """What the panel shows while it has no GPU figures (waiting, no driver): the same signature,
    the same text. None when it shows figures: they come with every sample."""
    sample = view.sample
    if sample is None:
        return ("waiting", view.compact)
    if sample.nvml not in ("ok", "stalled"):
        return (sample.nvml, sample.nvml_detail, view.compact)
    return None


class _Styles:
    def __init__(self, styles: dict[str, Style]) -> None:
        get = styles.get
        self.label, self.dim = get("label", Style()), get("dim", Style(dim=True))
        self.warn, self.error = get("warn", Style()), get("error", Style())
        self.done, self.todo, self.spark = get("done", Style()), get("todo", Style()), get("spark", Style())


def gpu_lines(view: GpuView, width: int, styles: dict[str, Style] | None = None) -> list[Text]:
    s = _Styles(styles or {})
    sample = view.sample
    if sample is None:
        return [Text("waiting for the first GPU sample…", s.dim)]
    if sample.nvml not in ("ok", "stalled"):
        title = {
            "no_driver": "no NVIDIA GPU / driver not loaded",
            "no_gpu": "no NVIDIA GPU",
            "error": "GPU telemetry failed",
        }.get(sample.nvml, f"GPU telemetry: {sample.nvml}")
        detail = (sample.nvml_detail or "").removeprefix(title).lstrip(":").strip()
        style = s.warn if sample.nvml == "error" else s.label
        if view.compact and len(title) + 3 + len(detail) <= width:
            return [Text.assemble((title, style), (f" · {detail}" if detail else "", s.dim))]
        return [Text(title, style), Text(detail or "-", s.dim)]
    lines = []
    if sample.nvml == "stalled":
        lines.append(Text(f"NVML stalled: {sample.nvml_detail or ''}", s.warn))
    torch_index = torch_gpu_index(sample.gpus, view.trainer_pid)
    prefix_w = max(len(f"GPU{gpu.index}") for gpu in sample.gpus) + 1 if sample.gpus else 5
    spread = view_spread(view)
    if view.compact:
        lines.extend(_compact_rows(view, sample.gpus, width, prefix_w, s))
        if spread is not None:
            lines.append(spread_line(spread, width, s))
        return lines
    rows = [_gpu_rows(view, gpu, torch_index, s) for gpu in sample.gpus]
    extra_w = min(EXTRA_MAX, max((len(r[4]) for block in rows for r in block if r), default=0))
    base = prefix_w + LABEL_WIDTH + VALUE_WIDTH + 1
    rest = width - base
    spark_w = SPARK_MIN if rest >= SPARK_MIN + 1 else 0
    rest -= spark_w + 1 if spark_w else 0
    show_extra = extra_w and rest >= extra_w + 2
    rest -= extra_w + 2 if show_extra else 0
    show_gauge = rest >= GAUGE_WIDTH + 1
    rest -= GAUGE_WIDTH + 1 if show_gauge else 0
    if spark_w:
        spark_w = min(SPARK_MAX, spark_w + max(0, rest))
    for gpu, block in zip(sample.gpus, rows):
        prefix = f"GPU{gpu.index}".ljust(prefix_w)
        if gpu.state == "lost":
            lines.append(Text.assemble((prefix, s.label), ("LOST ", s.error), (gpu.error or "", s.dim)))
            continue
        value_style = s.dim if gpu.stale else Style()
        for n, (label, value, share, (key, high), extra, extra_style) in enumerate(block):
            line = Text(no_wrap=True, overflow="ellipsis")
            line.append(prefix if n == 0 else " " * prefix_w, s.label)
            line.append(label.ljust(LABEL_WIDTH), s.label)
            line.append(value.ljust(VALUE_WIDTH), value_style)
            if show_gauge and share is None:  # no limit to measure against: no gauge
                line.append(" " * (GAUGE_WIDTH + 1))
            elif show_gauge:
                done, todo = bar_cells(share, GAUGE_WIDTH)
                line.append(" ")
                line.append(done, s.done)
                line.append(todo, s.todo)
            if spark_w:
                line.append(" ")
                line.append(_spark(view, key, spark_w, high), s.spark)
            if show_extra and extra:
                line.append("  ")
                line.append(extra[:extra_w], extra_style or value_style)
            lines.append(line)
    if spread is not None:
        lines.append(spread_line(spread, width, s))
    return lines


def spread_line(spread: GpuSpread, width: int, s: _Styles) -> Text:
    """`NVLink 18 links/GPU · util 61-97%, GPU5 lowest · mem 61.0-61.0 GiB · power 390-612 W · ...`:
    the parts that fit `width`, the least telling left out first."""
    blind = not spread.trainer_only  # then which GPUs count qualifies every figure
    parts = [  # (priority: lower is kept longer, text, style), in the order of the row
        (2, spread.interconnect or "", s.label),
        (0, util_words(spread), s.warn if spread.util_uneven else Style()),
        (3, mem_words(spread), s.warn if spread.mem_uneven else Style()),
        (4, power_words(spread), Style()),
        (1 if blind else 5, scope_words(spread), s.dim),
    ]
    shown = [part for part in parts if part[1]]
    sep = " · "
    while len(shown) > 1 and sum(len(text) for _, text, _ in shown) + len(sep) * (len(shown) - 1) > width:
        shown.remove(max(shown, key=lambda part: part[0]))
    line = Text(no_wrap=True, overflow="ellipsis")
    for n, (_, text, style) in enumerate(shown):
        if n:
            line.append(sep, s.dim)
        line.append(text, style)
    return line


def _spark(view: GpuView, key: str, width: int, high: float | None) -> str:
    series = view.book.get(key) if view.book is not None else None
    if series is None or view.span is None or not high:
        return " " * width
    return spark(series, width, *grid_span(view.span[0], view.span[1], width, view.sliding), high)


def _gpu_rows(view: GpuView, gpu: Any, torch_index: int | None, s: _Styles) -> list:
    """(label, value, gauge share, (series key, scale), extra text, extra style) per row."""
    if gpu.state == "lost":
        return []
    i = gpu.index
    util = "-" if gpu.util_pct is None else f"{gpu.util_pct:.0f}%"
    used, total = gpu.mem_used_bytes, gpu.mem_total_bytes
    mem = f"{gib(used, '')}/{gib(total)}" if used is not None else "-"
    power, limit = gpu.power_w, gpu.power_limit_w
    power_text = "-" if power is None else f"{power:.0f}/{limit:.0f} W" if limit else f"{power:.0f} W"
    power_high = limit or (view.book.peaks.get(f"gpu{i}.power") if view.book is not None else None)
    heat = []
    if gpu.temp_c is not None:
        heat.append(f"{gpu.temp_c:.0f}°C")
    if gpu.sm_clock_mhz is not None:
        heat.append(f"SM {gpu.sm_clock_mhz} MHz")
    first_extra, first_style = "  ".join(heat), None
    if gpu.state == "stalled":
        first_extra, first_style = "STALLED: NVML does not answer", s.warn
    torch = torch_text(view.torch_memory) if torch_index == i else ""
    return [
        (
            "util",
            util,
            None if gpu.util_pct is None else gpu.util_pct / 100,
            (f"gpu{i}.util", 100.0),
            first_extra,
            first_style,
        ),
        (
            "mem",
            mem,
            used / total if used is not None and total else None,
            (f"gpu{i}.mem", total),
            torch,
            None,
        ),
        (
            "power",
            power_text,
            power / limit if power is not None and limit else None,
            (f"gpu{i}.power", power_high),
            throttle_text(gpu),
            s.warn,
        ),
    ]


def _compact_rows(view: GpuView, gpus: Sequence[Any], width: int, prefix_w: int, s: _Styles) -> list[Text]:
    cells = []
    for gpu in gpus:
        if gpu.state == "lost":
            cells.append(None)
            continue
        power = "-" if gpu.power_w is None else f"{gpu.power_w:.0f}"
        cells.append(
            [
                "-" if gpu.util_pct is None else f"{gpu.util_pct:.0f}%",
                f"{gib(gpu.mem_used_bytes, '')}/{gib(gpu.mem_total_bytes, 'G')}",
                f"{power}/{gpu.power_limit_w:.0f}W" if gpu.power_limit_w else f"{power}W",
                "" if gpu.temp_c is None else f"{gpu.temp_c:.0f}°C",
                "" if gpu.sm_clock_mhz is None else f"{gpu.sm_clock_mhz}MHz",
            ]
        )
    widths = [max((len(c[k]) for c in cells if c), default=0) for k in range(5)]
    fixed = prefix_w + sum(w + 1 for w in widths)
    tails = ["STALLED" if g.state == "stalled" else throttle_text(g) for g in gpus]
    spark_w = min(COMPACT_SPARK_MAX, width - fixed - 1 - max(map(len, tails), default=0))
    if spark_w < COMPACT_SPARK_MIN and width - fixed - 1 - COMPACT_SPARK_MIN >= COMPACT_TAIL_MIN:
        spark_w = COMPACT_SPARK_MIN  # a long throttle list is cut short rather than the sparklines
    spark_w = spark_w if spark_w >= COMPACT_SPARK_MIN else 0
    lines = []
    for gpu, row, tail in zip(gpus, cells, tails):
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append(f"GPU{gpu.index}".ljust(prefix_w), s.label)
        if row is None:
            line.append("LOST ", s.error)
            line.append(gpu.error or "", s.dim)
            lines.append(line)
            continue
        style = s.dim if gpu.stale else Style()
        line.append(row[0].rjust(widths[0]) + " ", style)
        if spark_w:
            line.append(_spark(view, f"gpu{gpu.index}.util", spark_w, 100.0), s.spark)
            line.append(" ")
        line.append(" ".join(cell.rjust(w) for cell, w in zip(row[1:], widths[1:])), style)
        if tail:
            line.append(" ")
            line.append(tail, s.warn)
        lines.append(line)
    return lines


class GpuPanel(LinePanel):
    """`show(view)` hands it a `GpuView`; it draws as many rows as the view needs."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "gpu-panel--label",
        "gpu-panel--dim",
        "gpu-panel--warn",
        "gpu-panel--error",
        "gpu-panel--done",
        "gpu-panel--todo",
        "gpu-panel--spark",
    }

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None):
        super().__init__(name=name, id=id, classes=classes)
        self.view = GpuView()

    def show(self, view: GpuView) -> None:
        before = self.view
        self.view = view
        signature = still_signature(view)
        if signature is not None and signature == still_signature(before):
            return  # it says the same words as before: no redraw
        self.redraw(layout=row_count(view) != row_count(before))

    def get_content_height(self, container, viewport, width: int) -> int:
        return row_count(self.view)

    def build_lines(self, width: int) -> list[Text]:
        styles = {
            name: self.component_style(f"gpu-panel--{name}")
            for name in ("label", "dim", "warn", "error", "done", "todo", "spark")
        }
        return gpu_lines(self.view, width, styles)
