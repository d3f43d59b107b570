"""The run screen under an impatient user: at 80x24, what a row says is not cut short."""

from __future__ import annotations

from test_tui import events_until_step, make_app, screen_text, scripted, shown


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
        assert "loss          nan " in text and "nan%" not in text
        assert "no finite loss yet: every logged" in text and "no loss logged yet" not in text
