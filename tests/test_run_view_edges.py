"""The run screen under an impatient user: at 80x24, what a row says is not cut short."""

from __future__ import annotations

from test_tui import events_until_step, make_app, screen_text, scripted, shown


async def test_at_80x24_the_cost_row_names_the_whole_key_to_set(tmp_path):
    events = [dict(e, price_per_hour=None) if e["type"] == "hello" else e for e in events_until_step(30)]
    app = make_app(scripted(tmp_path, events))
    async with app.run_test(size=(80, 24)) as pilot:
        await shown(pilot, app)
        assert "cost          - set cost.price_per_hour " in screen_text(app)
