"""`cockpit replay` of the tests' recorded demo run (a CPU run), played to its end at 80x24, as the
walk-through does it: its GPU/host strip agrees with its run panel (no GPU, the host of a CPU
box), the header shows how it ended whole beside the REPLAY label, and a recording whose folder
holds no weights offers no `e` (Export); one whose folder has them does.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from support.pilot import FIXTURE, RUN_ID, TELEMETRY_FIXTURE, running, screen_text, shown, wait_for

from cockpit.live.replay import ReplaySession
from cockpit.run.rundir import RunDir
from screens.run.app import CockpitApp
from screens.run.export import ExportScreen
from screens.run.view import NOTHING_TO_EXPORT

SIZE = (80, 24)


def demo_replay(tmp_path: Path, weights: bool = False) -> tuple[CockpitApp, list[float]]:
    """The recorded demo run (its events and telemetry) replayed at x1; set the clock's [0] past 22 s
    to reach its end. `weights`: its folder has a final adapter, as the trainer left it."""
    path = tmp_path / RUN_ID
    path.mkdir()
    shutil.copy(FIXTURE, path / "events.jsonl")
    shutil.copy(TELEMETRY_FIXTURE, path / "telemetry.jsonl")
    if weights:
        (path / "final").mkdir()
        (path / "final" / "adapter_config.json").write_text("{}")
    clock = [0.0]
    session = ReplaySession(RunDir(path), speed=1, clock=lambda: clock[0])
    return CockpitApp(session, watch=session.watch, poll_interval_s=0.02), clock


async def played_out(pilot, clock: list[float]) -> None:
    """From the first frame to the end of the recording, its last telemetry bin drawn."""
    app = pilot.app
    await shown(pilot, app)
    clock[0] = 100.0
    await wait_for(
        pilot,
        lambda: (
            app.run_view.run_ended
            and app.run_view.sample is not None
            and app.run_view.sample.ts == 1796052170.0  # the last bin
        ),
    )
    await pilot.pause()


def footer(app) -> str:
    return screen_text(app).splitlines()[-1]


async def test_the_strip_of_a_cpu_runs_replay_shows_no_gpu_and_the_cpu_box(tmp_path):
    app, clock = demo_replay(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await played_out(pilot, clock)
        text = screen_text(app)
    assert "device        cpu x86_64" in text
    assert "no NVIDIA GPU / driver not loaded · as recorded in telemetry.jsonl" in text
    assert "GPU0" not in text and "as recorded · host" not in text  # no GPU's figures, no GPU's name
    assert "RAM 1.1/23.5G" in text  # the CPU box's 23.5 GiB, not a GPU server's 251
    assert "trainer 176% 0.6G" in text and "memory        0.62 GiB RSS (host)" in text


async def test_the_end_of_a_replay_is_whole_beside_its_label_at_80_columns(tmp_path):
    app, clock = demo_replay(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await played_out(pilot, clock)
        header, progress = screen_text(app).splitlines()[:2]
    assert "finished at step 88" in header and "…" not in header
    assert "step 88/88 · epoch 4.00/4 · 100%" in progress and "REPLAY x1 0:00:22/0:00:22" in progress


async def test_a_replay_without_weights_offers_no_export_and_says_why(tmp_path):
    app, clock = demo_replay(tmp_path)
    async with running(app) as pilot:
        await played_out(pilot, clock)
        assert "Summary" in footer(app) and "Export" not in footer(app)
        assert "e" not in app.screen.active_bindings
        await pilot.press("e")
        await pilot.pause()
        assert not isinstance(app.screen, ExportScreen)
        assert list(app._notifications)[-1].message == NOTHING_TO_EXPORT
        assert "nothing to export: this recording's folder" in screen_text(app)  # its toast
        assert "cockpit restart" not in screen_text(app)


async def test_a_replay_whose_folder_has_weights_offers_export(tmp_path):
    app, clock = demo_replay(tmp_path, weights=True)
    async with running(app) as pilot:
        await played_out(pilot, clock)
        assert "e Export" in footer(app)
        await pilot.press("e")
        await wait_for(pilot, lambda: isinstance(app.screen, ExportScreen))
        screen = app.screen
        await wait_for(pilot, lambda: screen.plan is not None or screen.problem is not None, timeout_s=20)
        assert screen.choices[screen.weights].label == "final"
        assert "cockpit restart" not in (screen.problem or "")


async def test_going_back_from_the_end_hides_export_until_the_end_again(tmp_path):
    app, clock = demo_replay(tmp_path, weights=True)
    async with running(app) as pilot:
        await played_out(pilot, clock)
        await pilot.press("left_square_bracket")  # a minute back: the start, playing again
        await wait_for(pilot, lambda: app.run_view.status != "finished")
        await pilot.pause()
        assert "e" not in app.screen.active_bindings
        clock[0] = 1000.0
        await wait_for(pilot, lambda: app.run_view.run_ended)
        await pilot.pause()
        assert "e Export" in footer(app)


def test_replay_at_its_end_80x24(snap_compare, tmp_path):
    """The strip of a CPU box, `finished at step 88` whole, no `e` (this folder has no weights)."""
    app, clock = demo_replay(tmp_path)

    async def to_the_end(pilot) -> None:
        await played_out(pilot, clock)

    assert snap_compare(app, terminal_size=SIZE, run_before=to_the_end)
