"""The preflight screen under an impatient user: keys pressed before the plan is made, and an
export path that cannot be a file name."""

from __future__ import annotations

from preflight_fakes import machine
from support.pilot import screen_text
from test_preflight_screen import app_for, finished, notes, rows, until
from textual.widgets import Input

from screens.preflight.export import ExportReport


async def test_a_pasted_export_path_with_a_nul_byte_is_refused_not_a_crash(tmp_path):
    app = app_for(machine("healthy"), tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await finished(pilot)
        await pilot.press("e")
        await until(pilot, lambda: isinstance(app.screen, ExportReport), "the export prompt")
        footer = screen_text(app).splitlines()[-1]  # the dialog's keys, not the list's
        assert "Cancel" in footer and "Re-run" not in footer
        app.screen.query_one(Input).value = "report\0.json"
        await pilot.press("enter")
        await until(pilot, lambda: not isinstance(app.screen, ExportReport), "the prompt to close")
        assert app.is_running and app.last_export is None
        said = " ".join(notes(app)[-1].split())  # folded to the toast's width
        assert "could not write" in said and "press e and give another path" in said
    assert not list(tmp_path.iterdir())


async def test_r_before_any_check_is_listed_says_so(monkeypatch):
    app = app_for(machine("healthy"))

    def no_plan():
        raise OSError("no /proc here")

    monkeypatch.setattr(app.preflight, "plan", no_plan)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.ended_at is not None, "the plan to fail")
        assert rows(app) == {} and "could not plan the checks" in notes(app)[-1]
        await pilot.press("r")
        await pilot.pause()
        assert notes(app)[-1] == "No check is listed yet: nothing to re-run."


async def test_enter_on_an_empty_export_path_asks_for_one(tmp_path):
    app = app_for(machine("healthy"), tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await finished(pilot)
        await pilot.press("e")
        await until(pilot, lambda: isinstance(app.screen, ExportReport), "the export prompt")
        app.screen.query_one(Input).value = "  "
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, ExportReport) and "Give a path" in notes(app)[-1]
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, ExportReport), "the prompt to close")
    assert app.last_export is None and not list(tmp_path.iterdir())
