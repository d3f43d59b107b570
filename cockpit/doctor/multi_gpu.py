"""The doctor's rules for a run on several GPUs: a straggler GPU, a slow all-reduce.

Same contract as cockpit.doctor.engine (pure, windows of observations in, `Finding`s out; a rule that
lacks its evidence stays quiet). Both judge only the trainer's GPUs, and only while at least two
of them report a utilisation: under DDP every step waits for the slowest rank at the gradient
all-reduce, so one card that works less than the others holds all of them back.
"""

from __future__ import annotations

from statistics import fmean, median
from typing import Any

from cockpit.doctor.rules import LOW_UTIL_PCT
from cockpit.doctor.window import Finding, Observation, Window, field
from cockpit.paths import cockpit_command
from cockpit.telemetry.nvml_state import PCIE_X16_PRACTICAL_GBS

STRAGGLER_GAP_PCT = 15.0  # a GPU this many points below the median of the others' util...
STRAGGLER_MIN_OTHERS_PCT = 50.0  # ...while the others do work
ALLREDUCE_LINK_SHARE = 0.3  # PCIe traffic above 30% of the link's practical rate, on every GPU...
ALLREDUCE_UNKNOWN_LINK_BYTES_S = 5e9  # ...or above 5 GB/s where the link is not reported


def rank_pids(state: Any) -> set[int]:
    """This node's rank processes (from the hello and model events), all of them the trainer's."""
    found = (field(state, "distributed") or {}).get("pids") or []
    return {p for p in found if isinstance(p, int)}


def _utils(o: Observation) -> dict[Any, float]:
    return {field(g, "index"): u for g in o.trainer_gpus if (u := field(g, "util_pct")) is not None}


def _behind(o: Observation, index: Any) -> float | None:
    """How many points GPU `index` works less than the median of the other trainer GPUs."""
    utils = _utils(o)
    if index not in utils or len(utils) < 2:
        return None
    others = median(u for i, u in utils.items() if i != index)
    if others < STRAGGLER_MIN_OTHERS_PCT:
        return None
    return others - utils[index]


def _training(o: Observation) -> bool:
    return o.training


def straggler(window: Window, state: Any) -> Finding | None:
    """One trainer GPU's util >= 15 points below the median of the others (themselves >= 50%)
    for most of the window while training, with at least two trainer GPUs reporting util."""
    indexes = dict.fromkeys(i for o in window for i in _utils(o))
    for index in indexes:

        def lagging(o: Observation, index: Any = index) -> bool:
            gap = _behind(o, index)
            return o.training and gap is not None and gap >= STRAGGLER_GAP_PCT

        if not window.held(lagging, during=_training):
            continue
        training = [o for o in window if o.training and len(_utils(o)) >= 2]
        means = {
            i: fmean(u for o in training if (u := _utils(o).get(i)) is not None)
            for i in indexes
            if any(i in _utils(o) for o in training)
        }
        spread = ", ".join(f"GPU {i} {m:.0f}%" for i, m in sorted(means.items(), key=lambda kv: str(kv[0])))
        latest = (g for o in reversed(window.observations) for g in o.trainer_gpus)
        gpu = next((g for g in latest if field(g, "index") == index), None)
        clues = []
        if gpu is not None and field(gpu, "throttle_reasons"):
            clues.append(f"throttle: {'/'.join(field(gpu, 'throttle_reasons'))}")
        clock, clock_max = field(gpu, "sm_clock_mhz"), field(gpu, "sm_clock_max_mhz")
        if clock and clock_max:
            clues.append(f"SM clock {clock:.0f} of {clock_max:.0f} MHz")
        return Finding(
            rule="straggler",
            severity="warn",
            title=f"Straggler: GPU {index} works less than the others and holds every step back",
            evidence=f"util per GPU (means of {window.span_text()}): {spread}"
            + (f"; GPU {index}: {', '.join(clues)}" if clues else ""),
            fix=f"Under DDP every step waits for the slowest rank. Check GPU {index}: throttling and clocks "
            "(nvidia-smi -q -d PERFORMANCE), its rank's CPU (NUMA: nvidia-smi topo -m), or another process "
            f"on it; `{cockpit_command()} preflight --multi` measures each card. Or leave it out "
            "(CUDA_VISIBLE_DEVICES).",
            since_ts=window.first_ts(lagging),
        )
    return None


def _link_bytes_s(gpu: Any) -> float:
    gen, width = field(gpu, "pcie_gen") or field(gpu, "pcie_gen_max"), field(gpu, "pcie_width")
    if gen in PCIE_X16_PRACTICAL_GBS and width:
        return float(ALLREDUCE_LINK_SHARE * PCIE_X16_PRACTICAL_GBS[gen] * 1e9 * width / 16)
    return ALLREDUCE_UNKNOWN_LINK_BYTES_S


def _traffic(gpu: Any) -> float | None:
    tx, rx = field(gpu, "pcie_tx_bytes_s"), field(gpu, "pcie_rx_bytes_s")
    return None if tx is None and rx is None else (tx or 0.0) + (rx or 0.0)


def _waiting_on_the_bus(o: Observation) -> bool:
    gpus = [g for g in o.trainer_gpus if field(g, "util_pct") is not None]
    if not o.training or len(gpus) < 2 or max(g.util_pct for g in gpus) >= LOW_UTIL_PCT:
        return False
    traffic = [(_traffic(g), _link_bytes_s(g)) for g in gpus]
    return all(t is not None and t >= limit for t, limit in traffic)


def slow_allreduce(window: Window, state: Any) -> Finding | None:
    """Every trainer GPU (two or more) below 70% util while each moves >= 30% of its PCIe link's
    practical rate (>= 5 GB/s where the link is unknown), for most of the window: the GPUs wait
    for the gradient exchange over the bus."""
    if not window.held(_waiting_on_the_bus, during=_training):
        return None
    training = [o for o in window if _waiting_on_the_bus(o)]
    indexes = sorted({field(g, "index") for o in training for g in o.trainer_gpus}, key=str)
    parts = []
    for i in indexes:
        readings = [g for o in training for g in o.trainer_gpus if field(g, "index") == i]
        util = fmean(g.util_pct for g in readings if g.util_pct is not None)
        traffic = fmean(t for g in readings if (t := _traffic(g)) is not None)
        parts.append(f"GPU {i} {util:.0f}% util, PCIe {traffic / 1e9:.1f} GB/s")
    world = (field(state, "distributed") or {}).get("strategy")
    nvlink = any(field(g, "nvlink_active") for o in training for g in o.trainer_gpus)
    remedy = (
        # the GPUs have NVLink, yet the exchange crosses PCIe: NCCL was kept off the links
        "these GPUs have NVLink, so NCCL is not using it: unset NCCL_P2P_DISABLE and NCCL_P2P_LEVEL, "
        "give the container IPC (--ipc=host) and check `nvidia-smi topo -m` and `nvidia-smi nvlink -s`."
        if nvlink
        else "or rent cards joined by NVLink; check `nvidia-smi topo -m` and that NCCL_P2P_DISABLE is unset."
    )
    return Finding(
        rule="slow_allreduce",
        severity="warn",
        title="Slow all-reduce: the GPUs wait for each other over the bus",
        evidence=f"{'; '.join(parts)} (means of {window.span_text()})",
        fix="The gradient exchange goes over PCIe"
        + (f" ({world})" if world else "")
        + ": raise training.gradient_accumulation_steps (fewer exchanges per sample), use LoRA/QLoRA "
        "rather than a full fine-tune, " + remedy,
        since_ts=window.first_ts(_waiting_on_the_bus),
    )


RULES = (("straggler", straggler), ("slow_allreduce", slow_allreduce))
