"""How evenly the GPUs of a run work, and what joins them: plain data in, plain data out.

`gpu_spread()` takes the GPUs of one telemetry sample (`cockpit.telemetry.gpu.GpuSample`s or anything
with the same fields) and gives the spread across them of utilisation, memory used and power:
lowest and highest, and which GPU has each. Only the trainer's GPUs count when the process lists
say which they are (the trainer's pid and its ranks'); otherwise every GPU counts, and
`GpuSpread.trainer_only` says so. Utilisation can also be judged over a window (the means of the
last minute, which the caller computes with `window_mean` from its sparkline history): one
sample catches ranks at different moments of a step, a minute's means do not.

`interconnect_text()` says what joins those GPUs: NVLink (links up per GPU) or PCIe only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cockpit.fmt import GIB

# Ranks of one DDP/FSDP job meet at every gradient all-reduce, so their utilisation moves
# together: a minute's means stay within a few points of each other. 20 points between the
# busiest and the idlest is beyond that jitter, about where the doctor's straggler rule (15 points
# below the others' median, cockpit.doctor.multi_gpu) fires, and costs every rank a fifth of its time.
UTIL_SPREAD_WARN_PCT = 20.0
# Every rank holds the same model, optimizer state and micro-batch shapes: memory used differs by
# little. A gap of 15% of a card means another process on one card, or uneven sharding, and the
# fullest card is the one that runs out first.
MEM_SPREAD_WARN_SHARE = 0.15
SPREAD_WINDOW_S = 60.0  # the window of the means (the doctor judges minutes too)
MIN_WINDOW_S = 10.0  # a shorter history says no more than the current sample: no window then


@dataclass(frozen=True)
class Range:
    """The lowest and highest of one figure across the GPUs, and which GPU has each."""

    low: float
    high: float
    low_index: int
    high_index: int

    @property
    def spread(self) -> float:
        return self.high - self.low


@dataclass(frozen=True)
class GpuSpread:
    indexes: tuple[int, ...]  # the GPUs counted
    trainer_only: bool  # True: the trainer's GPUs (process lists); False: every GPU, the trainer's unknown
    util: Range | None  # % in the current sample
    mem: Range | None  # bytes used in the current sample
    mem_total_bytes: int | None  # the smallest card's memory, the scale of the memory spread
    power: Range | None  # W in the current sample
    util_window: Range | None = None  # % as means over `window_s`
    window_s: float | None = None
    interconnect: str | None = None  # `interconnect_text` of the GPUs counted

    @property
    def util_basis(self) -> Range | None:
        """What the warning judges: the window's means when there are some, else the sample."""
        return self.util_window or self.util

    @property
    def util_uneven(self) -> bool:
        basis = self.util_basis
        return basis is not None and basis.spread >= UTIL_SPREAD_WARN_PCT

    @property
    def mem_uneven(self) -> bool:
        if self.mem is None or not self.mem_total_bytes:
            return False
        return self.mem.spread >= MEM_SPREAD_WARN_SHARE * self.mem_total_bytes

    @property
    def lowest(self) -> int | None:
        """The GPU that works least (by the basis of the warning)."""
        basis = self.util_basis
        return None if basis is None else basis.low_index


def value_range(values: Mapping[int, float | None]) -> Range | None:
    """Range of the values known (index -> value); None unless two or more are."""
    known = {i: float(v) for i, v in values.items() if v is not None}
    if len(known) < 2:
        return None
    low = min(known, key=lambda i: (known[i], i))
    high = max(known, key=lambda i: (known[i], -i))
    return Range(known[low], known[high], low, high)


def counted_gpus(gpus: Sequence[Any], trainer_pids: Iterable[int] = ()) -> tuple[list[Any], bool]:
    """The GPUs with live readings that the trainer holds, and True; or all of them and False when
    the process lists name none of the trainer's pids (not reported, or another PID namespace)."""
    live = [g for g in gpus if g.state == "ok" and not g.stale]
    pids = set(trainer_pids)
    ours = [g for g in live if pids & {p.get("pid") for p in g.processes or []}]
    return (ours, True) if ours else (live, False)


def gpu_spread(
    gpus: Sequence[Any],
    trainer_pids: Iterable[int] = (),
    window_util: Mapping[int, float | None] | None = None,
    window_s: float | None = None,
) -> GpuSpread | None:
    """The spread across the run's GPUs; None with fewer than two to compare.

    `window_util`: each GPU's mean utilisation over the last `window_s` seconds (`window_mean`);
    ignored when that window is shorter than MIN_WINDOW_S."""
    counted, trainer_only = counted_gpus(gpus, trainer_pids)
    if len(counted) < 2:
        return None
    indexes = tuple(g.index for g in counted)
    totals = [g.mem_total_bytes for g in counted if g.mem_total_bytes]
    util_window = None
    if window_util is not None and window_s is not None and window_s >= MIN_WINDOW_S:
        util_window = value_range({i: window_util.get(i) for i in indexes})
    return GpuSpread(
        indexes=indexes,
        trainer_only=trainer_only,
        util=value_range({g.index: g.util_pct for g in counted}),
        mem=value_range({g.index: g.mem_used_bytes for g in counted}),
        mem_total_bytes=min(totals) if totals else None,
        power=value_range({g.index: g.power_w for g in counted}),
        util_window=util_window,
        window_s=window_s if util_window is not None else None,
        interconnect=interconnect_text(counted),
    )


def window_mean(points: Iterable[tuple[float, float, float]], t0: float, t1: float) -> float | None:
    """The time-weighted mean of (start, end, value) intervals over [t0, t1]; None with none there."""
    total = weight = 0.0
    for start, end, value in points:
        overlap = min(end, t1) - max(start, t0)
        if overlap > 0:
            total += value * overlap
            weight += overlap
    return total / weight if weight else None


def interconnect_text(gpus: Sequence[Any]) -> str | None:
    """`NVLink 18 links/GPU × 26.6 GB/s`, `PCIe 4.0 x16, no NVLink`, or None when nothing is known
    (a recorded sample carries neither)."""
    if not gpus:
        return None
    links = [g.nvlink_active or 0 for g in gpus]
    joined = [n for n in links if n]
    if joined:
        low, high = min(joined), max(joined)
        text = f"NVLink {high} links/GPU" if low == high else f"NVLink {low}-{high} links/GPU"
        if len(joined) < len(gpus):
            text = f"NVLink on {len(joined)} of {len(gpus)} GPUs"
        speeds = {g.nvlink_speed_mbps for g in gpus if g.nvlink_active}
        if len(speeds) == 1 and None not in speeds:
            text += f" × {speeds.pop() / 1000:.1f} GB/s"
        return text
    # the card's and slot's best link: the current one trains down while the GPU idles
    gens = {g.pcie_gen_max or g.pcie_gen for g in gpus}
    widths = {g.pcie_width_max or g.pcie_width for g in gpus}
    if None in gens or None in widths:
        if any(g.nvlink_active == 0 for g in gpus):  # links exist, none is up
            return "no NVLink up"
        return None
    gen = f"{gens.pop()}.0" if len(gens) == 1 else f"gen {min(gens)}-{max(gens)}"
    width = f"x{widths.pop()}" if len(widths) == 1 else f"x{min(widths)}-x{max(widths)}"
    return f"PCIe {gen} {width}, no NVLink"


# ---------------------------------------------------------------- words


def _pct(r: Range) -> str:
    return f"{r.low:.0f}-{r.high:.0f}%"


def window_words(window_s: float) -> str:
    return f"{window_s / 60:.0f} min" if window_s >= 60 else f"{window_s:.0f} s"


def util_words(spread: GpuSpread) -> str:
    """`util 61-97% now, 63-97% over 1 min, GPU5 lowest`."""
    parts = []
    if spread.util is not None:
        parts.append(f"util {_pct(spread.util)}" + (" now" if spread.util_window else ""))
    if spread.util_window is not None and spread.window_s is not None:
        lead = "" if parts else "util "
        parts.append(f"{lead}{_pct(spread.util_window)} over {window_words(spread.window_s)}")
    basis = spread.util_basis  # `lowest` is its low_index
    if basis is not None and basis.spread > 0:
        parts.append(f"GPU{basis.low_index} lowest")
    return ", ".join(parts)


def mem_words(spread: GpuSpread) -> str:
    r = spread.mem
    return "" if r is None else f"mem {r.low / GIB:.1f}-{r.high / GIB:.1f} GiB"


def power_words(spread: GpuSpread) -> str:
    r = spread.power
    return "" if r is None else f"power {r.low:.0f}-{r.high:.0f} W"


def scope_words(spread: GpuSpread) -> str:
    n = len(spread.indexes)
    return f"the trainer's {n} GPUs" if spread.trainer_only else f"all {n} GPUs: trainer's not known"


def brief(spread: GpuSpread | None) -> str:
    """A few characters for a status line: `util 61-97% (GPU5 low)`."""
    if spread is None or spread.util_basis is None:
        return ""
    basis = spread.util_basis
    low = f" (GPU{basis.low_index} low)" if basis.spread >= UTIL_SPREAD_WARN_PCT else ""
    return f"util {_pct(basis)}{low}"
