"""Live telemetry and the doctor in the headless client (fake NVML; no GPU needed)."""

from __future__ import annotations

import io
import os
import time

from cockpit.doctor import Finding
from cockpit.headless import _print_changes, _render
from cockpit.nvml_fake import FakeGpu, FakeNvml
from cockpit.runstate import RunState
from cockpit.telemetry import Sampler
from cockpit.watch import LiveWatch, gpu_status


def running_fp32_state() -> RunState:
    state = RunState()
    state.apply(
        {
            "v": 1,
            "type": "hello",
            "ts": time.time(),
            "pid": os.getpid(),
            "precision": "fp32",
            "device": {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3", "capability": "9.0"},
        }
    )
    state.apply({"v": 1, "type": "train_begin", "ts": time.time(), "total_steps": 10})
    state.precision = "fp32"
    return state


def test_gpu_status_line():
    sampler = Sampler(nvml=FakeNvml(gpus=[FakeGpu(), FakeGpu(util_pct=12)]))
    text = gpu_status(sampler.sample())
    assert text == "GPU0 97% 61.0/80.0 GiB 612 W  GPU1 12% 61.0/80.0 GiB 612 W"
    assert gpu_status(Sampler(nvml=FakeNvml(init_error="driver_not_loaded")).sample()) == "GPU: no driver"
    assert gpu_status(None) == "GPU: sampling..."
    many = Sampler(nvml=FakeNvml(gpus=4)).sample()
    assert "+2 GPUs (mean 97%)" in gpu_status(many)


def test_live_watch_feeds_the_doctor_and_findings_come_and_go():
    fake = FakeNvml(gpus=[FakeGpu(processes=[(os.getpid(), 40 * 2**30)])])
    watch = LiveWatch(os.getpid(), interval_s=0.02, sampler=Sampler(nvml=fake)).start()
    state = running_fp32_state()
    try:
        deadline = time.monotonic() + 10
        findings: list[Finding] = []
        while time.monotonic() < deadline and not findings:
            time.sleep(0.05)
            _, findings = watch.update(state)
        assert [f.rule for f in findings] == ["fp32_on_bf16_card"]
        out = io.StringIO()
        shown: dict[str, Finding] = {}
        _print_changes(shown, findings, out)
        assert "doctor [warn]" in out.getvalue() and "training.precision: bf16" in out.getvalue()
        _print_changes(shown, findings, out)  # still holds: no new line
        assert out.getvalue().count("doctor [warn]") == 1
        _print_changes(shown, [], out)
        assert "no longer holds" in out.getvalue()
    finally:
        watch.stop()


def test_live_render_shows_gpu_and_findings():
    from rich.console import Console

    sample = Sampler(nvml=FakeNvml(gpus=1)).sample()
    finding = Finding(
        "throttling", "warn", "The GPU is throttled", "hw_slowdown 80% of 60 s", "Ask the provider.", 0.0
    )
    console = Console(file=io.StringIO(), width=160, force_terminal=False)
    console.print(_render(RunState(run_id="r1"), time.time(), sample, [finding], watching=True))
    text = console.file.getvalue()
    assert "GPU0 97% 61.0/80.0 GiB 612 W" in text and "The GPU is throttled" in text
