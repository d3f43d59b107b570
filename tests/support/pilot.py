"""Pilot-test aids shared by the TUI tests: a recorded demo run, doubles of the run source and the
watch (the `RunSource` and `Watch` Protocols of cockpit/live/sources.py), and helpers to read the
screen and wait for it. Never shipped in the product."""

from __future__ import annotations

import itertools
import json
import shutil
import threading
import time
from pathlib import Path
from types import SimpleNamespace

from cockpit.doctor.window import Finding
from cockpit.fmt import GIB
from cockpit.live.session import RunSession
from cockpit.run.rundir import RunDir
from cockpit.run.state import RunState
from cockpit.telemetry.host import HostCounters
from cockpit.telemetry.sampler import Sample, Sampler
from screens.run.app import CockpitApp
from support.nvml_fake import FakeGpu, FakeNvml

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
FIXTURE = FIXTURES / "demo_run_events.jsonl"
RUN_ID = "20261130-152228-tiny"
EVENTS = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
LAST_TS = EVENTS[-1]["ts"]
SIZE = (100, 32)


def events_until_step(step: int) -> list[dict]:
    """The recording up to the log event of `step` and its checkpoint, before any ending."""
    out = []
    for item in EVENTS:
        past = item["type"] == "log" and item["step"] > step
        if past or item["type"] == "done" or item.get("phase") in ("saving", "done"):
            break
        out.append(item)
    return out


def event(type_: str, ts: float, **fields) -> dict:
    return {"v": 1, "type": type_, "ts": ts, **fields}


class ScriptedSession:
    """The RunSession interface over recorded events: `feed()` makes more arrive, commands are recorded."""

    playing = False
    rewinds = 0
    rewind_pending = False
    speed = 1.0
    next_commands = None

    def __init__(self, run: RunDir, events: list[dict], *, alive: bool = True, recorded: bool = False):
        self.run = run
        self.mode = "recorded" if recorded else "live"
        self.alive = alive and not recorded
        self.state = RunState(run_id=run.run_id)
        self.snapshot = self.state.snapshot()
        self.trainer_gone = False
        self.sent: list[str] = []
        self.send_error: Exception | None = None
        self.closed = False
        self.poll_threads: set[str] = set()
        self._pending = list(events)
        self._lock = threading.Lock()

    def feed(self, events: list[dict]) -> None:
        with self._lock:
            self._pending.extend(events)

    def poll(self) -> list:
        self.poll_threads.add(threading.current_thread().name)
        with self._lock:
            items, self._pending = self._pending, []
        for item in items:
            self.state.apply(item)
        self.snapshot = self.state.snapshot()
        if not self.alive:
            self.trainer_gone = True
        return items

    @property
    def label(self) -> str | None:
        return "REPLAY" if self.mode == "recorded" else None

    def recorded_now(self) -> float | None:
        return None

    def set_speed(self, speed: float) -> float:
        return self.speed

    def skip(self, seconds: float) -> None:
        pass

    @property
    def ended(self) -> bool:
        return self.trainer_gone and (self.state.ended or self.mode == "recorded")

    def send(self, command: str, sender: str = "cockpit") -> None:
        if self.send_error is not None:
            raise self.send_error
        self.sent.append(command)

    def close(self) -> None:
        self.closed = True


def scripted(tmp_path: Path, events: list[dict], **kw) -> ScriptedSession:
    path = tmp_path / RUN_ID
    path.mkdir(exist_ok=True)
    return ScriptedSession(RunDir(path), events, **kw)


def recorded(tmp_path: Path, events: list[dict] = EVENTS) -> RunSession:
    """A real session replaying a recording (what `cockpit attach` does when no trainer is alive)."""
    path = tmp_path / RUN_ID
    path.mkdir()
    if events is EVENTS:
        shutil.copy(FIXTURE, path / "events.jsonl")
    else:
        (path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return RunSession(RunDir(path), recorded=True)


def make_app(session, clock_ts: float = LAST_TS + 5.0) -> CockpitApp:
    return CockpitApp(session, poll_interval_s=0.02, clock=lambda: clock_ts)


def running(app: CockpitApp):
    return app.run_test(size=SIZE, notifications=True)


def screen_text(app) -> str:
    """What the terminal shows, as plain text (toasts included): the one place the tests read the
    screen's rendered lines (what a user sees, not the widgets' state)."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


async def wait_for(pilot, condition, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the view"
        await pilot.pause(0.02)


async def shown(pilot, app: CockpitApp) -> None:
    await wait_for(pilot, lambda: app.run_view.updates_shown > 0)
    await pilot.pause()


TELEMETRY_FIXTURE = FIXTURES / "demo_run_telemetry.jsonl"  # the recording's own: a CPU box, no GPU
# the GPU recording: gpu_events(EVENTS) with this telemetry, as if the run had trained on an H100
GPU_TELEMETRY_FIXTURE = FIXTURES / "gpu_run_telemetry.jsonl"
GPU_BINS = [json.loads(line) for line in GPU_TELEMETRY_FIXTURE.read_text().splitlines()]
TRAINER_PID = 4253  # the recorded hello's pid


def gpu_events(events: list[dict]) -> list[dict]:
    """The recording as if it ran on an H100: a cuda device, bf16, torch's memory counters (its
    telemetry: GPU_TELEMETRY_FIXTURE)."""
    out = []
    for item in events:
        if item["type"] == "hello":
            device = {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3", "capability": "9.0"}
            item = dict(item, device=dict(device, total_bytes=80 * GIB), precision="bf16")
        elif item["type"] == "train_begin":
            item = dict(item, precision="bf16")
        elif item["type"] == "log":
            item = dict(
                item, mem_allocated_bytes=30 * GIB, mem_reserved_bytes=34 * GIB, mem_peak_bytes=41 * GIB
            )
        out.append(item)
    return out


def write_gpu_recording(path: Path) -> RunDir:
    """The GPU recording, its events and its telemetry, in the run folder `path` (made here)."""
    path.mkdir()
    (path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in gpu_events(EVENTS)))
    shutil.copy(GPU_TELEMETRY_FIXTURE, path / "telemetry.jsonl")
    return RunDir(path)


def fake_host() -> HostCounters:
    """Host counters that move the same way every run: 16 cores, busy disk, a trainer of 9 GiB."""
    ticks = itertools.count()

    def disk() -> tuple[int, int]:
        n = next(ticks)
        return n * 60_000_000, n * 1_000_000  # 120 MB/s read, 2 MB/s write at two samples a second

    return HostCounters(
        cpu_percent_per_core=lambda: [35.0, 99.0, 12.0, 64.0] * 4,
        cpu_count_usable=lambda: 16,
        memory=lambda: (28 * GIB, 251 * GIB),
        swap=lambda: (0, 8 * GIB),
        disk_bytes=disk,
        net_bytes=lambda: (0, 0),
        process_tree=lambda pid: (12.5, 9 * GIB),
        process_name=lambda pid: "python",
    )


def fake_samples(
    count: int = 4, start_ts: float = 1796052165.5, gpus: list[FakeGpu] | None = None, **nvml
) -> list[Sample]:
    """`count` samples half a second apart from fake NVML (utilisation climbing) and a fake host."""
    utils = itertools.cycle([62, 88, 97, 99, 94, 71])

    def climbing(_n):
        return SimpleNamespace(gpu=next(utils), memory=50)

    if gpus is None:
        gpus = [FakeGpu(processes=[(TRAINER_PID, 34 * GIB)], overrides={"utilization": climbing})]
    times = itertools.count()
    sampler = Sampler(
        FakeNvml(gpus=gpus, **nvml),
        trainer_pid=TRAINER_PID,
        clock=lambda: start_ts + 0.5 * next(times),
        host=fake_host(),
    )
    try:
        return [sampler.sample() for _ in range(count)]
    finally:
        sampler.close()


class ScriptedWatch:
    """A watch double: always the same newest sample and findings; every sample once, to `pop_samples`.

    `block`: an Event `update` waits for (a stuck watch).
    """

    plays_history = False
    pushes = False

    def __init__(self, samples: list[Sample] = (), findings: list[Finding] = (), block=None):
        self.samples = list(samples)
        self.findings = list(findings)
        self.block = block
        self.calls = 0
        self.threads: set[str] = set()
        self.stopped = False
        self._popped = False

    def update(self, state):
        self.calls += 1
        self.threads.add(threading.current_thread().name)
        if self.block is not None:
            self.block.wait()
        return (self.samples[-1] if self.samples else None), list(self.findings)

    def pop_samples(self) -> list[Sample]:
        samples, self._popped = ([] if self._popped else self.samples), True
        return samples

    def start(self) -> ScriptedWatch:
        return self

    def stop(self) -> None:
        self.stopped = True

    def subscribe(self, state_of, on_news) -> None:
        raise TypeError("a scripted watch is asked (update), it does not push")


INPUT_BOUND = Finding(
    "input_bound",
    "warn",
    "Input-bound: the GPU waits for data",
    "GPU util 41% (mean of 60 s), trainer CPU 100% of one core",
    "Raise training.dataloader_num_workers (e.g. to 8) and pre-tokenise the dataset.",
    0.0,
)
