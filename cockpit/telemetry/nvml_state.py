"""NVML as plain data for the GPU checks: `read_nvml(source)` turns an `NvmlSource` (real or `FakeNvml`)
plus the few system/ECC fields outside `NVML_FIELDS` (`extras`) into an `NvmlState`; `sample_load()`
reads what changes under load.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cockpit.telemetry.nvml import NVML_NOT_SUPPORTED, NvmlSource, nvml_code

# achievable host->device copy over PCIe x16, GB/s, by generation (practical, not the line rate)
PCIE_X16_PRACTICAL_GBS = {3: 12.0, 4: 25.0, 5: 50.0, 6: 100.0}


@dataclass
class NvmlState:
    error: str | None = None  # why NVML cannot be used; None when it answered
    source_kind: str = "pynvml"
    driver_version: str | None = None
    cuda_driver_version: int | None = None  # 12040 = the newest CUDA the driver supports, 12.4
    gpus: list[dict[str, Any]] = field(default_factory=list)  # per GPU: field -> value; "unsupported": names


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


def _read_fields(source: NvmlSource, names: tuple[str, ...]) -> list[dict[str, Any]]:
    gpus = []
    for index in range(source.device_count()):
        gpu: dict[str, Any]
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


def read_nvml(source: NvmlSource, extras: dict[str, Any] | None = None) -> NvmlState:
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


def sample_load(source: NvmlSource) -> list[dict[str, Any]]:
    """Throttle reasons, PCIe link and utilisation now; pass it as `run_probe(sample=...)`."""
    source.init()
    try:
        return _read_fields(source, LOAD_FIELDS)
    finally:
        source.shutdown()


def _pynvml_extras(count: int) -> dict[str, Any]:
    import pynvml

    def ask(fn: Callable[..., Any], *args: Any) -> Any:
        try:
            value = fn(*args)
            return value.decode() if isinstance(value, bytes) else value
        except pynvml.NVMLError:
            return None  # not supported (consumer cards, vGPU): the check skips

    extras: dict[str, Any] = {
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
                "cuda_capability": ask(pynvml.nvmlDeviceGetCudaComputeCapability, h),  # (major, minor)
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
