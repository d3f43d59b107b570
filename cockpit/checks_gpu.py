"""Preflight checks of the GPU, judged in the UI process from NVML and the probe's answer (no torch).

Inputs are plain data: `read_nvml(source)` turns an `NvmlSource` (real or `FakeNvml`) plus the
few system/ECC fields outside `NVML_FIELDS` (`extras`) into an `NvmlState`; the probe's answer is
`ProbeAnswer.findings` (see train_backend/probe.py), and `load` is a list of `sample_load()` results
taken while the probe's matmul ran. `gpu_checks(...)` returns every check; each check is also a
function of its own. Thresholds and tables cite shared/reference/gpus.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from cockpit.checks import CheckResult
from cockpit.telemetry import NVML_NOT_SUPPORTED, nvml_code, throttle_names

GIB = 1 << 30
# torch's CUDA -> the oldest Linux driver that runs it fully (shared/reference/gpus.md)
CUDA_DRIVER_FLOORS = {
    "11.8": "520.61.05", "12.0": "525.60.13", "12.1": "530.30.02", "12.2": "535.54.03",
    "12.3": "545.23.06", "12.4": "550.54.14", "12.5": "555.42.02", "12.6": "560.28.03",
    "12.8": "570.26", "12.9": "575.51.03", "13.0": "580.65.06", "13.1": "590.44.01", "13.2": "595.45.04",
}  # fmt: skip
# minor-version compatibility: any 12.x (13.x) runs, with limits, on the major's base driver
MAJOR_BASE_FLOORS = {"12": "525.60.13", "13": "580.65.06"}
# achievable host->device copy over PCIe x16, GB/s, by generation (practical, not the line rate)
PCIE_X16_PRACTICAL_GBS = {3: 12.0, 4: 25.0, 5: 50.0, 6: 100.0}
# NVML name -> catalog id, first match wins (the NVL variants are not in the catalog)
CARD_PATTERNS = (
    (r"h200 nvl|h100 nvl", None), (r"h200", "h200-sxm"), (r"h100.*pcie", "h100-pcie"), (r"h100", "h100-sxm"),
    (r"a100.*sxm.*80|a100.*80.*sxm", "a100-80gb-sxm"), (r"a100.*sxm", "a100-40gb-sxm"),
    (r"a100.*80gb", "a100-80gb-pcie"), (r"a100", "a100-40gb-pcie"), (r"b200", "b200"),
    (r"a10g", "a10g"), (r"\ba10\b", "a10"), (r"l40s", "l40s"), (r"\bl4\b", "l4"),
    (r"rtx 6000 ada", "rtx-6000-ada"), (r"rtx a6000", "rtx-a6000"), (r"rtx 3090", "rtx-3090"),
    (r"rtx 4090", "rtx-4090"), (r"rtx 5090", "rtx-5090"),
)  # fmt: skip
# Known-bad combinations beyond what each package's own metadata declares (those are checked too).
# (package, installed range, other package, minimum, why)
KNOWN_BAD = (
    # huggingface/transformers PR #41889: "starting with transformers v5 ... the minimum PEFT version
    # will be 0.18.0"
    ("transformers", ">=5", "peft", "0.18.0", "transformers 5 imports PEFT APIs first released in peft 0.18"),
)
_THROTTLE_BAD = {"hw_power_brake": "fail", "hw_thermal_slowdown": "fail", "hw_slowdown": "fail",
                 "sw_thermal_slowdown": "warn"}  # fmt: skip


@dataclass
class NvmlState:
    error: str | None = None  # why NVML cannot be used; None when it answered
    source_kind: str = "pynvml"
    driver_version: str | None = None
    cuda_driver_version: int | None = None  # 12040 = the newest CUDA the driver supports, 12.4
    gpus: list[dict] = field(default_factory=list)  # per GPU: field -> value; "unsupported": names


def _version(text: str | None) -> tuple[int, ...]:
    """'2.11.0+cu130' -> (2, 11, 0); '0.18.0rc1' -> (0, 18, 0)."""
    return tuple(int(p) for p in re.findall(r"\d+", (text or "").split("+")[0].split("rc")[0])[:4])


def _result(
    cid: str,
    group: str,
    title: str,
    status: str,
    value: str = "",
    threshold: str = "",
    fix: str = "",
    **evidence,
) -> CheckResult:
    return CheckResult(cid, group, title, status, value, threshold, "" if status == "pass" else fix, evidence)


# ---- reading NVML --------------------------------------------------------------------------------

STATE_FIELDS = (
    "name",
    "memory",
    "power_limit_mw",
    "power_default_limit_mw",
    "pcie_gen",
    "pcie_width",
    "pcie_gen_max",
    "pcie_width_max",
    "clock_event_reasons",
    "processes",
)
LOAD_FIELDS = ("clock_event_reasons", "pcie_gen", "pcie_width", "utilization")


def _plain(name: str, raw: Any) -> Any:
    if name == "memory":
        return {"total_bytes": raw.total, "used_bytes": raw.used}
    if name == "utilization":
        return raw.gpu
    if name == "processes":
        return [{"pid": p.pid, "used_bytes": p.usedGpuMemory} for p in raw]
    return raw.decode() if isinstance(raw, bytes) else raw


def _read_fields(source, names: tuple[str, ...]) -> list[dict]:
    gpus = []
    for index in range(source.device_count()):
        handle, gpu = source.handle(index), {"index": index, "unsupported": []}
        for name in names:
            try:
                gpu[name] = _plain(name, source.read(handle, name))
            except Exception as exc:
                gpu["unsupported" if nvml_code(exc) == NVML_NOT_SUPPORTED else "errors"] = [
                    *gpu.get("unsupported" if nvml_code(exc) == NVML_NOT_SUPPORTED else "errors", []),
                    name,
                ]
        gpus.append(gpu)
    return gpus


def read_nvml(source, extras: dict | None = None) -> NvmlState:
    """NVML as plain data. `extras`: {"driver_version", "cuda_driver_version", "gpus": [{...}]} with
    persistence_mode, ecc_uncorrected, retired_pending, remapped_rows_pending/failure per GPU; read from
    pynvml itself when None and the source is real."""
    try:
        source.init()
    except Exception as exc:
        return NvmlState(error=f"NVML did not start: {exc}", source_kind=source.kind)
    try:
        state = NvmlState(source_kind=source.kind, gpus=_read_fields(source, STATE_FIELDS))
        if extras is None and source.kind == "pynvml":
            extras = _pynvml_extras(len(state.gpus))
        extras = extras or {}
        state.driver_version = extras.get("driver_version")
        state.cuda_driver_version = extras.get("cuda_driver_version")
        for gpu, more in zip(state.gpus, extras.get("gpus", [])):
            gpu.update(more)
        return state
    finally:
        try:
            source.shutdown()
        except Exception:
            pass


def sample_load(source) -> list[dict]:
    """Throttle reasons, PCIe link and utilisation now; pass it as `run_probe(sample=...)`."""
    source.init()
    try:
        return _read_fields(source, LOAD_FIELDS)
    finally:
        source.shutdown()


def _pynvml_extras(count: int) -> dict:
    import pynvml

    def ask(fn, *args):
        try:
            value = fn(*args)
            return value.decode() if isinstance(value, bytes) else value
        except pynvml.NVMLError:
            return None  # not supported (consumer cards, vGPU): the check skips

    extras: dict = {
        "driver_version": ask(pynvml.nvmlSystemGetDriverVersion),
        "cuda_driver_version": ask(pynvml.nvmlSystemGetCudaDriverVersion),
        "gpus": [],
    }
    for index in range(count):
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        rows = ask(pynvml.nvmlDeviceGetRemappedRows, h)  # (corrected, uncorrected, pending, failed)
        extras["gpus"].append(
            {
                "persistence_mode": ask(pynvml.nvmlDeviceGetPersistenceMode, h),
                "ecc_uncorrected": ask(
                    pynvml.nvmlDeviceGetTotalEccErrors,
                    h,
                    pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                    pynvml.NVML_VOLATILE_ECC,
                ),
                "retired_pending": ask(pynvml.nvmlDeviceGetRetiredPagesPendingStatus, h),
                "remapped_rows_pending": None if rows is None else bool(rows[2]),
                "remapped_rows_failure": None if rows is None else bool(rows[3]),
            }
        )
    return extras


def find_card(nvml_name: str | None, catalog=None):
    """The catalog card an NVML name denotes ("NVIDIA H200" -> h200-sxm), else None."""
    from cockpit.catalog import load_catalog

    name = (nvml_name or "").lower()
    for pattern, card_id in CARD_PATTERNS:
        if re.search(pattern, name):
            if card_id is None:
                return None
            catalog = catalog or load_catalog()
            return next((c for c in catalog.cards if c.id == card_id), None)
    return None


# ---- the checks ----------------------------------------------------------------------------------


def check_visible(state: NvmlState) -> CheckResult:
    title = "GPU visible to NVML"
    if state.error:
        return _result(
            "gpu.visible",
            "gpu",
            title,
            "fail",
            state.error,
            "NVML starts and lists >= 1 GPU",
            "install or load the NVIDIA driver (`nvidia-smi` must work); in a container, "
            "start it with --gpus all",
            source=state.source_kind,
        )
    if not state.gpus:
        return _result(
            "gpu.visible",
            "gpu",
            title,
            "fail",
            "NVML runs but lists no GPU",
            ">= 1 GPU",
            "check CUDA_VISIBLE_DEVICES and the container's GPU access",
        )
    names = sorted({g.get("name") or "?" for g in state.gpus})
    vram = [g["memory"]["total_bytes"] / GIB for g in state.gpus if "memory" in g]
    value = f"{len(state.gpus)} x {', '.join(names)}" + (f", {min(vram):.0f} GiB each" if vram else "")
    driver = f"; driver {state.driver_version}" if state.driver_version else ""
    return _result(
        "gpu.visible",
        "gpu",
        title,
        "pass",
        value + driver,
        ">= 1 GPU",
        count=len(state.gpus),
        names=names,
        driver=state.driver_version,
    )


def check_cuda_driver(state: NvmlState, probe: dict) -> CheckResult:
    cid, title = "gpu.cuda_driver", "Driver runs torch's CUDA"
    torch_cuda = (probe.get("torch") or {}).get("cuda")
    if "torch" not in probe or not state.driver_version:
        return _result(cid, "gpu", title, "skip", "no probe answer or no driver version")
    if torch_cuda is None:
        return _result(
            cid,
            "gpu",
            title,
            "fail",
            f"torch {probe['torch'].get('version')} is a CPU-only build",
            "a CUDA build of torch",
            "install a CUDA wheel of torch (pip install torch "
            "--index-url https://download.pytorch.org/whl/cu128, or the cu1XX the driver allows)",
        )
    driver = _version(state.driver_version)
    floor = CUDA_DRIVER_FLOORS.get(torch_cuda)
    base = MAJOR_BASE_FLOORS.get(torch_cuda.split(".")[0])
    value = f"torch CUDA {torch_cuda}, driver {state.driver_version}"
    evidence = {
        "torch_cuda": torch_cuda,
        "driver": state.driver_version,
        "floor": floor,
        "cuda_driver_version": state.cuda_driver_version,
    }
    fix = f"install driver >= {floor or base} or a torch wheel built for an older CUDA"
    if floor and driver >= _version(floor):
        return _result(cid, "gpu", title, "pass", value, f"driver >= {floor}", **evidence)
    if base and driver >= _version(base):
        return _result(
            cid,
            "gpu",
            title,
            "warn",
            value + " (minor-version compatibility)",
            f"driver >= {floor or '?'} for full support",
            fix + "; until then PTX JIT can fail",
            **evidence,
        )
    return _result(
        cid,
        "gpu",
        title,
        "fail",
        value,
        f"driver >= {floor or base}",
        f"torch needs a newer driver: {fix}",
        **evidence,
    )


def check_arch(probe: dict) -> CheckResult:
    cid, title = "gpu.arch", "torch has kernels for this GPU"
    arch, devices = (probe.get("torch") or {}).get("arch_list") or [], probe.get("devices") or []
    if not devices:
        return _result(cid, "gpu", title, "skip", "the probe saw no device")
    missing, ptx_only = [], []
    for dev in devices:
        major, minor = dev["capability"]
        if f"sm_{major}{minor}" in arch:
            continue
        ptx = [a for a in arch if a.startswith("compute_") and int(a[8:]) <= major * 10 + minor]
        (ptx_only if ptx else missing).append(f"sm_{major}{minor}")
    needed = sorted({"sm_{}{}".format(*d["capability"]) for d in devices})
    value = f"needs {', '.join(needed)}"
    ev = {"arch_list": arch}
    if missing:
        return _result(
            cid,
            "gpu",
            title,
            "fail",
            f"{value}; torch has {', '.join(arch) or 'none'}",
            "the device's sm_XY in torch.cuda.get_arch_list()",
            f'this torch has no {", ".join(missing)} kernels ("no kernel image is available"): '
            "install a torch wheel whose CUDA supports this GPU",
            **ev,
        )
    if ptx_only:
        return _result(
            cid,
            "gpu",
            title,
            "warn",
            f"{value}; only PTX",
            "native sm_XY kernels",
            "kernels are JIT-compiled from PTX (slow first start); prefer a wheel with native "
            f"{', '.join(ptx_only)}",
            **ev,
        )
    return _result(cid, "gpu", title, "pass", value, "sm_XY in torch's arch list", **ev)


def check_cudnn(probe: dict) -> CheckResult:
    torch_info = probe.get("torch")
    if not torch_info or not torch_info.get("cuda_available"):
        return _result("gpu.cudnn", "gpu", "cuDNN present", "skip", "torch sees no GPU")
    version = torch_info.get("cudnn")
    status = "pass" if version else "warn"
    return _result(
        "gpu.cudnn",
        "gpu",
        "cuDNN present",
        status,
        f"cuDNN {version or 'missing'}",
        "cuDNN loads",
        "reinstall torch with its nvidia-cudnn wheel",
    )


def check_bf16(probe: dict) -> CheckResult:
    devices = probe.get("devices") or []
    if not devices:
        return _result("gpu.bf16", "gpu", "Real bf16", "skip", "the probe saw no device")
    low = min(tuple(d["capability"]) for d in devices)
    value = f"compute capability {low[0]}.{low[1]}"
    if low >= (8, 0):
        return _result("gpu.bf16", "gpu", "Real bf16", "pass", value, "capability >= 8.0")
    return _result(
        "gpu.bf16",
        "gpu",
        "Real bf16",
        "warn",
        value + ": bf16 is emulated: use fp16",
        "capability >= 8.0 (is_bf16_supported() says True here through emulation)",
        "train in fp16 (bf16: false, fp16: true)",
    )


def check_bnb(probe: dict) -> CheckResult:
    cid, title = "gpu.bnb_4bit", "bitsandbytes 4-bit forward/backward"
    answer = probe.get("bnb_4bit")
    if not answer:
        return _result(cid, "gpu", title, "skip", "not probed (no GPU)")
    if answer.get("ok"):
        return _result(
            cid,
            "gpu",
            title,
            "pass",
            f"nf4, {answer.get('compute_dtype')} compute: ok",
            "finite output and gradients",
            **answer,
        )
    error = answer.get("error") or "unknown error"
    if "No module named 'bitsandbytes'" in error:
        return _result(
            cid,
            "gpu",
            title,
            "warn",
            "bitsandbytes is not installed",
            "imports",
            "pip install bitsandbytes (needed for QLoRA only)",
            **answer,
        )
    return _result(
        cid,
        "gpu",
        title,
        "fail",
        error[:200],
        "finite output and gradients",
        "QLoRA will not work here: reinstall bitsandbytes for this torch/CUDA, or use LoRA",
        **answer,
    )


def _per_gpu(state: NvmlState, key: str) -> list[tuple[int, Any]]:
    return [(g["index"], g[key]) for g in state.gpus if g.get(key) is not None]


def check_persistence(state: NvmlState) -> CheckResult:
    cid, title = "gpu.persistence", "Persistence mode"
    modes = _per_gpu(state, "persistence_mode")
    if not modes:
        return _result(cid, "gpu", title, "skip", "not reported by this driver")
    off = [i for i, mode in modes if not mode]
    status = "warn" if off else "pass"
    value = f"off on GPU {', '.join(map(str, off))}" if off else "on"
    return _result(
        cid,
        "gpu",
        title,
        status,
        value,
        "on",
        "sudo nvidia-smi -pm 1 (otherwise every process start re-initialises the GPU)",
    )


def check_memory_health(state: NvmlState) -> CheckResult:
    cid, title = "gpu.memory_errors", "ECC errors and retired/remapped rows"
    keys = ("ecc_uncorrected", "retired_pending", "remapped_rows_pending", "remapped_rows_failure")
    seen = {k: _per_gpu(state, k) for k in keys}
    if not any(seen.values()):
        return _result(cid, "gpu", title, "skip", "ECC not supported or not reported (consumer card?)")
    bad = [f"GPU {i}: {k.replace('_', ' ')} = {v}" for k, vals in seen.items() for i, v in vals if v]
    if bad:
        return _result(
            cid,
            "gpu",
            title,
            "fail",
            "; ".join(bad),
            "0 uncorrected errors, nothing pending",
            "memory errors on this GPU: ask the provider for another node (a reset may clear "
            "pending retirements)",
            **seen,
        )
    return _result(cid, "gpu", title, "pass", "no uncorrected errors, nothing pending", "0", **seen)


def check_throttle(state: NvmlState, load: list[list[dict]] | None = None) -> CheckResult:
    """Clock-event reasons while the probe loaded the GPU (`load`), else as NVML reports them now."""
    cid, title = "gpu.throttle", "Clock throttling under load"
    samples = [g for snapshot in load or [] for g in snapshot] or state.gpus
    masks = [
        (g["index"], g["clock_event_reasons"]) for g in samples if g.get("clock_event_reasons") is not None
    ]
    if not masks:
        return _result(cid, "gpu", title, "skip", "clock event reasons not supported")
    when = "under load" if load else "now (idle: throttling shows under load)"
    found = {(i, name) for i, mask in masks for name in throttle_names(mask) if name in _THROTTLE_BAD}
    if not found:
        return _result(
            cid,
            "gpu",
            title,
            "pass",
            f"no thermal/hardware slowdown {when}",
            "no hw/thermal slowdown",
            samples=len(masks),
        )
    status = "fail" if any(_THROTTLE_BAD[n] == "fail" for _, n in found) else "warn"
    value = ", ".join(f"GPU {i}: {n}" for i, n in sorted(found)) + f" {when}"
    return _result(
        cid,
        "gpu",
        title,
        status,
        value,
        "no hw/thermal slowdown",
        "the card is slowed by heat or power delivery: check cooling and `nvidia-smi -q -d "
        "PERFORMANCE`; ask the provider for another node",
        samples=len(masks),
    )


def check_power_limit(state: NvmlState) -> CheckResult:
    cid, title = "gpu.power_limit", "Power limit"
    pairs = [
        (g["index"], g["power_limit_mw"], g["power_default_limit_mw"])
        for g in state.gpus
        if g.get("power_limit_mw") and g.get("power_default_limit_mw")
    ]
    if not pairs:
        return _result(cid, "gpu", title, "skip", "power limits not reported")
    low = [(i, lim, dflt) for i, lim, dflt in pairs if lim < 0.98 * dflt]
    if low:
        value = "; ".join(f"GPU {i}: {lim / 1000:.0f} W of default {d / 1000:.0f} W" for i, lim, d in low)
        return _result(
            cid,
            "gpu",
            title,
            "warn",
            value,
            "limit = default",
            "a capped card runs slower: sudo nvidia-smi -pl <default W>, or ask the provider",
        )
    return _result(cid, "gpu", title, "pass", f"{pairs[0][1] / 1000:.0f} W (default)", "limit = default")


def check_pcie_link(state: NvmlState, load: list[list[dict]] | None = None) -> CheckResult:
    cid, title = "gpu.pcie_link", "PCIe link"
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
        return _result(cid, "gpu", title, "skip", "PCIe link not reported")
    note = "" if load else " (idle: the generation downclocks at idle; judged under load by the probe)"
    value = "; ".join(sorted(set(shown))) + note
    if issues:
        return _result(
            cid,
            "gpu",
            title,
            "warn",
            "; ".join(issues),
            "max generation and width under load",
            "the GPU sits in a slower slot or riser: host<->GPU copies will be slow; ask the provider",
            links=shown,
        )
    return _result(cid, "gpu", title, "pass", value, "max generation and width under load", links=shown)


def check_processes(state: NvmlState, own_pids: set[int] | None = None) -> CheckResult:
    cid, title = "gpu.other_processes", "Other processes on the GPU"
    if not any("processes" in g for g in state.gpus):
        return _result(cid, "gpu", title, "skip", "process list not reported")
    others = [
        (g["index"], p)
        for g in state.gpus
        for p in g.get("processes", [])
        if p["pid"] not in (own_pids or set())
    ]
    if not others:
        return _result(cid, "gpu", title, "pass", "none", "no other process holds GPU memory")
    value = "; ".join(
        f"GPU {i}: pid {p['pid']} holds "
        + (f"{p['used_bytes'] / GIB:.1f} GiB" if p["used_bytes"] else "memory")
        for i, p in others
    )
    return _result(
        cid,
        "gpu",
        title,
        "warn",
        value,
        "no other process holds GPU memory",
        "stop them (`nvidia-smi`, then kill PID) or expect less free VRAM",
        processes=others,
    )


def check_probe_ran(answer_problem: str | None, probe: dict) -> CheckResult | None:
    if answer_problem:
        return _result(
            "gpu.probe",
            "gpu",
            "GPU probe",
            "fail",
            answer_problem,
            "the probe finishes",
            "run `python -m train_backend.probe --quick` to see its error",
        )
    if "probe_error" in probe:  # the probe itself broke part-way: what it did not reach is unknown
        return _result(
            "gpu.probe",
            "gpu",
            "GPU probe",
            "fail",
            f"the GPU probe failed part-way: {probe['probe_error'].get('error', '?')}",
            "the probe finishes",
            "run `python -m train_backend.probe --quick` to see the whole traceback",
        )
    if "no_gpu" in probe and "torch" in probe and probe["torch"].get("cuda") is not None:
        return _result(
            "gpu.probe",
            "gpu",
            "GPU probe",
            "fail",
            probe["no_gpu"]["reason"],
            "torch sees the GPU",
            "check CUDA_VISIBLE_DEVICES and that the driver matches torch",
        )
    return None


def gpu_checks(
    state: NvmlState,
    probe: dict,
    load: list[list[dict]] | None = None,
    answer_problem: str | None = None,
    own_pids: set[int] | None = None,
    catalog=None,
) -> list[CheckResult]:
    """Every GPU, performance and software check, in the order the preflight screen lists them."""
    from cockpit.checks_perf import (
        check_allreduce,
        check_h2d,
        check_matmul,
        check_peer_access,
        check_software,
    )

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
        check_software(probe),
    ]
