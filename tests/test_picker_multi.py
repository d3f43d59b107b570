"""The card picker's rows of 2, 4 and 8 GPUs: `g` shows and hides them, the breakdown of such a row
is one GPU's share, Enter on one writes `gpus` and `distributed.strategy`; and snapshots with the
rows shown (100x32, as the other picker snapshots)."""

from __future__ import annotations

import pytest
import yaml
from test_picker import make_app, notices, screen_text, table_of

from cockpit.config import load as config_load
from cockpit.gpus.catalog import load_catalog
from screens.picker.inputs import default_path
from screens.picker.save import SaveConfig
from widgets.card_table import CardTableView

FULL_7B = ["model.name=synthetic:llama-2-7b", "method=full"]


@pytest.fixture(autouse=True)
def no_user_cards(tmp_path, monkeypatch):
    monkeypatch.setenv("COCKPIT_CONFIG", str(tmp_path / "no-config"))


async def to_row(pilot, key: str) -> None:
    view = pilot.app.screen.query_one(CardTableView)
    view.move_cursor(row=[r.key for r in view.table.rows].index(key))
    await pilot.pause()


async def test_g_toggles_the_rows_of_several_gpus(tmp_path):
    app = make_app(tmp_path, FULL_7B)
    async with app.run_test(size=(100, 32), notifications=True) as pilot:
        await pilot.pause()
        assert "2/4/8 GPUs" in screen_text(app)  # the key is in the footer
        one = [r.key for r in table_of(app).rows]
        assert table_of(app).gpu_counts == (1,)
        await pilot.press("g")
        await pilot.pause()
        shown = table_of(app)
        assert shown.gpu_counts == (1, 2, 4, 8) and len(shown.rows) == 4 * len(one)
        assert "x2 FSDP" in screen_text(app)
        # the highlights weigh them: the fastest is now 8 GPUs of a card
        assert shown.fastest.gpus == 8
        await pilot.press("g")
        await pilot.pause()
        assert [r.key for r in table_of(app).rows] == one and "x2 FSDP" not in screen_text(app)


async def test_a_row_of_4_gpus_shows_one_gpus_share_and_writes_gpus_4(tmp_path):
    app = make_app(tmp_path, FULL_7B, multi=True)
    async with app.run_test(size=(100, 32), notifications=True) as pilot:
        await pilot.pause()
        await to_row(pilot, "a100-80gb-sxm-x4")
        text = screen_text(app)
        assert "A100 80GB SXM x4 (FSDP): fits" in text and "GiB free per GPU" in text
        assert "speed NOT calibrated (a model: 4 x one GPU less communication" in text
        await pilot.press("b")
        await pilot.pause()
        text = screen_text(app)
        assert "one GPU of A100 80GB SXM x4 (FSDP), as set above: weights, grads, states 1/4 each" in text
        assert "weights (fp32 master) (1/4)" in text and "gathered layers" in text
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, SaveConfig)
        await pilot.press("enter")
        await pilot.pause()
        path = default_path("synthetic:llama-2-7b", "a100-80gb-sxm-x4", tmp_path / "out")
        assert app.written == [path]
        assert f"then: cockpit train {path}" in notices(app)
    price = load_catalog().get("a100-80gb-sxm").price_per_hour
    cfg = config_load.load_config(path)
    assert cfg.gpus == 4 and cfg.distributed.strategy == "fsdp" and cfg.method == "full"
    assert cfg.cost.price_per_hour == pytest.approx(4 * price)
    written = yaml.safe_load(path.read_text())
    assert written["gpus"] == 4 and written["distributed"]["strategy"] == "fsdp"
    assert "for A100 80GB SXM x4 (FSDP)" in path.read_text() and "GiB per GPU" in path.read_text()


async def test_a_one_gpu_row_still_writes_one_gpu(tmp_path):
    app = make_app(tmp_path, ["model.name=synthetic:llama-2-7b"], multi=True)
    async with app.run_test(size=(100, 32), notifications=True) as pilot:
        await pilot.pause()
        await to_row(pilot, "l4")
        await pilot.press("enter")
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
    (path,) = app.written
    written = yaml.safe_load(path.read_text())
    assert "gpus" not in written or written["gpus"] == 1


async def rows_shown(pilot) -> None:
    await pilot.press("g")
    await pilot.pause()


async def breakdown_of_a_4_gpu_row(pilot) -> None:
    await pilot.press("g")
    await pilot.pause()
    await to_row(pilot, "a100-80gb-sxm-x4")
    await pilot.press("b")
    await pilot.pause()


def test_snapshot_rows_shown(snap_compare, tmp_path):
    app = make_app(tmp_path, FULL_7B, budget=5.0)
    assert snap_compare(app, terminal_size=(100, 32), run_before=rows_shown)


def test_snapshot_breakdown_of_a_4_gpu_row(snap_compare, tmp_path):
    app = make_app(tmp_path, FULL_7B, budget=5.0)
    assert snap_compare(app, terminal_size=(100, 32), run_before=breakdown_of_a_4_gpu_row)


def test_cockpit_pick_multi_starts_with_the_rows_shown(tmp_path, monkeypatch):
    from cockpit.cli.main import main
    from screens.picker.app import PickerApp

    started = {}
    monkeypatch.setattr(PickerApp, "run", lambda app: started.update(multi=app.picker.multi))
    assert main(["pick", "--model", "synthetic:llama-2-7b", "--multi"]) == 0
    assert started == {"multi": True}
    assert main(["pick", "--model", "synthetic:llama-2-7b"]) == 0
    assert started == {"multi": False}


async def test_g_keeps_the_cursor_on_its_card(tmp_path):
    app = make_app(tmp_path, ["model.name=synthetic:llama-2-7b"])
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await pilot.pause()
        await to_row(pilot, "rtx-4090")
        for key in ("g", "g"):  # rows of 2/4/8 GPUs shown, then hidden again
            await pilot.press(key)
            await pilot.pause()
            assert app.screen.query_one(CardTableView).selected_row.key == "rtx-4090"
            assert "RTX 4090: fits" in str(app.screen.query_one("#detail").render())
