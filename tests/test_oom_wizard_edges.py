"""The OOM wizard at its edges: an analysis that cannot be made is said on the wizard and the app
keeps running; at 80x24 the highlighted remedy's effect on the results is on screen."""

from __future__ import annotations

from support.pilot import ScriptedSession, screen_text
from test_oom_wizard import RUN_ID, make_app, make_run, oom_error, until_training, wait_for, wizard_ready

from screens.oom.figures import observed_rows, predicted_rows
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


async def test_at_80x24_the_memory_panes_give_every_figure_whole_and_the_remedies_their_rows(tmp_path):
    """`m` at 80x24 showed `weights 0.01…` and `peak (as nvidia-smi) 0.78…`, one remedy row and a
    scrollbar outside the boxes: the screen ran over its 24 rows. Now the panes take the detail box's
    place, every figure is whole with its unit, and every remedy has its row, none cut."""
    session = ScriptedSession(make_run(tmp_path), [*until_training(), oom_error()], alive=False)
    app = make_app(session)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: wizard_ready(app))
        wizard = app.screen
        assert not wizard.query_one("#where").display  # short: the table first
        await pilot.press("m")
        await pilot.pause()
        text = screen_text(app)
        assert wizard.query_one("#where").display and not wizard.query_one("#detail-box").display
        assert "…" not in text
        for _, value in [*observed_rows(wizard.analysis), *predicted_rows(wizard.analysis)]:
            assert str(value) in text
        assert not wizard.show_vertical_scrollbar and wizard.max_scroll_y == 0
        table = wizard.query_one("#remedies")
        assert table.row_count == len(wizard.analysis.options) == 7
        assert table.scrollable_content_region.height >= 7  # the header and six remedies
        assert table.max_scroll_x == 0  # each column whole: the effect is in the detail box
        await pilot.press("m")  # back: the highlighted remedy's detail, and every remedy
        await pilot.pause()
        assert not wizard.query_one("#where").display and wizard.query_one("#detail-box").display
        assert table.max_scroll_y == 0 and table.max_scroll_x == 0 and wizard.max_scroll_y == 0
        text = screen_text(app)
        for option in wizard.analysis.options:
            speed = "-" if option.speed is None else f"{option.speed:.2f}x"
            assert f"{option.title} " in text and f" {speed} " in text
        assert "effect: none; resumes from the last checkpoint" in text
