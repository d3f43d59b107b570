"""The export screen over the run screen of an ended run (`e`): driven with pilot, what the user sees
asserted, and snapshots at 80x24 of the choices with their RAM/disk check and of the result.

The run is the recorded eval run (tests/fixtures/eval_run_events.jsonl) with its config, a final
adapter and two complete checkpoints on disk. The export process is the fake at the module edge
(tests/support/fake_export.py: the real protocol, fixed figures); the real export of the tiny model
is tested through `cockpit export` in tests/test_export.py. RAM and disk free are fixed so that the
numbers on screen are deterministic."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest
from conftest import SUPPORT, write_config
from support.pilot import (
    LAST_TS,
    event,
    events_until_step,
    make_app,
    running,
    screen_text,
    scripted,
    shown,
    wait_for,
)

from cockpit.live.session import RunSession
from cockpit.results import export as exporter
from cockpit.results import export_needs as needs_mod
from cockpit.run.rundir import COMPLETE_MARKER, RunDir
from screens.run.app import CockpitApp
from screens.run.export import ExportScreen

FIXTURE = Path(__file__).parent / "fixtures" / "eval_run_events.jsonl"
RUN_ID = "20261201-223529-tiny"
SIZE = (80, 24)
GIB = 2**30


@pytest.fixture
def ended_run(tmp_path, monkeypatch) -> RunDir:
    run = RunDir(tmp_path / RUN_ID)
    run.path.mkdir()
    shutil.copy(FIXTURE, run.events_path)
    write_config(run.config_path)
    for folder in (run.final_dir, run.checkpoints_dir / "checkpoint-4", run.checkpoints_dir / "checkpoint-8"):
        folder.mkdir(parents=True)
        (folder / "adapter_config.json").write_text("{}")
        (folder / "adapter_model.safetensors").write_bytes(b"\0" * 1000)
        if folder != run.final_dir:
            (folder / COMPLETE_MARKER).write_text("{}")
    monkeypatch.setattr(
        exporter,
        "backend_command",
        lambda request: [sys.executable, str(SUPPORT / "fake_export.py"), json.dumps(request)],
    )
    monkeypatch.setattr(needs_mod, "available_ram_bytes", lambda: 12 * GIB)
    monkeypatch.setattr(needs_mod, "free_disk_bytes", lambda path: 40 * GIB)
    monkeypatch.delenv("FAKE_EXPORT_FAIL", raising=False)
    return run


def app_of(run: RunDir) -> CockpitApp:
    return CockpitApp(RunSession(run, recorded=True), poll_interval_s=0.02, clock=lambda: 1796164340.0)


async def until(pilot, ready, what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert time.monotonic() < deadline, f"never: {what}"
        await pilot.pause(0.02)
    await pilot.pause()


def text_of(screen, selector: str) -> str:
    return str(screen.query_one(selector).render())


async def open_export(pilot) -> ExportScreen:
    await until(pilot, lambda: pilot.app.run_view.updates_shown and pilot.app.session.state.ended, "drawn")
    assert "e" in pilot.app.screen.active_bindings  # the Export key is in the ended run's footer
    await pilot.press("e")
    await until(pilot, lambda: isinstance(pilot.app.screen, ExportScreen), "the export screen")
    screen = pilot.app.screen
    await until(pilot, lambda: screen.plan is not None or screen.problem is not None, "the check")
    return screen


async def test_export_the_merged_model_and_gguf_from_the_ended_run(ended_run):
    async with app_of(ended_run).run_test(size=SIZE) as pilot:
        screen = await open_export(pilot)
        shown = text_of(screen, "#export-check")
        assert "adapter from final" in shown and "into exports/final-adapter" in shown
        assert "RAM   ~512.0 MiB of 12.00 GiB available" in shown
        assert "of 40.00 GiB free at the run's folder" in shown
        assert screen.focused is None, screen.focused
        await pilot.press("c")  # final -> the best checkpoint by eval loss
        assert "best by eval: checkpoint-8" in text_of(screen, "#export-choices")
        await pilot.press("c", "c", "c")  # checkpoint-8, checkpoint-4, back to final
        await pilot.press("g", "g")  # GGUF q8_0, which merges
        choices = text_of(screen, "#export-choices")
        assert "q8_0" in choices and "on: the adapter merged" in choices
        await until(pilot, lambda: screen.plan is not None and screen.plan.gguf == "q8_0", "the new check")
        shown = text_of(screen, "#export-check")
        assert "merged model (bf16) + GGUF q8_0 from final" in shown and "GGUF q8_0" in shown
        # each file's predicted size, from the tiny model's shape, before it starts
        assert "merged safetensors (bf16): ~6.5 MiB (3.43M params x 2 B)" in shown
        assert "GGUF q8_0: ~4.1 MiB (2.20M layer weights x 8.5 bits + 524,288 embeddings and output" in shown
        await pilot.press("enter")
        await until(pilot, lambda: screen.state in ("done", "failed"), "the export's end")
        shown = text_of(screen, "#export-progress")
        assert screen.state == "done", shown
        assert "written to exports/final-merged-bf16-q8_0" in shown
        for stage in ("load", "merge", "write", "convert"):  # each stage's progress came to the screen
            assert screen.stages[stage].strip() == f"{stage:<8} done in 1.5 s"
        assert "time: load 1.5 s, merge 1.5 s, write 1.5 s; peak RAM 512.0 MiB" in shown
        assert "merge check: merged vs base + adapter (bf16, cpu)" in shown and ": passed" in shown
        assert "GGUF check: " in shown and "(q8_0) read back: next-token max |Δ| 0.0168" in shown
        out = ended_run.path / "exports" / "final-merged-bf16-q8_0"
        assert {"model.safetensors", "Modelfile", "README.md"} <= {p.name for p in out.iterdir()}
        assert "enter" not in screen.active_bindings  # done: nothing to start again
        await pilot.press("escape")
        assert not isinstance(pilot.app.screen, ExportScreen)


async def test_a_failing_export_is_said_and_leaves_nothing(ended_run, monkeypatch):
    monkeypatch.setenv("FAKE_EXPORT_FAIL", "1")
    async with app_of(ended_run).run_test(size=SIZE) as pilot:
        screen = await open_export(pilot)
        await pilot.press("m", "enter")
        await until(pilot, lambda: screen.state in ("done", "failed"), "the export's end")
        assert screen.state == "failed"
        shown = text_of(screen, "#export-progress")
        assert "FAILED: export failed: the fake export was told to fail at the merge" in shown
        assert not (ended_run.path / "exports").exists() or not any((ended_run.path / "exports").iterdir())


async def test_too_little_disk_is_said_with_the_numbers_and_nothing_starts(ended_run, monkeypatch):
    monkeypatch.setattr(needs_mod, "free_disk_bytes", lambda path: 64 * 1024)
    async with app_of(ended_run).run_test(size=SIZE) as pilot:
        screen = await open_export(pilot)
        await pilot.press("m")
        await until(pilot, lambda: screen.problem is not None, "the refusal")
        shown = text_of(screen, "#export-check")
        assert "cannot start: not enough disk at" in shown and "(merged safetensors" in shown
        assert "is free" in shown
        await pilot.press("enter")
        await pilot.pause()
        assert screen.state == "choosing" and not (ended_run.path / "exports").exists()


def test_snapshot_export_choices_with_the_check(snap_compare, ended_run):
    async def choices(pilot):
        screen = await open_export(pilot)
        await pilot.press("g", "g")
        await until(pilot, lambda: screen.plan is not None and screen.plan.gguf == "q8_0", "the check")

    assert snap_compare(app_of(ended_run), terminal_size=SIZE, run_before=choices)


def test_snapshot_export_result(snap_compare, ended_run):
    async def result(pilot):
        screen = await open_export(pilot)
        await pilot.press("m")
        await until(pilot, lambda: screen.plan is not None and screen.plan.merge, "the check")
        await pilot.press("enter")
        await until(pilot, lambda: screen.state in ("done", "failed"), "the export's end")

    assert snap_compare(app_of(ended_run), terminal_size=SIZE, run_before=result)


async def test_a_live_run_offers_export_only_once_it_has_ended(tmp_path):
    session = scripted(tmp_path, events_until_step(30))
    app = make_app(session)
    async with running(app) as pilot:
        await shown(pilot, app)
        assert "e Export" not in screen_text(app) and "e" not in app.screen.active_bindings
        await pilot.press("e")
        await pilot.pause()
        assert not isinstance(app.screen, ExportScreen)  # the key does nothing while it trains
        session.feed([event("done", LAST_TS + 1, status="finished", step=30, message="finished")])
        session.alive = False
        await wait_for(pilot, lambda: app.run_view.run_ended)
        await pilot.pause()
        assert "e Export" in screen_text(app)
