"""Several GPUs in the card table: the communication model worked by hand, the table's 2x/4x/8x
rows (per-GPU fit, N x price), the highlights over them, `cockpit cards --gpus` and its --json."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import date

import pytest

from cockpit.fmt import GIB
from cockpit.gpus.catalog import load_catalog
from cockpit.models import shape as modelshape
from cockpit.models.memory import Workload, estimate_memory
from cockpit.plan.cards_inputs import CardsError, parse_dataset
from cockpit.plan.cards_text import table_text
from cockpit.plan.multi_rows import parse_gpu_counts
from cockpit.plan.table import card_table
from cockpit.speed import model as speed
from cockpit.speed.model import estimate_speed
from cockpit.speed.multi_gpu import CALIBRATION, estimate_multi_speed, interconnect

TODAY = date(2026, 12, 1)


@pytest.fixture(autouse=True)
def no_user_cards(tmp_path, monkeypatch):
    monkeypatch.setenv("COCKPIT_CONFIG", str(tmp_path / "no-config"))


@pytest.fixture(scope="module")
def catalog():
    return load_catalog(today=TODAY)


@pytest.fixture(scope="module")
def llama7b():
    return modelshape.load_shape("synthetic:llama-2-7b")


def full_7b(shape, **kw) -> Workload:
    fields = dict(method="full", seq_len=512, micro_batch=4, grad_accum=4, optimizer="adamw_torch")
    return Workload(shape, **{**fields, **kw})


# ---------------------------------------------------------------- the communication model


def test_fsdp_full_fine_tune_on_8_a100_sxm_by_hand(catalog, llama7b):
    a100 = catalog.get("a100-80gb-sxm")
    w = full_7b(llama7b, gpus=8, sharding="fsdp")
    assert llama7b.params == 6_738_415_616 and llama7b.num_layers == 32
    # link: the catalog's "600 GB/s" NVLink is both directions: 300 GB/s one way, at 80%
    link = interconnect(a100, 8)
    assert (link.kind, link.one_way_gbs, link.effective_bytes_per_s) == ("nvlink", 300.0, 240e9)
    multi = estimate_multi_speed(w, a100)
    comm = multi.comm
    # each micro-batch gathers the 16-bit weights (2 x 6,738,415,616 B) in forward and in backward,
    # 7/8 of them from the other GPUs: 2 x 7/8 x 13,476,831,232 = 23,584,454,656 B
    assert comm.gather_bytes == 23_584_454_656
    assert comm.gather_s == pytest.approx(23_584_454_656 / 240e9) == pytest.approx(0.0982686, rel=1e-5)
    # one reduce-scatter of the 16-bit gradients per optimizer step: 7/8 x 13,476,831,232 B
    assert comm.gradient_bytes == 13_476_831_232
    assert comm.gradient_s == pytest.approx(11_792_227_328 / 240e9) == pytest.approx(0.0491343, rel=1e-5)
    # compute hides the prefetched gathers; the first of 33 units (32 layers + root) per pass is
    # exposed, 4 micro-batches a step; the reduce-scatter hides behind the backward but its first unit
    one = estimate_speed(replace(w, gpus=1, sharding="ddp"), a100)
    assert one.micro_batch_s > comm.gather_s and 2 / 3 * one.micro_batch_s > comm.gradient_s
    exposed = (4 * 0.0982686 + 0.0491343) / 33
    assert comm.exposed_s == pytest.approx(exposed, rel=1e-5) == pytest.approx(0.0134003, rel=1e-4)
    # each GPU steps foreach AdamW (84 B/param of traffic with clipping, speed.OPTIMIZER_BYTES) for its
    # eighth, at AdamW's measured share of 2039 GB/s, a shard of each of the 291 tensors at AdamW's
    # time per tensor, then the step's host time (the trainer's logging waits for the optimizer)
    assert speed.OPTIMIZER_BYTES["adamw_torch"] == 84 and speed.trainable_tensors(w) == 32 * 9 + 3
    per_tensor, share = speed.OPTIMIZER_RATES["adamw_torch"]
    optimizer_s = 6_738_415_616 * 84 / 8 / (2039e9 * share) + 291 * per_tensor + speed.STEP_OVERHEAD_S
    assert multi.speed.optimizer_step_s == pytest.approx(optimizer_s)
    step_s = 4 * one.micro_batch_s + optimizer_s + exposed
    assert multi.speed.step_s == pytest.approx(step_s, rel=1e-5)
    assert multi.speed.tokens_per_s == pytest.approx(8 * 4 * 2048 / step_s, rel=1e-5)
    # the sharded optimizer step saves more than the exposed communication costs: past 8x
    assert 7.5 < multi.speed.tokens_per_s / one.tokens_per_s < 9


def test_ddp_all_reduces_the_adapter_gradients_once_a_step(catalog, llama7b):
    h200 = catalog.get("h200-sxm")
    w = Workload(llama7b, method="qlora", seq_len=512, micro_batch=4, grad_accum=4, gpus=2)
    multi = estimate_multi_speed(w, h200)
    # 33,554,432 bf16 adapter weights (r 64 on q, v): the DDP buckets of the memory model
    grads = 33_554_432 * 2
    assert multi.comm.gradient_bytes == grads == estimate_memory(w).part("ddp_buckets").bytes
    rate = 450e9 * 0.8  # "900 GB/s" both ways
    assert multi.comm.gradient_s == pytest.approx(2 * (1 / 2) * grads / rate)
    # the backward hides it all but the last 25 MiB bucket
    assert multi.comm.exposed_s == pytest.approx(2 * (1 / 2) * 25 * 2**20 / rate)
    assert multi.scaling == pytest.approx(1.0, abs=0.001)


def test_a_slow_link_makes_fsdp_communication_bound(catalog, llama7b):
    l40s = catalog.get("l40s")  # no NVLink: PCIe 4.0 x16, 31.5 GB/s one way
    link = interconnect(l40s, 8)
    assert (link.kind, link.one_way_gbs) == ("pcie", 31.5)
    w = full_7b(llama7b, gpus=8, sharding="fsdp", micro_batch=3)
    multi = estimate_multi_speed(w, l40s)
    gather_s = 23_584_454_656 / (31.5e9 * 0.8)
    assert multi.comm.gather_s == pytest.approx(gather_s)
    compute_s = multi.one_gpu.micro_batch_s
    assert gather_s > compute_s  # the gathers outlast the compute: a micro-batch takes as long as they do
    reduce_s = 11_792_227_328 / (31.5e9 * 0.8)
    assert reduce_s < 2 / 3 * compute_s  # the reduce-scatter still hides behind the backward
    exposed = 4 * (gather_s - compute_s + gather_s / 33) + reduce_s / 33
    assert multi.comm.exposed_s == pytest.approx(exposed)
    assert multi.speed.micro_batch_s == pytest.approx(compute_s + exposed / 4)
    assert multi.speed.bound == "communication"
    # the exposed gathers cost about a seventh of the step (each GPU's optimizer step, an eighth of the
    # one-GPU one, still makes 8 GPUs more than 8x one here)
    assert 0.1 < multi.comm.exposed_s / multi.speed.step_s < 0.2


@pytest.mark.parametrize(
    ("card_id", "gpus", "kind", "one_way_gbs"),
    [
        ("rtx-3090", 2, "bridge", 56.25),  # "bridge 112.5 GB/s": a pair only
        ("rtx-3090", 4, "pcie", 31.5),
        ("a100-40gb-pcie", 2, "pcie", 31.5),  # "bridge", no figure stated
        ("h100-pcie", 4, "pcie", 63.0),  # Hopper: PCIe 5.0
        ("rtx-4090", 8, "pcie", 31.5),
        ("b200", 8, "nvlink", 900.0),
        ("mi300x", 2, "mesh", 448 / 7),  # 1 of the 7 Infinity Fabric links
        ("mi300x", 8, "mesh", 448.0),
    ],
)
def test_the_link_follows_the_catalog(catalog, card_id, gpus, kind, one_way_gbs):
    link = interconnect(catalog.get(card_id), gpus)
    assert (link.kind, link.one_way_gbs) == (kind, pytest.approx(one_way_gbs))


def test_one_gpu_is_not_a_multi_gpu_estimate(catalog, llama7b):
    with pytest.raises(ValueError, match=r"use cockpit\.speed\.model\.estimate_speed"):
        estimate_multi_speed(full_7b(llama7b), catalog.get("h200-sxm"))


# ---------------------------------------------------------------- the table's rows


def test_rows_of_several_gpus_fit_per_gpu_and_cost_n_times_the_price(catalog, llama7b):
    w = full_7b(llama7b)
    table = card_table(w, catalog, parse_dataset("10M"), None, TODAY, gpu_counts=(1, 2, 4, 8))
    assert table.gpu_counts == (1, 2, 4, 8)
    keys = [r.key for r in table.rows]
    a100 = keys.index("a100-80gb-sxm")
    assert keys[a100 : a100 + 4] == [
        "a100-80gb-sxm",
        "a100-80gb-sxm-x2",
        "a100-80gb-sxm-x4",
        "a100-80gb-sxm-x8",
    ]
    one, four = table.row("a100-80gb-sxm"), table.row("a100-80gb-sxm-x4")
    assert one.fit.verdict == "no"  # a 7B full fine-tune needs ~115 GiB on one GPU
    # a DDP replica does not fit 80 GiB: auto shards; each GPU holds a quarter
    assert (four.gpus, four.sharding, four.name) == (4, "fsdp", "A100 80GB SXM x4 (FSDP)")
    per_gpu = estimate_memory(replace(w, gpus=4, sharding="fsdp")).peak_bytes
    assert four.fit.verdict == "fits" and four.fit.peak_bytes == per_gpu < 40 * GIB
    figures = four.as_given
    assert figures.cost_usd == pytest.approx(4 * one.card.price_per_hour * figures.time_s / 3600)
    assert figures.time_s == pytest.approx(10_000_000 / figures.speed.tokens_per_s)
    assert four.multi["calibrated"] is False and four.multi["extrapolated"] is True
    assert four.multi["link"]["label"] == "NVLink 600 GB/s (300 GB/s one way)"
    # LoRA and QLoRA always run DDP under auto: a replica on each GPU
    qlora = card_table(replace(w, method="qlora"), catalog, None, None, TODAY, gpu_counts=(1, 2))
    assert {r.sharding for r in qlora.rows if r.gpus == 2} == {"ddp"}


def test_the_highlights_weigh_the_multi_gpu_rows(catalog, llama7b):
    w = full_7b(llama7b)
    size = parse_dataset("10M")
    alone = card_table(w, catalog, size, None, TODAY)
    several = card_table(w, catalog, size, None, TODAY, gpu_counts=(1, 2, 4, 8))
    assert all(r.gpus == 1 for r in alone.rows) and [r.key for r in alone.rows] == catalog.ids()
    assert several.fastest.gpus == 8 and several.fastest.key == "b200-x8"
    assert several.fastest.as_given.speed.tokens_per_s > alone.fastest.as_given.speed.tokens_per_s
    fitting = [r for r in several.rows if r.fit.verdict == "fits"]
    assert several.cheapest.as_given.cost_usd == min(r.as_given.cost_usd for r in fitting)
    # a budget under the 8 x B200 run's cost: the fastest row is one within it
    budget = several.fastest.as_given.cost_usd * 0.9
    capped = card_table(w, catalog, size, budget, TODAY, gpu_counts=(1, 2, 4, 8))
    assert capped.fastest.key != "b200-x8" and capped.fastest.as_given.cost_usd <= budget
    # with no run size, the cheapest is by the price of the whole job an hour
    hourly = card_table(w, catalog, None, None, TODAY, gpu_counts=(1, 8))
    assert hourly.cheapest.usd_per_hour == min(r.usd_per_hour for r in hourly.rows if r.fit.verdict == "fits")


def test_the_config_gpu_count_no_longer_warns_when_its_rows_are_shown(catalog, llama7b):
    w = full_7b(llama7b, gpus=4, sharding="fsdp")
    assert any("asks for 4 GPUs" in x for x in card_table(w, catalog, today=TODAY).warnings)
    assert not any(
        "asks for 4 GPUs" in x for x in card_table(w, catalog, today=TODAY, gpu_counts=(1, 4)).warnings
    )


def test_text_table_shows_the_rows_under_their_card(catalog, llama7b):
    table = card_table(full_7b(llama7b), catalog, parse_dataset("10M"), None, TODAY, gpu_counts=(1, 4))
    text = table_text(table)
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines)
    a100 = next(i for i, line in enumerate(lines) if line.startswith("   A100 80GB SXM"))
    assert lines[a100 + 1].startswith("     x4 FSDP") and "$5.86 x4" in lines[a100 + 1]
    assert "NOT calibrated on a measured multi-GPU" in " ".join(text.split())
    assert "» fastest card that fits: B200 x4 (DDP)" in text


@pytest.mark.parametrize(
    ("text", "counts"), [(None, (1,)), ("1,2,4,8", (1, 2, 4, 8)), ("multi", (1, 2, 4, 8)), ("4 2", (2, 4))]
)
def test_gpu_counts_parse(text, counts):
    assert parse_gpu_counts(text) == counts


@pytest.mark.parametrize("text", ["0", "two", "1,-2", "100"])
def test_bad_gpu_counts_say_what_is_expected(text):
    with pytest.raises(CardsError) as caught:
        parse_gpu_counts(text)
    assert caught.value.field == "gpus" and ("expected" in str(caught.value))


def test_cards_cli_gpus_and_json(capsys):
    from cockpit.cli.main import main

    args = ["cards", "--model", "synthetic:llama-2-7b", "--method", "full", "--tokens", "10M"]
    assert main([*args, "--gpus", "1,4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["gpu_counts"] == [1, 4]
    rows = {r["card"] + ("" if r["gpus"] == 1 else f"-x{r['gpus']}"): r for r in data["rows"]}
    four = rows["a100-80gb-sxm-x4"]
    assert four["name"] == "A100 80GB SXM x4 (FSDP)" and four["sharding"] == "fsdp"
    assert four["verdict"] == "fits" and four["usd_per_hour"] == pytest.approx(
        4 * four["price"]["usd_per_hour"]
    )
    multi = four["multi_gpu"]
    assert multi["calibration"] == CALIBRATION and multi["extrapolated"] is True
    assert multi["gather_bytes_per_micro_batch"] == 2 * 3 * 6_738_415_616 * 2 // 4
    assert four["as_given"]["parts_s"]["communication"] > 0
    assert "multi_gpu" not in rows["a100-80gb-sxm"] and rows["a100-80gb-sxm"]["gpus"] == 1
    assert rows["h200-sxm"]["speed_inputs"]["extrapolated"] is False  # the calibrated card, one GPU
    assert rows["h200-sxm-x4"]["speed_inputs"]["extrapolated"] is True
    assert main([*args, "--gpus", "1,4"]) == 0
    assert "  x4 FSDP" in capsys.readouterr().out
    assert main([*args, "--gpus", "zero"]) == 2
    assert "--gpus 'zero': expected GPU counts like 1,2,4,8" in capsys.readouterr().err
