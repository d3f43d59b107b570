"""The memory model's trainer paths: TRL's fused LM head (tiles, not the full logits), plain HF
Trainer's materialised logits, a full fine-tune per trainer, and the band where the model is unsure
(a verdict never says "fits" where the band's top does not)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cockpit.models import memory as m
from cockpit.models.shape import load_shape

ONE_B = load_shape("synthetic:llama-3.2-1b")  # vocabulary 128256, hidden 2048
LARGE = m.Workload(
    shape=ONE_B,
    method="lora",
    seq_len=2048,
    micro_batch=8,
    gradient_checkpointing=False,
    optimizer="adamw_torch",
)


def test_trl_computes_the_loss_in_tiles_and_hf_materialises_the_logits():
    trl = m.estimate_memory(replace(LARGE, micro_batch=2)).part("logits")
    tile = 4096 * 32768 * 2
    assert trl.bytes == tile + 4096 * 2048 * 6 and "not the full logits" in trl.note
    hf = m.estimate_memory(replace(LARGE, micro_batch=2, trainer="hf")).part("logits")
    assert hf.bytes == int(4096 * 128256 * m.HF_LOGITS_BYTES) and hf.bytes > 10 * trl.bytes


# every objective's TRL loss path is known now (tests/test_logits_band.py); the band is for one that
# is not: here KTO, with the list of fused-head objectives cut to SFT's
KTO = replace(LARGE, objective="kto", reference="adapter_off")


@pytest.fixture(autouse=True)
def kto_path_unknown(monkeypatch):
    monkeypatch.setattr(m, "FUSED_HEAD_OBJECTIVES", ("sft",))


def test_a_band_beyond_the_checked_tokens_with_a_large_vocabulary():
    checked = m.estimate_memory(replace(KTO, micro_batch=2))  # 4096 tokens: a measured size
    assert checked.unsure == () and checked.band_text() == f"{checked.peak_gib:.1f} GiB"
    big = m.estimate_memory(KTO)  # 16384 tokens
    (band,) = big.unsure
    assert band.key == "logits" and band.bytes == 16384 * 128256 * 6
    assert big.high_bytes - big.peak_bytes == band.bytes
    assert big.band_text() == f"{big.peak_gib:.1f}-{big.high_gib:.1f} GiB"
    # a 32k vocabulary at the same size: the full logits are small beside the peak, no band
    seven = m.estimate_memory(replace(KTO, shape=load_shape("synthetic:llama-2-7b"), micro_batch=2))
    assert seven.unsure == ()


def test_never_fits_where_the_band_s_top_runs_out():
    big = m.estimate_memory(KTO)
    top = big.high_bytes
    card = (big.peak_bytes + top) // 2  # the estimate fits it, its top does not: never "tight"
    assert big.peak_bytes < card * (1 - m.SAFETY_MARGIN) < top
    assert m.verdict(big, card) == "no"
    snug = int(top / (1 - m.SAFETY_MARGIN / 2))  # the top fits, inside the safety margin
    assert snug * (1 - m.SAFETY_MARGIN) < top <= snug
    assert m.verdict(big, snug) == "tight"
    assert m.verdict(big, int(top / (1 - m.SAFETY_MARGIN)) + 1) == "fits"
    assert m.verdict(big, int(big.peak_bytes * 0.9)) == "no"


def test_a_full_fine_tune_holds_what_its_trainer_holds():
    full = replace(LARGE, method="full", seq_len=512, micro_batch=4)
    trl = m.estimate_memory(full)  # the product: fp32 master weights, fp32 grads, fp32 AdamW, 16-bit copies
    assert (
        trl.part("weights").bytes == ONE_B.params * 4
        and trl.part("autocast_copies").bytes == ONE_B.params * 2
    )
    assert trl.part("gradients").bytes == ONE_B.params * 4 and trl.part("optimizer").bytes == ONE_B.params * 8
    hf = m.estimate_memory(replace(full, trainer="hf"))  # loaded in bf16, trained as loaded: 8 B a parameter
    held = sum(hf.part(k).bytes for k in ("weights", "gradients", "optimizer"))
    assert held == ONE_B.params * 8 and hf.part("autocast_copies") is None
    eight_bit = m.estimate_memory(replace(full, trainer="hf", optimizer="adamw_8bit"))
    assert eight_bit.part("optimizer").bytes == ONE_B.params * 2
    # the trained LM head's fp32 weight gradient is part of TRL's fused loss
    assert "fp32 weight gradient" in trl.part("logits").note


def test_the_cross_entropy_choice_no_longer_claims_the_logits_are_never_built():
    from cockpit.speed.auto import _cross_entropy

    reason = _cross_entropy().reason
    assert "never materialised" not in reason and "tiles of 4096 tokens x 32768" in reason
