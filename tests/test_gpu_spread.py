"""The spread across a run's GPUs (cockpit.telemetry.spread): which GPUs count, the ranges, the warning,
the window's means, and what joins the GPUs."""

from __future__ import annotations

import pytest
from support.nvml_fake import FakeGpu, FakeNvml

from cockpit.fmt import GIB
from cockpit.live.watch import gpu_status
from cockpit.telemetry.gpu import GpuSample
from cockpit.telemetry.host import HostCounters
from cockpit.telemetry.sampler import Sampler
from cockpit.telemetry.spread import (
    MIN_WINDOW_S,
    UTIL_SPREAD_WARN_PCT,
    brief,
    gpu_spread,
    interconnect_text,
    util_words,
    window_mean,
)

TRAINER = 4242


def gpu(index: int, util: float | None = 97, mem_gib: float = 61, power: float = 600, **kw) -> GpuSample:
    kw.setdefault("processes", [{"pid": TRAINER + index, "used_bytes": None, "name": "python"}])
    return GpuSample(
        index, util_pct=util, mem_used_bytes=int(mem_gib * GIB), mem_total_bytes=80 * GIB, power_w=power, **kw
    )


RANKS = [TRAINER + i for i in range(8)]


def test_the_ranges_name_the_lowest_and_highest_gpu():
    gpus = [gpu(i) for i in range(8)]
    gpus[5] = gpu(5, util=61, mem_gib=40.5, power=310)
    spread = gpu_spread(gpus, RANKS)
    assert spread.indexes == tuple(range(8)) and spread.trainer_only
    assert (spread.util.low, spread.util.high, spread.util.low_index) == (61, 97, 5)
    assert (spread.mem.low, spread.mem.high) == (40.5 * GIB, 61 * GIB)
    assert (spread.power.low, spread.power.high, spread.power.low_index) == (310, 600, 5)
    assert spread.util_uneven and spread.lowest == 5
    assert spread.mem_uneven  # 20.5 GiB of 80: another process or uneven shards
    assert brief(spread) == "util 61-97% (GPU5 low)"
    assert util_words(spread) == "util 61-97%, GPU5 lowest"


def test_an_even_run_is_not_flagged():
    gpus = [gpu(i, util=97 - i, mem_gib=61 + i / 10) for i in range(4)]
    spread = gpu_spread(gpus, RANKS)
    assert spread.util.spread == 3 and not spread.util_uneven and not spread.mem_uneven
    assert brief(spread) == "util 94-97%"
    assert not gpu_spread([gpu(0), gpu(1, util=97 - UTIL_SPREAD_WARN_PCT + 1)], RANKS).util_uneven
    assert gpu_spread([gpu(0), gpu(1, util=97 - UTIL_SPREAD_WARN_PCT)], RANKS).util_uneven


def test_only_the_trainers_gpus_count_when_the_process_lists_say_which():
    others = [gpu(i, util=0, power=60, processes=[]) for i in range(2, 8)]
    spread = gpu_spread([gpu(0), gpu(1, util=95), *others], RANKS)
    assert spread.indexes == (0, 1) and spread.trainer_only and not spread.util_uneven
    # one trainer GPU out of eight: nothing to compare it with
    assert gpu_spread([gpu(0), *others], RANKS) is None
    # process lists that name no trainer pid (not reported, another PID namespace): every GPU counts
    blind = gpu_spread([gpu(0), gpu(1), *others], trainer_pids=[1])
    assert blind.indexes == tuple(range(8)) and not blind.trainer_only and blind.util_uneven


def test_lost_and_stalled_gpus_and_missing_figures_are_left_out():
    gpus = [
        gpu(0),
        gpu(1, util=None),
        GpuSample(2, state="lost"),
        gpu(3, util=10, state="stalled", stale=True),
    ]
    spread = gpu_spread(gpus, RANKS)
    assert spread.indexes == (0, 1)
    assert spread.util is None and spread.mem is not None  # one util known: no util range
    assert brief(spread) == "" and gpu_spread([gpu(0)], RANKS) is None


def test_the_window_means_are_what_the_warning_judges():
    gpus = [gpu(0, util=99), gpu(1, util=60)]  # one sample catches GPU1 at its all-reduce
    even = gpu_spread(gpus, RANKS, window_util={0: 96.0, 1: 93.5}, window_s=60.0)
    assert even.util.spread == 39 and not even.util_uneven
    assert util_words(even) == "util 60-99% now, 94-96% over 1 min, GPU1 lowest"
    short = gpu_spread(gpus, RANKS, window_util={0: 96.0, 1: 93.5}, window_s=MIN_WINDOW_S - 1)
    assert short.util_window is None and short.util_uneven  # too short a history: the sample judges


def test_window_mean_weights_by_time_within_the_window():
    points = [(0.0, 10.0, 100.0), (10.0, 20.0, 50.0), (20.0, 30.0, 0.0)]
    assert window_mean(points, 10.0, 30.0) == pytest.approx(25.0)
    assert window_mean(points, 5.0, 15.0) == pytest.approx(75.0)
    assert window_mean(points, 40.0, 50.0) is None


def test_what_joins_the_gpus():
    nvlink = [gpu(i, nvlink_active=18, nvlink_speed_mbps=26_562) for i in range(8)]
    assert interconnect_text(nvlink) == "NVLink 18 links/GPU × 26.6 GB/s"
    assert interconnect_text([gpu(0, nvlink_active=12), gpu(1, nvlink_active=10)]) == "NVLink 10-12 links/GPU"
    assert interconnect_text([gpu(0, nvlink_active=4), gpu(1, nvlink_active=None)]) == "NVLink on 1 of 2 GPUs"
    pcie = [gpu(i, pcie_gen=1, pcie_width=16, pcie_gen_max=4, pcie_width_max=16) for i in range(2)]
    assert interconnect_text(pcie) == "PCIe 4.0 x16, no NVLink"  # the best link, not the idle one
    mixed = [gpu(0, pcie_gen_max=4, pcie_width_max=16), gpu(1, pcie_gen_max=3, pcie_width_max=8)]
    assert interconnect_text(mixed) == "PCIe gen 3-4 x8-x16, no NVLink"
    assert interconnect_text([gpu(0), gpu(1)]) is None  # a recorded sample: nothing known
    assert interconnect_text([gpu(0, nvlink_active=0), gpu(1, nvlink_active=0)]) == "no NVLink up"
    assert gpu_spread(pcie, RANKS).interconnect == "PCIe 4.0 x16, no NVLink"


def test_the_no_ui_status_line_gives_the_spread_of_many_gpus():
    ranks = [5000 + i for i in range(8)]
    gpus = [FakeGpu(processes=[(pid, 60 * GIB)]) for pid in ranks]
    gpus[5].util_pct = 61
    gpus.append(FakeGpu(util_pct=0, processes=[]))  # a ninth card the run does not use
    sample = Sampler(FakeNvml(gpus), host=HostCounters(process_name=lambda pid: None)).sample()
    line = gpu_status(sample, ranks)
    assert line.endswith("+7 GPUs (mean 82%)  spread util 61-97% (GPU5 low)"), line
    assert gpu_status(sample).endswith("spread util 0-97% (GPU8 low)")  # the trainer's GPUs unknown
    even = Sampler(FakeNvml(4), host=HostCounters(process_name=lambda pid: None)).sample()
    assert gpu_status(even).endswith("+2 GPUs (mean 97%)  spread util 97-97%")
