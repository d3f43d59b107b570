"""Which cards fit, and the single change that makes a card fit (memory model + catalog)."""

from __future__ import annotations

import pytest

from cockpit.gpus.catalog import load_catalog
from cockpit.models.memory import Workload, estimate_memory
from cockpit.models.shape import load_shape
from cockpit.plan.fits import fit_card, fit_cards, fit_phrase, single_changes

QV = ["q_proj", "v_proj"]


@pytest.fixture(scope="module")
def catalog():
    return load_catalog(user_file=None)


def test_13b_qlora_fits_a_4090_only_with_checkpointing(catalog):
    w = Workload(shape=load_shape("synthetic:llama-2-13b"), lora_targets=QV, gradient_checkpointing=False)
    fit = fit_card(w, catalog.get("rtx-4090"))
    assert fit.verdict != "fits"
    assert fit.change is not None and fit.change.key == "gradient_checkpointing"
    assert fit.change.config == {"training.gradient_checkpointing": True}
    assert fit_phrase(fit).startswith("RTX 4090: fits with gradient checkpointing")
    assert fit_card(w, catalog.get("h100-sxm")).verdict == "fits"


def test_every_card_gets_a_row_and_big_cards_fit(catalog):
    w = Workload(shape=load_shape("synthetic:llama-2-7b"), lora_targets=QV)
    fits = fit_cards(w, catalog.cards)
    assert len(fits) == len(catalog.cards)
    assert all(f.verdict == "fits" for f in fits if f.card.vram_gib >= 24)


def test_full_fine_tune_of_7b_needs_more_than_one_80gb_card_or_lora(catalog):
    w = Workload(shape=load_shape("synthetic:llama-2-7b"), method="full", micro_batch=1)
    assert fit_card(w, catalog.get("rtx-4090")).verdict == "no"
    h100 = fit_card(w, catalog.get("h100-sxm"))
    assert h100.verdict == "no" and h100.change is not None and h100.change.key == "lora"
    assert fit_card(w, catalog.get("h200-sxm")).verdict == "fits"


def test_changes_lower_the_peak_and_keep_the_effective_batch():
    w = Workload(
        shape=load_shape("synthetic:llama-2-7b"),
        method="lora",
        lora_targets="all-linear",
        gradient_checkpointing=False,
        micro_batch=4,
        grad_accum=4,
        seq_len=1024,
        optimizer="adamw_torch",
    )
    base = estimate_memory(w).peak_bytes
    changes = {c.key: c for c in single_changes(w)}
    assert set(changes) == {
        "gradient_checkpointing",
        "micro_batch",
        "optimizer",
        "qlora",
        "targets",
        "max_length",
    }
    assert all(c.peak_bytes < base for c in changes.values())
    batch = changes["micro_batch"]
    assert batch.workload.micro_batch * batch.workload.grad_accum == 16
    assert "same effective batch" in batch.effect
    assert "truncated" in changes["max_length"].effect


def test_no_change_is_offered_that_does_not_help():
    w = Workload(
        shape=load_shape("synthetic:tiny"),
        micro_batch=1,
        seq_len=128,
        optimizer="paged_adamw_8bit",
        lora_targets=QV,
        gradient_checkpointing=True,
    )
    assert single_changes(w) == []
