"""Live telemetry: GPUs through NVML, the host through psutil, sampled off the UI thread.

Two edges, each one small interface with a real implementation and a fake:
- `NvmlSource` (cockpit.telemetry.nvml): `PynvmlSource` over nvidia-ml-py (imported only when NVML is
  first started, so this module imports on a machine with no driver) and
  `tests/support/nvml_fake.py.FakeNvml` for tests and demos. A source reads one named field (`NVML_FIELDS`)
  in NVML's own units and raises `pynvml.NVMLError` subclasses, so the sampler's code path is the
  same for both;
- `HostCounters` (cockpit.telemetry.host): psutil by default, every callable replaceable for
  deterministic tests.

`Sampler.sample()` turns them into a `Sample` of plain data. It never raises, and never blocks much
longer than `call_timeout_s`:
- the GPUs are read by cockpit.telemetry.gpu.GpuReader: a capability probe, slow fields
  (`NVML_SLOW_FIELDS`: names, process list, PCIe link, NVLink, power limits, max clock) read every
  `slow_every`-th sample, and a watchdog that abandons a stuck NVML call and marks its GPU, or the
  whole library, "stalled";
- the host's usable CPU count and swap are read with the slow fields too; the trainer's
  descendants are listed every few seconds (`telemetry_host.ProcessTree`);
- the host is read every `host_every`-th sample (a live view samples GPUs faster than the host
  figures move; each host read costs about as much as all the GPU fields), and the samples in
  between carry its last reading;
- rates (disk, network, trainer CPU) come from counter differences between samples.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from cockpit.telemetry.gpu import GpuReader, GpuSample
from cockpit.telemetry.host import HostCounters, Rate, safe
from cockpit.telemetry.nvml import NvmlSource, PynvmlSource


@dataclass
class HostSample:
    cpu_pct: float | None = None
    cpu_per_core_pct: list[float] | None = None
    cpu_count_usable: int | None = None  # CPU affinity, capped by a cgroup CPU quota
    ram_used_bytes: int | None = None  # total - available
    ram_total_bytes: int | None = None
    swap_used_bytes: int | None = None
    swap_total_bytes: int | None = None
    disk_read_bytes_s: float | None = None
    disk_write_bytes_s: float | None = None
    net_rx_bytes_s: float | None = None  # loopback excluded
    net_tx_bytes_s: float | None = None
    trainer_pid: int | None = None
    trainer_cpu_pct: float | None = None  # the trainer and its children: 400 = four busy cores
    trainer_rss_bytes: int | None = None  # summed RSS: pages shared by forked workers count twice

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Sample:
    ts: float
    gpus: list[GpuSample]
    host: HostSample
    nvml: str = "ok"  # ok | no_gpu | no_driver | stalled | error (a bug in the sampler)
    nvml_detail: str | None = None
    gpu_source: str = "pynvml"  # "fake" when the GPUs are a test double: the UI must say so

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Sampler:
    """One `sample()` at a time: GPUs (NVML) and host (psutil), never raising, never hanging."""

    def __init__(
        self,
        nvml: NvmlSource | None = None,
        trainer_pid: int | None = None,
        clock: Callable[[], float] = time.time,
        slow_every: int = 5,
        call_timeout_s: float = 1.0,
        *,
        host: HostCounters | None = None,
        stall_backoff_s: float = 5.0,
        max_backoff_s: float = 60.0,
        host_every: int = 1,
    ) -> None:
        if slow_every < 1:
            raise ValueError(f"slow_every must be 1 or more (every n-th sample), got {slow_every}")
        if host_every < 1:
            raise ValueError(f"host_every must be 1 or more (every n-th sample), got {host_every}")
        if call_timeout_s <= 0:
            raise ValueError(f"call_timeout_s must be positive, got {call_timeout_s}")
        self.nvml: NvmlSource = nvml if nvml is not None else PynvmlSource()
        self.trainer_pid = trainer_pid
        self.clock = clock
        self.slow_every = slow_every
        self.call_timeout_s = call_timeout_s
        self.host = host if host is not None else HostCounters()
        self.stall_backoff_s = stall_backoff_s
        self.max_backoff_s = max_backoff_s
        self.host_every = host_every
        self._host_sample: HostSample | None = None
        self._gpu_reader = GpuReader(
            self.nvml, call_timeout_s, slow_every, stall_backoff_s, max_backoff_s, self.host.process_name
        )
        self._lock = threading.Lock()
        self._count = 0
        self._disk, self._net = Rate(), Rate()
        self._trainer_pid: int | None = None
        self._trainer_cpu = Rate()  # CPU seconds of the trainer's process tree
        # usable CPUs, swap used and total: read with the slow fields
        self._host_slow: tuple[int | None, ...] | None = None

    def sample(self) -> Sample:
        with self._lock:
            try:
                ts = float(self.clock())
            except Exception:
                ts = time.time()
            if self._host_sample is None or self._count % self.host_every == 0:
                self._host_sample = self._sample_host(ts)
            host = self._host_sample  # between host reads, a sample carries the last one
            try:
                gpus, nvml, detail = self._gpu_reader.read(self._count)
            except Exception as exc:  # a bug here must not take the live view down
                gpus, nvml, detail = [], "error", f"telemetry sampler failed: {type(exc).__name__}: {exc}"
            self._count += 1
            return Sample(ts, gpus, host, nvml, detail, getattr(self.nvml, "kind", "pynvml"))

    def close(self) -> None:
        """Shut NVML down (unless it hangs) and let the worker thread end."""
        with self._lock:
            self._gpu_reader.close()

    def _sample_host(self, ts: float) -> HostSample:
        h, out = self.host, HostSample()
        per_core = safe(h.cpu_percent_per_core)
        if per_core:
            out.cpu_per_core_pct = [float(v) for v in per_core]
            out.cpu_pct = sum(out.cpu_per_core_pct) / len(out.cpu_per_core_pct)
        if self._count % self.slow_every == 0 or self._host_slow is None:  # they hardly move
            self._host_slow = (safe(h.cpu_count_usable), *(safe(h.swap) or (None, None)))
        out.cpu_count_usable, out.swap_used_bytes, out.swap_total_bytes = self._host_slow
        out.ram_used_bytes, out.ram_total_bytes = safe(h.memory) or (None, None)
        out.disk_read_bytes_s, out.disk_write_bytes_s = self._disk(ts, safe(h.disk_bytes)) or (None, None)
        out.net_rx_bytes_s, out.net_tx_bytes_s = self._net(ts, safe(h.net_bytes)) or (None, None)
        pid = out.trainer_pid = self.trainer_pid
        tree = safe(h.process_tree, pid) if pid is not None else None
        if pid != self._trainer_pid or tree is None:  # a new trainer: a new baseline
            self._trainer_pid, self._trainer_cpu = pid, Rate()
        if tree is not None:
            cpu_s, out.trainer_rss_bytes = tree
            (cpu_per_s,) = self._trainer_cpu(ts, (cpu_s,)) or (None,)
            # a dead child not yet reaped takes its CPU time out of the sum for a moment
            out.trainer_cpu_pct = None if cpu_per_s is None else cpu_per_s * 100.0
        return out


class BackgroundSampler:
    """Samples every `interval_s` on a daemon thread; the UI reads `latest` or gets `on_sample`.

    The callback runs on the sampler thread: a Textual app posts a message from it, nothing more.
    A slow sample delays the next one instead of piling up.
    """

    def __init__(
        self,
        sampler: Sampler | None = None,
        interval_s: float = 0.5,
        on_sample: Callable[[Sample], None] | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        self._owns_sampler = sampler is None
        self.sampler = sampler if sampler is not None else Sampler()
        self.interval_s = interval_s
        self.on_sample = on_sample
        self.latest: Sample | None = None
        self.callback_error: str | None = None  # the last exception the callback raised
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> BackgroundSampler:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="cockpit-telemetry", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop sampling and join the thread (a sample in flight ends within ~call_timeout_s).

        A sampler this object made is closed; one passed in is left for its owner to close.
        """
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout_s if timeout_s is not None else self.sampler.call_timeout_s + 2.0)
        if self._owns_sampler:
            self.sampler.close()

    def __enter__(self) -> BackgroundSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        due = time.monotonic()
        while not self._stop.is_set():
            sample = self.sampler.sample()
            self.latest = sample
            if self.on_sample is not None:
                try:
                    self.on_sample(sample)
                except Exception as exc:
                    self.callback_error = f"{type(exc).__name__}: {exc}"
            due = max(due + self.interval_s, time.monotonic())
            if self._stop.wait(max(0.0, due - time.monotonic())):
                return
