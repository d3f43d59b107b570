"""The GPU panel's spread row: the window's means from the sparkline history, the warning colour,
and the parts that give way on a narrow terminal."""

from __future__ import annotations

from rich.style import Style

from cockpit.fmt import GIB
from cockpit.telemetry.gpu import GpuSample
from cockpit.telemetry.sampler import HostSample, Sample
from screens.run.telemetry_feed import SeriesBook
from widgets.gpu_panel import GpuView, gpu_lines, has_spread_row, row_count, view_spread

WARN = Style(color="yellow")


def sample(ts: float, utils: list[float], pids: list[int]) -> Sample:
    gpus = [
        GpuSample(
            n,
            util_pct=u,
            mem_used_bytes=60 * GIB,
            mem_total_bytes=80 * GIB,
            power_w=600.0,
            nvlink_active=18,
            processes=[{"pid": pid, "used_bytes": None, "name": "python"}],
        )
        for n, (u, pid) in enumerate(zip(utils, pids))
    ]
    return Sample(ts, gpus, HostSample())


def test_a_minute_of_history_judges_the_spread_not_one_sample():
    book = SeriesBook()
    for t in range(40):  # GPU1 lagged for 39 s; the newest sample caught it busy
        book.add_sample(sample(1000.0 + t, [97, 60], [11, 12]))
    newest = sample(1040.0, [97, 96], [11, 12])
    book.add_sample(newest)
    view = GpuView(newest, book, book.span(), trainer_pid=None, compact=True, rank_pids=frozenset({11, 12}))
    spread = view_spread(view)
    assert spread.trainer_only and spread.window_s == 40.5  # the first sample stands for 0.5 s
    assert spread.util.spread == 1 and round(spread.util_window.low) == 61 and spread.util_uneven
    lines = gpu_lines(view, 200, {"warn": WARN})
    assert len(lines) == row_count(view) == 3
    row = lines[-1]
    assert row.plain.startswith("NVLink 18 links/GPU · util 96-97% now, 61-97% over 40 s, GPU1 lowest · mem")
    warned = [row.plain[span.start : span.end] for span in row.spans if span.style == WARN]
    assert warned == ["util 96-97% now, 61-97% over 40 s, GPU1 lowest"]


def test_narrow_rows_keep_the_util_spread_and_one_gpu_of_the_run_has_none():
    newest = sample(1000.0, [97, 70, 0], [11, 12, 99])
    view = GpuView(newest, SeriesBook(), None, trainer_pid=None, compact=True, rank_pids=frozenset({11, 12}))
    assert gpu_lines(view, 40)[-1].plain == "util 70-97%, GPU1 lowest"
    assert gpu_lines(view, 50)[-1].plain == "NVLink 18 links/GPU · util 70-97%, GPU1 lowest"
    alone = GpuView(newest, SeriesBook(), None, trainer_pid=None, compact=True, rank_pids=frozenset({11}))
    assert not has_spread_row(alone) and row_count(alone) == 3  # a one-GPU run on a three-GPU box
