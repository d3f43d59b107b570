"""The run view's `a`: the Data screen over the run's own config, checked in a worker (the data
check of `cockpit data`, cached while the files are unchanged); not offered without a config."""

from __future__ import annotations

import shutil

from conftest import ROOT
from support.pilot import events_until_step, make_app, running, screen_text, scripted, shown, wait_for

from screens.data.data import DataScreen
from screens.run import commands


def demo_config(run_path) -> None:
    shutil.copy(ROOT / "cockpit" / "data" / "demo" / "demo.yaml", run_path / "config.yaml")


def test_the_run_config_s_data_is_checked_as_cockpit_data_checks_it(tmp_path, monkeypatch):
    monkeypatch.setenv("COCKPIT_CACHE", str(tmp_path / "cache"))
    demo_config(tmp_path)
    report = commands.data_report_of(tmp_path / "config.yaml")()
    assert isinstance(report, dict), report
    assert report["totals"]["rows_kept"] == 345, report.keys()


def test_a_config_that_does_not_load_is_said(tmp_path):
    (tmp_path / "config.yaml").write_text("model: [not, a, section]\n")
    said = commands.data_report_of(tmp_path / "config.yaml")()
    assert isinstance(said, str) and said.startswith("the run's config does not load")


async def test_a_opens_the_data_screen_over_the_run_s_report(tmp_path, monkeypatch):
    session = scripted(tmp_path, events_until_step(30))
    demo_config(session.run.path)
    asked = []

    def fake_report_of(path):
        asked.append(path)
        return lambda: {"status": "ok", "sources": [], "warnings": [], "errors": []}

    monkeypatch.setattr(commands, "data_report_of", fake_report_of)
    app = make_app(session)
    async with running(app) as pilot:
        await shown(pilot, app)
        assert "a Data" in screen_text(app)
        await pilot.press("a")
        await wait_for(pilot, lambda: isinstance(app.screen, DataScreen))
        assert asked == [session.run.config_path]


async def test_without_a_config_the_key_is_not_offered(tmp_path):
    session = scripted(tmp_path, events_until_step(30))
    app = make_app(session)
    async with running(app) as pilot:
        await shown(pilot, app)
        assert "a Data" not in screen_text(app)
