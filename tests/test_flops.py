"""FLOPs per token and MFU (cockpit.speed.flops) against cases computed by hand, the speed plan's
`flops`, and where MFU shows: the run state, the --no-ui status line, the speed plan's lines, the
doctor's low-MFU finding."""

from __future__ import annotations

import pytest
from test_doctor import feed, only, rules, run_state

from cockpit.config import load as config_load
from cockpit.doctor.engine import Doctor
from cockpit.fmt import GIB
from cockpit.live.event_text import describe
from cockpit.live.headless import status_line
from cockpit.models.shape import ModelShape, load_shape
from cockpit.speed import auto as speed_auto
from cockpit.speed import flops

# a toy decoder: 2 layers, hidden 8, MLP 16, 2 query heads and 1 KV head of 4, vocabulary 100
TOY = ModelShape(
    name="toy",
    model_type="llama",
    vocab_size=100,
    hidden_size=8,
    intermediate_size=16,
    num_layers=2,
    num_heads=2,
    num_kv_heads=1,
    head_dim=4,
    tie_embeddings=False,
)


def test_attention_context_is_the_token_weighted_mean_of_causal_positions():
    # samples of 3 and 1 tokens: positions attend to 1, 2, 3 and 1 -> (1+2+3+1) / 4 = 1.75;
    # sum n(n+1)/2 / sum n = (6 + 1) / 4
    assert flops.attention_context([3, 1]) == pytest.approx(1.75)
    # a 5-token sample cut at 3, an empty one ignored
    assert flops.attention_context([5, 0], max_length=3) == pytest.approx(2.0)
    assert flops.attention_context([]) == 0.0


def test_lora_flops_per_token_by_hand():
    # per layer, linears (in x out): q 8x8=64, k 8x4=32, v 8x4=32, o 8x8=64, gate/up/down 8x16=128
    # each: 576 weights; 2 layers: 1152. LM head 100 x 8 = 800.
    # frozen base: forward 2 + input gradient 2 = 4 FLOPs a weight: 4*1152 = 4608, 4*800 = 3200
    # LoRA r=2 on q (2*(8+8)=32) and v (2*(8+4)=24): 56 a layer, 112 in all; 6 FLOPs each: 672
    # attention, context 1.75: forward 4 * q_out 8 * 1.75 * 2 layers = 112; x3 with backward: 336
    # model: 4608 + 3200 + 672 + 336 = 8816
    # one of 2 layers recomputed: half of (2*1152 + 2*112 + 112) = 1320; hardware 10136
    got = flops.flops_per_token(TOY, "qlora", 2, ["q_proj", "v_proj"], 1.75, checkpoint_layers=1)
    assert got.parts == {
        "linears": 4608,
        "lm_head": 3200,
        "adapters": 672,
        "attention": 336,
        "recompute": 1320,
    }
    assert got.model == 8816 and got.hardware == 10136
    assert flops.flops_per_token(TOY, "lora", 2, ["q_proj", "v_proj"], 1.75).hardware == 8816


def test_full_fine_tune_is_six_flops_a_weight_plus_attention():
    # 6 * (1152 + 800) = 11712, attention 336: 12048; every layer recomputed: 2*1152 + 112 = 2416
    got = flops.flops_per_token(TOY, "full", 2, "all-linear", 1.75, checkpoint_layers=2)
    assert got.model == 12048 and got.parts["adapters"] == 0
    assert got.hardware == 12048 + 2416
    # the 6N rule: with no attention, 6 x the matmul weights (parameters less embeddings and norms)
    no_attention = flops.flops_per_token(TOY, "full", 2, "all-linear", 0.0)
    matmul_weights = TOY.params - TOY.embedding_params - TOY.num_layers * TOY.layer_other_params - 8
    assert no_attention.model == 6 * matmul_weights


def test_mfu_by_hand_and_its_missing_inputs():
    # 1000 tokens/s x 8816 FLOPs = 8.816e6 FLOP/s over a 1e8 peak: 8.816%
    assert flops.utilisation(1000, 8816, 1e8) == pytest.approx(0.08816)
    assert flops.utilisation(None, 8816, 1e8) is None
    assert flops.utilisation(1000, 8816, None) is None
    plan = {"flops": {"model_per_token": 8816, "peak_flops": 1e8}}
    assert flops.mfu_of(plan, 1000, gpus=2) == pytest.approx(0.04408)  # two cards, twice the peak
    assert flops.mfu_of({"flops": {"model_per_token": 8816, "peak_flops": None}}, 1000) is None
    with pytest.raises(ValueError, match="expected lora, qlora or full"):
        flops.flops_per_token(TOY, "prefix", 2, [], 1.0)


def test_llama2_7b_qlora_all_linear_is_about_27_gflop_a_token():
    shape = load_shape("synthetic:llama-2-7b")
    # 32 layers x (4 x 4096^2 + 3 x 4096 x 11008) = 6.476e9 weights, LM head 32000 x 4096 = 1.31e8:
    # 4 x 6.607e9 = 26.43e9; adapters r=16: 32 x 16 x (4 x 8192 + 3 x 15104) = 39.98e6, x6 = 0.24e9;
    # attention at context 171.8 (ragged 32..512): 12 x 32 x 4096 x 171.8 = 0.27e9
    got = flops.flops_per_token(shape, "qlora", 16, "all-linear", 171.8, checkpoint_layers=32)
    assert got.model == pytest.approx(26.94e9, rel=0.002)
    assert got.hardware - got.model == pytest.approx(2 * 6.476e9 + 2 * 39.98e6 + 0.09e9, rel=0.002)


def _h200() -> speed_auto.Facts:
    card, _ = speed_auto.card_for("NVIDIA H200", int(139.8 * GIB))
    return speed_auto.Facts(
        "cuda", "bf16", device_name="NVIDIA H200", memory_bytes=80 * GIB, capability="9.0", card=card
    )


def test_the_speed_plan_carries_flops_and_the_h200_dense_peak():
    cfg = config_load.config_from_dotted(
        {"model.name": "synthetic:llama-2-7b", "lora.r": 16, "lora.target_modules": "all-linear"}
    )
    shape = load_shape("synthetic:llama-2-7b")
    plan = speed_auto.plan(cfg, _h200(), [512] * 64, shape)
    info = plan.to_event()["flops"]
    assert info["peak_flops"] == 989e12 and "dense bf16" in info["peak_source"]
    assert info["attention_context"] == 256.5  # (512 + 1) / 2
    assert info["checkpoint_layers"] == plan.checkpoint_layers
    expected = flops.flops_per_token(shape, "qlora", 16, "all-linear", 256.5, plan.checkpoint_layers)
    assert info["model_per_token"] == round(expected.model)
    line = describe({"type": "speed_plan", **plan.to_event()})
    assert "MFU counts 27.1 GFLOP a real token" in line and "against 989 TFLOPS: H200" in line


def test_the_peak_is_the_card_the_nvml_name_denotes():
    cfg = config_load.config_from_dotted({"model.name": "synthetic:llama-2-7b", "speed.mode": "off"})
    shape = load_shape("synthetic:llama-2-7b")
    card, _ = speed_auto.card_for("NVIDIA H100 80GB HBM3", 80 * GIB)  # the SXM card, as the MFU's peak
    h100 = speed_auto.Facts("cuda", "bf16", device_name="NVIDIA H100 80GB HBM3", capability="9.0", card=card)
    info = speed_auto.plan(cfg, h100, [100] * 8, shape).to_event()["flops"]
    assert (info["peak_flops"], info["peak_source"]) == (
        989e12,
        "H100 SXM, dense bf16 (catalog)",
    )  # HBM3: SXM
    nvl = speed_auto.Facts(
        "cuda", "bf16", device_name="NVIDIA H200 NVL", capability="9.0", card=card, card_note=" x"
    )
    info = speed_auto.plan(cfg, nvl, [100] * 8, shape).to_event()["flops"]
    assert info["peak_flops"] is None and info["peak_source"] == "no catalog peak for NVIDIA H200 NVL"


def test_on_the_cpu_there_is_no_peak_and_no_mfu():
    cfg = config_load.config_from_dotted({"model.name": "synthetic:llama-2-7b", "speed.mode": "off"})
    cpu = speed_auto.Facts("cpu", "fp32", host_available_bytes=8 * GIB, cpu_count=2)
    info = speed_auto.plan(cfg, cpu, [100] * 8, load_shape("synthetic:llama-2-7b")).to_event()["flops"]
    assert info["peak_flops"] is None and info["peak_source"] == "no catalog peak for the CPU"
    assert "no MFU: no catalog peak for the CPU" in describe({"type": "speed_plan", "flops": info})


def _state(tokens_per_s: float, plan: dict | None = None):
    state = run_state()
    state.device["name"] = "NVIDIA H200"
    state.tokens_per_s = tokens_per_s
    state.speed_plan = plan or {
        "mode": "auto",
        "flops": {
            "model_per_token": 26_940_000_000,
            "hardware_per_token": 40_000_000_000,
            "checkpoint_layers": 32,
            "peak_flops": 989e12,
            "peak_source": "H200 SXM, dense bf16 (catalog)",
        },
    }
    return state


def test_run_state_and_no_ui_show_mfu():
    state = _state(9410.0)
    # 9410 x 26.94e9 = 253.5e12 FLOP/s of 989e12: 25.6%
    assert state.mfu == pytest.approx(0.2563, abs=1e-4)
    assert "MFU 26%" in status_line(state, None)
    assert "MFU" not in status_line(_state(9410.0, {"mode": "auto"}), None)


def test_the_doctor_names_a_run_far_below_its_card():
    finding = only(feed(Doctor(), 0, 60, state=_state(3000.0), gpu={"util_pct": 95.0}), "low_mfu")
    # 3000 x 26.94e9 = 80.8e12 of 989e12: 8.2%
    assert finding.title == "The card works at 8.2% of its dense bf16 peak (MFU)"
    assert "81 of 989 TFLOPS a card" in finding.evidence
    assert "32 layers are recomputed (48% more FLOPs" in finding.fix
    assert "low_mfu" not in rules(feed(Doctor(), 0, 60, state=_state(9410.0), gpu={"util_pct": 95.0}))


def test_low_mfu_on_a_split_speed_auto_fitted_to_the_memory_does_not_say_raise_it():
    def plan(source: str) -> dict:
        return {
            "mode": "auto",
            "busy_tokens_per_micro_batch": 4096,
            "budget_bytes": 5_560_000_000,
            "predicted_peak_bytes": 5_450_000_000,
            "choices": [{"name": "micro-batch", "value": "1 x 9", "reason": "", "source": source}],
            "flops": {"model_per_token": 26_940_000_000, "peak_flops": 989e12, "peak_source": "catalog"},
        }

    fixes = {}
    for source in ("auto", "yours"):
        state = _state(817.0, plan(source))
        state.input = {"tokens_per_micro_batch": 512.0, "data_wait_share": 0.0}
        fixes[source] = only(feed(Doctor(), 0, 60, state=state, gpu={"util_pct": 16.0}), "low_mfu").fix
    assert "512 tokens per micro-batch, ~4096 needed" in fixes["auto"]
    assert "speed: auto already runs the fastest split that fits" in fixes["auto"]
    assert "raise training.micro_batch_size" not in fixes["auto"]
    assert "raise training.micro_batch_size or pack rows" in fixes["yours"]
