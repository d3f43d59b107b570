"""A fake NVML for tests and demos: no GPU, no driver, the same errors as the real library.

`FakeNvml` implements `cockpit.telemetry.nvml.NvmlSource`. Each `FakeGpu` answers the fields of
`cockpit.telemetry.nvml.NVML_FIELDS` in NVML's units and shapes (structs with .gpu/.memory,
.used/.total, processes with .pid/.usedGpuMemory), and fails the way the real one does, by raising
`pynvml.NVMLError(code)`, which pynvml turns into its subclass (NVMLError_NotSupported, ...):

    FakeGpu(unsupported={"power_mw"})            a field answers NotSupported
    FakeGpu(errors={"temp_c": NVML_ERROR_UNKNOWN}) a field fails with any code, every call
    FakeGpu(lost_at_call=7)                      the 7th read of the device and all after: GpuIsLost
    FakeGpu(processes=[(1234, 2 << 30)])         pids need not exist: psutil then finds no name
    FakeGpu(nvlink_active=None)                  no NVLink: its fields answer NotSupported (PCIe only)
    FakeGpu(overrides={"temp_c": lambda n: 60 + n})  a value per call (n counts reads of the field)
    fake.block(0, "power_mw", 5.0)               that read sleeps 5 s (or until fake.unblock())
    FakeNvml(init_error="driver_not_loaded")     or "library_not_found", or any NVML code
    FakeNvml(gpus=0)                             NVML runs but lists no GPU

`fake.calls` counts reads per (gpu index, field); `fake.count(field, index=None)` sums them.
The figures of a default FakeGpu are an H100 SXM under a LoRA run, for demos; a demo that shows
them must say they are fake (`Sample.gpu_source == "fake"`).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml

from cockpit.fmt import GIB
from cockpit.telemetry.nvml import NVML_FIELDS

INIT_ERRORS = {
    "driver_not_loaded": pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
    "library_not_found": pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
    "version_mismatch": pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
    "no_permission": pynvml.NVML_ERROR_NO_PERMISSION,
}


def nvml_error(code: int) -> pynvml.NVMLError:
    """The exception the real library raises for this NVML return code (its pynvml subclass)."""
    return pynvml.NVMLError(code)


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str | None = None  # default: derived from the index
    util_pct: int = 97
    mem_util_pct: int = 58
    mem_used_bytes: int = 61 * GIB
    mem_total_bytes: int = 80 * GIB
    power_mw: int = 612_000
    power_limit_mw: int = 700_000
    power_default_limit_mw: int = 700_000
    temp_c: int = 67
    sm_clock_mhz: int = 1980
    mem_clock_mhz: int = 2619
    sm_clock_max_mhz: int = 1980
    pcie_gen: int = 5
    pcie_width: int = 16
    pcie_gen_max: int = 5
    pcie_width_max: int = 16
    pcie_tx_kb_s: int = 180_000
    pcie_rx_kb_s: int = 950_000
    clock_event_reasons: int = 0
    nvlink_active: int | None = 18  # an H100 SXM has 18 NVLink links; None: no NVLink (NotSupported)
    nvlink_speed_mbps: int | None = 26_562  # per link, about what an H100 SXM reports; None: NotSupported
    processes: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, used bytes)
    unsupported: set[str] = field(default_factory=set)
    errors: dict[str, int] = field(default_factory=dict)  # field -> NVML error code
    lost_at_call: int | None = None
    overrides: dict[str, Callable[[int], Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in {*self.unsupported, *self.errors, *self.overrides}:
            if name not in NVML_FIELDS:
                raise ValueError(f"unknown NVML field {name!r}; fields are: {', '.join(NVML_FIELDS)}")
        # a card without NVLink answers NotSupported for its links, as the real library does
        self.unsupported = self.unsupported | {
            name for name in ("nvlink_active", "nvlink_speed_mbps") if getattr(self, name) is None
        }

    def raw(self, name: str, index: int) -> Any:
        """The field as pynvml returns it."""
        if name == "utilization":
            return SimpleNamespace(gpu=self.util_pct, memory=self.mem_util_pct)
        if name == "memory":
            free = self.mem_total_bytes - self.mem_used_bytes
            return SimpleNamespace(total=self.mem_total_bytes, free=free, used=self.mem_used_bytes)
        if name == "processes":
            return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self.processes]
        if name == "uuid":
            return self.uuid or f"GPU-fa4e0000-0000-4000-8000-{index:012d}"
        return getattr(self, name)


class FakeNvml:
    """`NvmlSource` over FakeGpus; thread-safe, since the sampler calls it from its worker thread."""

    kind = "fake"

    def __init__(
        self,
        gpus: list[FakeGpu] | int = 2,
        init_error: str | int | None = None,
        init_block_s: float = 0.0,
    ) -> None:
        self.gpus = [FakeGpu() for _ in range(gpus)] if isinstance(gpus, int) else list(gpus)
        if isinstance(init_error, str) and init_error not in INIT_ERRORS:
            raise ValueError(f"unknown init_error {init_error!r}; use one of {', '.join(INIT_ERRORS)}")
        self.init_error = INIT_ERRORS.get(init_error, init_error) if init_error is not None else None
        self.init_block_s = init_block_s
        self.calls: Counter[tuple[int | None, str]] = Counter()
        self.started = False
        self._device_reads: Counter[int] = Counter()
        self._blocks: dict[tuple[int, str], float] = {}
        self._lock = threading.Lock()
        self._released = threading.Event()

    # -- test controls --

    def block(self, index: int, name: str, seconds: float) -> None:
        """Make every read of this field sleep `seconds` (until `unblock`)."""
        if name not in NVML_FIELDS:
            raise ValueError(f"unknown NVML field {name!r}")
        with self._lock:
            self._released.clear()
            self._blocks[(index, name)] = seconds

    def unblock(self) -> None:
        """Wake every read that sleeps now and stop blocking later ones."""
        with self._lock:
            self._blocks.clear()
            self.init_block_s = 0.0
            self._released.set()

    def count(self, name: str, index: int | None = None) -> int:
        with self._lock:
            return sum(n for (i, f), n in self.calls.items() if f == name and index in (None, i))

    # -- NvmlSource --

    def init(self) -> None:
        with self._lock:
            self.calls[(None, "init")] += 1
            block_s = self.init_block_s
        if block_s:
            self._released.wait(block_s)
        if self.init_error is not None:
            raise nvml_error(self.init_error)
        self.started = True

    def shutdown(self) -> None:
        self._check_started()
        self.started = False

    def device_count(self) -> int:
        self._check_started()
        return len(self.gpus)

    def handle(self, index: int) -> int:
        self._check_started()
        if not 0 <= index < len(self.gpus):
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return index

    def read(self, handle: Any, field: str) -> Any:
        self._check_started()
        index, gpu = handle, self.gpus[handle]
        with self._lock:
            self.calls[(index, field)] += 1
            self._device_reads[index] += 1
            call_no, device_reads = self.calls[(index, field)], self._device_reads[index]
            block_s = self._blocks.get((index, field), 0.0)
        if block_s:
            self._released.wait(block_s)
        if gpu.lost_at_call is not None and device_reads >= gpu.lost_at_call:
            raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
        if field in gpu.unsupported:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if field in gpu.errors:
            raise nvml_error(gpu.errors[field])
        if field in gpu.overrides:
            return gpu.overrides[field](call_no)
        return gpu.raw(field, index)

    def _check_started(self) -> None:
        if not self.started:
            raise nvml_error(pynvml.NVML_ERROR_UNINITIALIZED)


def gone_pid() -> int:
    """A pid no process has: one above the kernel's pid_max (for a process that vanished)."""
    try:
        with open("/proc/sys/kernel/pid_max") as f:
            return int(f.read()) + 1
    except (OSError, ValueError):
        return (1 << 22) + 1  # Linux's largest pid_max is 2**22
