"""The picker's memory breakdown at 80x24 (issue 16, item 6): every figure first, the notes that
would be cut beside their figures under them all, nothing ending in an ellipsis, and what does
not fit the panel's height reached with Tab and the arrows."""

from __future__ import annotations

import pytest
from test_picker import make_app

from widgets.memory_breakdown import BreakdownBox


@pytest.fixture(autouse=True)
def no_user_cards(tmp_path, monkeypatch):
    monkeypatch.setenv("COCKPIT_CONFIG", str(tmp_path / "no-config"))


def panel_text(app) -> list[str]:
    panel = app.screen.query_one(BreakdownBox)
    region = panel.region
    lines = [strip.text for strip in app.screen._compositor.render_strips()]
    assert region.bottom <= len(lines), (region, len(lines))
    return [line[region.x : region.right] for line in lines[region.y : region.bottom]]


async def test_at_80_columns_every_note_is_whole_and_the_rest_scrolls_into_view(tmp_path):
    app = make_app(tmp_path, budget=5.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("down", "down", "down", "b")  # RTX 4090
        await pilot.pause()
        await pilot.pause()
        panel = app.screen.query_one(BreakdownBox)
        first = "\n".join(panel_text(app))
        assert "…" not in first
        for part in ("weights", "quantisation constants", "LoRA adapter + grads + optimizer", "activations"):
            assert f"│ {part} " in first  # the figures first, each row whole
        assert "Tab, then ↑↓: the rest" in first.splitlines()[-1]
        assert "while loading" not in first  # the notes: below the panel's height
        while app.screen.focused is not panel:
            await pilot.press("tab")
        await pilot.press("end")
        await pilot.pause()
        last = "\n".join(panel_text(app))
        assert "peak: while loading 7.74 GiB" in last and "…" not in last
        await pilot.press("home", *["down"] * 3)
        await pilot.pause()
        assert "peak (as nvidia-smi shows it)      23.70 GiB of 24.0: +0.29 GiB free" in "\n".join(
            panel_text(app)
        )
        await pilot.press(*["down"] * 4)
        await pilot.pause()
        assert "weights: 12.69B linear params in 4-bit, 0.33B (embeddings" in "\n".join(panel_text(app))
