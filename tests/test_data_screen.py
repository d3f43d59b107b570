"""The Data screen over recorded data check reports (tests/fixtures/data, made by
tests/support/data_reports.py): snapshots at 80x24 and 100x32 with errors, with warnings and the
preview, and pilot tests: its keys jump to each part, Escape goes back, and the picker opens it with
`d`, from a report in hand or by checking the data in a worker.

Deterministic: recorded reports, fixed terminal sizes, no cursor (the body has the focus).
"""

from __future__ import annotations

import json

import pytest
from support.pilot import screen_text
from test_picker import make_app
from textual.app import App

from screens.data.data import DataScreen

FIXTURES = __import__("conftest").FIXTURES / "data"


def report(name: str) -> dict:
    return json.loads((FIXTURES / f"report_{name}.json").read_text())


class DataApp(App[None]):
    """The screen on its own, as a run view or the picker pushes it."""

    ENABLE_COMMAND_PALETTE = False

    def __init__(self, shown: dict):
        super().__init__()
        self.shown = shown

    def on_mount(self) -> None:
        self.push_screen(DataScreen(self.shown, "my-run.yaml"))


@pytest.fixture(autouse=True)
def no_user_cards(tmp_path, monkeypatch):
    monkeypatch.setenv("COCKPIT_CONFIG", str(tmp_path / "no-config"))


async def settled(pilot) -> None:
    await pilot.pause()


async def at_the_preview(pilot) -> None:
    await pilot.press("p")
    await pilot.pause()


def test_errors_80x24(snap_compare):
    assert snap_compare(DataApp(report("errors")), terminal_size=(80, 24), run_before=settled)


def test_warnings_80x24(snap_compare):
    assert snap_compare(DataApp(report("chat_issues")), terminal_size=(80, 24), run_before=settled)


def test_preview_80x24(snap_compare):
    assert snap_compare(DataApp(report("chat_issues")), terminal_size=(80, 24), run_before=at_the_preview)


def test_tokens_100x32(snap_compare):
    async def at_the_tokens(pilot) -> None:
        await pilot.press("t")
        await pilot.pause()

    assert snap_compare(DataApp(report("chat_issues")), terminal_size=(100, 32), run_before=at_the_tokens)


async def test_the_keys_jump_to_each_part_and_escape_goes_back():
    app = DataApp(report("chat_issues"))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, DataScreen)
        text = screen_text(app)
        assert "OK, 5 warning(s)" in text and "Errors" in text and "Preview" in text  # the footer's keys
        body = screen.query_one("#data-body")
        await pilot.press("p")
        await pilot.pause()
        assert body.scroll_y > 0 and "trained text" in screen_text(app)
        await pilot.press("e")
        await pilot.pause()
        assert body.scroll_y == 0
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, DataScreen)


async def test_the_errors_lead_and_name_file_row_and_fix():
    app = DataApp(report("errors"))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        text = " ".join(screen_text(app).split())
        assert "3 data error(s): nothing can train" in text
        assert "line 2, byte 140 (0xE9) is not UTF-8" in text and "fix: convert the file to UTF-8" in text


async def test_the_picker_opens_it_with_d_from_the_report_in_hand(tmp_path):
    app = make_app(tmp_path, data_report=report("chat_issues"), data_source="run.yaml")
    async with app.run_test(size=(100, 32)) as pilot:
        await pilot.pause()
        await pilot.press("d")
        await pilot.pause()
        assert isinstance(app.screen, DataScreen) and app.screen.source == "run.yaml"
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, DataScreen) and "Data" in screen_text(app)


async def test_the_picker_checks_the_data_in_a_worker_when_it_has_no_report(tmp_path):
    calls = []

    def loader() -> dict:
        calls.append(1)
        return report("errors")

    app = make_app(tmp_path, data_loader=loader)
    async with app.run_test(size=(100, 32)) as pilot:
        await pilot.pause()
        await pilot.press("d")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert calls == [1] and isinstance(app.screen, DataScreen)
        assert app.data_report["problems"]  # kept: the next d shows it without checking again
        await pilot.press("escape", "d")
        await pilot.pause()
        assert calls == [1] and isinstance(app.screen, DataScreen)
