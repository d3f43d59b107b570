"""Preflight checks of the GPU, judged in the UI process from NVML and the probe's answer (no torch).

The NVML checks live here: visibility, persistence, memory errors, throttling, power limit, PCIe
link, other processes. Inputs are plain data: an `NvmlState` from `cockpit.telemetry.nvml_state.read_nvml`,
and `load`, a list of `sample_load()` results taken while the probe's matmul ran. The checks on the
probe's answer are in `cockpit.preflight.checks.gpu_probe`, the performance and software checks in
`cockpit.preflight.checks.perf`; `gpu_checks(...)` returns them all, in the preflight screen's order.
Thresholds cite shared/reference/gpus.md.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from cockpit.fmt import GIB
from cockpit.gpus.catalog import Catalog
from cockpit.preflight.checks.base import CheckResult
from cockpit.preflight.checks.gpu_probe import (
    check_arch,
    check_bf16,
    check_bnb,
    check_cuda_driver,
    check_cudnn,
    check_probe_ran,
    make_result,
)
from cockpit.preflight.checks.perf import (
    check_allreduce,
    check_h2d,
    check_host_launch,
    check_matmul,
    check_peer_access,
    check_software,
)
from cockpit.telemetry.nvml import throttle_names
from cockpit.telemetry.nvml_state import NvmlState

_THROTTLE_BAD = {"hw_power_brake": "fail", "hw_thermal_slowdown": "fail", "hw_slowdown": "fail",
                 "sw_thermal_slowdown": "warn"}  # fmt: skip


def check_visible(state: NvmlState) -> CheckResult:
    result = partial(make_result, "gpu.visible", "gpu", "GPU visible to NVML")
    if state.error:
        return result(
            "fail",
            state.error,
            "NVML starts and lists >= 1 GPU",
            "install or load the NVIDIA driver (`nvidia-smi` must work); in a container, "
            "start it with --gpus all",
            source=state.source_kind,
        )
    if not state.gpus:
        return result(
            "fail",
            "NVML runs but lists no GPU",
            ">= 1 GPU",
            "check CUDA_VISIBLE_DEVICES and the container's GPU access",
        )
    names = sorted({g.get("name") or "?" for g in state.gpus})
    vram = [g["memory"]["total_bytes"] / GIB for g in state.gpus if "memory" in g]
    value = f"{len(state.gpus)} x {', '.join(names)}" + (f", {min(vram):.0f} GiB each" if vram else "")
    driver = f"; driver {state.driver_version}" if state.driver_version else ""
    return result(
        "pass",
        value + driver,
        ">= 1 GPU",
        count=len(state.gpus),
        names=names,
        driver=state.driver_version,
    )


def _per_gpu(state: NvmlState, key: str) -> list[tuple[int, Any]]:
    return [(g["index"], g[key]) for g in state.gpus if g.get(key) is not None]


def check_persistence(state: NvmlState) -> CheckResult:
    result = partial(make_result, "gpu.persistence", "gpu", "Persistence mode")
    modes = _per_gpu(state, "persistence_mode")
    if not modes:
        return result("skip", "not reported by this driver")
    off = [i for i, mode in modes if not mode]
    status = "warn" if off else "pass"
    value = f"off on GPU {', '.join(map(str, off))}" if off else "on"
    return result(
        status,
        value,
        "on",
        "sudo nvidia-smi -pm 1 (otherwise every process start re-initialises the GPU)",
    )


def check_memory_health(state: NvmlState) -> CheckResult:
    result = partial(make_result, "gpu.memory_errors", "gpu", "ECC errors and retired/remapped rows")
    keys = ("ecc_uncorrected", "retired_pending", "remapped_rows_pending", "remapped_rows_failure")
    seen: dict[str, Any] = {k: _per_gpu(state, k) for k in keys}  # the evidence: each GPU's value
    if not any(seen.values()):
        return result("skip", "ECC not supported or not reported (consumer card?)")
    bad = [f"GPU {i}: {k.replace('_', ' ')} = {v}" for k, vals in seen.items() for i, v in vals if v]
    if bad:
        return result(
            "fail",
            "; ".join(bad),
            "0 uncorrected errors, nothing pending",
            "memory errors on this GPU: ask the provider for another node (a reset may clear "
            "pending retirements)",
            **seen,
        )
    return result("pass", "no uncorrected errors, nothing pending", "0", **seen)


def check_throttle(state: NvmlState, load: list[list[dict[str, Any]]] | None = None) -> CheckResult:
    """Clock-event reasons while the probe loaded the GPU (`load`), else as NVML reports them now."""
    result = partial(make_result, "gpu.throttle", "gpu", "Clock throttling under load")
    samples = [g for snapshot in load or [] for g in snapshot] or state.gpus
    masks = [
        (g["index"], g["clock_event_reasons"]) for g in samples if g.get("clock_event_reasons") is not None
    ]
    if not masks:
        return result("skip", "clock event reasons not supported")
    when = "under load" if load else "now (idle: throttling shows under load)"
    found = {(i, name) for i, mask in masks for name in throttle_names(mask) if name in _THROTTLE_BAD}
    if not found:
        return result(
            "pass",
            f"no thermal/hardware slowdown {when}",
            "no hw/thermal slowdown",
            samples=len(masks),
        )
    status = "fail" if any(_THROTTLE_BAD[n] == "fail" for _, n in found) else "warn"
    value = ", ".join(f"GPU {i}: {n}" for i, n in sorted(found)) + f" {when}"
    return result(
        status,
        value,
        "no hw/thermal slowdown",
        "the card is slowed by heat or power delivery: check cooling and `nvidia-smi -q -d "
        "PERFORMANCE`; ask the provider for another node",
        samples=len(masks),
    )


def check_power_limit(state: NvmlState) -> CheckResult:
    result = partial(make_result, "gpu.power_limit", "gpu", "Power limit")
    pairs = [
        (g["index"], g["power_limit_mw"], g["power_default_limit_mw"])
        for g in state.gpus
        if g.get("power_limit_mw") and g.get("power_default_limit_mw")
    ]
    if not pairs:
        return result("skip", "power limits not reported")
    low = [(i, lim, dflt) for i, lim, dflt in pairs if lim < 0.98 * dflt]
    if low:
        value = "; ".join(f"GPU {i}: {lim / 1000:.0f} W of default {d / 1000:.0f} W" for i, lim, d in low)
        return result(
            "warn",
            value,
            "limit = default",
            "a capped card runs slower: sudo nvidia-smi -pl <default W>, or ask the provider",
        )
    return result("pass", f"{pairs[0][1] / 1000:.0f} W (default)", "limit = default")


def check_pcie_link(state: NvmlState, load: list[list[dict[str, Any]]] | None = None) -> CheckResult:
    result = partial(make_result, "gpu.pcie_link", "gpu", "PCIe link")
    issues, shown = [], []
    for gpu in state.gpus:
        if gpu.get("pcie_gen_max") is None or gpu.get("pcie_width_max") is None:
            continue
        under = [g for snap in load or [] for g in snap if g["index"] == gpu["index"] and g.get("pcie_gen")]
        gen = max((g["pcie_gen"] for g in under), default=gpu.get("pcie_gen"))
        width = max((g.get("pcie_width") or 0 for g in under), default=gpu.get("pcie_width"))
        shown.append(f"Gen{gen} x{width} of Gen{gpu['pcie_gen_max']} x{gpu['pcie_width_max']}")
        if width is not None and width < gpu["pcie_width_max"]:
            issues.append(f"GPU {gpu['index']} runs x{width} of x{gpu['pcie_width_max']}")
        elif under and gen is not None and gen < gpu["pcie_gen_max"]:
            issues.append(f"GPU {gpu['index']} runs Gen{gen} of Gen{gpu['pcie_gen_max']} under load")
    if not shown:
        return result("skip", "PCIe link not reported")
    note = "" if load else " (idle: the generation downclocks at idle; judged under load by the probe)"
    value = "; ".join(sorted(set(shown))) + note
    if issues:
        return result(
            "warn",
            "; ".join(issues),
            "max generation and width under load",
            "the GPU sits in a slower slot or riser: host<->GPU copies will be slow; ask the provider",
            links=shown,
        )
    return result("pass", value, "max generation and width under load", links=shown)


def check_processes(state: NvmlState, own_pids: set[int] | None = None) -> CheckResult:
    result = partial(make_result, "gpu.other_processes", "gpu", "Other processes on the GPU")
    if not any("processes" in g for g in state.gpus):
        return result("skip", "process list not reported")
    others = [
        (g["index"], p)
        for g in state.gpus
        for p in g.get("processes", [])
        if p["pid"] not in (own_pids or set())
    ]
    if not others:
        return result("pass", "none", "no other process holds GPU memory")
    value = "; ".join(
        f"GPU {i}: pid {p['pid']} holds "
        + (f"{p['used_bytes'] / GIB:.1f} GiB" if p["used_bytes"] else "memory")
        for i, p in others
    )
    return result(
        "warn",
        value,
        "no other process holds GPU memory",
        "stop them (`nvidia-smi`, then kill PID) or expect less free VRAM",
        processes=others,
    )


def gpu_checks(
    state: NvmlState,
    probe: dict[str, Any],
    load: list[list[dict[str, Any]]] | None = None,
    answer_problem: str | None = None,
    own_pids: set[int] | None = None,
    catalog: Catalog | None = None,
) -> list[CheckResult]:
    """Every GPU, performance and software check, in the order the preflight screen lists them."""
    visible = check_visible(state)
    if visible.status == "fail":
        return [visible, check_software(probe)]
    ran = check_probe_ran(answer_problem, probe)
    return [
        visible,
        *([ran] if ran else []),
        check_cuda_driver(state, probe),
        check_arch(probe),
        check_cudnn(probe),
        check_bf16(probe),
        check_bnb(probe),
        check_persistence(state),
        check_memory_health(state),
        check_throttle(state, load),
        check_power_limit(state),
        check_pcie_link(state, load),
        check_processes(state, own_pids),
        check_peer_access(probe),
        check_allreduce(probe, state, catalog),
        *check_matmul(probe, state, catalog),
        *check_h2d(probe, state),
        check_host_launch(probe),
        check_software(probe),
    ]
