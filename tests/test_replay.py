"""Replaying a recorded run (`cockpit replay`): events and telemetry at their recorded times,
scaled by the speed, with an injected clock; the doctor over the replayed samples; the CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cockpit.cli import main as cli
from cockpit.fmt import GIB
from cockpit.live.replay import MAX_GAP_S, ReplaySession, Timeline, sample_of_bin
from cockpit.run.control import NotRunning
from cockpit.run.rundir import RunDir
from cockpit.telemetry.gpu import GPU_LOST_TEXT

FIXTURES = Path(__file__).parent / "fixtures"
EVENTS_FIXTURE = FIXTURES / "demo_run_events.jsonl"
TELEMETRY_FIXTURE = FIXTURES / "demo_run_telemetry.jsonl"
T0 = 1_800_000_000.0


class Clock:
    """Monotonic seconds the test sets by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def event(type_: str, ts: float, **fields) -> dict:
    return {"v": 1, "type": type_, "ts": ts, **fields}


def gpu_bin(ts_start: float, util: float, trainer_cpu: float = 50.0, n: int = 5, **gpu) -> dict:
    return {
        "v": 1,
        "ts_start": ts_start,
        "ts_end": ts_start + n - 1,
        "n": n,
        "bin_s": 5.0,
        "merged_bins": 1,
        "nvml": "ok",
        "gpus": [
            {
                "index": 0,
                "n": n,
                "state": "ok",
                "util_mean_pct": util,
                "sm_clock_mean_mhz": 1980.4,
                "mem_used_max_bytes": 30 * GIB,
                "mem_total_bytes": 80 * GIB,
                "power_mean_w": 400.0,
                "temp_max_c": 60,
                "throttle_reasons": [],
                **gpu,
            }
        ],
        "host": {"cpu_mean_pct": 20.0, "trainer_cpu_mean_pct": trainer_cpu, "trainer_rss_max_bytes": 8 * GIB},
    }


def make_run(tmp_path: Path, events: list[dict], bins: list[dict] = ()) -> RunDir:
    path = tmp_path / "20261201-101010-replayed"
    path.mkdir()
    (path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    if bins:
        (path / "telemetry.jsonl").write_text("".join(json.dumps(b) + "\n" for b in bins))
    return RunDir(path)


def demo_run(tmp_path: Path) -> RunDir:
    path = tmp_path / "20261130-152228-tiny"
    path.mkdir()
    shutil.copy(EVENTS_FIXTURE, path / "events.jsonl")
    shutil.copy(TELEMETRY_FIXTURE, path / "telemetry.jsonl")
    return RunDir(path)


def types(items) -> list[str]:
    return [item["type"] for item in items]


# ---------------------------------------------------------------- timing


def test_events_come_at_their_recorded_times_scaled_by_the_speed(tmp_path):
    events = [
        event("phase", T0, phase="starting"),
        event("hello", T0 + 1, pid=7, device={"kind": "cpu", "name": "x86_64"}),
        event("phase", T0 + 2, phase="training"),
        event("train_begin", T0 + 10, total_steps=4),
        event("done", T0 + 30, status="finished", step=4),
    ]
    clock = Clock()
    session = ReplaySession(make_run(tmp_path, events), speed=10, clock=clock)
    assert types(session.poll()) == ["phase"]  # the replay starts at its first poll
    clock.now += 0.09  # 0.9 s of the recording
    assert session.poll() == []
    clock.now += 0.02
    assert types(session.poll()) == ["hello"]
    clock.now += 0.92  # 10.3 s of the recording
    assert types(session.poll()) == ["phase", "train_begin"]
    assert session.state.status == "running" and not session.ended and session.playing
    assert session.label == "REPLAY x10 0:00:10/0:00:30"
    assert session.recorded_now() == pytest.approx(T0 + 10.3)
    clock.now += 1.96  # 29.9 s
    assert session.poll() == [] and not session.trainer_gone
    clock.now += 0.02
    assert types(session.poll()) == ["done"]
    assert session.trainer_gone and session.ended and not session.playing
    assert session.state.status == "finished"
    clock.now += 100
    assert session.poll() == []
    assert session.recorded_now() == pytest.approx(T0 + 30)  # the end, however long one waits


def test_speed_zero_plays_everything_at_once(tmp_path):
    session = ReplaySession(demo_run(tmp_path), speed=0, clock=Clock())
    items = session.poll()
    assert len(items) == len(EVENTS_FIXTURE.read_text().splitlines())
    assert session.ended and session.state.status == "finished" and session.state.step == 88
    assert session.label == "REPLAY max speed 0:00:22/0:00:22"
    sample, _ = session.watch.update(session.state)
    assert len(session.watch.pop_samples()) == 5 and sample.ts == pytest.approx(1796052170.0)


def test_a_long_silence_plays_as_a_short_one():
    timeline = Timeline([T0, T0 + 5, T0 + 3600, T0 + 3601])
    assert timeline.offset(T0 + 5) == 5
    assert timeline.offset(T0 + 3600) == 5 + MAX_GAP_S
    assert timeline.total_s == 6 + MAX_GAP_S
    assert timeline.recorded(5 + MAX_GAP_S + 0.5) == pytest.approx(T0 + 3600.5)
    assert timeline.recorded(3) == pytest.approx(T0 + 3)


def test_a_line_without_a_time_comes_with_the_one_before(tmp_path):
    run = make_run(tmp_path, [event("phase", T0, phase="starting"), event("hello", T0 + 4, pid=1)])
    with open(run.events_path, "a") as f:
        f.write("{oops\n")
    clock = Clock()
    session = ReplaySession(run, speed=1, clock=clock)
    assert types(session.poll()) == ["phase"]
    clock.now += 4
    items = session.poll()
    assert items[0]["type"] == "hello" and not isinstance(items[1], dict)  # the fault
    assert session.state.faults == 1 and session.ended


def test_commands_are_refused(tmp_path):
    session = ReplaySession(demo_run(tmp_path), clock=Clock())
    assert session.mode == "playback"
    with pytest.raises(NotRunning, match="replay"):
        session.send("stop")


def test_a_negative_speed_is_refused(tmp_path):
    with pytest.raises(ValueError, match="speed"):
        ReplaySession(demo_run(tmp_path), speed=-1)


# ---------------------------------------------------------------- telemetry and the doctor


def test_the_watch_gives_each_bin_as_a_sample_once_the_replay_reaches_its_end(tmp_path):
    from support.pilot import RUN_ID, write_gpu_recording

    clock = Clock()
    session = ReplaySession(write_gpu_recording(tmp_path / RUN_ID), speed=1, clock=clock)
    session.poll()
    assert session.watch.update(session.state) == (None, [])
    # the first bin ends at ...154.3, 5.708 s after the first event (...148.592)
    clock.now += 5.6
    assert session.watch.update(session.state)[0] is None
    clock.now += 0.2
    sample, _ = session.watch.update(session.state)
    assert sample.ts == pytest.approx(1796052154.3) and sample.gpu_source == "recorded"
    clock.now += 10
    sample, _ = session.watch.update(session.state)
    assert [s.ts for s in session.watch.pop_samples()] == pytest.approx(
        [1796052154.3, 1796052159.1, 1796052164.0]
    )
    assert session.watch.pop_samples() == []
    gpu = sample.gpus[0]
    assert (gpu.util_pct, gpu.mem_used_bytes, gpu.power_w, gpu.temp_c, gpu.sm_clock_mhz) == (
        93.8,
        int(58.9 * GIB),
        598.2,
        63,
        1980,
    )
    assert sample.host.cpu_pct == 41.5 and sample.host.trainer_rss_bytes == 9 * GIB


def test_the_demo_recordings_telemetry_is_of_the_cpu_run_its_events_tell():
    """The recorded demo run trained on the CPU of a box without an NVIDIA driver: its telemetry
    has no GPU, and the trainer's RSS is the one its events give (the recorder counts the trainer's
    children too: a little more, never less)."""
    events = [json.loads(line) for line in EVENTS_FIXTURE.read_text().splitlines()]
    bins = [json.loads(line) for line in TELEMETRY_FIXTURE.read_text().splitlines()]
    hello = next(e for e in events if e["type"] == "hello")
    assert hello["device"]["kind"] == "cpu"
    assert all(b["nvml"] == "no_driver" and b["gpus"] == [] for b in bins)
    compared = 0
    for b in bins:
        rss = [e["rss_bytes"] for e in events if "rss_bytes" in e and b["ts_start"] <= e["ts"] <= b["ts_end"]]
        if rss:
            compared += 1
            assert max(rss) <= b["host"]["trainer_rss_max_bytes"] <= max(rss) + 64 * 2**20, b["ts_start"]
    assert compared >= 3


def test_the_replayed_doctor_finds_what_the_live_one_found(tmp_path):
    events = [event("hello", T0, pid=11, device={"kind": "cuda", "name": "NVIDIA H100"}, precision="bf16")]
    events += [event("train_begin", T0 + 1, total_steps=100)]
    events += [event("log", T0 + 5 * i, step=i, total_steps=100, loss=2.0) for i in range(1, 16)]
    bins = [gpu_bin(T0 + 5 * i, util=38.0, trainer_cpu=100.0) for i in range(16)]
    clock = Clock()
    session = ReplaySession(make_run(tmp_path, events, bins), speed=5, clock=clock)
    rules = []
    for _ in range(16):
        session.poll()
        _, findings = session.watch.update(session.state)
        rules.append([f.rule for f in findings])
        clock.now += 1  # 5 s of the recording
    assert rules[0] == [] and rules[-1] == ["input_bound"]
    assert session.watch.doctor.findings(T0 + 79)[0].title == "Input-bound: the GPU waits for data"


def test_a_bin_becomes_a_sample_with_its_states():
    lost = gpu_bin(T0, util=0.0, state="lost", n=5)
    lost["gpus"][0]["n"] = 0
    sample = sample_of_bin(lost)
    assert sample.gpus[0].state == "lost" and sample.gpus[0].error == GPU_LOST_TEXT
    blind = {"v": 1, "ts_start": T0, "ts_end": T0 + 4, "n": 5, "nvml": "no_driver", "gpus": [], "host": {}}
    sample = sample_of_bin(blind)
    assert sample.nvml == "no_driver" and sample.gpus == []
    assert sample.nvml_detail == "no NVIDIA GPU / driver not loaded: as recorded in telemetry.jsonl"
    assert sample.host.cpu_pct is None


# ---------------------------------------------------------------- the command


def test_cockpit_replay_no_ui_prints_the_recorded_lines(tmp_path, capsys):
    run = demo_run(tmp_path)
    assert cli.main(["replay", str(run.path), "--no-ui", "--speed", "0"]) == 0
    out = capsys.readouterr().out
    assert "trainer pid 4253 on cpu x86_64 (fp32)" in out
    assert "checkpoint: step 25" in out and "done: finished at step 88" in out
    assert "2026-11-30T" in out.splitlines()[0]  # stamped with the recorded time


def test_the_no_ui_checkpoint_line_gives_its_size_as_the_checkpoints_box_does(tmp_path, capsys):
    """13,542,335 bytes: the run screen's checkpoints box says 12.9 MiB, and so do the lines."""
    from cockpit.run.state import RunState
    from screens.run.figures import checkpoint_rows

    run = demo_run(tmp_path)
    assert cli.main(["replay", str(run.path), "--no-ui", "--speed", "0"]) == 0
    out = capsys.readouterr().out
    assert "checkpoint: step 25 (12.9 MiB, 0.057 s)" in out and " GiB, 0.0" not in out
    state = RunState()
    for line in (run.path / "events.jsonl").read_text().splitlines():
        state.apply(json.loads(line))
    assert all(value.startswith("12.9 MiB") for _, value in checkpoint_rows(state))


def test_cockpit_replay_refuses_a_negative_speed(tmp_path, capsys):
    run = demo_run(tmp_path)
    assert cli.main(["replay", str(run.path), "--no-ui", "--speed", "-2"]) == 2
    assert "--speed" in capsys.readouterr().err


def test_a_headless_replay_never_imports_textual(tmp_path):
    run = demo_run(tmp_path)
    code = (
        "import sys\nfrom cockpit.cli.main import main\n"
        f"code = main(['replay', {str(run.path)!r}, '--no-ui', '--speed', '0'])\n"
        "assert 'textual' not in sys.modules and 'torch' not in sys.modules, 'imported textual or torch'\n"
        "sys.exit(code)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=Path(__file__).parent.parent, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert "done: finished at step 88" in out.stdout


async def test_a_replay_has_speed_and_skip_keys_and_no_commands_in_its_footer(tmp_path):
    from support.pilot import FIXTURE, RUN_ID, running, screen_text, shown, wait_for

    from screens.run.app import CockpitApp

    path = tmp_path / RUN_ID
    path.mkdir()
    shutil.copy(FIXTURE, path / "events.jsonl")
    clock = [0.0]
    session = ReplaySession(RunDir(path), speed=1, clock=lambda: clock[0])
    app = CockpitApp(session, watch=session.watch, poll_interval_s=0.02)
    async with running(app) as pilot:
        await shown(pilot, app)
        footer = screen_text(app).splitlines()[-1]
        assert "- Slower" in footer and "+ Faster" in footer and "] +1 min" in footer
        assert "Save" not in footer and "Pause" not in footer and "Stop" not in footer
        await pilot.press("s")  # not offered, and says why when pressed
        await pilot.pause()
        assert "this is a replay of a recorded run" in screen_text(app)
        clock[0] = 2.0
        assert session.position_s() == 2.0
        await pilot.press("plus", "plus")
        assert session.speed == 4 and session.position_s() == 2.0  # faster from where it was
        clock[0] = 3.0
        assert session.position_s() == 6.0
        await pilot.press("minus")
        assert session.speed == 2 and session.position_s() == 6.0
        await pilot.press("right_square_bracket")  # a minute ahead: past the end of this recording
        assert session.position_s() == 66.0
        await wait_for(pilot, lambda: app.run_view.status == "finished")
        assert "] +1 min" not in screen_text(app).splitlines()[-1]  # played out: nothing to skip


def slow_recording(tmp_path: Path, steps: int = 100, every_s: float = 2.0) -> RunDir:
    """The demo's run stretched to one step every `every_s` seconds, each step with its own loss."""
    from support.pilot import EVENTS, RUN_ID

    t0 = EVENTS[0]["ts"]
    template = next(e for e in EVENTS if e["type"] == "log")
    out = [dict(e, ts=t0 + i * 0.1) for i, e in enumerate(EVENTS) if e["type"] in ("hello", "train_begin")]
    for step in range(1, steps + 1):
        loss = 7.0 - 0.05 * step + 0.3 * (step % 3)  # every step's loss differs from its neighbours'
        out.append(dict(template, ts=t0 + 1 + step * every_s, step=step, total_steps=steps, loss=loss))
        if step == 60:
            out.append(event("checkpoint", t0 + 1.5 + step * every_s, step=60, path="checkpoint-60", bytes=1))
    out.append(event("done", t0 + 2 + steps * every_s, status="finished", step=steps, total_steps=steps))
    for e in out:
        if e["type"] == "train_begin":
            e["total_steps"] = steps
    path = tmp_path / RUN_ID
    path.mkdir()
    (path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in out))
    return RunDir(path)


def state_at(run: RunDir, position_s: float):
    """What a replay that played straight to `position_s` has folded: the state to compare with."""
    session = ReplaySession(run, speed=1, clock=lambda: 0.0)
    session.poll()
    session.skip(position_s)
    session.poll()
    return session.state


def test_going_back_folds_the_recording_again_up_to_there(tmp_path):
    run = slow_recording(tmp_path)
    clock = Clock()
    session = ReplaySession(run, speed=1, clock=clock)
    session.poll()
    clock.now = 100.0 + 150.0
    session.poll()
    assert session.state.step > 70
    session.skip(-60)  # asked on the UI's thread: the fold happens at the next poll
    assert session.rewind_pending and session.rewinds == 0 and session.state.step > 70
    session.poll()
    expected = state_at(run, 90.0)
    assert session.rewinds == 1 and not session.rewind_pending
    assert session.position_s() == 90.0
    assert (session.state.step, session.state.losses) == (expected.step, expected.losses)
    assert 40 <= expected.step < 50
    session.skip(-1000)  # not before the start
    session.poll()
    assert session.position_s() == 0.0 and session.state.step == 0


async def test_seeking_back_in_a_replay_shows_the_state_at_that_point(tmp_path):
    from support.pilot import running, screen_text, shown, wait_for

    from screens.run.app import CockpitApp
    from widgets.loss_plot import LossPlot

    run = slow_recording(tmp_path)
    clock = Clock()
    session = ReplaySession(run, speed=1, clock=clock)
    app = CockpitApp(session, watch=session.watch, poll_interval_s=0.02)
    async with running(app) as pilot:
        await shown(pilot, app)
        footer = screen_text(app).splitlines()[-1]
        assert "[ -1 min" in footer and "] +1 min" in footer and "Save" not in footer
        clock.now = 100.0 + 150.0
        later = state_at(run, 150.0)
        await wait_for(pilot, lambda: app.run_view.query_one("#progress").step == later.step)
        assert f"step {later.step}/100" in screen_text(app)
        await wait_for(
            pilot,
            lambda: (
                "checkpoint: step 60" in "\n".join(s.text for s in app.run_view.query_one("#events").lines)
            ),
        )
        await pilot.press("left_square_bracket")
        expected = state_at(run, 90.0)
        await wait_for(pilot, lambda: app.run_view.query_one("#progress").step == expected.step)
        await pilot.pause()
        text = screen_text(app)
        assert f"step {expected.step}/100" in text and f"step {later.step}/100" not in text
        assert "REPLAY x1 0:01:30/" in text
        last_loss = expected.losses[-1][1]
        assert f"step loss     {last_loss:.4f}" in text  # the run panel's loss is that step's
        plot = app.run_view.query_one(LossPlot)
        assert list(plot.points) == [tuple(p) for p in expected.losses]  # the plot ends there too
        events_log = "\n".join(line.text for line in app.run_view.query_one("#events").lines)
        assert "checkpoint: step 60" not in events_log  # saved at step 60, later than where it went back to
        # played out, it can still go back, and then plays (and skips) again
        clock.now = 100.0 + 1000.0
        await wait_for(pilot, lambda: app.run_view.status == "finished")
        await pilot.pause()
        footer = screen_text(app).splitlines()[-1]
        assert "[ -1 min" in footer and "] +1 min" not in footer
        await pilot.press("left_square_bracket")
        await wait_for(pilot, lambda: app.run_view.status == "running")
        assert session.position_s() == session._timeline.total_s - 60
        await pilot.pause()
        assert "] +1 min" in screen_text(app).splitlines()[-1]
