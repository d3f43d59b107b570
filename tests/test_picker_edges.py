"""The card picker under an impatient user: values at the edges of what the fields take, typed
into the form, must be explained under their row, never take the screen down."""

from __future__ import annotations

from test_picker import make_app, screen_text, set_field, table_of
from textual.widgets import Input

from screens.picker.save import SaveConfig


async def test_epochs_so_small_the_run_covers_no_token_is_explained(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await set_field(pilot, "epochs", "1e-12")
        text = screen_text(app)
        assert "epochs: 1e-12 epochs of 10,000,000 tokens is less than one token" in text
        assert app.screen.query_one("#epochs").has_class("-bad")
        await set_field(pilot, "epochs", "1")
        await set_field(pilot, "dataset", "1x0.5")
        assert "dataset: mean tokens per sample 0.5: expected at least 1" in screen_text(app)
        await set_field(pilot, "dataset", "3x350")
        await set_field(pilot, "epochs", "0.1")
        assert "0.1 epochs of 3 samples is less than one sample" in screen_text(app)
        await set_field(pilot, "epochs", "0.5")
        assert table_of(app).size.tokens(table_of(app).workload) == 525  # 3 x 350 x 0.5


async def test_a_pasted_path_with_a_nul_byte_is_refused_not_a_crash(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, SaveConfig)
        footer = screen_text(app).splitlines()[-1]  # the dialog's keys, not the picker's
        assert "Cancel" in footer and "Breakdown" not in footer
        app.screen.query_one(Input).value = "run\0.yaml"
        await pilot.press("enter")
        await pilot.pause()
        assert app.is_running and app.written == []
        assert "could not write" in list(app._notifications)[-1].message


async def test_a_model_folder_whose_config_json_is_no_object_is_explained(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("[1, 2]")
    app = make_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await set_field(pilot, "model", str(folder))
        assert "config.json is not a JSON object of model settings" in screen_text(app)
        assert app.screen.query_one("#model").has_class("-bad")


async def test_a_hub_config_cached_half_written_is_fetched_again_not_a_crash(tmp_path, monkeypatch):
    monkeypatch.setenv("COCKPIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no network here: the fetch fails, and says so
    cached = tmp_path / "cache" / "configs" / "org--model" / "main" / "config.json"
    cached.parent.mkdir(parents=True)
    cached.write_text('{"model_type": "lla')
    app = make_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await set_field(pilot, "model", "org/model")
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.is_running
        assert "org/model: could not fetch config.json" in screen_text(app)


async def test_a_max_length_past_the_models_context_is_warned_and_rows_agree_with_the_detail(tmp_path):
    from test_picker import set_field, table_of

    from cockpit.models.memory import GIB
    from cockpit.plan.cards_text import row_cells
    from widgets.card_table import CardTableView

    app = make_app(tmp_path, ["model.name=synthetic:llama-2-7b"])
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await pilot.pause()
        await set_field(pilot, "seq", "100000")
        assert "longer than synthetic:llama-2-7b's context" in " ".join(screen_text(app).split())
        table = table_of(app)
        view = app.screen.query_one(CardTableView)
        changed = next(r for r in table.rows if r.shown_workload_is_changed)
        view.move_cursor(row=list(table.rows).index(changed))
        await pilot.pause()
        detail = str(app.screen.query_one("#detail").render())
        peak = f"{changed.fit.change.peak_bytes / GIB:.1f} GiB"
        assert peak in detail  # the detail's peak with the change ...
        cells = row_cells(changed, table.today)  # ... is the row's peak, and its free memory agrees
        assert cells["peak"] == f"{changed.fit.change.peak_bytes / GIB:.0f}G" or cells["peak"][:-1] in peak
        free_gib = changed.card.vram_gib - changed.fit.change.peak_bytes / GIB
        assert cells["free"].startswith("+") and abs(float(cells["free"][:-1]) - free_gib) < 0.6
