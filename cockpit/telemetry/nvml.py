"""The NVML edge of the telemetry sampler: which fields it reads, and the real library behind them.

`NVML_FIELDS` names each field and the pynvml function (and constants) that reads it; most are one
call, a few (`NVML_COMPOSITE`) take several (NVLink: one call per link). `PynvmlSource` reads them
through nvidia-ml-py, imported only when NVML is first started, so this module imports on a machine
with no driver; `tests/support/nvml_fake.py.FakeNvml` answers the same fields for tests and demos. Both raise
`pynvml.NVMLError` subclasses, so the sampler (`cockpit.telemetry.sampler`) has one code path for both.
"""

from __future__ import annotations

import sys
from typing import Any, Protocol

# field -> (pynvml function, names of pynvml constants passed after the handle). Values come back
# in NVML's units: `utilization` has .gpu/.memory (%), `memory` .used/.total (bytes), `*_mw`
# milliwatts, `*_kb_s` KB/s (NVML samples PCIe traffic over a 20 ms window, so each such call
# takes ~20 ms), `clock_event_reasons` a bit mask, `processes` items with .pid/.usedGpuMemory.
NVML_FAST_FIELDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "utilization": ("nvmlDeviceGetUtilizationRates", ()),
    "memory": ("nvmlDeviceGetMemoryInfo", ()),
    "power_mw": ("nvmlDeviceGetPowerUsage", ()),
    "temp_c": ("nvmlDeviceGetTemperature", ("NVML_TEMPERATURE_GPU",)),
    "sm_clock_mhz": ("nvmlDeviceGetClockInfo", ("NVML_CLOCK_SM",)),
    "mem_clock_mhz": ("nvmlDeviceGetClockInfo", ("NVML_CLOCK_MEM",)),
    "clock_event_reasons": ("nvmlDeviceGetCurrentClocksEventReasons", ()),
}
# read every `slow_every`-th sample only
NVML_SLOW_FIELDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "name": ("nvmlDeviceGetName", ()),
    "uuid": ("nvmlDeviceGetUUID", ()),
    "power_limit_mw": ("nvmlDeviceGetEnforcedPowerLimit", ()),
    "power_default_limit_mw": ("nvmlDeviceGetPowerManagementDefaultLimit", ()),
    "sm_clock_max_mhz": ("nvmlDeviceGetMaxClockInfo", ("NVML_CLOCK_SM",)),
    # the current link trains down at idle to save power: judge it under load
    "pcie_gen": ("nvmlDeviceGetCurrPcieLinkGeneration", ()),
    "pcie_width": ("nvmlDeviceGetCurrPcieLinkWidth", ()),
    "pcie_gen_max": ("nvmlDeviceGetMaxPcieLinkGeneration", ()),
    "pcie_width_max": ("nvmlDeviceGetMaxPcieLinkWidth", ()),
    "processes": ("nvmlDeviceGetComputeRunningProcesses", ()),
    # PCIe traffic, for the several-GPU doctor only: each call counts bytes over a 20-ms window
    "pcie_tx_kb_s": ("nvmlDeviceGetPcieThroughput", ("NVML_PCIE_UTIL_TX_BYTES",)),
    "pcie_rx_kb_s": ("nvmlDeviceGetPcieThroughput", ("NVML_PCIE_UTIL_RX_BYTES",)),
    # what joins the GPUs: active NVLink links (each link asked in turn; a card without NVLink, a
    # consumer card say, answers NotSupported and is not asked again) and their common speed
    "nvlink_active": ("nvmlDeviceGetNvLinkState", ("NVML_NVLINK_MAX_LINKS",)),
    "nvlink_speed_mbps": ("nvmlDeviceGetFieldValues", ("NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON",)),
}
NVML_FIELDS = {**NVML_FAST_FIELDS, **NVML_SLOW_FIELDS}
_OLDER_NAMES = {"nvmlDeviceGetCurrentClocksEventReasons": "nvmlDeviceGetCurrentClocksThrottleReasons"}

# nvmlClocksEventReason* bits (nvml.h), in the order the UI lists them
THROTTLE_REASONS: tuple[tuple[int, str], ...] = (
    (0x80, "hw_power_brake"),
    (0x40, "hw_thermal_slowdown"),
    (0x8, "hw_slowdown"),
    (0x20, "sw_thermal_slowdown"),
    (0x4, "sw_power_cap"),
    (0x10, "sync_boost"),
    (0x2, "applications_clocks_setting"),
    (0x100, "display_clocks_setting"),
    (0x200, "board_limit"),
    (0x400, "reliability"),
    (0x1, "gpu_idle"),
)

# NVML return codes (nvml.h; equal to pynvml.NVML_ERROR_*, which a test checks)
NVML_SUCCESS = 0
NVML_INVALID_ARGUMENT = 2
NVML_NOT_SUPPORTED = 3
NVML_NO_PERMISSION = 4
NVML_DRIVER_NOT_LOADED = 9
NVML_LIBRARY_NOT_FOUND = 12
NVML_FUNCTION_NOT_FOUND = 13
NVML_GPU_IS_LOST = 15
NVML_RESET_REQUIRED = 16
NVML_LIB_RM_VERSION_MISMATCH = 18
NEVER_ASK_AGAIN_CODES = {NVML_NOT_SUPPORTED, NVML_FUNCTION_NOT_FOUND, NVML_NO_PERMISSION}
LOST_CODES = {NVML_GPU_IS_LOST, NVML_RESET_REQUIRED}


class NvmlSource(Protocol):
    """The NVML edge. Every method raises `pynvml.NVMLError` (a subclass per code) on failure."""

    kind: str  # "pynvml" for the real library, "fake" for a test double

    def init(self) -> None: ...

    def shutdown(self) -> None: ...

    def device_count(self) -> int: ...

    def handle(self, index: int) -> Any: ...

    def read(self, handle: Any, field: str) -> Any:
        """One entry of NVML_FIELDS for one device, in NVML's units."""
        ...


class PynvmlSource:
    """The real NVML, through nvidia-ml-py (imported in `init`, so a driverless box can import us)."""

    kind = "pynvml"

    def __init__(self) -> None:
        self._nv: Any = None

    def init(self) -> None:
        import pynvml

        pynvml.nvmlInit()
        self._nv = pynvml

    def shutdown(self) -> None:
        if self._nv is not None:
            self._nv.nvmlShutdown()

    def device_count(self) -> int:
        count: int = self._nv.nvmlDeviceGetCount()
        return count

    def handle(self, index: int) -> Any:
        return self._nv.nvmlDeviceGetHandleByIndex(index)

    def read(self, handle: Any, field: str) -> Any:
        if field in NVML_COMPOSITE:
            return NVML_COMPOSITE[field](self._nv, handle)
        function, constants = NVML_FIELDS[field]
        fn = getattr(self._nv, function, None) or getattr(self._nv, _OLDER_NAMES.get(function, ""), None)
        if fn is None:  # an nvidia-ml-py older than the field
            raise self._nv.NVMLError(NVML_FUNCTION_NOT_FOUND)
        return fn(handle, *(getattr(self._nv, name) for name in constants))


def nvml_code(exc: BaseException) -> int | None:
    """The NVML return code of a pynvml error, else None (never imports pynvml itself)."""
    pynvml = sys.modules.get("pynvml")
    if pynvml is not None and isinstance(exc, pynvml.NVMLError):
        return getattr(exc, "value", None)
    return None


def throttle_names(mask: int) -> list[str]:
    """Short names of a clock-event mask's bits, most severe first; a bit we do not know stays visible."""
    names = [name for bit, name in THROTTLE_REASONS if mask & bit]
    rest = mask & ~sum(bit for bit, _ in THROTTLE_REASONS)
    return names + [f"unknown_0x{1 << b:x}" for b in range(64) if rest >> b & 1]


def nvlink_active(nv: Any, handle: Any) -> int:
    """How many of the card's NVLink links are up. Links past the card's own count answer
    InvalidArgument or NotSupported; a card that answers so for every link has no NVLink, and the
    first link's error is raised (NotSupported: the sampler does not ask again)."""
    active, answered = 0, False
    first_error: BaseException | None = None
    for link in range(nv.NVML_NVLINK_MAX_LINKS):
        try:
            state = nv.nvmlDeviceGetNvLinkState(handle, link)
        except nv.NVMLError as exc:
            if nvml_code(exc) not in (NVML_INVALID_ARGUMENT, NVML_NOT_SUPPORTED):
                raise
            first_error = first_error or exc
            continue
        answered = True
        active += state == nv.NVML_FEATURE_ENABLED
    if not answered:
        assert first_error is not None  # no link answered: each one raised
        if nvml_code(first_error) == NVML_INVALID_ARGUMENT:
            raise nv.NVMLError(NVML_NOT_SUPPORTED)
        raise first_error
    return active


def nvlink_speed_mbps(nv: Any, handle: Any) -> int:
    """The speed NVML reports as common to the card's NVLink links, MB/s (one field value)."""
    (value,) = nv.nvmlDeviceGetFieldValues(handle, [nv.NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON])
    if value.nvmlReturn != NVML_SUCCESS:
        raise nv.NVMLError(value.nvmlReturn)
    return int(value.value.uiVal)


# fields read with more than one call: field -> reader(pynvml module, handle)
NVML_COMPOSITE = {"nvlink_active": nvlink_active, "nvlink_speed_mbps": nvlink_speed_mbps}
