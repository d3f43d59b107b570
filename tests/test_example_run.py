"""The recorded GPU run shipped in examples/h200-run opens without a GPU: in the replay view and
headless. Recorded with bench/record_example.py on the GPU machine; skipped until it is committed."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

import pytest
from conftest import ROOT
from support.pilot import screen_text

from cockpit.live.replay import ReplaySession
from cockpit.run.rundir import RunDir
from screens.run.app import CockpitApp

EXAMPLE = ROOT / "examples" / "h200-run"
FILES = {"backend.log", "config.yaml", "events.jsonl", "telemetry.jsonl"}

pytestmark = pytest.mark.skipif(
    not (EXAMPLE / "events.jsonl").exists(),
    reason="examples/h200-run is not committed yet: record it on the GPU machine with "
    "`python bench/record_example.py --out DIR` and commit DIR/h200-run as examples/h200-run",
)


@pytest.fixture
def example(tmp_path):
    """A copy: a replay must not be able to write into the committed example."""
    return shutil.copytree(EXAMPLE, tmp_path / EXAMPLE.name)


def test_the_example_is_small_and_holds_no_weights():
    assert {p.name for p in EXAMPLE.iterdir()} == FILES
    assert sum(p.stat().st_size for p in EXAMPLE.iterdir()) < 1_000_000


async def test_the_example_opens_in_the_replay_view(example):
    session = ReplaySession(RunDir(example), speed=0)
    app = CockpitApp(session, watch=session.watch, poll_interval_s=0.02)
    async with app.run_test(size=(100, 32)) as pilot:
        deadline = time.monotonic() + 10
        while app.run_view.status != "finished" or app.run_view.sample is None:
            assert time.monotonic() < deadline, "the example did not play to its end"
            await pilot.pause(0.05)
        await pilot.pause()
        text = screen_text(app)
        await pilot.press("q")
    assert "REPLAY max speed" in text and " finished " in text
    assert "as recorded" in text and "GPU0" in text  # the GPU as the recorder saw it
    assert app.return_value == 0


def test_the_example_replays_headless(example, env):
    done = subprocess.run(
        [sys.executable, "-m", "cockpit", "replay", str(example), "--no-ui", "--speed", "0"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "finished" in done.stdout
