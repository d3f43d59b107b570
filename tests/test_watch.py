"""Live telemetry and the doctor in the headless client (fake NVML; no GPU needed)."""

from __future__ import annotations

import io
import itertools
import os
import time

from support.nvml_fake import FakeGpu, FakeNvml

from cockpit.doctor.window import Finding
from cockpit.live.headless import _print_changes, _render
from cockpit.live.watch import JUDGE_EVERY_S, LiveWatch, gpu_status
from cockpit.run.state import RunState
from cockpit.telemetry.sampler import Sampler


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


def test_a_subscribed_watch_pushes_each_sample_with_a_verdict_given_every_judge_interval():
    ticks = itertools.count()
    sampler = Sampler(nvml=FakeNvml(gpus=1), clock=lambda: 1000.0 + 0.25 * next(ticks))  # 4 a second
    watch = LiveWatch(os.getpid(), interval_s=0.01, sampler=sampler)
    judged: list[float] = []
    judge = watch.doctor.findings
    watch.doctor.findings = lambda now_ts: judged.append(now_ts) or judge(now_ts)
    news: list[tuple] = []
    state = running_fp32_state()
    watch.subscribe(lambda: state, lambda *said: news.append(said))
    watch.start()
    try:
        deadline = time.monotonic() + 10
        while len(news) < 13 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        watch.stop()
    samples = [sample for sample, _, error in news[:13] if error is None]
    assert len(samples) == 13 and len({id(s) for s in samples}) == 13  # every sample, once
    assert [s.ts for s in samples] == sorted({s.ts for s in samples})
    assert len(watch.doctor) >= 13 and JUDGE_EVERY_S == 2.0  # each one is evidence, the verdict every 2 s
    assert [ts for ts in judged if ts <= samples[-1].ts] == [1000.0, 1002.0]  # 3 s of samples


def test_a_doctor_that_fails_is_said_and_the_samples_go_on():
    watch = LiveWatch(os.getpid(), interval_s=0.01, sampler=Sampler(nvml=FakeNvml(gpus=1)))

    def broken(now_ts):
        raise ZeroDivisionError("a rule divided by zero")

    watch.doctor.findings = broken
    news: list[tuple] = []
    watch.subscribe(RunState, lambda *said: news.append(said))
    watch.start()
    try:
        deadline = time.monotonic() + 10
        while len(news) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        watch.stop()
    assert news[0] == (None, [], "the doctor failed: ZeroDivisionError: a rule divided by zero")
    assert watch.background.callback_error is None  # handled: the sampler thread goes on
