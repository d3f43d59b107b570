"""The doctor gives the same verdict for the same run watched live or replayed, and gives it within
a short run's training.

A live view samples about twice a second (cockpit.live.watch) and judges once a second; the
recorder beside the trainer samples once a second and keeps 5-s bins (cockpit.telemetry.history),
which a replay plays back. Each run here is made of recorded-like data: the events a trainer
writes (the model loads for 25 s, then steps with their measurements), and GPU util and trainer
CPU as they swing within each step (the loader's burst, then the kernels). The same run is fed to
the product's live watch at its sampling rate and written by the product's recorder, then played
by the product's replay."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_replay import Clock, event

from cockpit.doctor.engine import Doctor
from cockpit.live.replay import ReplaySession
from cockpit.live.watch import SAMPLE_INTERVAL_S, LiveWatch
from cockpit.run.rundir import RunDir
from cockpit.run.state import RunState
from cockpit.telemetry.history import TELEMETRY_NAME, TelemetryRecorder
from cockpit.telemetry.sampler import GpuSample, HostSample, Sample

T0 = 1_800_000_000.0  # a multiple of the recorder's 5-s bins
PID = 4242
LOAD_S = 25.0  # loading a 7B QLoRA model: no step yet
GIB = 1 << 30
SPEED_PLAN = {
    "micro_batch_size": 4,
    "gradient_accumulation_steps": 4,
    "num_layers": 32,
    "dataloader_num_workers": 0,
    "predicted_tokens_per_s": 4892.2,
    "busy_tokens_per_micro_batch": 3072,
    "auto_split": {
        "micro_batch_size": 16,
        "gradient_accumulation_steps": 1,
        "checkpoint_layers": 0,
        "tokens_per_s": 14241.1,
        "as_run_tokens_per_s": 4892.2,
    },
}


@dataclass(frozen=True)
class Run:
    """A run whose every step waits `wait_s` for its data (GPU idle, the trainer's CPU busy), then
    computes for `compute_s` at `compute_util`%; `tokens` per micro-batch; `steps` steps."""

    steps: int
    wait_s: float
    compute_s: float
    compute_util: float
    tokens: float
    trainer_cpu: float = 105.0
    stray_at_s: float | None = None  # one reading of an idle GPU, this long into training

    @property
    def step_s(self) -> float:
        return self.wait_s + self.compute_s

    @property
    def train_end(self) -> float:
        return T0 + LOAD_S + self.steps * self.step_s

    def events(self) -> list[dict]:
        begin = T0 + LOAD_S
        out = [
            event("hello", T0, pid=PID, device={"kind": "cuda", "name": "NVIDIA H200", "capability": "9.0"},
                  precision="bf16"),
            event("speed_plan", T0 + 20, **SPEED_PLAN),
            event("phase", begin, phase="training", message=""),
            event("train_begin", begin, total_steps=self.steps, micro_batch_size=4,
                  gradient_accumulation_steps=4),
        ]  # fmt: skip
        for step in range(1, self.steps + 1):
            out.append(
                event(
                    "log",
                    begin + step * self.step_s,
                    step=step,
                    total_steps=self.steps,
                    loss=2.0,
                    step_time_s=self.step_s,
                    tokens_per_s=self.tokens * 4 / self.step_s,
                    data_wait_s=self.wait_s,
                    compute_s=self.compute_s,
                    data_wait_share=self.wait_s / self.step_s,
                    tokens_per_micro_batch=self.tokens,
                )
            )
        out.append(event("done", self.train_end + 0.5, status="finished", step=self.steps))
        return out

    def sample(self, ts: float) -> Sample:
        """The reading at `ts`: what NVML and psutil would say then."""
        into = ts - T0 - LOAD_S
        if into < 0 or ts > self.train_end:
            util, cpu = 0.0, (100.0 if into < 0 else 2.0)  # loading, then the trainer ending
        elif self.stray_at_s is not None and abs(into - self.stray_at_s) < 0.5:
            util, cpu = 0.0, self.trainer_cpu
        elif into % self.step_s < self.wait_s:
            util, cpu = 0.0, 100.0  # the loader's burst
        else:
            util, cpu = self.compute_util, self.trainer_cpu
        gpu = GpuSample(
            index=0,
            name="NVIDIA H200",
            util_pct=util,
            mem_used_bytes=40 * GIB,
            mem_total_bytes=140 * GIB,
            processes=[{"pid": PID, "used_bytes": 40 * GIB, "name": "python"}],
        )
        return Sample(
            ts, [gpu], HostSample(cpu_pct=8.0, cpu_count_usable=16, trainer_pid=PID, trainer_cpu_pct=cpu)
        )


class _NoSampler:
    """The live watch's sampler is never started here: the test hands it each sample."""

    def close(self) -> None:
        pass


def live(run: Run) -> dict[str, float]:
    """The product's live watch over the run at its sampling rate: rule -> seconds into training
    when its finding first showed."""
    events, state = run.events(), RunState()
    watch = LiveWatch(PID, sampler=_NoSampler(), doctor=Doctor())
    fired: dict[str, float] = {}
    ts, applied = T0 + 0.1, 0
    while ts < run.train_end + 10:
        while applied < len(events) and events[applied]["ts"] <= ts:
            state.apply(events[applied])
            applied += 1
        watch._on_sample(run.sample(ts))
        _, findings = watch.update(state)
        for f in findings:
            fired.setdefault(f.rule, round(ts - T0 - LOAD_S, 1))
        ts += SAMPLE_INTERVAL_S
    return fired


def replayed(run: Run, tmp_path: Path) -> dict[str, float]:
    """The recorder's bins of the run's once-a-second samples, played by the product's replay:
    rule -> seconds into training when its finding first showed."""
    path = tmp_path / "20261202-080000-recorded"
    path.mkdir()
    (path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in run.events()))
    with TelemetryRecorder(path / TELEMETRY_NAME) as recorder:
        ts = T0 + 0.3
        while ts < run.train_end + 1:
            recorder.add(run.sample(ts))
            ts += 1.0
    clock = Clock()
    session = ReplaySession(RunDir(path), speed=10, clock=clock)
    fired: dict[str, float] = {}
    while not session.ended:
        session.poll()
        latest, findings = session.watch.update(session.state)
        for f in findings:
            fired.setdefault(f.rule, round(latest.ts - T0 - LOAD_S, 1))
        clock.now += 0.05  # half a second of the recording
    session.close()
    return fired


STEP_RULES = {"input_bound", "gpu_underfed", "cpu_bound"}

# the slow-loader case of bench/doctor_fixes.py: 1.6 s of collation on the CPU, 1.4 s of kernels
SLOW_LOADER = Run(steps=8, wait_s=1.6, compute_s=1.4, compute_util=90.0, tokens=2048.0)
# the packed demo data on the 7B QLoRA at micro-batch 4: little wait, small micro-batches
DEMO_PACKED = Run(steps=12, wait_s=0.02, compute_s=2.1, compute_util=30.0, tokens=1753.0)


@pytest.mark.parametrize(("run", "rule"), [(SLOW_LOADER, "input_bound"), (DEMO_PACKED, "gpu_underfed")])
def test_live_and_replay_name_the_same_bottleneck_within_the_run_s_training(run, rule, tmp_path):
    seen_live, seen_replayed = live(run), replayed(run, tmp_path)
    assert set(seen_live) & STEP_RULES == {rule} == set(seen_replayed) & STEP_RULES
    training_s = run.steps * run.step_s
    # after its first logged step and >= 10 s of evidence, before the run's 24-25 s of steps end
    for at in (seen_live[rule], seen_replayed[rule]):
        assert run.step_s + 10 <= at + 0.5 and at < training_s
    assert abs(seen_live[rule] - seen_replayed[rule]) <= 5.5  # at most a recorded bin apart


def test_a_per_sample_threshold_would_have_split_them():
    """Why util is judged as its 5-s mean: live, most samples of the slow loader's steps land in
    its kernels (90%, above the 70% line) or its loader (0%), the bins hold both (~42%)."""
    steps = round(6 * SLOW_LOADER.step_s / SAMPLE_INTERVAL_S)  # six whole steps of samples
    readings = [
        SLOW_LOADER.sample(T0 + LOAD_S + 3 + i * SAMPLE_INTERVAL_S).gpus[0].util_pct for i in range(steps)
    ]
    below = sum(u < 70 for u in readings) / len(readings)
    assert below < 0.7  # a per-sample "held for 70%" could not fire live


@pytest.mark.parametrize(
    "run",
    [
        Run(steps=20, wait_s=0.01, compute_s=1.0, compute_util=95.0, tokens=8192.0, stray_at_s=8.0),
        Run(steps=4, wait_s=1.6, compute_s=1.4, compute_util=90.0, tokens=2048.0),  # 12 s: first step + 9 s
    ],
    ids=["healthy-with-a-stray-idle-reading", "too-short-to-judge"],
)
def test_live_and_replay_stay_quiet_alike(run, tmp_path):
    assert not set(live(run)) & STEP_RULES
    assert not set(replayed(run, tmp_path)) & STEP_RULES


def test_the_model_load_before_the_first_step_is_no_evidence(tmp_path):
    """25 s of loading with an idle GPU and a busy CPU, then 3 healthy steps: a doctor that judged
    the load as training would call it input-bound."""
    run = Run(steps=3, wait_s=0.01, compute_s=1.0, compute_util=95.0, tokens=8192.0)
    assert live(run) == {} and replayed(run, tmp_path) == {}


def test_the_bench_reads_each_rule_off_the_live_doctor_s_lines():
    """bench/doctor_fixes.py tells which rule a `--no-ui` line names by its title: every finding the
    GPU bench looks for, made by the product's rules, is read back as its own rule."""
    import sys

    from test_doctor import TRAINER_PID, gpu, run_state
    from test_doctor import feed as feed_doctor
    from test_doctor_steps import LAUNCH_BOUND, state_with
    from test_flops import _state as mfu_state

    from cockpit.live.watch import finding_line

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    from doctor_fixes import live_rules

    other = {"pid": 77, "used_bytes": GIB, "name": "burner"}
    found = [
        *feed_doctor(Doctor(), 0, 60, state=state_with(0.03, 2048.0), **LAUNCH_BOUND),  # gpu_underfed
        *feed_doctor(Doctor(), 0, 60, state=state_with(0.5, 2048.0), **LAUNCH_BOUND),  # input_bound
        *feed_doctor(
            Doctor(), 0, 60, state=state_with(0.05, 8192.0, step_s=4.0), **LAUNCH_BOUND
        ),  # cpu_bound
        *feed_doctor(Doctor(), 0, 60, state=run_state(precision="fp32")),
        *feed_doctor(Doctor(), 0, 60, gpus=[gpu(processes=[{"pid": TRAINER_PID, "used_bytes": GIB}, other])]),
        *feed_doctor(Doctor(), 0, 60, state=mfu_state(3000.0), gpu={"util_pct": 95.0}),  # low_mfu
    ]
    wanted = {"gpu_underfed", "input_bound", "cpu_bound", "fp32_on_bf16_card", "foreign_process", "low_mfu"}
    assert wanted <= {f.rule for f in found}
    for finding in found:
        assert live_rules([f"2026-12-02T08:00:00 {finding_line(finding)}"]) == [finding.rule]


def test_a_recorded_bin_is_judged_as_itself_and_live_samples_as_their_last_5_s():
    from cockpit.doctor.window import _trailing_mean

    # bins whose ends jitter a little under 5 s apart: the one before adds a hundredth of a second
    assert _trailing_mean([34.29, 29.3, 24.3], [100.0, 0.0, 0.0]) == pytest.approx(100.0, abs=0.3)
    # live: 0.5-s samples, the loader's 2 s at 0% then the kernels' 3 s at 90%
    times = [10.0 - 0.5 * i for i in range(12)]
    utils = [90.0] * 6 + [0.0] * 4 + [90.0] * 2
    assert _trailing_mean(times, utils) == pytest.approx(54.0)
    assert _trailing_mean([7.0], [40.0]) == 40.0  # the first sample alone
