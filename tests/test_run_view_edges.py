"""The run screen under an impatient user: at 80x24 what a row says is not cut short, a loss gone
nan is said as such, and a modal over the screen names its own keys in the footer."""

from __future__ import annotations

from support.pilot import LAST_TS, events_until_step, make_app, screen_text, scripted, shown

from cockpit.preflight.checks.base import CheckResult
from screens.confirm import Confirm
from screens.preflight.notice import PreflightNotice
from screens.run.app import CockpitApp


async def test_at_80x24_the_cost_row_names_the_whole_key_to_set(tmp_path):
    events = [dict(e, price_per_hour=None) if e["type"] == "hello" else e for e in events_until_step(30)]
    app = make_app(scripted(tmp_path, events))
    async with app.run_test(size=(80, 24)) as pilot:
        await shown(pilot, app)
        assert "cost          - set cost.price_per_hour " in screen_text(app)


async def test_a_loss_gone_nan_is_shown_without_a_made_up_change_or_an_empty_plot(tmp_path):
    # fp16 overflow: every loss the trainer logs is NaN (the protocol writes it as the string "NaN")
    nan = {"loss": "NaN", "grad_norm": "NaN"}
    events = [dict(e, **nan) if e["type"] == "log" else e for e in events_until_step(30)]
    app = make_app(scripted(tmp_path, events))
    async with app.run_test(size=(80, 24)) as pilot:
        await shown(pilot, app)
        text = screen_text(app)
        assert "step loss     nan " in text and "nan%" not in text
        assert "no finite loss yet: every logged" in text and "no loss logged yet" not in text


def footer_line(app) -> str:
    return screen_text(app).splitlines()[-1]


async def test_a_modal_footer_names_the_modal_s_keys_not_those_under_it(tmp_path):
    problems = [
        CheckResult(
            id=f"disk.free.{n}",
            group="disk",
            title="Free space under the model cache",
            status="fail",
            value=f"{n} GB free",
            threshold=">= 30 GB",
            fix="Free space or point HF_HOME at a larger disk; " * 3,
        )
        for n in range(8)
    ]
    session = scripted(tmp_path, events_until_step(30))
    app = CockpitApp(session, poll_interval_s=0.02, clock=lambda: LAST_TS, preflight_problems=problems)
    async with app.run_test(size=(80, 24)) as pilot:
        await shown(pilot, app)
        assert isinstance(app.screen, PreflightNotice)
        assert "Go on" in footer_line(app) and "s Save" not in footer_line(app)
        assert "Enter or Esc: back to the run" in screen_text(app)  # a long list leaves it on screen
        await pilot.press("enter")
        await pilot.pause()
        await pilot.press("x")  # the stop question
        await pilot.pause()
        assert isinstance(app.screen, Confirm)
        assert "y Yes" in footer_line(app) and "n No" in footer_line(app)
        assert "s Save" not in footer_line(app)
        await pilot.press("n")
    assert session.sent == []


async def test_h_without_any_telemetry_says_why_instead_of_nothing(tmp_path):
    app = make_app(scripted(tmp_path, events_until_step(30)))
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await shown(pilot, app)
        assert "h Span" in footer_line(app)
        await pilot.press("h")
        await pilot.pause()
        assert [n.message for n in app._notifications] == [
            "no GPU/host telemetry for this run: no live watch and no telemetry.jsonl"
        ]
        assert app.run_view.span_s is None
