"""The memory and speed models of the preference objectives (cockpit.models.memory, cockpit.speed.model),
on the CPU: a pair is one forward of twice the sequences; the reference costs a forward without
gradients (none when precomputed, none for ORPO), a 16-bit copy only for a full fine-tune, a frozen
adapter from init_from; KTO adds its KL batch; ORPO builds the full logits. The config says which
reference, the same rule as the trainer's; the OOM wizard offers precomputed log-probs and a prompt
cut."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fixtures_oom import DATA, H200, oom_event

from cockpit.config.load import config_from_dotted
from cockpit.gpus.catalog import load_catalog
from cockpit.models.memory import (
    ORPO_LOGITS_BYTES,
    PREFERENCE_ACTIVATION_SCALE,
    EstimateError,
    Workload,
    estimate_memory,
    forward_workload,
    fp32_kbit_path,
    workload_from_config,
)
from cockpit.models.shape import load_shape
from cockpit.oom.remedies import analyse
from cockpit.speed.batch_choice import busy_tokens, partial_tokens_per_s
from cockpit.speed.model import CardSpeed, estimate_speed, no_grad_forwards

H200_SPEED = CardSpeed("H200", 989.0, 4800.0)


@pytest.fixture(scope="module")
def llama7b():
    return load_shape("synthetic:llama-2-7b")


def parts(w: Workload) -> dict[str, int]:
    return {p.key: p.bytes for p in estimate_memory(w).parts}


def test_a_pair_is_one_forward_of_twice_the_sequences(llama7b):
    sft = Workload(llama7b, method="qlora", seq_len=1024, micro_batch=2, lora_dropout=0.0)  # as TRL's DPO
    dpo = replace(sft, objective="dpo", reference="precomputed")
    assert forward_workload(dpo).tokens_per_micro_batch == 2 * sft.tokens_per_micro_batch
    doubled = parts(replace(sft, micro_batch=4))
    got = parts(dpo)
    assert got["checkpoints"] == doubled["checkpoints"]
    # the recomputed block: as many tokens as SFT's doubled batch, at the preference scale
    assert got["activations"] == pytest.approx(doubled["activations"] * PREFERENCE_ACTIVATION_SCALE, rel=1e-6)
    assert got["weights"] == parts(sft)["weights"]  # precomputed: no reference in memory
    assert "reference" not in got and "reference_forward" not in got
    kto = parts(replace(sft, objective="kto", reference="precomputed"))
    assert kto["checkpoints"] == parts(sft)["checkpoints"]  # one completion a row


def test_the_reference_costs_what_it_holds_and_its_forward(llama7b):
    lora = Workload(llama7b, method="lora", seq_len=512, micro_batch=2, gradient_checkpointing=False)
    off = parts(replace(lora, objective="dpo", reference="adapter_off"))
    pre = parts(replace(lora, objective="dpo", reference="precomputed"))
    assert "reference" not in off  # the base with the adapter disabled: no second copy
    assert off["reference_forward"] > 0 and "reference_forward" not in pre
    assert sum(off.values()) > sum(pre.values())
    adapter = parts(replace(lora, objective="dpo", reference="ref_adapter"))
    assert adapter["reference"] == llama7b.lora_params(lora.lora_r, lora.lora_targets) * 4
    full = replace(lora, method="full", optimizer="adamw_torch")
    copy = parts(replace(full, objective="dpo", reference="copy"))
    assert copy["reference"] == llama7b.params * 2
    # KTO's KL batch: a forward without gradients even with the reference precomputed
    assert parts(replace(lora, objective="kto", reference="precomputed"))["reference_forward"] > 0


def test_orpo_has_no_reference_and_the_full_logits(llama7b):
    w = Workload(llama7b, method="qlora", seq_len=1024, micro_batch=2, objective="orpo")
    got = parts(w)
    assert "reference" not in got and "reference_forward" not in got
    assert got["logits"] == int(2 * 2 * 1024 * llama7b.vocab_size * ORPO_LOGITS_BYTES)
    with pytest.raises(EstimateError, match="does not go with"):
        estimate_memory(replace(w, reference="adapter_off"))


def test_orpo_on_a_4bit_base_takes_the_fp32_path_that_dpo_does_not(llama7b):
    """TRL's ORPOTrainer runs prepare_model_for_kbit_training on a quantised base (fp32 norms, so fp32
    MLP inputs and residual): more activations and fp32 checkpoints than DPO's forward of as many
    tokens; on a 16-bit base the two count the same activations."""
    for method, more in (("qlora", True), ("lora", False)):
        orpo = parts(Workload(llama7b, method=method, seq_len=1024, micro_batch=2, objective="orpo"))
        dpo = parts(
            Workload(
                llama7b, method=method, seq_len=1024, micro_batch=2, objective="dpo", reference="adapter_off"
            )
        )
        assert (orpo["activations"] > dpo["activations"]) is more
        assert (orpo["checkpoints"] == 2 * dpo["checkpoints"]) is more


def test_orpo_with_liger_keeps_the_16bit_stream(llama7b):
    """Liger's RMSNorm writes its input's dtype whatever its fp32 weight, so under speed: auto ORPO's
    4-bit run keeps 16-bit block inputs: the checkpoints are DPO's, with no fp32 extra."""
    orpo = Workload(llama7b, method="qlora", seq_len=1024, micro_batch=2, objective="orpo")
    assert fp32_kbit_path(orpo) and not fp32_kbit_path(replace(orpo, liger=True))
    dpo = replace(orpo, objective="dpo", reference="adapter_off")
    assert parts(replace(orpo, liger=True))["checkpoints"] == parts(replace(dpo, liger=True))["checkpoints"]
    assert parts(replace(orpo, liger=True))["checkpoints"] * 2 == parts(orpo)["checkpoints"]
    assert fp32_kbit_path(replace(orpo, trainer="hf", objective="sft", liger=True))  # HF Trainer's own


def test_the_fused_layers_with_liger_recompute_a_preference_block_at_sfts_count(llama7b):
    """DPO's and KTO's recomputed block is counted at SFT's bytes on the fused LoRA layers with Liger
    (the runs measured so), and keeps PREFERENCE_ACTIVATION_SCALE with either alone, and without
    checkpointing (not measured on the fused layers)."""
    base = Workload(llama7b, method="qlora", seq_len=1024, micro_batch=2, lora_dropout=0.0)
    for objective in ("dpo", "kto"):
        pref = replace(base, objective=objective, reference="adapter_off")
        sft_tokens = replace(base, micro_batch=2 * pref.sequences_per_row)
        for fused, liger, scale in (
            (True, True, 1.0),
            (True, False, PREFERENCE_ACTIVATION_SCALE),
            (False, True, PREFERENCE_ACTIVATION_SCALE),
        ):
            got = parts(replace(pref, fused_lora=fused, liger=liger))["activations"]
            sft = parts(replace(sft_tokens, fused_lora=fused, liger=liger))["activations"]
            assert got == pytest.approx(sft * scale, rel=1e-6), (objective, fused, liger)
        no_ckpt = replace(pref, fused_lora=True, liger=True, gradient_checkpointing=False)
        sft_no_ckpt = replace(sft_tokens, fused_lora=True, liger=True, gradient_checkpointing=False)
        assert parts(no_ckpt)["activations"] == pytest.approx(
            parts(sft_no_ckpt)["activations"] * PREFERENCE_ACTIVATION_SCALE, rel=1e-6
        )


def test_the_plans_tokens_per_s_counts_both_sequences_of_a_pair(llama7b):
    """speed: auto's rate of a split (batch_choice) and the speed model's own are one figure: a DPO
    pair's chosen and rejected both, as TRL's num_tokens counts them (its collator's attention mask
    covers both). It counted one sequence a pair, half the speed model's and 2.7x under the 7,667
    tokens/s a 7B QLoRA DPO ran at on an H100 (2026-12-07)."""
    w = Workload(llama7b, method="qlora", seq_len=2048, micro_batch=2)
    for objective, reference in (("dpo", "adapter_off"), ("orpo", "none"), ("kto", "adapter_off")):
        one = replace(w, objective=objective, reference=reference)
        n = llama7b.num_layers
        assert partial_tokens_per_s(one, n, H200_SPEED) == pytest.approx(
            estimate_speed(one, H200_SPEED).tokens_per_s, rel=1e-9
        ), objective
        assert one.forward_tokens_per_micro_batch == one.sequences_per_row * one.tokens_per_micro_batch
    # the doctor's busy threshold is set against the step meter's input_ids: both sequences of a pair
    dpo = replace(w, objective="dpo", reference="precomputed", seq_len=256)
    busy = busy_tokens(dpo, H200_SPEED)
    m = next(
        mb
        for mb in range(1, 1025)
        if estimate_speed(replace(dpo, micro_batch=mb, grad_accum=1), H200_SPEED).bound != "overhead"
    )
    assert busy == 2 * m * 256


def test_a_full_orpo_counts_only_the_logits_beyond_the_gradients(llama7b):
    w = Workload(
        llama7b, method="full", seq_len=512, micro_batch=2, objective="orpo", optimizer="adamw_torch"
    )
    got = parts(w)
    logits = int(2 * 2 * 512 * llama7b.vocab_size * ORPO_LOGITS_BYTES)
    assert got["logits"] == max(0, logits - got["gradients"])


def test_a_preference_batch_without_checkpointing_keeps_more_activations(llama7b):
    base = Workload(
        llama7b, method="lora", seq_len=512, micro_batch=2, gradient_checkpointing=False, lora_dropout=0.0
    )
    sft = parts(replace(base, micro_batch=4))  # as many tokens as a pair's batch of 2
    dpo = parts(replace(base, objective="dpo", reference="adapter_off"))
    assert dpo["activations"] == pytest.approx(sft["activations"] * PREFERENCE_ACTIVATION_SCALE, rel=1e-6)
    with_ckpt = replace(base, gradient_checkpointing=True)
    sft_block = parts(replace(with_ckpt, micro_batch=4))["activations"]
    for objective, scale in (("dpo", PREFERENCE_ACTIVATION_SCALE), ("orpo", 1.0)):
        reference = "none" if objective == "orpo" else "adapter_off"
        got = parts(replace(with_ckpt, objective=objective, reference=reference))["activations"]
        assert got == pytest.approx(sft_block * scale, rel=1e-6), objective  # ORPO's block as SFT's


def test_trl_turns_lora_dropout_off_for_the_preference_objectives(llama7b):
    """DPOConfig, KTOConfig and ORPOConfig default to disable_dropout=True: LoRA's dropout is p=0, which
    keeps no copy and no mask; SFT keeps both."""
    base = Workload(
        llama7b,
        method="qlora",
        seq_len=1024,
        micro_batch=2,
        gradient_checkpointing=False,
        lora_targets="all-linear",
        lora_dropout=0.0,
    )
    for objective, reference in (
        ("sft", "none"),
        ("dpo", "adapter_off"),
        ("kto", "adapter_off"),
        ("orpo", "none"),
    ):
        plain = parts(replace(base, objective=objective, reference=reference))["activations"]
        dropped = parts(replace(base, objective=objective, reference=reference, lora_dropout=0.1))[
            "activations"
        ]
        assert (dropped > plain) is (objective == "sft"), objective


def test_a_full_reference_copy_is_held_through_the_optimizer_step(llama7b):
    w = Workload(llama7b, method="full", seq_len=512, micro_batch=1, objective="dpo", optimizer="adamw_torch")
    est = estimate_memory(replace(w, reference="copy"))
    held = sum(p.bytes for p in est.parts if p.key in ("weights", "gradients", "optimizer", "reference"))
    assert est.peak_bytes >= held + llama7b.params * 4  # adamw_torch's foreach temporary beside them


@pytest.mark.parametrize(
    ("settings", "reference"),
    [
        ({"objective": "dpo"}, "adapter_off"),
        ({"objective": "dpo", "preference.precompute_ref_log_probs": True}, "precomputed"),
        ({"objective": "kto", "method": "full", "training.optimizer": "adamw_torch"}, "copy"),
        ({"objective": "dpo", "init_from": "/some/adapter"}, "ref_adapter"),
        ({"objective": "orpo"}, "none"),
        ({}, "none"),
    ],
)
def test_the_config_says_which_reference(llama7b, settings, reference):
    cfg = config_from_dotted({"model.name": "synthetic:llama-2-7b", "method": "qlora", **settings})
    w = workload_from_config(cfg, llama7b)
    assert (w.objective, w.reference) == (cfg.objective, reference)


def test_the_speed_model_counts_the_forwards_without_gradients(llama7b):
    base = Workload(llama7b, method="qlora", seq_len=1024, micro_batch=2)
    dpo = replace(base, objective="dpo", reference="adapter_off")
    pre = replace(dpo, reference="precomputed")
    kto = replace(base, objective="kto", reference="adapter_off")
    counts = [no_grad_forwards(w) for w in (base, dpo, pre, kto, replace(kto, reference="precomputed"))]
    assert counts == [0, 1, 0, 3, 1]
    with_ref, without = estimate_speed(dpo, H200_SPEED), estimate_speed(pre, H200_SPEED)
    assert with_ref.step_s > without.step_s and with_ref.parts_s["no_grad_forwards"] > 0
    # a pair's step carries both sequences: twice an SFT step's tokens, in more time
    sft = estimate_speed(base, H200_SPEED)
    assert without.step_s > sft.step_s
    assert without.tokens_per_s * without.step_s == pytest.approx(2 * sft.tokens_per_s * sft.step_s)


def test_the_oom_wizard_offers_precomputed_log_probs_and_a_prompt_cut():
    settings = {
        "model.name": "synthetic:llama-2-7b",
        "method": "qlora",
        "objective": "dpo",
        "training.max_length": 2048,
        "training.micro_batch_size": 4,
        "training.gradient_checkpointing": False,
        "training.optimizer": "paged_adamw_32bit",
        "emulate_vram_gib": 24.0,
    }
    cfg = config_from_dotted(settings)
    data = {
        **DATA,
        "tokens_max": 2048,
        "max_length": 2048,
        "prompt_tokens_max": 1800,
        "answer_tokens_max": 200,
    }
    analysis = analyse(cfg, oom_event(), load_shape(cfg.model.name), data, H200, load_catalog(user_file=None))
    options = {o.keys: o for o in analysis.options}
    pre = options[("precompute_ref_log_probs",)]
    assert pre.config == {"preference.precompute_ref_log_probs": True} and pre.effect.startswith("none")
    assert pre.peak_bytes < analysis.estimate.peak_bytes + analysis.gap_bytes and pre.speed > 1
    cut = options[("max_prompt_length",)]
    assert cut.config["preference.max_prompt_length"] < 1800
    assert cut.peak_bytes < pre.peak_bytes  # shorter sequences: less of everything a token holds
    # --on-oom auto: what keeps the results and fits, fastest first: checkpointing with the reference
    # precomputed beats checkpointing alone (no reference forward a step)
    auto = analysis.auto_choice()
    assert auto is not None and auto.verdict == "fits" and "precompute_ref_log_probs" in auto.keys
    assert auto.speed > options[("gradient_checkpointing",)].speed


def test_speed_auto_never_packs_pairs_and_sizes_their_micro_batch_as_two_sequences(llama7b):
    import random

    from cockpit.models.memory import SAFETY_MARGIN
    from cockpit.speed import auto as speed_auto

    card, _ = speed_auto.card_for("NVIDIA H200", int(139.8 * 2**30))
    facts = speed_auto.Facts(
        device_kind="cuda",
        precision="bf16",
        device_name="NVIDIA H200",
        memory_bytes=22 * 2**30,
        memory_note="emulate_vram_gib 22",
        capability="9.0",
        cpu_count=16,
        card=card,
    )
    rng = random.Random(0)
    ragged = [rng.randint(32, 512) for _ in range(224)]  # SFT packs these (tests/test_speed_auto.py)
    sft = speed_auto.plan(config_from_dotted({"model.name": "synthetic:llama-2-7b"}), facts, ragged, llama7b)
    dpo_cfg = config_from_dotted({"model.name": "synthetic:llama-2-7b", "objective": "dpo"})
    dpo = speed_auto.plan(dpo_cfg, facts, ragged, llama7b)
    assert sft.packing != "none" and dpo.packing == "none" and not dpo.config.training.packing
    packing = next(c for c in dpo.choices if c.name == "packing")
    assert packing.source == "fixed" and "objective dpo" in packing.reason
    assert dpo.predicted_peak_bytes <= 22 * 2**30 * (1 - SAFETY_MARGIN)
    pairs = workload_from_config(dpo.config, llama7b)
    assert pairs.objective == "dpo" and estimate_memory(pairs).peak_bytes <= dpo.budget_bytes
    assert next(c for c in dpo.choices if c.name == "cross-entropy").value == "fused LM head, in tiles"
    orpo_cfg = config_from_dotted({"model.name": "synthetic:llama-2-7b", "objective": "orpo"})
    orpo = speed_auto.plan(orpo_cfg, facts, ragged, llama7b)
    assert next(c for c in orpo.choices if c.name == "cross-entropy").value == "full logits"


def test_the_dropout_rule_follows_the_trainers_trl_configs():
    """memory.DROPOUT_OFF_OBJECTIVES is what TRL's configs do by default, and the trainer keeps the
    default (it never passes disable_dropout)."""
    pytest.importorskip("trl")
    import inspect

    from cockpit.models.memory import DROPOUT_OFF_OBJECTIVES
    from train_backend import train_args
    from train_backend.preference import trainers

    for objective in ("dpo", "kto", "orpo"):
        field = trainers.config_class(objective).__dataclass_fields__["disable_dropout"]
        assert field.default is (objective in DROPOUT_OFF_OBJECTIVES), objective
    assert all("disable_dropout" not in inspect.getsource(m) for m in (trainers, train_args))
