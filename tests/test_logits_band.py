"""SFT's loss path is known: TRL's SFTTrainer computes the loss in tiles from the hidden states (its
fused LM head), never the full logits, so the estimate has no band up to them there (issue 44, item 5).
A relaunch at 4 x 2048 tokens of a 152k vocabulary trained in 22.02 GiB where the tiles predicted
22.28 and the full logits would have added 7 GiB on a 24 GiB card
(bench/results/2026-12-02-oom-vocab152k-recheck-h200.json)."""

from __future__ import annotations

from dataclasses import replace

from cockpit.config import load as config_load
from cockpit.fmt import GIB
from cockpit.gpus.catalog import load_catalog
from cockpit.models import memory as m
from cockpit.models.shape import load_shape
from cockpit.plan.fits import fit_card

LLAMA8 = load_shape("synthetic:llama-3.1-8b")  # vocabulary 128256


def _eight_b(micro_batch: int, checkpointing: bool = True) -> m.Workload:
    cfg = config_load.config_from_dotted(
        {
            "model.name": "synthetic:llama-3.1-8b",
            "training.max_length": 2048,
            "training.micro_batch_size": micro_batch,
            "training.gradient_checkpointing": checkpointing,
        }
    )
    return m.workload_from_config(cfg, LLAMA8)


def test_an_sft_run_past_the_checked_tokens_has_no_full_logits_band():
    est = m.estimate_memory(_eight_b(8))  # 16384 tokens a micro-batch, past the checked 4096
    assert est.unsure == () and est.high_bytes == est.peak_bytes
    assert est.band_text() == f"{est.peak_gib:.1f} GiB"
    loss = est.part("logits")
    assert loss is not None and "not the full logits" in loss.note
    assert loss.bytes < 16384 * LLAMA8.vocab_size * 4  # far below the fp32 logits


def test_on_a_24_gib_card_the_8b_at_2048_fits_by_its_tiles_not_the_full_logits():
    """8 x 2048 with checkpointing: ~15.7 GiB by the tiles; the band's top (+11.7 GiB of 16-bit + fp32
    logits) used to read "no" and send the picker to a smaller micro-batch."""
    rtx = next(c for c in load_catalog().cards if c.id == "rtx-4090")
    fit = fit_card(_eight_b(8), rtx)
    assert fit.verdict == "fits" and fit.change is None
    assert fit.peak_bytes <= 24 * GIB * (1 - m.SAFETY_MARGIN)


def test_no_objective_on_trl_keeps_a_band_its_loss_path_is_known():
    """DPO and KTO call TRL's fused head too: DPO at 8192 tokens a micro-batch measured -5.0% and
    -5.6% with 128k and 152k vocabularies, far under the band's top
    (bench/results/2026-12-07-preference-memory-h100.txt). ORPO's full logits are a part of their own,
    not a band on top of them. Without a known path (an objective not listed) the band stays."""
    for objective in ("dpo", "kto", "orpo"):
        reference = "none" if objective == "orpo" else "adapter_off"
        w = replace(_eight_b(8), method="lora", objective=objective, reference=reference)
        est = m.estimate_memory(w)
        assert est.unsure == () and est.high_bytes == est.peak_bytes, objective
    orpo = m.estimate_memory(replace(_eight_b(8), method="lora", objective="orpo"))
    assert orpo.part("logits").bytes >= 16384 * 2 * LLAMA8.vocab_size * 16  # the pairs' full logits
    unknown = replace(_eight_b(8), method="lora", objective="kto", reference="adapter_off")
    original = m.FUSED_HEAD_OBJECTIVES
    try:
        m.FUSED_HEAD_OBJECTIVES = ("sft",)
        (band,) = m.estimate_memory(unknown).unsure
    finally:
        m.FUSED_HEAD_OBJECTIVES = original
    assert band.key == "logits" and band.bytes == 16384 * LLAMA8.vocab_size * m.UNSURE_LOGITS_BYTES
