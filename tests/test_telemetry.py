"""Telemetry: the sampler over a fake NVML and fake host counters, its watchdog, the recorder.

No GPU needed. `test_real_nvml_path_never_fails` also runs the real pynvml path: here it finds no
driver; on a GPU machine it reads the real cards.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import math
import os
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import psutil
import pynvml
import pytest
from conftest import ROOT
from support.nvml_fake import FakeGpu, FakeNvml, gone_pid

from cockpit.fmt import GIB
from cockpit.telemetry import host as host_module
from cockpit.telemetry import nvml as nvml_source
from cockpit.telemetry import watchdog
from cockpit.telemetry.gpu import GPU_LOST_TEXT, GpuSample
from cockpit.telemetry.history import TelemetryRecorder, read_history
from cockpit.telemetry.host import HostCounters, ProcessTree, descendants
from cockpit.telemetry.nvml import NVML_FIELDS, NVML_SLOW_FIELDS, PynvmlSource, throttle_names
from cockpit.telemetry.sampler import BackgroundSampler, Sampler


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def fake_host(**overrides) -> HostCounters:
    """Fixed host figures; counters that stay put unless a test moves them."""
    values = dict(
        cpu_percent_per_core=lambda: [50.0, 100.0],
        cpu_count_usable=lambda: 2,
        memory=lambda: (8 * GIB, 64 * GIB),
        swap=lambda: (0, 4 * GIB),
        disk_bytes=lambda: (0, 0),
        net_bytes=lambda: (0, 0),
        process_tree=lambda pid: (10.0, 3 * GIB),
        process_name=lambda pid: {4242: "python"}.get(pid),
    )
    values.update(overrides)
    return HostCounters(**values)


def sampler(fake: FakeNvml, **kw) -> Sampler:
    kw.setdefault("host", fake_host())
    return Sampler(fake, **kw)


# ---- GPUs ------------------------------------------------------------------------------------------


def test_a_two_gpu_sample_has_every_field_in_our_units():
    gpu0 = FakeGpu(processes=[(4242, 3 * GIB)], clock_event_reasons=0x4 | 0x40)
    fake = FakeNvml([gpu0, FakeGpu(name="NVIDIA A100-SXM4-80GB", power_mw=250_500)])
    s = sampler(fake, trainer_pid=4242).sample()
    assert s.nvml == "ok" and s.nvml_detail is None and s.gpu_source == "fake"
    assert [g.index for g in s.gpus] == [0, 1]
    g0, g1 = s.gpus
    for f in dataclasses.fields(GpuSample):
        if f.name != "error":
            assert getattr(g0, f.name) is not None, f.name
    assert g0.state == "ok" and not g0.stale and g0.error is None
    assert g0.name == "NVIDIA H100 80GB HBM3" and g0.uuid.startswith("GPU-")
    assert (g0.util_pct, g0.mem_util_pct) == (97, 58)
    assert (g0.mem_used_bytes, g0.mem_total_bytes) == (61 * GIB, 80 * GIB)
    assert (g0.power_w, g0.power_limit_w, g0.power_default_limit_w) == (612.0, 700.0, 700.0)
    assert (g0.temp_c, g0.sm_clock_mhz, g0.mem_clock_mhz, g0.sm_clock_max_mhz) == (67, 1980, 2619, 1980)
    assert (g0.pcie_gen, g0.pcie_width, g0.pcie_gen_max, g0.pcie_width_max) == (5, 16, 5, 16)
    assert (g0.pcie_tx_bytes_s, g0.pcie_rx_bytes_s) == (180_000 * 1024, 950_000 * 1024)
    assert g0.throttle_reasons == ["hw_thermal_slowdown", "sw_power_cap"]
    assert (g0.nvlink_active, g0.nvlink_speed_mbps) == (18, 26_562)
    assert g0.processes == [{"pid": 4242, "used_bytes": 3 * GIB, "name": "python"}]
    assert g1.name == "NVIDIA A100-SXM4-80GB" and g1.power_w == 250.5 and g1.processes == []
    assert g0.uuid != g1.uuid
    h = s.host
    assert (h.cpu_pct, h.cpu_per_core_pct, h.cpu_count_usable) == (75.0, [50.0, 100.0], 2)
    assert (h.ram_used_bytes, h.ram_total_bytes, h.swap_used_bytes, h.swap_total_bytes) == (
        8 * GIB,
        64 * GIB,
        0,
        4 * GIB,
    )
    assert h.trainer_pid == 4242 and h.trainer_rss_bytes == 3 * GIB
    assert json.loads(json.dumps(s.to_dict()))["gpus"][0]["processes"][0]["name"] == "python"


def test_throttle_names_cover_every_bit():
    assert throttle_names(0) == []
    assert throttle_names(0x1 | 0x80) == ["hw_power_brake", "gpu_idle"]
    assert throttle_names(0x1000) == ["unknown_0x1000"]


def test_not_supported_fields_are_none_and_asked_only_once():
    gpu = FakeGpu(
        unsupported={"power_mw", "pcie_tx_kb_s", "processes", "name"},
        errors={"temp_c": pynvml.NVML_ERROR_UNKNOWN},
    )
    fake = FakeNvml([gpu])
    s = sampler(fake)
    samples = [s.sample() for _ in range(7)]
    g = samples[-1].gpus[0]
    assert g.state == "ok"
    assert g.power_w is None and g.pcie_tx_bytes_s is None and g.processes is None and g.name is None
    assert g.pcie_rx_bytes_s is not None and g.util_pct == 97
    for name in ("power_mw", "pcie_tx_kb_s", "processes", "name"):
        assert fake.count(name) == 1, name
    # any other error leaves the field None this time and asks again next time
    assert g.temp_c is None and "temp_c: Unknown Error" in g.error
    assert fake.count("temp_c") == 7


def test_slow_fields_are_read_every_fifth_sample_and_reused_in_between():
    gpu = FakeGpu()
    fake = FakeNvml([gpu])
    s = sampler(fake)
    limits = []
    for i in range(12):
        if i == 1:
            gpu.power_limit_mw = 450_000  # changed by `nvidia-smi -pl` after the first sample
        limits.append(s.sample().gpus[0].power_limit_w)
    for name in NVML_SLOW_FIELDS:
        assert fake.count(name) == 3, name  # samples 1, 6 and 11
    for name in set(NVML_FIELDS) - set(NVML_SLOW_FIELDS):
        assert fake.count(name) == 12, name
    assert limits == [700.0] * 5 + [450.0] * 7


def test_a_lost_gpu_is_reported_and_the_other_keeps_going():
    fake = FakeNvml([FakeGpu(), FakeGpu(lost_at_call=len(NVML_FIELDS) + 1)])
    s = sampler(fake)
    first = s.sample()
    assert [g.state for g in first.gpus] == ["ok", "ok"]
    second = s.sample()
    g0, g1 = second.gpus
    assert second.nvml == "ok" and g0.state == "ok"
    assert g1.state == "lost" and g1.error == GPU_LOST_TEXT
    assert g1.name == "NVIDIA H100 80GB HBM3" and g1.util_pct is None  # which card, no stale figures
    reads = sum(fake.count(f, 1) for f in NVML_FIELDS)
    third = s.sample()
    assert third.gpus[1].state == "lost"
    assert sum(fake.count(f, 1) for f in NVML_FIELDS) == reads  # a lost GPU is asked on slow samples


def test_a_process_that_vanished_is_kept_without_a_name():
    gone = gone_pid()
    fake = FakeNvml([FakeGpu(processes=[(os.getpid(), 1 * GIB), (gone, None)])])
    s = sampler(fake, host=fake_host(process_name=HostCounters().process_name)).sample()
    assert s.gpus[0].processes == [
        {"pid": os.getpid(), "used_bytes": 1 * GIB, "name": HostCounters().process_name(os.getpid())},
        {"pid": gone, "used_bytes": None, "name": None},
    ]
    assert s.gpus[0].processes[0]["name"]


@pytest.mark.parametrize(
    ("fake", "state", "words"),
    [
        (FakeNvml(init_error="driver_not_loaded"), "no_driver", "Driver Not Loaded"),
        (FakeNvml(init_error="library_not_found"), "no_driver", "Library Not Found"),
        (FakeNvml(init_error="version_mismatch"), "no_driver", "reboot"),
        (FakeNvml(gpus=0), "no_gpu", "nvidia-smi -L"),
    ],
)
def test_no_driver_or_no_gpu_still_gives_the_host(fake, state, words):
    s = sampler(fake, trainer_pid=4242).sample()
    assert s.nvml == state and s.gpus == []
    assert words in s.nvml_detail
    if state == "no_driver":
        assert s.nvml_detail.startswith("no NVIDIA GPU / driver not loaded")
    assert s.host.ram_total_bytes == 64 * GIB and s.host.cpu_pct == 75.0 and s.host.trainer_rss_bytes


def test_real_nvml_path_never_fails():
    """Here: no driver. On a GPU machine: every card read, with names and memory."""
    start = time.monotonic()
    sampler = Sampler(trainer_pid=os.getpid())
    s1 = sampler.sample()
    time.sleep(0.15)  # rates need MIN_RATE_S between samples
    took = time.monotonic()
    s2 = sampler.sample()  # not a slow sample: the fast fields only
    took = time.monotonic() - took
    s3 = sampler.sample()
    sampler.close()
    assert took < sampler.call_timeout_s, f"one sample took {took:.3f} s"
    assert time.monotonic() - start < 5
    assert s2.gpu_source == "pynvml" and s2.nvml == s3.nvml == s1.nvml
    assert s2.nvml in ("ok", "no_driver", "no_gpu"), s2.nvml_detail
    assert s2.host.ram_total_bytes > 0 and s2.host.cpu_count_usable >= 1
    assert s2.host.trainer_rss_bytes > 0 and s2.host.cpu_per_core_pct is not None
    assert s1.host.disk_read_bytes_s is None  # a rate needs two samples
    if s2.nvml == "ok":  # on a GPU machine
        assert s2.gpus and all(g.state == "ok" and g.name and g.uuid and g.mem_total_bytes for g in s2.gpus)
        for g in s2.gpus:
            assert None not in (g.util_pct, g.mem_used_bytes, g.temp_c, g.sm_clock_mhz), g
            assert g.throttle_reasons is not None and isinstance(g.processes, list), g
    else:
        assert s2.gpus == [] and s2.nvml_detail


def test_the_table_matches_the_installed_nvidia_ml_py():
    """What the real path calls exists in pynvml; our NVML codes and bits are pynvml's."""
    for function, constants in NVML_FIELDS.values():
        assert hasattr(pynvml, function), function
        for name in constants:
            assert isinstance(getattr(pynvml, name), int), name
    for name in ("NOT_SUPPORTED", "NO_PERMISSION", "DRIVER_NOT_LOADED", "LIBRARY_NOT_FOUND"):
        assert getattr(nvml_source, f"NVML_{name}") == getattr(pynvml, f"NVML_ERROR_{name}")
    for name in ("FUNCTION_NOT_FOUND", "GPU_IS_LOST", "RESET_REQUIRED", "LIB_RM_VERSION_MISMATCH"):
        assert getattr(nvml_source, f"NVML_{name}") == getattr(pynvml, f"NVML_ERROR_{name}")
    bits = {
        "gpu_idle": "GpuIdle",
        "applications_clocks_setting": "ApplicationsClocksSetting",
        "sw_power_cap": "SwPowerCap",
        "hw_slowdown": "HwSlowdown",
        "sync_boost": "SyncBoost",
        "sw_thermal_slowdown": "SwThermalSlowdown",
        "hw_thermal_slowdown": "HwThermalSlowdown",
        "hw_power_brake": "HwPowerBrakeSlowdown",
        "display_clocks_setting": "DisplayClockSetting",
        "board_limit": "BoardLimit",
        "reliability": "Reliability",
    }
    for bit, name in nvml_source.THROTTLE_REASONS:
        assert getattr(pynvml, f"nvmlClocksThrottleReason{bits[name]}") == bit, name


def test_the_real_source_calls_pynvml_with_the_right_arguments():
    calls = []

    class Stub:
        NVMLError = pynvml.NVMLError

        def __getattr__(self, name):
            if name.startswith("NVML_"):
                return getattr(pynvml, name)
            return lambda *args: calls.append((name, args)) or name

    source = PynvmlSource()
    source._nv = Stub()
    assert source.read("h", "sm_clock_mhz") == "nvmlDeviceGetClockInfo"
    source.read("h", "pcie_rx_kb_s")
    source.read("h", "temp_c")
    assert calls == [
        ("nvmlDeviceGetClockInfo", ("h", pynvml.NVML_CLOCK_SM)),
        ("nvmlDeviceGetPcieThroughput", ("h", pynvml.NVML_PCIE_UTIL_RX_BYTES)),
        ("nvmlDeviceGetTemperature", ("h", pynvml.NVML_TEMPERATURE_GPU)),
    ]


def test_the_fake_raises_the_real_pynvml_classes():
    fake = FakeNvml([FakeGpu(unsupported={"power_mw"}, lost_at_call=3)])
    fake.init()
    handle = fake.handle(0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.read(handle, "power_mw")
    fake.read(handle, "temp_c")
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        fake.read(handle, "temp_c")
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        FakeNvml(init_error="driver_not_loaded").init()
    with pytest.raises(ValueError, match="unknown NVML field 'powr_mw'"):
        FakeGpu(unsupported={"powr_mw"})


# ---- the watchdog ----------------------------------------------------------------------------------


def wait_until(predicate, timeout_s: float = 3.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("timed out")


def test_a_stuck_call_leaves_sample_prompt_and_the_gpu_recovers():
    fake = FakeNvml(2)
    s = sampler(fake)  # call_timeout_s=1.0
    good = s.sample()
    fake.block(0, "power_mw", 5.0)

    start = time.monotonic()
    stalled = s.sample()
    assert time.monotonic() - start < 1.5
    g0 = stalled.gpus[0]
    assert g0.state == "stalled" and g0.stale and "nvmlDeviceGetPowerUsage" in g0.error
    assert g0.power_w == good.gpus[0].power_w and g0.util_pct == good.gpus[0].util_pct  # last good
    assert stalled.gpus[1].stale  # no time was left to read it: no GPU has fresh values
    assert stalled.nvml == "stalled"

    start = time.monotonic()
    later = s.sample()  # GPU 0 is not asked while its call is stuck; GPU 1 is read again
    assert time.monotonic() - start < 0.9  # under the 1 s call timeout a stuck call would cost
    assert later.nvml == "ok" and later.gpus[1].state == "ok" and not later.gpus[1].stale
    assert later.gpus[0].state == "stalled"

    fake.unblock()
    recovered = wait_until(lambda: (x := s.sample()).gpus[0].state == "ok" and x)
    assert recovered.nvml == "ok" and not recovered.gpus[0].stale and recovered.gpus[0].error is None
    s.close()


def test_a_hung_library_is_stalled_and_not_asked_until_a_call_returns():
    fake = FakeNvml(2)
    s = sampler(fake, call_timeout_s=1.0)
    s.sample()
    fake.block(0, "memory", 5.0)
    fake.block(1, "memory", 5.0)
    assert s.sample().nvml == "stalled"  # GPU 0 hangs
    assert s.sample().nvml == "stalled"  # GPU 1 hangs too: the library is judged hung
    reads = sum(fake.count(f) for f in NVML_FIELDS)
    start = time.monotonic()
    hung = s.sample()
    # no NVML call is made, so no call_timeout_s (1 s) is waited for
    assert time.monotonic() - start < 0.9 and sum(fake.count(f) for f in NVML_FIELDS) == reads
    assert hung.nvml == "stalled" and "more than one GPU" in hung.nvml_detail
    assert all(g.state == "stalled" and g.stale for g in hung.gpus)
    assert hung.host.ram_total_bytes == 64 * GIB
    fake.unblock()
    back = wait_until(lambda: (x := s.sample()).nvml == "ok" and x)
    assert [g.state for g in back.gpus] == ["ok", "ok"] and back.nvml_detail is None


def test_an_init_that_hangs_is_stalled_then_starts():
    fake = FakeNvml(1, init_block_s=5.0)
    s = sampler(fake, call_timeout_s=0.3)
    start = time.monotonic()
    first = s.sample()
    assert time.monotonic() - start < 0.6
    assert first.nvml == "stalled" and first.gpus == [] and "did not start" in first.nvml_detail
    assert first.host.cpu_pct == 75.0
    fake.unblock()
    assert wait_until(lambda: (x := s.sample()).nvml == "ok" and x).gpus[0].state == "ok"


def test_abandoned_threads_are_bounded():
    fake = FakeNvml(1)
    s = sampler(fake, call_timeout_s=0.05, stall_backoff_s=0.0)
    s.sample()
    fake.block(0, "utilization", 5.0)
    before = threading.active_count()
    for _ in range(10):
        assert s.sample().gpus[0].state == "stalled"
    assert threading.active_count() - before <= watchdog.MAX_STUCK_THREADS
    fake.unblock()
    wait_until(lambda: s.sample().gpus[0].state == "ok")


# ---- host and rates --------------------------------------------------------------------------------


def test_rates_come_from_counters_between_samples():
    clock = Clock(1000.0)
    counters = {"disk": (1_000, 5_000), "net": (100, 200), "tree": (10.0, 2 * GIB)}
    host = fake_host(
        disk_bytes=lambda: counters["disk"],
        net_bytes=lambda: counters["net"],
        process_tree=lambda pid: counters["tree"],
    )
    s = sampler(FakeNvml(1), trainer_pid=77, clock=clock, host=host)
    first = s.sample().host
    assert first.disk_read_bytes_s is None and first.net_rx_bytes_s is None and first.trainer_cpu_pct is None
    assert first.trainer_rss_bytes == 2 * GIB

    clock.t += 2.0
    counters.update(disk=(9_000, 5_000), net=(2_100, 1_200), tree=(13.0, 3 * GIB))
    h = s.sample().host
    assert (h.disk_read_bytes_s, h.disk_write_bytes_s) == (4_000.0, 0.0)
    assert (h.net_rx_bytes_s, h.net_tx_bytes_s) == (1_000.0, 500.0)
    assert h.trainer_cpu_pct == 150.0 and h.trainer_rss_bytes == 3 * GIB  # 1.5 cores busy

    clock.t += 1.0
    counters.update(disk=(10, 5_100), tree=None)  # a counter reset; the trainer has exited
    h = s.sample().host
    assert h.disk_read_bytes_s is None and h.disk_write_bytes_s == 100.0
    assert h.trainer_pid == 77 and h.trainer_cpu_pct is None and h.trainer_rss_bytes is None

    clock.t += 1.0
    counters.update(tree=(1.0, GIB))  # a new trainer: no rate until its second sample
    assert s.sample().host.trainer_cpu_pct is None


def test_a_failing_host_counter_is_none_not_a_crash():
    def broken():
        raise PermissionError("denied")

    s = sampler(FakeNvml(1), host=fake_host(memory=broken, disk_bytes=broken)).sample()
    assert s.host.ram_used_bytes is None and s.host.disk_read_bytes_s is None
    assert s.host.cpu_pct == 75.0 and s.nvml == "ok"


def test_a_live_view_reads_the_host_every_other_sample_and_its_slow_figures_every_fifth_time():
    reads: dict[str, int] = {"memory": 0, "swap": 0, "cpus": 0}

    def counted(name: str, value):
        def read():
            reads[name] += 1
            return value

        return read

    host = fake_host(
        memory=counted("memory", (8 * GIB, 64 * GIB)),
        swap=counted("swap", (0, 4 * GIB)),
        cpu_count_usable=counted("cpus", 2),
    )
    fake = FakeNvml(1)
    s = sampler(fake, host=host, host_every=2)
    samples = [s.sample() for _ in range(12)]
    assert fake.count("utilization") == 12  # the GPU at every sample
    assert reads["memory"] == 6  # the host at samples 1, 3, 5, ...
    assert reads["swap"] == reads["cpus"] == 2  # and its slow figures at its 1st and 6th read
    assert samples[1].host is samples[0].host and samples[2].host is not samples[1].host
    assert samples[11].host.swap_total_bytes == 4 * GIB and samples[11].host.cpu_count_usable == 2
    with pytest.raises(ValueError, match="host_every"):
        Sampler(fake, host_every=0)


BURN_CPU_30_S = "import time\nend = time.time() + 30\nwhile time.time() < end: pass"


def test_the_trainer_tree_is_listed_every_few_seconds_and_a_new_child_counts_without_a_spike(monkeypatch):
    listings = []
    real_descendants = host_module.descendants

    def descendants(root):
        listings.append(root.pid)
        return real_descendants(root)

    monkeypatch.setattr(host_module, "descendants", descendants)
    clock = Clock(0.0)
    tree = ProcessTree(relist_s=2.0, clock=clock)
    _, rss_before = tree(os.getpid())
    burner = subprocess.Popen([sys.executable, "-c", BURN_CPU_30_S])
    try:
        child = psutil.Process(burner.pid)

        def child_cpu_s() -> float:
            t = child.cpu_times()
            return t.user + t.system

        wait_until(lambda: child_cpu_s() >= 0.3, timeout_s=20)
        clock.t = 1.0
        cpu_unlisted, _ = tree(os.getpid())  # within relist_s: the new child is not listed yet
        clock.t = 2.5
        cpu_listed, rss_listed = tree(os.getpid())
        used_before_listing = child_cpu_s()
        assert len(listings) == 2 and rss_listed > rss_before
        # its CPU before the listing that found it is no spike in the trainer's rate
        assert cpu_listed - cpu_unlisted < 0.1 < used_before_listing
        wait_until(lambda: child_cpu_s() >= used_before_listing + 0.2, timeout_s=20)
        used_since = child_cpu_s() - used_before_listing
        clock.t = 3.0
        cpu_later, _ = tree(os.getpid())  # not listed again, but read: it counts from now on
        assert len(listings) == 2
        assert cpu_later - cpu_listed >= used_since - 0.05
    finally:
        burner.kill()
        burner.wait()
    assert tree(2**22 + 12345) is None  # no such process


# ---- background sampling ---------------------------------------------------------------------------


def test_background_sampler_delivers_samples_at_about_the_interval():
    got: list[float] = []
    bg = BackgroundSampler(
        sampler(FakeNvml(1)), interval_s=0.05, on_sample=lambda x: got.append(time.monotonic())
    )
    with bg:
        time.sleep(0.6)
        assert bg.latest is not None and bg.latest.nvml == "ok"
    count = len(got)
    assert 4 <= count <= 14, count
    gaps = sorted(b - a for a, b in itertools.pairwise(got))
    assert 0.03 < gaps[len(gaps) // 2] < 0.15
    time.sleep(0.15)
    assert len(got) == count  # stopped means stopped
    assert not any(t.name == "cockpit-telemetry" for t in threading.enumerate())


def test_background_sampler_survives_its_callback():
    def boom(sample):
        raise RuntimeError("widget gone")

    bg = BackgroundSampler(sampler(FakeNvml(1)), interval_s=0.02, on_sample=boom).start()
    wait_until(lambda: bg.callback_error)
    first = bg.latest
    wait_until(lambda: bg.latest is not first)
    bg.stop()
    assert "widget gone" in bg.callback_error


# ---- the recorder and the history ------------------------------------------------------------------


def gpu_dict(index: int, util: float, power: float, temp: float, throttle=(), **extra) -> dict:
    base = GpuSample(index, util_pct=util, power_w=power, temp_c=temp, mem_used_bytes=int(util) * GIB)
    base.throttle_reasons = list(throttle)
    return {**base.to_dict(), **extra}


def sample_dict(ts: float, util: float, cpu: float, gpus: list[dict] | None = None) -> dict:
    host = {"cpu_pct": cpu, "ram_used_bytes": int(cpu) * GIB, "trainer_rss_bytes": 2 * GIB}
    return {"ts": ts, "nvml": "ok", "gpus": gpus or [gpu_dict(0, util, 2 * util, util / 2)], "host": host}


def test_recorder_bins_hold_means_maxes_and_unions(tmp_path):
    path = tmp_path / "telemetry.jsonl"
    with TelemetryRecorder(path, bin_s=5.0) as rec:
        for i in range(20):  # 0.5 s apart: two bins of ten
            ts = 1000.0 + i * 0.5
            gpus = [gpu_dict(0, 10 * (i % 10), 100 + i, 60 + i, ["sw_power_cap"] if i == 3 else [])]
            if i == 4:  # a stalled GPU's stale repeat counts for the state, not the figures
                gpus[0].update(state="stalled", stale=True, util_pct=1000)
            rec.add(sample_dict(ts, 0, cpu=i, gpus=gpus))
        assert rec.lines_written == 1  # the second bin is still open
    assert rec.lines_written == 2 and rec.write_error is None
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [(x["ts_start"], x["ts_end"], x["n"]) for x in lines] == [
        (1000.0, 1004.5, 10),
        (1005.0, 1009.5, 10),
    ]
    g = lines[0]["gpus"][0]
    assert g["n"] == 9 and g["state"] == "stalled"
    assert g["util_mean_pct"] == pytest.approx(sum(10 * i for i in range(10) if i != 4) / 9, abs=1e-3)
    assert g["util_max_pct"] == 90 and g["temp_max_c"] == 69
    assert g["power_mean_w"] == pytest.approx(sum(100 + i for i in range(10) if i != 4) / 9, abs=1e-3)
    assert g["mem_used_max_bytes"] == 90 * GIB and g["throttle_reasons"] == ["sw_power_cap"]
    assert lines[1]["gpus"][0]["throttle_reasons"] == [] and lines[1]["gpus"][0]["state"] == "ok"
    h = lines[0]["host"]
    assert h["cpu_mean_pct"] == 4.5 and h["ram_used_max_bytes"] == 9 * GIB
    assert h["trainer_rss_max_bytes"] == 2 * GIB and h["disk_read_mean_bytes_s"] is None


def test_recorder_takes_live_samples(tmp_path):
    clock = Clock(2000.0)
    s = sampler(FakeNvml(2), clock=clock, trainer_pid=1)
    with TelemetryRecorder(tmp_path / "t.jsonl", bin_s=1.0) as rec:
        for _ in range(4):
            rec.add(s.sample())
            clock.t += 0.5
    history = read_history(tmp_path / "t.jsonl")
    assert [b["n"] for b in history.bins] == [2, 2]
    assert [g["power_mean_w"] for g in history.bins[0]["gpus"]] == [612.0, 612.0]


def test_partial_and_bad_lines_are_skipped_and_counted(tmp_path):
    path = tmp_path / "telemetry.jsonl"
    with TelemetryRecorder(path, bin_s=5.0) as rec:
        for i in range(3):
            rec.add(sample_dict(1000.0 + 5 * i, 50, 10))
    with open(path, "a") as f:
        f.write('{"v": 1, "ts_start": 1015.0, "ts_end": 1019.5, "n"')  # the writer died here
    history = read_history(path)
    assert len(history.bins) == 3 and history.skipped_lines == 1 and history.lines_read == 3

    with TelemetryRecorder(path, bin_s=5.0) as rec:  # a new writer starts on a fresh line
        rec.add(sample_dict(1020.0, 50, 10))
    with open(path, "a") as f:
        f.write("Segmentation fault\n")
    history = read_history(path)
    assert [b["ts_start"] for b in history.bins] == [1000.0, 1005.0, 1010.0, 1020.0]
    assert history.skipped_lines == 2
    assert read_history(tmp_path / "missing.jsonl").bins == []


def test_days_of_history_fit_max_points_with_the_newest_hour_at_full_resolution(tmp_path):
    path = tmp_path / "telemetry.jsonl"
    start, bin_s, days = 1_700_000_000.0, 5.0, 3
    count = int(days * 86400 / bin_s)
    spike = count // 3  # one hot bin two days ago must survive the merging
    with open(path, "w") as f:
        for i in range(count):
            util = 100 if i == spike else 40 + i % 50
            line = {
                "v": 1,
                "ts_start": start + i * bin_s,
                "ts_end": start + i * bin_s + 4.5,
                "n": 10,
                "bin_s": bin_s,
                "merged_bins": 1,
                "nvml": "ok",
                "gpus": [{"index": 0, "n": 10, "state": "ok", "util_mean_pct": util, "util_max_pct": util}],
                "host": {"cpu_mean_pct": 20.0},
            }
            f.write(json.dumps(line) + "\n")
    history = read_history(path, max_points=2000)
    bins = history.bins
    assert len(bins) <= 2000 and history.lines_read == count and history.skipped_lines == 0
    assert [b["ts_start"] for b in bins] == sorted(b["ts_start"] for b in bins)
    last = start + (count - 1) * bin_s
    newest = [b for b in bins if b["ts_start"] >= last - 3600]
    assert len(newest) == 721 and all(b["merged_bins"] == 1 for b in newest)
    assert history.full_resolution_from == last - 3600
    assert newest[-1]["gpus"][0]["util_mean_pct"] == 40 + (count - 1) % 50  # as written
    older = [b for b in bins if b["ts_start"] < last - 3600]
    assert all(b["merged_bins"] > 1 for b in older)
    assert sum(b["merged_bins"] for b in bins) == count and sum(b["n"] for b in bins) == 10 * count
    assert max(b["gpus"][0]["util_max_pct"] for b in older) == 100  # max of maxes
    overall = sum(b["gpus"][0]["util_mean_pct"] * b["gpus"][0]["n"] for b in bins) / (10 * count)
    expected = (sum(40 + i % 50 for i in range(count)) - (40 + spike % 50) + 100) / count
    assert overall == pytest.approx(expected, rel=1e-4)  # mean of means, weighted by samples
    assert all(b["host"]["cpu_mean_pct"] == pytest.approx(20.0) for b in bins)
    assert math.isclose(bins[0]["ts_start"], start)


# ---- import boundaries -----------------------------------------------------------------------------


def test_telemetry_imports_neither_torch_nor_textual():
    probe = (
        "import sys, json\n"
        "import cockpit.telemetry.sampler, cockpit.telemetry.history\n"
        "lazy = 'pynvml' not in sys.modules\n"
        "import support.nvml_fake\n"
        "print(json.dumps([lazy, sorted({m.split('.')[0] for m in sys.modules})]))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    lazy, modules = json.loads(out.stdout.strip().splitlines()[-1])
    assert lazy, "cockpit.telemetry.sampler must import pynvml only when NVML is started"
    assert not {"torch", "textual", "transformers"} & set(modules)


def test_sample_to_dict_is_plain_json():
    s = sampler(FakeNvml(1), trainer_pid=4242).sample()
    assert json.loads(json.dumps(s.to_dict())) == s.to_dict()
    assert SimpleNamespace(**s.host.to_dict()).cpu_pct == 75.0


def test_the_trainers_descendants_are_listed_from_their_own_proc_files_not_every_process(monkeypatch):
    """psutil's children(recursive=True) reads every process's stat file: on a GPU host with
    thousands of pids that was the live view's costliest read (issue 16, item 17)."""
    expected: list[int] = []
    grandparent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time; "
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); time.sleep(30)",
        ]
    )
    try:
        me = psutil.Process()
        wait_until(lambda: len(me.children(recursive=True)) == 2, timeout_s=20)
        expected = sorted(p.pid for p in me.children(recursive=True))

        def no_scan(self, recursive=False):
            raise AssertionError("scanned every process")

        monkeypatch.setattr(psutil.Process, "children", no_scan)
        assert sorted(p.pid for p in descendants(me)) == expected
        monkeypatch.undo()
    finally:
        for pid in expected:
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()
        grandparent.wait()
