"""The card picker, driven with pilot: edit the inputs and see the table follow, bad input marked
next to its field, a hub model fetched in a worker, the breakdown, and Enter on a card writing a
config that `cockpit train` accepts.

The app gets the shipped catalog priced as on a fixed day, a fixed clock, and a folder of its own
for the configs it writes.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import yaml
from support.pilot import screen_text as rendered_text

from cockpit.config import load as config_load
from cockpit.gpus.catalog import load_catalog
from cockpit.models import shape as modelshape
from screens.picker.app import PickerApp
from screens.picker.inputs import default_path
from screens.picker.save import SaveConfig
from widgets.card_table import CardTableView
from widgets.memory_breakdown import BreakdownBox

NOW = dt.datetime(2026, 12, 1, 10, 0)
ARTICLE_13B = ["model.name=synthetic:llama-2-13b", "training.gradient_checkpointing=false"]


@pytest.fixture(autouse=True)
def no_user_cards(tmp_path, monkeypatch):
    monkeypatch.setenv("COCKPIT_CONFIG", str(tmp_path / "no-config"))


def make_app(tmp_path: Path, overrides=ARTICLE_13B, **kw) -> PickerApp:
    cfg = config_load.load_config(None, list(overrides))
    kw.setdefault("dataset", "10M")
    catalog = load_catalog(today=NOW.date())
    return PickerApp(cfg, catalog=catalog, clock=lambda: NOW, out_dir=tmp_path / "out", **kw)


def screen_text(app: PickerApp) -> str:
    """What the terminal shows, with runs of spaces and line ends as one space (messages wrap)."""
    return " ".join(rendered_text(app).split())


def notices(app: PickerApp) -> str:
    """The notifications raised so far (toasts wrap and overlap the screen)."""
    return "\n".join(n.message for n in app._notifications)


def table_of(app: PickerApp):
    return app.screen.query_one(CardTableView).table


async def type_into(pilot, field_id: str, text: str) -> None:
    """Focus a field and type over it, key by key, as a user would."""
    field = pilot.app.screen.query_one(f"#{field_id}")
    field.focus()
    await pilot.press("end", *["backspace"] * len(field.value), *list(text))
    await pilot.pause()


async def set_field(pilot, field_id: str, text: str) -> None:
    """Put `text` in a field at once (one change, as a paste), which keeps the tests quick."""
    field = pilot.app.screen.query_one(f"#{field_id}")
    field.focus()
    field.value = text
    await pilot.pause()


async def test_editing_an_input_refills_the_table(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 32), notifications=True) as pilot:
        await pilot.pause()
        before = table_of(app)
        assert before.row("rtx-4090").fit.verdict == "tight" and before.row("l4").fit.verdict == "no"
        assert "L4: fits with gradient checkpointing" in screen_text(app)

        app.screen.query_one("#ckpt").focus()
        assert "checkpointing off" in screen_text(app)
        await pilot.press("space")  # checkpointing on
        await pilot.pause()
        assert "checkpointing on" in screen_text(app)
        after = table_of(app)
        assert after.workload.gradient_checkpointing and after.row("l4").fit.verdict == "fits"
        assert after.estimate.peak_bytes < before.estimate.peak_bytes

        await type_into(pilot, "seq", "2048")
        longer = table_of(app)
        assert longer.workload.seq_len == 2048 and longer.estimate.peak_bytes > after.estimate.peak_bytes
        peak = f"peak {longer.estimate.band_text()} on any card"  # a band past 4096 tokens per micro-batch
        assert peak in screen_text(app)

        await set_field(pilot, "dataset", "20M")
        assert table_of(app).size.dataset_tokens == 20_000_000
        await set_field(pilot, "budget", "0.5")
        cheap = table_of(app)
        assert cheap.budget_usd == 0.5
        assert cheap.fastest is None or cheap.fastest.as_given.cost_usd <= 0.5


async def test_bad_input_is_marked_next_to_its_field(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 32), notifications=True) as pilot:
        await pilot.pause()
        await type_into(pilot, "seq", "-5")
        text = screen_text(app)
        assert "max length: training.max_length: -5 (int) is out of range; it must be >= 8" in text
        assert "fix the marked inputs; the table shows the last valid settings" in text
        assert app.screen.query_one("#seq").has_class("-bad")
        assert table_of(app).workload.seq_len == 51  # the last valid value typed on the way
        assert app.screen.query_one(CardTableView).has_class("-stale")
        # Enter on a card now refuses: the table is not for what the fields say
        app.screen.query_one(CardTableView).focus()
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, SaveConfig)

        await set_field(pilot, "seq", "512")
        assert not app.screen.query_one("#seq").has_class("-bad")
        await set_field(pilot, "model", "synthetic:gpt-9")
        assert "unknown synthetic architecture 'gpt-9'" in screen_text(app)
        await set_field(pilot, "model", "llama-2-7b")  # a bare shape name is the synthetic model
        assert table_of(app).workload.shape.name == "synthetic:llama-2-7b"
        await set_field(pilot, "targets", "qkv")
        assert "targets: LoRA targets qkv are not linear layers" in screen_text(app)
        await set_field(pilot, "targets", "all-linear")
        await set_field(pilot, "dataset", "1e20")
        assert "check the unit" in screen_text(app)
        await set_field(pilot, "dataset", "")
        await set_field(pilot, "budget", "ten")
        assert "budget 'ten': expected US dollars" in screen_text(app)
        await set_field(pilot, "budget", "10")
        assert "a budget needs the dataset size" in screen_text(app)


async def test_a_local_config_json_missing_fields(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama", "hidden_size": 4096}')
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 32), notifications=True) as pilot:
        await pilot.pause()
        await set_field(pilot, "model", str(folder))
        assert "config.json lacks vocab_size, intermediate_size" in screen_text(app)


async def test_a_hub_model_is_fetched_on_enter_in_a_worker(tmp_path):
    asked = []

    def loader(name: str, revision: str):
        asked.append((name, revision))
        if name == "org/missing":
            raise modelshape.ShapeError("org/missing: the hub at https://hub.example answered 404")
        return modelshape.load_shape("synthetic:llama-3.1-8b")

    app = make_app(tmp_path, shape_loader=loader)
    async with app.run_test(size=(100, 32), notifications=True) as pilot:
        await pilot.pause()
        await set_field(pilot, "model", "meta-llama/Llama-3.1-8B")
        assert asked == [("synthetic:llama-2-13b", "main")]  # read once; typing a hub id fetches nothing
        assert "press Enter here to fetch its config.json from the hub" in screen_text(app)
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert asked[1:] == [("meta-llama/Llama-3.1-8B", "main")]
        assert table_of(app).workload.shape.model_type == "llama"
        await set_field(pilot, "model", "org/missing")
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert "answered 404" in screen_text(app)


async def test_breakdown_follows_the_selected_card(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 32), notifications=True) as pilot:
        await pilot.pause()
        panel = app.screen.query_one(BreakdownBox)
        assert not panel.display
        await pilot.press("b")
        await pilot.pause()
        assert panel.display
        assert "where the memory goes: L4, with gradient checkpointing" in screen_text(app)
        assert "checkpointed block inputs" in screen_text(app)  # the changed run's parts
        await pilot.press("down", "down", "down")  # RTX 4090: tight, as set above
        await pilot.pause()
        text = screen_text(app)
        assert "where the memory goes: RTX 4090, as set above" in text and "activations" in text
        await pilot.press("b")
        await pilot.pause()
        assert not panel.display


async def test_the_breakdown_gives_each_part_in_the_units_cockpit_estimate_does(tmp_path, capsys):
    """A 7B model's quantisation constants are 98.0 MiB in `cockpit estimate` and in the picker's
    breakdown, not 0.10 GiB; the fused loss's part (nothing, checkpointing on) is 0.0 MiB in both."""
    from cockpit.cli.main import main

    assert main(["estimate", "--model", "synthetic:llama-2-7b"]) == 0
    estimate = " ".join(capsys.readouterr().out.split())
    app = make_app(tmp_path, ["model.name=synthetic:llama-2-7b"])
    async with app.run_test(size=(100, 32), notifications=True) as pilot:
        await pilot.pause()
        await pilot.press("b", "down", "down", "down")  # RTX 4090
        await pilot.pause()
        text = screen_text(app)
    assert "where the memory goes: RTX 4090, as set above" in text
    for part in ("quantisation constants 98.0 MiB", "loss (fused LM head, tiles) 0.0 MiB"):
        assert part in estimate and part in text
    assert "0.00 GiB" not in text and "0.00 GiB" not in estimate


async def test_the_summary_names_the_cards_as_fast_as_the_fastest(tmp_path):
    """`cockpit pick --model synthetic:llama-2-7b --tokens 20M --budget 10`: MI300X, H200 SXM and B200
    all take 0:46:50 (host-bound); the cheapest of them is flagged, as `cockpit cards` flags it, and
    the summary names the others as `cockpit cards` does, at 80x24."""
    from cockpit.plan.cards_text import legend_lines

    app = make_app(tmp_path, ["model.name=synthetic:llama-2-7b"], dataset="20M", budget=10.0)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await pilot.pause()
        table = table_of(app)
        text = screen_text(app)
    tied = table.tied_with_fastest
    assert [r.name for r in tied] == ["H200 SXM", "B200"]
    assert all(table.fastest.as_given.cost_usd <= r.as_given.cost_usd for r in tied)
    assert "» fastest within $10.00: MI300X 0:46:50 (as fast and dearer: H200 SXM, B200)" in text
    assert "  as fast and dearer: H200 SXM, B200; " in "\n".join(legend_lines(table))


async def test_enter_on_a_card_writes_a_config_train_accepts(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 32), notifications=True) as pilot:
        await pilot.pause()
        await pilot.press("enter")  # L4: fits with gradient checkpointing
        await pilot.pause()
        assert isinstance(app.screen, SaveConfig)
        await pilot.press("enter")
        await pilot.pause()
        path = default_path("synthetic:llama-2-13b", "l4", tmp_path / "out")
        assert app.written == [path] and path.name == "cockpit-llama-2-13b-l4.yaml"
        assert f"then: cockpit train {path}" in notices(app)

    cfg = config_load.load_config(path)
    l4 = load_catalog(today=NOW.date()).get("l4")
    assert cfg.model.name == "synthetic:llama-2-13b" and cfg.method == "qlora"
    assert cfg.training.gradient_checkpointing is True  # the change that makes it fit
    assert cfg.cost.price_per_hour == l4.price_per_hour
    assert cfg.training.max_length == 512 and cfg.lora.target_modules == ["q_proj", "v_proj"]
    text = path.read_text()
    assert "# written by cockpit pick on 2026-12-01 10:00 for L4" in text
    assert "with gradient checkpointing" in text and "cockpit train THIS_FILE" in text


async def test_an_existing_file_is_never_overwritten_silently(tmp_path):
    app = make_app(tmp_path)
    path = default_path("synthetic:llama-2-13b", "rtx-4090", tmp_path / "out")
    path.parent.mkdir(parents=True)
    path.write_text("mine\n")
    async with app.run_test(size=(100, 32), notifications=True) as pilot:
        await pilot.pause()
        await pilot.press("down", "down", "down", "enter")  # RTX 4090, as given (tight)
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, SaveConfig)
        assert "exists. Enter again overwrites it; or edit the path." in screen_text(app)
        assert path.read_text() == "mine\n"
        await pilot.press("enter")  # the second Enter on the same path
        await pilot.pause()
        assert app.written == [path]
    cfg = config_load.load_config(path)
    assert cfg.training.gradient_checkpointing is False and cfg.training.micro_batch_size == 4


async def test_an_sft_run_past_the_checked_tokens_reads_by_its_tiles(tmp_path, capsys):
    """`cockpit pick`, 7B, max length 2048, micro-batch 16: SFT's loss is computed in tiles (TRL's fused
    LM head), so the estimate (22.7 GiB) has no band up to the full logits and fits an RTX 4090 inside
    the margin as written, as `cockpit cards` says (a band's top over the card reads "no": KTO's, in
    tests/test_memory_paths.py)."""
    from cockpit.cli.main import main

    seven = ["model.name=synthetic:llama-2-7b", "training.max_length=2048", "training.micro_batch_size=16"]
    app = make_app(tmp_path, seven, dataset="20M")
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await pilot.pause()
        table = table_of(app)
        rtx = table.row("rtx-4090")
        assert table.estimate.unsure == () and table.estimate.high_bytes == table.estimate.peak_bytes
        assert rtx.fit.verdict == "fits" and not rtx.shown_workload_is_changed
    sets = [f"--set={key}" for key in seven[1:]]
    assert main(["cards", "--model", "synthetic:llama-2-7b", *sets, "--tokens", "20M"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if "RTX 4090" in line]
    assert rows[0][3] == "fits"


async def test_a_card_nothing_fits_writes_nothing(tmp_path):
    app = make_app(tmp_path, ["model.name=synthetic:llama-2-70b", "method=full"])
    async with app.run_test(size=(100, 32), notifications=True) as pilot:
        await pilot.pause()
        assert table_of(app).cheapest is None
        await pilot.press("enter")  # L4: no single change fits a 70B full fine-tune
        await pilot.pause()
        assert not isinstance(app.screen, SaveConfig) and app.written == []
        assert "L4: does not fit, and no single change makes it fit" in notices(app)


async def test_keyboard_alone_at_80x24(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await pilot.pause()
        text = screen_text(app)
        assert "Write config" in text and "Edit inputs" in text and "Breakdown" in text
        await pilot.press("e")  # to the model field
        assert app.focused.id == "model"
        await pilot.press("tab", "tab", "tab")  # method, checkpointing, max length
        assert app.focused.id == "seq"
        await pilot.press("escape")
        assert isinstance(app.focused, CardTableView)


async def test_written_config_sets_every_speed_key_the_estimate_assumed(tmp_path):
    app = make_app(tmp_path, ["model.name=synthetic:llama-2-7b"])
    async with app.run_test(size=(100, 32), notifications=True) as pilot:
        await pilot.pause()
        await set_field(pilot, "batch", "2")  # set in the form; checkpointing and accumulation untouched
        await set_field(pilot, "epochs", "3")
        await pilot.press("escape", "enter")  # L4 fits the 7B recipe as given
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
    (path,) = app.written
    written = yaml.safe_load(path.read_text())
    assert written["training"]["micro_batch_size"] == 2 and written["training"]["epochs"] == 3.0
    assert written["training"]["gradient_checkpointing"] is True  # the estimate assumed it on
    assert written["training"]["gradient_accumulation_steps"] == 4
    cfg = config_load.load_config(path)
    assert set(cfg.speed.keep) == {
        "training.micro_batch_size",
        "training.gradient_checkpointing",
        "training.gradient_accumulation_steps",
    }
    assert "set as the estimate assumed them" in path.read_text()


def test_cockpit_pick_starts_the_app_and_repeats_what_it_wrote(tmp_path, monkeypatch, capsys):
    from cockpit.cli.main import main

    started = {}

    def run(app):
        started["fields"] = app.initial
        app.written.append(tmp_path / "cockpit-llama-2-7b-l4.yaml")

    monkeypatch.setattr(PickerApp, "run", run)
    args = ["pick", "--model", "synthetic:llama-2-7b", "--seq", "1024", "--tokens", "5M", "--budget", "3"]
    assert main(args) == 0
    assert started["fields"]["seq"] == "1024" and started["fields"]["dataset"] == "5M"
    assert started["fields"]["budget"] == "3"
    assert f"start it: cockpit train {tmp_path / 'cockpit-llama-2-7b-l4.yaml'}" in capsys.readouterr().out
    assert main(["pick", "--batch", "0"]) == 2  # a bad setting on the command line: before any screen
    assert "training.micro_batch_size: 0 (int) is out of range" in capsys.readouterr().err


async def test_old_default_prices_are_said(tmp_path):
    later = dt.datetime(2027, 6, 1, 9, 0)
    cfg = config_load.load_config(None, ARTICLE_13B)
    catalog = load_catalog(today=later.date())
    app = PickerApp(cfg, catalog=catalog, clock=lambda: later, dataset="10M", out_dir=tmp_path)
    async with app.run_test(size=(100, 32), notifications=True) as pilot:
        await pilot.pause()
        assert "rental prices move weekly" in notices(app)
        assert table_of(app).row("l4").price_label == "default price from 2026-11 (212 days old)"
        assert "$0.62 212d" in screen_text(app)


async def test_the_budget_comes_from_cost_max_usd_and_goes_into_the_written_config(tmp_path):
    overrides = ["model.name=synthetic:llama-2-7b", "cost.price_per_hour=1", "cost.max_usd=40"]
    app = make_app(tmp_path, overrides)
    async with app.run_test(size=(100, 32), notifications=True) as pilot:
        await pilot.pause()
        assert app.screen.query_one("#budget").value == "40"  # the config's budget, shown
        await set_field(pilot, "budget", "25")
        await pilot.press("escape", "enter")
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
    (path,) = app.written
    assert config_load.load_config(path).cost.max_usd == 25.0
    assert "# budget $25.00 (cost.max_usd): the run saves a checkpoint and stops" in path.read_text()
