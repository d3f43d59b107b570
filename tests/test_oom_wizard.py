"""The OOM wizard's behaviour, driven with pilot: from the `oom` event to the relaunch.

A scripted session plays a run of the article's 13B QLoRA recipe on an emulated 24 GiB card
up to its first training step; then the OOM arrives, the wizard opens by itself with the
analysis, the user picks remedies and relaunches. The relaunch writes the change into the run
(config, history, `config_change` event) and starts a trainer (a double here; the real path is
tests/test_oom_wizard_relaunch.py), and the app exits for the CLI to follow that trainer.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from fixtures_oom import ARTICLE_13B as ARTICLE_13B_DOTTED
from fixtures_oom import DATA, H200, OOM, nested
from support.pilot import ScriptedSession, screen_text

from cockpit.config import load as config_load
from cockpit.config import schema as config_mod
from cockpit.fmt import GIB
from cockpit.oom import relaunch as relaunch_mod
from cockpit.run.rundir import RunDir
from screens.confirm import Confirm
from screens.oom.wizard import OomWizard
from screens.run.app import CockpitApp

RUN_ID = "20261130-190000-llama-2-13b"
T0 = 1796065000.0
ARTICLE_13B = nested({**ARTICLE_13B_DOTTED, "training.max_steps": 40})
DEVICE = H200


def event(type_: str, dt: float, **fields) -> dict:
    return {"v": 1, "type": type_, "ts": T0 + dt, **fields}


def until_training(settings: dict = ARTICLE_13B) -> list[dict]:
    t = settings["training"]
    return [
        event("phase", 0.0, phase="starting", message="reading config"),
        event(
            "hello",
            1.0,
            pid=4242,
            pgid=4242,
            run_id=RUN_ID,
            device=DEVICE,
            precision="bf16",
            versions={},
            resume_from=None,
            price_per_hour=None,
            emulated_vram={"limit_bytes": 24 * GIB, "applied": True, "allowed_bytes": int(23.4 * GIB)},
        ),
        event("phase", 2.0, phase="preparing_data", message="loading data"),
        event("data", 3.0, **DATA),
        event("phase", 4.0, phase="quantising", message="loading weights"),
        event("phase", 60.0, phase="training", message=""),
        event(
            "train_begin",
            61.0,
            total_steps=t["max_steps"],
            start_step=0,
            epochs=1.0,
            micro_batch_size=t["micro_batch_size"],
            gradient_accumulation_steps=t["gradient_accumulation_steps"],
            max_length=t["max_length"],
            gradient_checkpointing=False,
            precision="bf16",
            optimizer=t["optimizer"],
        ),
    ]


def oom_error(oom: dict = OOM, step: int = 1, phase: str = "training") -> dict:
    return event(
        "error",
        63.0,
        kind="oom",
        message="CUDA out of memory. Tried to allocate 500.00 MiB.",
        hint="The GPU ran out of memory.",
        phase=phase,
        step=step,
        oom=oom,
        traceback="",
        checkpoints=[],
    )


def make_run(tmp_path: Path, settings: dict = ARTICLE_13B) -> RunDir:
    path = tmp_path / RUN_ID
    path.mkdir()
    run = RunDir(path)
    cfg = config_load.config_from_dict(json.loads(json.dumps(settings)))
    run.config_path.write_text(config_mod.dump_config(cfg))
    run.events_path.write_text("")
    return run


def make_app(session) -> CockpitApp:
    return CockpitApp(session, poll_interval_s=0.02, clock=lambda: T0 + 70.0)


async def wait_for(pilot, condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the screen"
        await pilot.pause(0.02)


def wizard_ready(app) -> bool:
    return isinstance(app.screen, OomWizard) and app.screen.analysis is not None


class FakeTrainer:
    pid = 4343

    def poll(self):
        return None


@pytest.fixture(autouse=True)
def no_user_cards(tmp_path, monkeypatch):
    """The catalog's shipped prices only: a cards.yaml of the machine running the tests stays out."""
    monkeypatch.setenv("COCKPIT_CONFIG", str(tmp_path / "no-config"))


async def test_the_oom_event_opens_the_wizard_and_the_relaunch_applies_the_picks(tmp_path, monkeypatch):
    run = make_run(tmp_path)
    session = ScriptedSession(run, until_training())
    launched: list[RunDir] = []
    monkeypatch.setattr(relaunch_mod.process, "launch", lambda r: launched.append(r) or FakeTrainer())
    app = make_app(session)
    async with app.run_test(size=(100, 32), notifications=True) as pilot:
        await wait_for(pilot, lambda: app.run_view.updates_shown > 0)
        assert not isinstance(app.screen, OomWizard)  # training: no wizard
        session.alive = False
        session.feed([oom_error()])
        await wait_for(pilot, lambda: wizard_ready(app))
        await pilot.pause()
        text = screen_text(app)
        assert "OUT OF GPU MEMORY during a backward pass at step 1, batch 4 x 512 tokens" in text
        assert "24.00 GiB (emulated 24 GiB card)" in text and "needed at least 24.11 GiB" in text
        wizard = app.screen
        titles = [o.title for o in wizard.analysis.options]
        assert titles[:3] == [
            "recompute 6 of 40 layers (auto)",
            "micro-batch 4 -> 2, accum 4 -> 8",
            "layer inputs in host memory",
        ]
        # the host-memory remedy is slower than recomputing a few layers, and both fit
        assert wizard.analysis.options[2].speed < wizard.analysis.options[0].speed
        # pick a few layers recomputed and a smaller micro-batch together
        await pilot.press("space", "down", "space")
        await pilot.pause()
        assert [o.keys[0] for o in wizard.picked] == ["gradient_checkpointing", "micro_batch"]
        assert "picked together" in screen_text(app)
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(app.screen, Confirm))
        assert app.screen.question.startswith(
            "Relaunch with recompute 6 of 40 layers (auto) + micro-batch 4 -> 2"
        )
        await pilot.press("y")
        await wait_for(pilot, lambda: app.relaunched is not None)
    assert launched == [run] and isinstance(app.relaunched, FakeTrainer)

    new = yaml.safe_load(run.config_path.read_text())
    assert "gradient_checkpointing" not in new["training"] and new["speed"]["mode"] == "auto"
    assert "training.gradient_checkpointing" not in new["speed"]["keep"]  # left to speed: auto
    assert (new["training"]["micro_batch_size"], new["training"]["gradient_accumulation_steps"]) == (2, 8)
    old = yaml.safe_load((run.path / "history" / "config-1.yaml").read_text())
    assert old["training"]["gradient_checkpointing"] is False and old["training"]["micro_batch_size"] == 4
    change = json.loads(run.events_path.read_text().splitlines()[-1])
    assert change["type"] == "config_change" and change["chosen_by"] == "the OOM wizard"
    assert change["remedy"] == ["gradient_checkpointing", "micro_batch"] and change["verdict"] == "fits"
    assert change["predicted_peak_bytes"] < 0.95 * 24 * GIB and change["card_bytes"] == 24 * GIB


async def test_escape_closes_the_wizard_and_o_opens_it_again(tmp_path):
    run = make_run(tmp_path)
    session = ScriptedSession(run, [*until_training(), oom_error()], alive=False)
    app = make_app(session)
    async with app.run_test(size=(100, 32)) as pilot:
        await wait_for(pilot, lambda: wizard_ready(app))
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, OomWizard))
        await pilot.pause(0.3)  # more updates of the run view do not bring it back by themselves
        assert not isinstance(app.screen, OomWizard)
        await pilot.press("o")
        await wait_for(pilot, lambda: wizard_ready(app))
    assert app.relaunched is None and not (run.path / "history").exists()


async def test_a_bigger_card_is_advice_not_a_relaunch(tmp_path):
    run = make_run(tmp_path)
    session = ScriptedSession(run, [*until_training(), oom_error()], alive=False)
    app = make_app(session)
    async with app.run_test(size=(100, 32), notifications=True) as pilot:
        await wait_for(pilot, lambda: wizard_ready(app))
        wizard = app.screen
        last = len(wizard.analysis.options) - 1
        assert wizard.analysis.options[last].keys == ("card",)
        for _ in range(last):
            await pilot.press("down")
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, OomWizard) and "RTX A6000 (47.99 GiB): copy the" in screen_text(app)
    assert app.relaunched is None


async def test_a_run_without_its_config_gets_no_wizard(tmp_path):
    path = tmp_path / RUN_ID
    path.mkdir()
    session = ScriptedSession(RunDir(path), [*until_training(), oom_error()], alive=False)
    app = make_app(session)
    async with app.run_test(size=(100, 32)) as pilot:
        await wait_for(pilot, lambda: app.run_view.updates_shown > 0 and session.state.status == "failed")
        await pilot.pause(0.2)
        assert not isinstance(app.screen, OomWizard)


def test_headless_ask_without_a_terminal_applies_nothing(tmp_path, capsys):
    run = make_run(tmp_path)
    session = ScriptedSession(run, [*until_training(), oom_error()], alive=False)
    session.poll()
    assert relaunch_mod.headless_on_oom(run, session.state, "ask", 1, interactive=False) is None
    out = capsys.readouterr().out
    assert "remedies, best first" in out and "stdin is not a terminal" in out
    assert not (run.path / "history").exists()


def test_headless_auto_gives_up_after_its_attempts(tmp_path, capsys):
    run = make_run(tmp_path)
    session = ScriptedSession(run, [*until_training(), oom_error()], alive=False)
    session.poll()
    attempts = relaunch_mod.MAX_AUTO_ATTEMPTS + 1
    assert relaunch_mod.headless_on_oom(run, session.state, "auto", attempts) is None
    assert f"stopped after {relaunch_mod.MAX_AUTO_ATTEMPTS} relaunches" in capsys.readouterr().out


def test_a_change_of_the_adapter_shape_moves_the_checkpoints_aside(tmp_path):
    run = make_run(tmp_path)
    for step in (10, 20):
        folder = run.checkpoints_dir / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        (folder / "cockpit-complete.json").write_text("{}")
    applied = relaunch_mod.apply_changes(run, {"lora.r": 16}, "oom", from_step_zero=True)
    assert applied.moved_checkpoints == run.path / "history" / "checkpoints-1"
    assert sorted(p.name for p in applied.moved_checkpoints.iterdir()) == ["checkpoint-10", "checkpoint-20"]
    assert run.complete_checkpoints() == []
    assert yaml.safe_load(run.config_path.read_text())["lora"]["r"] == 16
    with pytest.raises(config_mod.ConfigError):
        relaunch_mod.apply_changes(run, {"lora.r": 0}, "oom")
    assert not (run.path / "history" / "config-2.yaml").exists()  # nothing moved for a bad change
