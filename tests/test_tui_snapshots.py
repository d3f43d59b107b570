"""Snapshots of the run screen in its main states, from the recorded demo run (88 steps, CPU).

Deterministic: fixed terminal sizes, a fixed clock, recorded events, no cursor, Textual
pinned. After `--snapshot-update`, read snapshot_report.html before accepting.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

from cockpit.rundir import RunDir
from cockpit.runstate import RunState
from cockpit.session import RunSession
from screens.app import CockpitApp

FIXTURE = Path(__file__).parent / "fixtures" / "demo_run_events.jsonl"
RUN_ID = "20261130-152228-tiny"
EVENTS = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
OOM_MESSAGE = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.65 GiB of which "
    "1.02 GiB is free. Including non-PyTorch memory, this process has 22.61 GiB memory in use."
)
OOM_HINT = (
    "The GPU ran out of memory. Turn on training.gradient_checkpointing, lower training.micro_batch_size "
    "(raise gradient_accumulation_steps to keep the effective batch), or shorten training.max_length. "
    "The CUDA context is not reusable: start a new run or resume."
)


def events_until_step(step: int) -> list[dict]:
    out = []
    for item in EVENTS:
        past = item["type"] == "log" and item["step"] > step
        if past or item["type"] == "done" or item.get("phase") in ("saving", "done"):
            break
        out.append(item)
    return out


class ScriptedSession:
    """The RunSession interface over recorded events, with a trainer that is alive or gone."""

    def __init__(self, run: RunDir, events: list[dict], *, alive: bool = True):
        self.run = run
        self.replay = False
        self.alive = alive
        self.state = RunState(run_id=run.run_id)
        self.trainer_gone = False
        self._pending = list(events)
        self._lock = threading.Lock()

    def poll(self) -> list:
        with self._lock:
            items, self._pending = self._pending, []
        for item in items:
            self.state.apply(item)
        self.trainer_gone = not self.alive
        return items

    @property
    def ended(self) -> bool:
        return self.trainer_gone and self.state.ended

    def send(self, command: str, sender: str = "cockpit") -> None:
        pass

    def close(self) -> None:
        pass


def run_dir(tmp_path: Path) -> RunDir:
    path = tmp_path / RUN_ID
    path.mkdir()
    return RunDir(path)


def app_for(session, events: list[dict]) -> CockpitApp:
    now = events[-1]["ts"] + 2.0  # two seconds after the last event
    return CockpitApp(session, poll_interval_s=0.02, clock=lambda: now)


async def drawn(pilot) -> None:
    """Until the follow thread's first update is on screen."""
    deadline = time.monotonic() + 5
    while pilot.app.run_view.updates_shown == 0:
        assert time.monotonic() < deadline, "the run view was never drawn"
        await pilot.pause(0.02)
    await pilot.pause()


def finished_replay(tmp_path: Path) -> CockpitApp:
    run = run_dir(tmp_path)
    shutil.copy(FIXTURE, run.events_path)
    return app_for(RunSession(run, replay=True), EVENTS)


def mid_run(tmp_path: Path) -> CockpitApp:
    events = events_until_step(52)
    return app_for(ScriptedSession(run_dir(tmp_path), events), events)


def failed_run(tmp_path: Path) -> CockpitApp:
    events = events_until_step(30)
    error = {
        "v": 1,
        "type": "error",
        "ts": events[-1]["ts"] + 0.3,
        "kind": "oom",
        "message": OOM_MESSAGE,
        "hint": OOM_HINT,
        "phase": "training",
        "step": 31,
        "checkpoints": ["checkpoint-25"],
    }
    events = [*events, error]
    return app_for(ScriptedSession(run_dir(tmp_path), events, alive=False), events)


def paused_run(tmp_path: Path) -> CockpitApp:
    events = events_until_step(40)
    ts = events[-1]["ts"]
    events = [
        *events,
        {
            "v": 1,
            "type": "command",
            "ts": ts + 0.05,
            "name": "pause",
            "accepted": True,
            "detail": "pausing after the current step",
        },
        {"v": 1, "type": "paused", "ts": ts + 0.1, "step": 40},
    ]
    return app_for(ScriptedSession(run_dir(tmp_path), events), events)


def test_finished_replay(snap_compare, tmp_path):
    assert snap_compare(finished_replay(tmp_path), terminal_size=(100, 32), run_before=drawn)


def test_finished_replay_80x24(snap_compare, tmp_path):
    assert snap_compare(finished_replay(tmp_path), terminal_size=(80, 24), run_before=drawn)


def test_mid_run(snap_compare, tmp_path):
    assert snap_compare(mid_run(tmp_path), terminal_size=(100, 32), run_before=drawn)


def test_mid_run_80x24(snap_compare, tmp_path):
    assert snap_compare(mid_run(tmp_path), terminal_size=(80, 24), run_before=drawn)


def test_mid_run_wide(snap_compare, tmp_path):
    assert snap_compare(mid_run(tmp_path), terminal_size=(160, 48), run_before=drawn)


def test_failed_oom(snap_compare, tmp_path):
    assert snap_compare(failed_run(tmp_path), terminal_size=(100, 32), run_before=drawn)


def test_failed_oom_80x24(snap_compare, tmp_path):
    assert snap_compare(failed_run(tmp_path), terminal_size=(80, 24), run_before=drawn)


def test_paused(snap_compare, tmp_path):
    assert snap_compare(paused_run(tmp_path), terminal_size=(100, 32), run_before=drawn)


def test_stop_confirmation(snap_compare, tmp_path):
    async def ask_to_stop(pilot) -> None:
        await drawn(pilot)
        await pilot.press("x")

    assert snap_compare(mid_run(tmp_path), terminal_size=(80, 24), run_before=ask_to_stop)
