"""The card table (`cockpit.plan.cards`) and `cockpit cards`: rows, flags, budget, the change that makes a
card fit, the run's size, JSON, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from datetime import date

import pytest
from conftest import ROOT

from cockpit.cli.main import main
from cockpit.fmt import GIB
from cockpit.gpus.catalog import load_catalog
from cockpit.models.memory import Workload, estimate_memory
from cockpit.models.shape import load_shape
from cockpit.plan.cards_inputs import CardsError, RunSize, parse_count, parse_dataset
from cockpit.plan.cards_text import row_cells, table_text
from cockpit.plan.table import TIE_SHARE, card_table
from cockpit.speed.model import estimate_speed

TODAY = date(2026, 12, 1)
QV = ["q_proj", "v_proj"]


@pytest.fixture(autouse=True)
def no_user_cards(tmp_path, monkeypatch):
    monkeypatch.setenv("COCKPIT_CONFIG", str(tmp_path / "no-config"))


@pytest.fixture
def catalog():
    return load_catalog(today=TODAY)


def thirteen_b(**fields) -> Workload:
    """The article's 13B QLoRA recipe without checkpointing: too big for a 24 GB card."""
    return Workload(shape=load_shape("synthetic:llama-2-13b"), gradient_checkpointing=False, **fields)


def test_one_row_per_card_in_catalog_order(catalog):
    table = card_table(thirteen_b(), catalog, parse_dataset("10M"), today=TODAY)
    assert [r.card.id for r in table.rows] == catalog.ids()
    peak = estimate_memory(table.workload).peak_bytes
    for row in table.rows:
        assert row.fit.peak_bytes == peak
        assert row.fit.headroom_bytes == int(row.card.vram_gib * GIB) - peak


def test_a_card_that_does_not_fit_shows_the_change_and_its_speed(catalog):
    table = card_table(thirteen_b(), catalog, parse_dataset("10M"), today=TODAY)
    l4 = table.row("l4")
    assert l4.fit.verdict == "no" and l4.as_given is None
    assert l4.fit.change.key == "gradient_checkpointing"
    changed = replace(table.workload, gradient_checkpointing=True)
    assert l4.shown is l4.with_change
    assert l4.with_change.speed.tokens_per_s == pytest.approx(estimate_speed(changed, l4.card).tokens_per_s)
    assert l4.with_change.time_s == pytest.approx(10e6 / l4.with_change.speed.tokens_per_s)
    assert l4.with_change.cost_usd == pytest.approx(l4.with_change.time_s / 3600 * l4.card.price_per_hour)
    assert l4.phrase().startswith("L4: fits with gradient checkpointing (")
    assert "tok/s" in l4.phrase()
    assert row_cells(l4, TODAY)["fit"] == "no→ckpt"
    # checkpointing recomputes the forward pass: the changed run is slower than the run as given
    h100 = table.row("h100-sxm")
    assert h100.fit.verdict == "fits" and h100.fit.change is None and h100.with_change is None
    assert estimate_speed(changed, h100.card).tokens_per_s < h100.as_given.speed.tokens_per_s


def test_tight_rows_run_as_given_and_name_the_change_for_the_margin(catalog):
    table = card_table(thirteen_b(), catalog, parse_dataset("10M"), today=TODAY)
    rtx = table.row("rtx-4090")
    assert rtx.fit.verdict == "tight"
    assert rtx.shown is rtx.as_given and rtx.with_change is not None
    assert rtx.phrase().startswith("RTX 4090: fits with gradient checkpointing")
    assert not rtx.cheapest and not rtx.fastest  # inside the safety margin: never flagged


def test_cheapest_and_fastest_flags(catalog):
    table = card_table(thirteen_b(), catalog, parse_dataset("10M"), today=TODAY)
    fits = [r for r in table.rows if r.fit.verdict == "fits"]
    assert sum(r.cheapest for r in table.rows) == 1 and sum(r.fastest for r in table.rows) == 1
    assert table.cheapest.as_given.cost_usd == min(r.as_given.cost_usd for r in fits)
    best = max(r.as_given.speed.tokens_per_s for r in fits)
    assert table.fastest.as_given.speed.tokens_per_s >= best * (1 - TIE_SHARE)
    assert table.cheapest_by == "run cost"


def test_cards_that_tie_on_speed_flag_the_cheapest_and_say_why(catalog):
    """The 7B recipe is host-bound on H200, B200 and MI300X: one speed, three prices (on the H100 SXM
    the card's own traffic now outlasts the host's time, by the model refitted with the host probe)."""
    w = Workload(shape=load_shape("synthetic:llama-2-7b"))
    table = card_table(w, catalog, parse_dataset("20M"), today=TODAY)
    tied = [table.fastest, *table.tied_with_fastest]
    assert {r.card.id for r in tied} >= {"mi300x", "h200-sxm", "b200"}
    assert all(r.as_given.speed.bound == "overhead" for r in tied)
    assert table.fastest.as_given.cost_usd == min(r.as_given.cost_usd for r in tied)
    assert table.fastest.card.id != "b200"
    text = " ".join(table_text(table).split())
    assert "host-bound" in text and "a bigger micro-batch speeds it up" in text


def test_without_a_size_cheapest_is_by_price_and_there_is_no_time_or_cost(catalog):
    table = card_table(thirteen_b(), catalog, today=TODAY)
    fits = [r for r in table.rows if r.fit.verdict == "fits"]
    assert table.cheapest_by == "price per hour"
    assert table.cheapest.card.price_per_hour == min(r.card.price_per_hour for r in fits)
    assert all(r.shown is None or (r.shown.time_s is None and r.shown.cost_usd is None) for r in table.rows)
    assert row_cells(table.cheapest, TODAY)["time"] == "-"


def test_budget_limits_the_fastest(catalog):
    size = parse_dataset("10M")
    free = card_table(thirteen_b(), catalog, size, today=TODAY)
    budget = free.fastest.as_given.cost_usd * 0.99  # the fastest overall no longer qualifies
    table = card_table(thirteen_b(), catalog, size, budget, today=TODAY)
    assert table.fastest is not None and table.fastest.card.id != free.fastest.card.id
    assert table.fastest.as_given.cost_usd <= budget
    faster_in_budget = [
        r
        for r in table.rows
        if r.fit.verdict == "fits"
        and r.within_budget
        and r.as_given.speed.tokens_per_s > table.fastest.as_given.speed.tokens_per_s
    ]
    assert faster_in_budget == []
    assert all(r.within_budget == (r.shown.cost_usd <= budget) for r in table.rows if r.shown)

    broke = card_table(thirteen_b(), catalog, size, 0.01, today=TODAY)
    assert broke.fastest is None and broke.cheapest is not None
    assert any("no card that fits costs $0.010 or less" in w for w in broke.warnings)
    with pytest.raises(CardsError, match="budget needs the dataset size") as info:
        card_table(thirteen_b(), catalog, RunSize(), 5.0, today=TODAY)
    assert info.value.field == "budget"
    with pytest.raises(CardsError, match="budget -5"):
        card_table(thirteen_b(), catalog, size, -5.0, today=TODAY)


def test_nothing_fits_a_70b_full_fine_tune(catalog):
    w = Workload(shape=load_shape("synthetic:llama-2-70b"), method="full")
    table = card_table(w, catalog, parse_dataset("10M"), 100.0, today=TODAY)
    assert table.cheapest is None and table.fastest is None
    assert all(r.fit.verdict == "no" for r in table.rows)
    hopeless = [r for r in table.rows if r.fit.change is None]
    assert hopeless and all(r.shown is None and row_cells(r, TODAY)["tok_s"] == "-" for r in hopeless)
    assert "no card fits the run as given" in table_text(table)


def test_run_size():
    w = thirteen_b(seq_len=512, micro_batch=4, grad_accum=4)
    assert parse_dataset("10M", 2).tokens(w) == 20_000_000
    # samples longer than the max length are cut at it
    assert parse_dataset("1000x700").tokens(w) == 1000 * 512
    assert parse_dataset("9,846 x 350", 3).tokens(w) == 9846 * 350 * 3
    assert "cut at max length" in parse_dataset("1000x700").describe(w)
    # max_steps wins over the dataset: steps x tokens per optimizer step
    assert parse_dataset("10M", 1, max_steps=100).tokens(w) == 100 * 4 * 4 * 512
    assert parse_dataset("").tokens(w) is None and not parse_dataset("").known


def test_a_pair_counts_its_chosen_and_rejected_sequences_as_the_speed_model_does():
    """DPO and ORPO run a pair's chosen and rejected sequences through the model (TRL counts both in its
    num_tokens), and the speed model's tokens/s counts both: the run's tokens must count them too, or
    its time and cost come out half."""
    sft = thirteen_b(seq_len=512, micro_batch=4, grad_accum=4)
    for objective, sequences in (("dpo", 2), ("orpo", 2), ("kto", 1)):
        reference = "none" if objective == "orpo" else "adapter_off"
        w = replace(sft, objective=objective, reference=reference)
        assert parse_dataset("", max_steps=100).tokens(w) == sequences * 100 * 4 * 4 * 512
        assert parse_dataset("1000x300").tokens(w) == sequences * 1000 * 300
    dpo = replace(sft, objective="dpo", reference="adapter_off")
    assert "x 2 sequences (chosen, rejected)" in parse_dataset("1000x300").describe(dpo)
    # with several GPUs each runs its own micro-batches: max_steps covers all of them, as the
    # multi-GPU tokens/s does (it was 1/N of the time and cost)
    four = replace(dpo, gpus=4)
    assert parse_dataset("", max_steps=100).tokens(four) == 4 * parse_dataset("", max_steps=100).tokens(dpo)
    assert parse_dataset("1000x300").tokens(four) == parse_dataset("1000x300").tokens(dpo)
    assert "sequences" not in parse_dataset("1000x300").describe(sft)


@pytest.mark.parametrize(
    ("text", "value"), [("5M", 5e6), ("250k", 250e3), ("1.5B", 1.5e9), ("9,846", 9846), ("2e6", 2e6)]
)
def test_counts(text, value):
    assert parse_count(text, "tokens", "dataset", 1e13) == value


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("-5", "expected a number like 5M"),
        ("abc", "expected a number like 5M"),
        ("0", "must be more than 0"),
        ("1e20", "check the unit"),
        ("10x", "mean tokens per sample ''"),
        ("5Mx3x", "expected a number"),
    ],
)
def test_bad_dataset_sizes(text, message):
    with pytest.raises(CardsError, match=message) as info:
        parse_dataset(text)
    assert info.value.field == "dataset"


def test_bad_epochs():
    for epochs in (0, -1, 5000):
        with pytest.raises(CardsError, match="epochs") as info:
            parse_dataset("5M", epochs)
        assert info.value.field == "epochs"


def test_user_price_is_labelled_and_used(tmp_path):
    path = tmp_path / "cards.yaml"
    path.write_text("prices:\n  rtx-4090: {price: 0.2, date: 2026-11-25}\n")
    catalog = load_catalog(path, today=TODAY)
    w = Workload(shape=load_shape("synthetic:llama-2-7b"), lora_targets=QV)
    table = card_table(w, catalog, parse_dataset("10M"), today=TODAY)
    rtx = table.row("rtx-4090")
    assert rtx.price_label == "your price from 2026-11-25 (6 days old)"
    assert row_cells(rtx, TODAY)["price"] == "$0.20 own"
    assert rtx.as_given.cost_usd == pytest.approx(rtx.as_given.time_s / 3600 * 0.2)
    assert row_cells(table.row("l4"), TODAY)["price"].endswith(" 30d")
    assert table.prices_from == str(path)


def test_several_gpus_are_counted_as_one(catalog):
    w = Workload(shape=load_shape("synthetic:llama-2-7b"), gpus=4)
    table = card_table(w, catalog, today=TODAY)
    assert table.workload.gpus == 1 and any("4 GPUs" in w for w in table.warnings)


def test_json_states_every_input(catalog):
    table = card_table(thirteen_b(), catalog, parse_dataset("9846x350", 2), 5.0, today=TODAY)
    data = json.loads(json.dumps(table.to_dict()))
    inputs = data["inputs"]
    assert inputs["model"] == "synthetic:llama-2-13b" and inputs["gradient_checkpointing"] is False
    assert inputs["run"] == {
        "dataset_tokens": None,
        "samples": 9846,
        "mean_tokens": 350.0,
        "epochs": 2,
        "max_steps": None,
        "run_tokens": 9846 * 350 * 2,
    }
    assert inputs["budget_usd"] == 5.0 and inputs["today"] == "2026-12-01"
    assert data["peak_bytes"] == sum(p["bytes"] for p in data["parts"])
    assert len(data["rows"]) == len(catalog.cards)
    l4 = next(r for r in data["rows"] if r["card"] == "l4")
    assert l4["as_given"] is None and l4["verdict"] == "no"
    assert l4["change"]["config"] == {"training.gradient_checkpointing": True}
    assert l4["change"]["figures"]["tokens_per_s"] > 0 and l4["change"]["figures"]["cost_usd"] > 0
    assert l4["price"]["label"] == "default price from 2026-11 (30 days old)"
    assert l4["speed_inputs"]["extrapolated"] is True
    assert data["cheapest"] == table.cheapest.card.id
    assert data["fastest_within_budget"] == table.fastest.card.id


# ---------------------------------------------------------------- the command


@pytest.mark.parametrize("gpus", ["1", "1,2,4,8"])
def test_cards_cli_text_fits_80_columns_when_not_a_terminal(capsys, gpus):
    args = ["cards", "--model", "synthetic:llama-2-13b", "--no-checkpointing", "--tokens", "10M"]
    assert main([*args, "--budget", "5", "--gpus", gpus]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "ble-quantised" not in out.replace("double-quantised", "")  # no word cut in two
    assert "RTX 4090" in out and "no→ckpt" in out and "L4: fits with gradient checkpointing" in out
    assert "$ cheapest card the run fits" in out and "» fastest card that fits within $5.00" in out


def test_cards_cli_json_shares_the_estimate_flags(capsys):
    args = ["cards", "--model", "synthetic:llama-2-7b", "--method", "lora", "--seq", "1024", "--batch", "2"]
    assert (
        main(
            [
                *args,
                "--targets",
                "q_proj, k_proj",
                "--lora-r",
                "16",
                "--samples",
                "100",
                "--mean-tokens",
                "300",
                "--json",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)["inputs"]
    assert (data["method"], data["seq_len"], data["micro_batch"], data["lora_r"]) == ("lora", 1024, 2, 16)
    assert data["lora_targets"] == ["q_proj", "k_proj"]
    assert main(["estimate", "--model", "synthetic:llama-2-7b", "--method", "full", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["inputs"]["method"] == "full"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "synthetic:gpt-9"], "unknown synthetic architecture 'gpt-9'"),
        (["--batch", "-4"], "training.micro_batch_size: -4 (int) is out of range"),
        (["--seq", "abc"], "training.max_length: expected a whole number"),
        (["--tokens", "-5"], "dataset tokens '-5'"),
        (["--tokens", "1e20"], "check the unit"),
        (["--samples", "100"], "give --samples together with --mean-tokens"),
        (["--tokens", "5M", "--epochs", "-1"], "epochs -1.0"),
        (["--budget", "5"], "a budget needs the dataset size"),
        (["--targets", "qkv"], "LoRA targets qkv are not linear layers"),
    ],
)
def test_cards_cli_bad_input(capsys, args, message):
    assert main(["cards", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_cards_cli_bad_model_config_and_price_file(capsys, tmp_path, monkeypatch):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama", "hidden_size": 4096}')
    assert main(["cards", "--model", str(folder)]) == 2
    assert "config.json lacks vocab_size, intermediate_size" in capsys.readouterr().err
    (folder / "config.json").write_text('{"model_type": "bert"}')
    assert main(["cards", "--model", str(folder)]) == 2
    assert "architecture 'bert' is not modelled" in capsys.readouterr().err

    config_dir = tmp_path / "config"
    config_dir.mkdir()
    (config_dir / "cards.yaml").write_text("prices:\n  rtx-4099: 0.4\n")
    monkeypatch.setenv("COCKPIT_CONFIG", str(config_dir))
    assert main(["cards"]) == 2
    err = capsys.readouterr().err
    assert "card catalog:" in err and "unknown card id 'rtx-4099'. Did you mean 'rtx-4090'?" in err


def test_cards_cli_imports_neither_textual_nor_torch():
    code = (
        "import sys\nfrom cockpit.cli.main import main\nmain(['cards', '--tokens', '1M', '--json'])\n"
        "bad = {m.split('.')[0] for m in sys.modules} & {'textual', 'torch', 'screens', 'widgets'}\n"
        "assert not bad, bad"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["rows"]
