"""Every run source the views are given has all of the `RunSource` protocol (cockpit/live/sources.py),
so that the app reads none of them by getattr: the journal's session, live and recorded, the
replay, and the pilot tests' double."""

from __future__ import annotations

import shutil

import pytest
from support.pilot import EVENTS, FIXTURE, RUN_ID, scripted

from cockpit.live.replay import ReplaySession
from cockpit.live.session import RunSession
from cockpit.live.sources import RunSource
from cockpit.run.rundir import RunDir


@pytest.fixture
def run(tmp_path) -> RunDir:
    path = tmp_path / RUN_ID
    path.mkdir()
    shutil.copy(FIXTURE, path / "events.jsonl")
    return RunDir(path)


def test_each_source_is_a_run_source(run, tmp_path):
    recorded = RunSession(run, recorded=True)
    replay = ReplaySession(run, speed=0)
    double = scripted(tmp_path, EVENTS)  # in the same run folder
    try:
        for source in (recorded, replay, double):
            assert isinstance(source, RunSource), type(source).__name__
    finally:
        recorded.close()
        replay.close()


def test_a_source_that_never_goes_back_says_so_and_keeps_its_pace(run):
    session = RunSession(run, recorded=True)
    try:
        session.poll()
        session.skip(-60)
        assert session.set_speed(4.0) == session.speed == 1.0
        assert session.rewinds == 0 and not session.rewind_pending
    finally:
        session.close()


def test_a_replay_sent_back_folds_again_at_its_next_poll(run):
    session = ReplaySession(run, speed=0)
    session.poll()
    assert session.rewinds == 0 and not session.rewind_pending
    session.skip(-5)
    assert session.rewind_pending
    session.poll()
    assert session.rewinds == 1 and not session.rewind_pending
