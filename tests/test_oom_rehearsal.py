"""The OOM rehearsal (finding 3 of issue 43): a real GPU OOM recorded on an H200 (bench/results,
shipped in cockpit/data/rehearsal/oom) replays into the wizard on a machine without a GPU, with
the recorded figures, remedies that fit the recorded 24 GiB card, and nothing relaunched."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest
from support.pilot import screen_text

from cockpit.oom import rehearsal
from cockpit.oom import relaunch as relaunch_mod
from screens.oom.wizard import OomWizard
from screens.run.app import CockpitApp

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def no_user_cards(tmp_path, monkeypatch):
    monkeypatch.setenv("COCKPIT_CONFIG", str(tmp_path / "no-config"))


def test_the_recording_is_the_bench_record_it_names():
    rec = rehearsal.record()
    bench = json.loads((ROOT / rec["source"].split(",")[0]).read_text())
    scenario = next(s for s in bench["scenarios"] if s["name"] == rec["scenario"])
    assert rec["remedy"] == scenario["remedy"] and rec["relaunch"] == scenario["relaunch"]
    lines = (rehearsal.recording_dir() / "events.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    error = events[-1]
    assert error["type"] == "error" and error["kind"] == "oom"
    assert error["oom"]["memory"] == scenario["oom"]["memory"] and error["oom"]["injected"] is False
    hello = next(e for e in events if e["type"] == "hello")
    assert hello["device"]["name"] == bench["header"]["gpu"] == "NVIDIA H200"


def test_headless_rehearsal_ranks_remedies_that_fit_and_tells_the_recorded_relaunch(tmp_path):
    run = rehearsal.prepare(parent=tmp_path)
    out = io.StringIO()
    assert rehearsal.headless(rehearsal.RehearsalSession(run, speed=0), out=out) == 0
    text = out.getvalue()
    assert "card: 24.00 GiB (emulated 24 GiB card)" in text
    assert "1. recompute 5 of 40 layers (auto)\n      peak 22.6" in text and "(fits," in text
    said = "relaunched with gradient checkpointing (--on-oom auto, predicted 9.73 GiB), measured 10.21"
    assert said in text
    # its recorded run is not here to restart: the summary says what does the same on one's own run
    assert f"restart {run.path.name}" not in text and "next: a rehearsal (nothing to restart here)" in text
    assert "train CONFIG --on-oom auto" in text
    rehearsal.remove(run)
    assert not run.path.parent.exists()


async def test_the_replay_holds_at_the_oom_in_the_wizard_and_relaunches_nothing(tmp_path, monkeypatch):
    run = rehearsal.prepare(parent=tmp_path)
    launched = []
    monkeypatch.setattr(relaunch_mod.process, "launch", lambda r: launched.append(r))
    session = rehearsal.RehearsalSession(run, speed=0)
    app = CockpitApp(session, watch=session.watch, poll_interval_s=0.02)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        deadline = time.monotonic() + 10
        while not (isinstance(app.screen, OomWizard) and app.screen.analysis is not None):
            assert time.monotonic() < deadline, "the wizard did not open over the rehearsal"
            await pilot.pause(0.05)
        await pilot.pause()
        text = screen_text(app)
        assert "REPLAY: a rehearsal" in text and "recompute 5 of 40 layers" in text
        assert app.screen.analysis.options[0].verdict == "fits"  # the recorded card, not this machine's
        await pilot.press("r")
        await pilot.pause(0.2)
        if not isinstance(app.screen, OomWizard):
            await pilot.press("y")
        deadline = time.monotonic() + 5
        while isinstance(app.screen, OomWizard):
            assert time.monotonic() < deadline
            await pilot.pause(0.05)
        notes = " ".join(str(n.message) for n in app._notifications)
        assert "nothing was relaunched" in notes and "measured 10.21 GiB" in notes
    assert launched == [] and not (run.path / "history").exists()
