"""The GPU half of the telemetry sampler: every GPU read through NVML, never raising, never hanging.

`GpuReader.read()` asks the `NvmlSource` (cockpit.telemetry.nvml: the real nvidia-ml-py, or
tests/support/nvml_fake.py) for each GPU's fields and turns them into `GpuSample`s in our units:
- capability probe: the first read of a GPU asks every field; a field that answers NotSupported
  (or FunctionNotFound, NoPermission) is never asked again and stays None;
- slow fields (`NVML_SLOW_FIELDS`) are read every `slow_every`-th sample and reused in between;
- watchdog: NVML calls run on one worker thread. A call that overruns is abandoned (a daemon
  thread), its GPU shows `state="stalled"` with its last good values marked stale, and it is asked
  again once the stuck call returns or after a back-off. A second GPU stalling while one call is
  still stuck means the library itself hangs: the state is "stalled" and no NVML call is made until
  a stuck call returns or the back-off ends (cockpit.telemetry.watchdog: at most `MAX_STUCK_THREADS` threads
  are ever abandoned);
- a GPU that answers GpuIsLost (or needs a reset) is "lost", asked again only on slow samples.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from cockpit.telemetry.host import safe
from cockpit.telemetry.nvml import (
    LOST_CODES,
    NEVER_ASK_AGAIN_CODES,
    NVML_DRIVER_NOT_LOADED,
    NVML_FAST_FIELDS,
    NVML_FIELDS,
    NVML_GPU_IS_LOST,
    NVML_LIB_RM_VERSION_MISMATCH,
    NVML_LIBRARY_NOT_FOUND,
    NVML_SLOW_FIELDS,
    NvmlSource,
    nvml_code,
    throttle_names,
)
from cockpit.telemetry.watchdog import CallStalled, Watchdog

GPU_LOST_TEXT = "GPU is lost: check `nvidia-smi` and `dmesg | grep -i xid`; the node may need a reboot"
_LIBRARY = "library"  # the watchdog tag of calls that are not about one GPU
# one field read on the watchdog's worker: (name, raw value, None), (name, None, error), or
# (None, None, None) when the sample's budget ran out
_Answer = tuple[str | None, Any, BaseException | None]


@dataclass
class GpuSample:
    index: int
    name: str | None = None
    uuid: str | None = None
    util_pct: float | None = None
    mem_util_pct: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    power_default_limit_w: float | None = None
    temp_c: float | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_max: int | None = None
    pcie_tx_bytes_s: float | None = None
    pcie_rx_bytes_s: float | None = None
    nvlink_active: int | None = None  # NVLink links up; None: the card has no NVLink (NotSupported)
    nvlink_speed_mbps: int | None = None  # the links' common speed as NVML reports it, MB/s
    throttle_reasons: list[str] | None = None
    processes: list[dict[str, Any]] | None = None  # {pid, used_bytes, name}; name None when the pid is gone
    state: str = "ok"  # ok | lost | stalled
    stale: bool = False  # the values are the last good ones, not this sample's
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Gpu:
    index: int
    handle: Any
    unsupported: set[str] = field(default_factory=set)
    slow: dict[str, Any] = field(default_factory=dict)  # GpuSample fields from the slow reads
    slow_read: bool = False
    last_good: GpuSample | None = None
    last_good_mono: float = 0.0
    lost: str | None = None
    retry_at: float = 0.0  # monotonic time before which a stuck GPU is not asked again
    backoff_s: float = 0.0


class GpuReader:
    """The GPUs of one sample at a time; the caller serialises `read()` and `close()`."""

    def __init__(
        self,
        nvml: NvmlSource,
        call_timeout_s: float,
        slow_every: int,
        stall_backoff_s: float,
        max_backoff_s: float,
        process_name: Callable[[int], str | None],
    ) -> None:
        self.nvml = nvml
        self.call_timeout_s = call_timeout_s
        self.slow_every = slow_every
        self.stall_backoff_s = stall_backoff_s
        self.max_backoff_s = max_backoff_s
        self.process_name = process_name  # pid -> name for the process list; may raise
        self._watchdog = Watchdog()
        self._state = "init"  # init | ok | no_gpu | no_driver | stalled (while starting)
        self._detail: str | None = None
        self._gpus: list[_Gpu] = []
        self._library_retry_at = 0.0
        self._library_backoff_s = 0.0
        self._library_stuck_at = 0  # stuck calls when the library was judged hung

    def close(self) -> None:
        """Shut NVML down (unless it hangs) and let the worker thread end."""
        if self._state == "ok" and not self._watchdog.stuck_count():
            try:
                self._watchdog.call(self.call_timeout_s, _LIBRARY, self.nvml.shutdown)
            except Exception:
                pass
        self._watchdog.close()
        self._state, self._gpus = "init", []

    def read(self, count: int) -> tuple[list[GpuSample], str, str | None]:
        """The GPUs of sample number `count`, NVML's state ("ok", "no_gpu", ...) and why not ok."""
        now = time.monotonic()
        deadline = now + self.call_timeout_s
        if self._state in ("no_driver", "no_gpu"):  # a driver does not appear mid-run: not retried
            return [], self._state, self._detail
        if self._state in ("init", "stalled"):
            if self._state == "stalled" and not self._library_may_retry(now):
                return [], "stalled", self._detail
            self._start(deadline)
            if self._state != "ok":
                return [], self._state, self._detail
        if self._library_hung(now):
            return [self._stale(g, self._detail or "") for g in self._gpus], "stalled", self._detail
        slow_due = count % self.slow_every == 0
        samples, spent_on = [], None
        for gpu in self._gpus:
            if spent_on is not None:
                samples.append(self._stale(gpu, f"not read: NVML was busy with a stuck call on {spent_on}"))
                continue
            if self._watchdog.is_stuck(gpu.index) and now < gpu.retry_at:
                samples.append(self._stale(gpu, self._stall_text(gpu, "a call is still stuck")))
                continue
            stuck_elsewhere = self._watchdog.stuck_elsewhere(gpu.index)
            try:
                samples.append(self._read_gpu(gpu, slow_due, deadline))
            except CallStalled as exc:
                spent_on = f"GPU {gpu.index}"
                gpu.backoff_s = min(self.max_backoff_s, max(self.stall_backoff_s, gpu.backoff_s * 2))
                gpu.retry_at = time.monotonic() + gpu.backoff_s
                samples.append(self._stale(gpu, self._stall_text(gpu, str(exc))))
                if stuck_elsewhere and self._watchdog.is_stuck(gpu.index):
                    self._judge_library_hung("NVML calls hang on more than one GPU")
        if self._gpus and all(s.state == "stalled" for s in samples):
            return samples, "stalled", self._detail or "NVML does not answer for any GPU"
        if not self._library_stuck_at:
            self._library_backoff_s = 0.0
        return samples, "ok", None

    def _start(self, deadline: float) -> None:
        """nvmlInit, the device count and the handles, each under the watchdog."""
        call = self._call_library
        try:
            call(deadline, self.nvml.init)
            count = call(deadline, self.nvml.device_count)
            handles = [call(deadline, self.nvml.handle, i) for i in range(count)]
        except CallStalled as exc:
            self._state = "stalled"
            self._judge_library_hung(f"NVML did not start: {exc}")
            return
        except ImportError as exc:
            self._state = "no_driver"
            self._detail = (
                f"no NVIDIA GPU / driver not loaded: cannot import pynvml ({exc}); pip install nvidia-ml-py"
            )
            return
        except Exception as exc:
            self._state, self._detail = _start_failure(exc)
            return
        if not handles:
            self._state = "no_gpu"
            self._detail = "no NVIDIA GPU: NVML runs but lists no device (check `nvidia-smi -L`)"
            return
        self._state, self._detail = "ok", None
        self._gpus = [_Gpu(i, h) for i, h in enumerate(handles)]

    def _call_library(self, deadline: float, fn: Callable[..., Any], *args: Any) -> Any:
        return self._watchdog.call(min(self.call_timeout_s, deadline - time.monotonic()), _LIBRARY, fn, *args)

    def _judge_library_hung(self, why: str) -> None:
        self._library_backoff_s = min(
            self.max_backoff_s, max(self.stall_backoff_s, self._library_backoff_s * 2)
        )
        self._library_retry_at = time.monotonic() + self._library_backoff_s
        self._library_stuck_at = self._watchdog.stuck_count()
        self._detail = (
            f"{why}; not asking NVML again for {self._library_backoff_s:.0f} s or until a stuck call "
            "returns. A hung NVML usually means a driver problem: check `nvidia-smi` and "
            "`dmesg | grep -i xid`"
        )

    def _library_may_retry(self, now: float) -> bool:
        return now >= self._library_retry_at or self._watchdog.stuck_count() < self._library_stuck_at

    def _library_hung(self, now: float) -> bool:
        if not self._library_stuck_at:
            return False
        if self._library_may_retry(now):
            self._library_stuck_at, self._detail = 0, None
            return False
        return True

    def _read_gpu(self, gpu: _Gpu, slow_due: bool, deadline: float) -> GpuSample:
        if gpu.lost and not slow_due:  # asked again only on slow samples
            return self._lost(gpu)
        read_slow = slow_due or not gpu.slow_read or gpu.lost is not None
        fields = [f for f in (NVML_FIELDS if read_slow else NVML_FAST_FIELDS) if f not in gpu.unsupported]
        fast: dict[str, Any] = {}
        slow: dict[str, Any] = {}
        failures = []
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise CallStalled(f"the sample's {self.call_timeout_s:.1f} s NVML budget is spent")
        asked: list[str] = []  # the fields the worker has started on: the last one is in flight
        wait_s = min(self.call_timeout_s, remaining)
        try:
            answers = self._watchdog.call(wait_s, gpu.index, self._read_fields, gpu, fields, deadline, asked)
        except CallStalled as exc:
            function = NVML_FIELDS[asked[-1]][0] if asked else "NVML"
            raise CallStalled(f"{function} {exc}") from None
        for name, raw, error in answers:
            if name is None:
                raise CallStalled(f"the sample's {self.call_timeout_s:.1f} s NVML budget is spent")
            if error is not None:
                code = nvml_code(error)
                if code in LOST_CODES:
                    gpu.lost = GPU_LOST_TEXT if code == NVML_GPU_IS_LOST else f"{error}: {GPU_LOST_TEXT}"
                    return self._lost(gpu)
                if code in NEVER_ASK_AGAIN_CODES:
                    gpu.unsupported.add(name)
                else:
                    failures.append(f"{name}: {error}")
                continue
            (slow if name in NVML_SLOW_FIELDS else fast).update(self._convert(name, raw))
        gpu.lost = None
        if read_slow:  # a slow field that failed this time keeps its last value
            gpu.slow = {**gpu.slow, **slow}
            gpu.slow_read = True
        sample = GpuSample(gpu.index, **gpu.slow, **fast)
        sample.error = "; ".join(failures) or None
        gpu.last_good, gpu.last_good_mono, gpu.backoff_s = sample, time.monotonic(), 0.0
        return sample

    def _read_fields(self, gpu: _Gpu, fields: list[str], deadline: float, asked: list[str]) -> list[_Answer]:
        """On the watchdog's worker: each field's (name, raw value, None) or (name, None, error), in
        one hand-off per GPU rather than one per field (each costs the sampler a thread switch). It
        stops after a GPU-lost error, and with (None, None, None) once the sample's budget is spent."""
        answers: list[_Answer] = []
        for name in fields:
            if time.monotonic() >= deadline:
                answers.append((None, None, None))
                break
            asked.append(name)
            try:
                answers.append((name, self.nvml.read(gpu.handle, name), None))
            except Exception as exc:
                answers.append((name, None, exc))
                if nvml_code(exc) in LOST_CODES:
                    break
        return answers

    def _convert(self, name: str, raw: Any) -> dict[str, Any]:
        """One NVML field in NVML's units -> GpuSample fields in ours."""
        if name == "utilization":
            return {"util_pct": raw.gpu, "mem_util_pct": raw.memory}
        if name == "memory":
            return {"mem_used_bytes": raw.used, "mem_total_bytes": raw.total}
        if name.endswith("_mw"):
            return {name[: -len("_mw")] + "_w": raw / 1000.0}
        if name.endswith("_kb_s"):
            return {name[: -len("_kb_s")] + "_bytes_s": raw * 1024.0}
        if name == "clock_event_reasons":
            return {"throttle_reasons": throttle_names(int(raw))}
        if name in ("name", "uuid"):
            return {name: raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)}
        if name == "processes":
            return {"processes": [self._process(p) for p in raw]}
        return {name: int(raw)}

    def _process(self, proc: Any) -> dict[str, Any]:
        used = getattr(proc, "usedGpuMemory", None)
        if used is not None and used >= 1 << 63:  # NVML_VALUE_NOT_AVAILABLE (MIG, WDDM)
            used = None
        return {"pid": proc.pid, "used_bytes": used, "name": safe(self.process_name, proc.pid)}

    def _lost(self, gpu: _Gpu) -> GpuSample:
        return GpuSample(gpu.index, gpu.slow.get("name"), gpu.slow.get("uuid"), state="lost", error=gpu.lost)

    def _stale(self, gpu: _Gpu, error: str) -> GpuSample:
        if gpu.last_good is None:
            return GpuSample(gpu.index, state="stalled", stale=True, error=error)
        return replace(gpu.last_good, state="stalled", stale=True, error=error)

    def _stall_text(self, gpu: _Gpu, why: str) -> str:
        now = time.monotonic()
        age = f"values from {now - gpu.last_good_mono:.0f} s ago" if gpu.last_good else "no values yet"
        return (
            f"NVML stalled on GPU {gpu.index} ({why}); showing {age}. Asked again when the stuck call "
            f"returns or in {max(0.0, gpu.retry_at - now):.0f} s; a hang that persists means a driver "
            "problem: check `nvidia-smi` and `dmesg | grep -i xid`"
        )


def _start_failure(exc: BaseException) -> tuple[str, str]:
    code = nvml_code(exc)
    if code == NVML_LIB_RM_VERSION_MISMATCH:
        return "no_driver", (
            f"no NVIDIA GPU / driver not loaded: driver/library version mismatch ({exc}): the driver "
            "was upgraded without a reboot; reboot the node (or reload the nvidia kernel modules)"
        )
    if code in (NVML_DRIVER_NOT_LOADED, NVML_LIBRARY_NOT_FOUND) or code is None:
        return "no_driver", f"no NVIDIA GPU / driver not loaded: {exc} (`nvidia-smi` says why)"
    return "no_gpu", f"no NVIDIA GPU usable: NVML failed to start: {exc} (check `nvidia-smi`)"
