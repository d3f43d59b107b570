"""The OOM wizard at its edges: an analysis that cannot be made is said on the wizard and the app
keeps running; at 80x24 the highlighted remedy's effect on the results is on screen."""

from __future__ import annotations

from support.pilot import ScriptedSession, screen_text
from test_oom_wizard import RUN_ID, make_app, make_run, oom_error, until_training, wait_for, wizard_ready

from screens.oom.wizard import OomWizard


async def test_a_config_edited_into_an_error_is_said_not_a_crash(tmp_path):
    run = make_run(tmp_path)
    run.config_path.write_text("training:\n  lerning_rate: 0.001\n")  # edited by hand since the OOM
    session = ScriptedSession(run, [*until_training(), oom_error()], alive=False)
    app = make_app(session)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, OomWizard) and app.screen.failure is not None)
        await pilot.pause()
        assert "could not analyse the failure" in screen_text(app)
        assert "training.lerning_rate" in app.screen.failure
        await pilot.press("r")  # says why nothing relaunches
        await pilot.pause()
        assert "could not analyse the failure" in list(app._notifications)[-1].message
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, OomWizard))
        assert app.is_running and RUN_ID in screen_text(app)
    assert app.relaunched is None


async def test_at_80x24_the_effect_of_the_highlighted_remedy_is_shown(tmp_path):
    session = ScriptedSession(make_run(tmp_path), [*until_training(), oom_error()], alive=False)
    app = make_app(session)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: wizard_ready(app))
        await pilot.press("down", "down", "down")
        await pilot.pause()
        assert app.screen.analysis.options[3].title == "max length 512 -> 256"
        assert "effect: cuts 61.0% of the samples (610 of 1000) to 256 tokens" in screen_text(app)
        assert app.screen.analysis.options[1].title == "micro-batch 4 -> 2, accum 4 -> 8"
        await pilot.press("space", "up", "up", "space")  # with the micro-batch: both effects
        await pilot.pause()
        assert "effect: cuts 61.0% of the samples" in screen_text(app)
        assert "batch kept at 16 (2 x 8); resumes from the last checkpoint" in screen_text(app)
