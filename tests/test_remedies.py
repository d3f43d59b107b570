"""Remedies after an OOM, on fixtures: predicted with the memory model, corrected by what the OOM
proved, sped by the speed model, ranked (what fits, then what keeps the results, then the fastest)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fixtures_oom import ARTICLE_13B, DATA, H200, oom_event

from cockpit.config.load import config_from_dotted
from cockpit.fmt import GIB
from cockpit.gpus.catalog import load_catalog
from cockpit.models.memory import SAFETY_MARGIN, estimate_memory
from cockpit.models.shape import load_shape
from cockpit.oom.remedies import analyse, rank_key
from cockpit.oom.remedy_options import FRAGMENTED_MIN_BYTES


@pytest.fixture(scope="module")
def catalog():
    return load_catalog(user_file=None)


def run(settings: dict, catalog, error: dict | None = None, data=DATA, device=H200, **changes):
    cfg = config_from_dotted({**settings, **changes})
    return analyse(cfg, error or oom_event(), load_shape(cfg.model.name), data, device, catalog)


def by_key(analysis) -> dict:
    return {o.keys: o for o in analysis.options}


def test_the_article_recipe_on_24gib_gets_the_fewest_recomputed_layers_first(catalog):
    a = run(ARTICLE_13B, catalog)
    assert a.target.bytes == 24 * GIB and "emulated" in a.target.source  # not the message's 139.81
    best = a.options[0]  # the checkpointing knob's mildest choice that fits: the fewest layers
    assert best.keys == ("gradient_checkpointing",) and best.verdict == "fits" and best.auto
    assert best.title == "recompute 6 of 40 layers (auto)" and a.auto_choice() is best
    assert best.config["speed.mode"] == "auto" and best.config["training.gradient_checkpointing"] is None
    assert (
        best.peak_bytes <= 24 * GIB * (1 - SAFETY_MARGIN)
        and best.headroom_bytes == 24 * GIB - best.peak_bytes
    )
    assert 0.9 < best.speed < 1.0 and best.effect == "none" and best.resume == "from the last checkpoint"
    # the failed config itself: ~23.7 GiB by the model (the fused loss tiles included); the OOM proved
    # at least 24.11 GiB
    assert a.estimate.peak_gib == pytest.approx(23.70, abs=0.05)
    assert a.observation.demand_bytes == int(23.62 * GIB) + 500 * 2**20
    assert a.gap_bytes == a.observation.demand_bytes - a.estimate.peak_bytes


def test_every_prediction_carries_what_the_oom_proved(catalog):
    a = run(ARTICLE_13B, catalog)
    for option in a.options:
        if option.applicable and not any(c.checkpoint_layers for c in option.choices):
            expected = estimate_memory(replace(a.workload, **_fields(option))).peak_bytes + a.gap_bytes
            assert option.peak_bytes == expected, option.title


def _fields(option) -> dict:
    merged = {}
    for choice in option.choices:
        merged.update(choice.fields)
    return merged


def test_options_are_ranked_and_state_their_effect(catalog):
    a = run(ARTICLE_13B, catalog)
    keys = [rank_key(o) for o in a.options if o.applicable]
    assert keys == sorted(keys)
    options = by_key(a)
    batch = options[("micro_batch",)]
    assert batch.config == {"training.micro_batch_size": 2, "training.gradient_accumulation_steps": 8}
    assert "effective batch kept at 16 (2 x 8)" in batch.effect and batch.verdict == "fits"
    assert batch.speed < 1.0  # smaller matmuls, fixed costs per micro-batch
    length = options[("max_length",)]
    assert length.config == {"training.max_length": 256}
    assert "cuts 61.0% of the samples (610 of 1000) to 256 tokens" in length.effect
    assert not length.auto and length.effect_rank == 3
    # keeping the results ranks above cutting 61% of the samples, whatever the speed
    assert a.options.index(batch) < a.options.index(length)


def test_a_bigger_card_from_the_catalog_with_its_price(catalog):
    a = run(ARTICLE_13B, catalog)
    card = a.options[-1]
    assert card.keys == ("card",) and not card.applicable and not card.auto
    assert card.card.vram_gib * GIB * (1 - SAFETY_MARGIN) >= card.peak_bytes
    cheaper = [
        c
        for c in catalog.cards
        if c.vram_gib * GIB * (1 - SAFETY_MARGIN) >= card.peak_bytes and c.vram_gib > 24
    ]
    assert card.card.price_per_hour == min(c.price_per_hour for c in cheaper)
    assert f"${card.card.price_per_hour:.2f}/h" in card.effect
    assert card.speed is None  # the card the run is on is emulated: no speed to compare with


SEVEN_B_LORA = {
    "model.name": "synthetic:llama-2-7b",
    "method": "lora",
    "lora.target_modules": "all-linear",
    "training.optimizer": "adamw_torch",
}
NO_FIGURES = {"process_bytes": None, "requested_bytes": None, "reserved_bytes": None}


def test_when_nothing_alone_fits_a_combination_does(catalog):
    # LoRA on a 16-bit 7B base, all linear layers, on a 16 GiB card (13.5 GiB of weights)
    a = run(ARTICLE_13B, catalog, error=oom_event(**NO_FIGURES), **SEVEN_B_LORA, emulate_vram_gib=16.0)
    singles = [o for o in a.options if len(o.keys) == 1 and o.applicable]
    assert not any(o.verdict == "fits" for o in singles)
    best = a.options[0]
    assert len(best.keys) > 1 and best.verdict == "fits" and best.auto  # results kept
    assert a.auto_choice() is best
    # on 12 GiB the 16-bit weights alone do not fit: only a 4-bit base does, which auto leaves alone
    small = run(ARTICLE_13B, catalog, error=oom_event(**NO_FIGURES), **SEVEN_B_LORA, emulate_vram_gib=12.0)
    best = small.options[0]
    assert best.verdict == "fits" and "qlora" in best.keys and "4-bit base weights" in best.effect
    assert small.auto_choice() is None


def test_fragmentation_offers_expandable_segments_from_the_observed_figures(catalog):
    big_hole = 3 * GIB
    a = run(ARTICLE_13B, catalog, error=oom_event(reserved_unallocated_bytes=big_hole))
    option = by_key(a)[("expandable_segments",)]
    assert option.config == {"expandable_segments": True}
    assert option.peak_bytes == a.estimate.peak_bytes + a.gap_bytes - big_hole
    assert option.speed == 1.0 and option.effect == "none"
    small = run(ARTICLE_13B, catalog, error=oom_event(reserved_unallocated_bytes=FRAGMENTED_MIN_BYTES - 1))
    assert ("expandable_segments",) not in by_key(small)
    already = run(
        ARTICLE_13B, catalog, error=oom_event(reserved_unallocated_bytes=big_hole), expandable_segments=True
    )
    assert ("expandable_segments",) not in by_key(already)


def test_cutting_a_few_outliers_counts_as_keeping_the_results(catalog):
    data = {**DATA, "tokens_over": {**DATA["tokens_over"], "1024": 4}, "tokens_max": 1800}
    a = run(ARTICLE_13B, catalog, data=data, emulate_vram_gib=48.0, **{"training.max_length": 2048})
    length = next(o for o in a.options if o.keys == ("max_length",))
    assert length.config == {"training.max_length": 1024}  # the mildest cut that fits
    assert "cuts 0.4% of the samples (4 of 1000)" in length.effect and length.effect_rank == 1


def test_the_estimate_uses_the_longest_sample_not_max_length(catalog):
    short = {**DATA, "tokens_max": 300, "tokens_over": {"64": 990, "128": 930, "256": 100}}
    a = run(ARTICLE_13B, catalog, data=short, **{"training.max_length": 2048})
    assert a.workload.seq_len == 300 and any("longest sample" in n for n in a.notes)


def test_on_the_cpu_no_remedy_needs_bitsandbytes(catalog):
    cpu = {"kind": "cpu", "name": "x86_64", "capability": None, "total_bytes": None}
    a = run(ARTICLE_13B, catalog, device=cpu, **{"method": "lora", "training.optimizer": "adamw_torch"})
    keys = {k for o in a.options for k in o.keys}
    assert "optimizer" not in keys and "qlora" not in keys and "expandable_segments" not in keys
    assert "gradient_checkpointing" in keys
    assert any("reference" in n for n in a.notes)  # speeds on the reference card, said so


def test_picks_combine_into_one_prediction(catalog):
    a = run(ARTICLE_13B, catalog)
    options = by_key(a)
    both = a.combine([options[("gradient_checkpointing",)], options[("micro_batch",)]])
    assert both.keys == ("gradient_checkpointing", "micro_batch")
    assert both.config == {  # a few layers recomputed: left to speed: auto, with the batch kept
        "speed.mode": "auto",
        "speed.keep": ["training.gradient_accumulation_steps", "training.micro_batch_size"],
        "training.gradient_checkpointing": None,
        "training.checkpoint_offload": None,
        "training.micro_batch_size": 2,
        "training.gradient_accumulation_steps": 8,
    }
    assert both.peak_bytes < options[("gradient_checkpointing",)].peak_bytes
    with pytest.raises(ValueError, match="another card"):
        a.combine([options[("gradient_checkpointing",)], a.options[-1]])


def test_host_oom_has_no_gpu_prediction(catalog):
    error = {"kind": "oom", "phase": "quantising", "oom": {"kind": "host", "host": True}}
    a = run(ARTICLE_13B, catalog, error=error, **{"training.dataloader_num_workers": 4})
    assert a.observation.host and a.estimate is None
    assert [o.config for o in a.options] == [{"training.dataloader_num_workers": 0}]
    assert a.options[0].verdict == "unknown" and a.auto_choice() is None
    assert any("host RAM" in n for n in a.notes)


def test_an_injected_oom_is_said_so(catalog):
    a = run(ARTICLE_13B, catalog, error=oom_event(injected=True))
    assert a.observation.injected and any("injected" in n for n in a.notes)


def test_the_oom_core_imports_neither_torch_nor_textual():
    from test_boundaries import HEAVY_FOR_UI, imported

    mods = imported("import cockpit.oom.remedies, cockpit.oom.remedy_options, cockpit.oom.relaunch")
    assert not (mods & {"textual", *HEAVY_FOR_UI}), mods & {"textual", *HEAVY_FOR_UI}
    assert not (imported("import screens.oom.wizard") & set(HEAVY_FOR_UI))
