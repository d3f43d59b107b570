"""quantization.unpack_scales: a double-quantised 4-bit model's scales unpacked once into fp32
(train_backend/speed/quant_scales.py) give the same weights and the same training numbers bit for bit;
the memory model counts what they add; speed: auto takes them only where the split's peak has
room; the OOM wizard counts them in what ran and offers them back."""

from __future__ import annotations

import pytest
import torch
from conftest import BNB, has_cuda  # noqa: F401 - has_cuda: skipif
from fixtures_oom import ARTICLE_13B, DATA, H200, oom_event
from test_fused_lora import peft_model, run
from test_speed_auto import LLAMA7, RAGGED, choice, gpu, qlora

from cockpit.config.load import config_from_dotted
from cockpit.fmt import GIB
from cockpit.gpus.catalog import load_catalog
from cockpit.models.memory import (
    NF4_CONSTANTS_PER_PARAM,
    estimate_memory,
    unpacked_scales_bytes,
    workload_from_config,
)
from cockpit.models.shape import load_shape
from cockpit.oom.relaunch import as_run
from cockpit.oom.remedies import analyse
from cockpit.speed import auto as speed_auto
from train_backend.speed import fused_lora, quant_scales
from train_backend.speed.setup import apply_quant_scales


def four_bit(n_out=256, n_in=256, double=True):
    bnb = pytest.importorskip("bitsandbytes", reason=BNB)

    torch.manual_seed(0)
    layer = bnb.nn.Linear4bit(n_in, n_out, bias=False, compute_dtype=torch.float32, quant_type="nf4")
    layer.weight = bnb.nn.Params4bit(
        torch.randn(n_out, n_in) * 0.1, requires_grad=False, quant_type="nf4", compress_statistics=double
    )
    return torch.nn.Sequential(layer.to("cpu"))


def test_the_unpacked_scales_dequantise_to_the_same_weights_bit_for_bit():
    F = pytest.importorskip("bitsandbytes.functional", reason=BNB)

    model = four_bit()
    weight = model[0].weight
    state = weight.quant_state
    assert state.nested and state.absmax.dtype == torch.uint8
    before = F.dequantize_4bit(weight.data, state).clone()
    blocks = 256 * 256 // 64  # one scale per 64 weights; their own scales one per 256 of them
    assert state.absmax.numel() == blocks and state.state2.absmax.numel() == blocks // 256

    assert quant_scales.unpack(model) == {
        "weights": 1,
        # 4 bytes a scale, less the byte a scale, the scales' own fp32 scales and their 256-entry map
        "bytes": 4 * blocks - (blocks + 4 * (blocks // 256) + 4 * 256),
    }
    assert not state.nested and state.state2 is None and state.offset is None
    assert state.absmax.dtype == torch.float32 and state.absmax.numel() == blocks
    assert torch.equal(F.dequantize_4bit(weight.data, state), before)
    assert model[0].weight.quant_state is state  # the layer's and the weight's state: one object
    assert quant_scales.unpack(model) == {"weights": 0, "bytes": 0}  # nothing nested left


def test_a_model_without_double_quantisation_has_nothing_to_unpack():
    model = four_bit(double=False)
    assert quant_scales.unpack(model) == {"weights": 0, "bytes": 0}
    assert quant_scales.unpack(torch.nn.Linear(4, 4)) == {"weights": 0, "bytes": 0}


@pytest.mark.parametrize("fused", [False, True], ids=["peft", "fused"])
def test_training_numbers_are_bit_for_bit_those_of_the_packed_scales(fused):
    x = torch.randn(3, 5, 64)
    model = peft_model(four_bit=True, dropout=0.1)
    if fused:
        assert fused_lora.apply(model)["fused"] == 1
    packed = run(model, x)
    assert quant_scales.unpack(model)["weights"] == 1
    unpacked = run(model, x)
    assert torch.equal(packed[0], unpacked[0]) and torch.equal(packed[1], unpacked[1])
    assert packed[2].keys() == unpacked[2].keys()
    assert all(torch.equal(packed[2][k], unpacked[2][k]) for k in packed[2])


def test_the_trainer_unpacks_only_what_the_config_asks_and_never_under_fsdp():
    asked = qlora(**{"quantization.unpack_scales": True})
    assert apply_quant_scales(asked, four_bit(), sharded=False)["weights"] == 1
    assert apply_quant_scales(asked, four_bit(), sharded=True) == {
        "kept": "FSDP shards the 4-bit weights with their scales"
    }
    assert apply_quant_scales(qlora(), four_bit(), sharded=False) is None
    off = qlora(**{"quantization.unpack_scales": True, "quantization.double_quant": False})
    assert apply_quant_scales(off, four_bit(double=False), sharded=False) is None


def test_the_memory_model_counts_four_bytes_a_scale_when_unpacked():
    linear = LLAMA7.num_layers * LLAMA7.layer_linear_params
    extra = unpacked_scales_bytes(LLAMA7)
    assert extra == int(linear * NF4_CONSTANTS_PER_PARAM[False]) - int(linear * NF4_CONSTANTS_PER_PARAM[True])
    assert 0.27 * GIB < extra < 0.29 * GIB  # llama-2-7b: 6.5B weights in 4 bits
    packed = workload_from_config(qlora(), LLAMA7)
    unpacked = workload_from_config(qlora(**{"quantization.unpack_scales": True}), LLAMA7)
    assert unpacked.unpacked_scales and not packed.unpacked_scales
    parts = {p.key: p for p in estimate_memory(unpacked).parts}
    assert parts["quant_constants"].bytes == int(linear * 0.5 / 8)
    assert "kept unpacked in fp32" in parts["quant_constants"].note
    assert estimate_memory(unpacked).peak_bytes - estimate_memory(packed).peak_bytes == pytest.approx(
        extra, abs=1
    )


def test_speed_auto_unpacks_them_where_the_split_has_room_and_its_peak_counts_them():
    roomy = speed_auto.plan(qlora(), gpu(22), RAGGED, LLAMA7)
    c = choice(roomy, "4-bit scales")
    assert (c.value, c.source) == ("fp32, unpacked once", "auto")
    assert roomy.config.quantization.unpack_scales and roomy.to_event()["unpack_scales"] is True
    # the same split as with the scales kept packed, its peak higher by exactly what they add
    kept = speed_auto.plan(qlora(**{"quantization.unpack_scales": False}), gpu(22), RAGGED, LLAMA7)
    assert (choice(kept, "4-bit scales").value, choice(kept, "4-bit scales").source) == (
        "double-quantised",
        "yours",
    )
    t, k = roomy.config.training, kept.config.training
    split = (t.micro_batch_size, t.gradient_accumulation_steps, roomy.checkpoint_layers)
    assert split == (k.micro_batch_size, k.gradient_accumulation_steps, kept.checkpoint_layers)
    assert roomy.predicted_peak_bytes == kept.predicted_peak_bytes + unpacked_scales_bytes(LLAMA7)
    assert roomy.predicted_peak_bytes <= roomy.budget_bytes
    assert roomy.predicted_tokens_per_s == kept.predicted_tokens_per_s  # no speed counted for it
    # dequantisations a step: 7 linears x (forward and backward of 32 layers + the recomputed ones)
    count = 7 * (2 * 32 + roomy.checkpoint_layers) * t.gradient_accumulation_steps
    assert f"{count:,} a step here" in c.reason and "does not count the saving" in c.reason


def test_a_split_without_room_for_them_keeps_them_packed_and_says_by_how_much():
    tight = speed_auto.plan(qlora(), gpu(8), RAGGED, LLAMA7)
    c = choice(tight, "4-bit scales")
    assert (c.value, c.source) == ("double-quantised", "auto") and "kept as loaded" in c.reason
    assert not tight.config.quantization.unpack_scales and tight.to_event()["unpack_scales"] is False
    assert tight.predicted_peak_bytes + unpacked_scales_bytes(LLAMA7) > tight.budget_bytes
    # written in the config: kept, and the memory plan sizes the split with them
    forced = speed_auto.plan(qlora(**{"quantization.unpack_scales": True}), gpu(8), RAGGED, LLAMA7)
    assert (choice(forced, "4-bit scales").source, forced.config.quantization.unpack_scales) == (
        "yours",
        True,
    )
    assert forced.predicted_peak_bytes <= forced.budget_bytes


def test_nothing_to_choose_without_double_quantised_4bit_weights_on_a_gpu():
    no_double = speed_auto.plan(qlora(**{"quantization.double_quant": False}), gpu(22), RAGGED, LLAMA7)
    assert (
        choice(no_double, "4-bit scales").value == "fp32" and not no_double.config.quantization.unpack_scales
    )
    lora = speed_auto.plan(qlora(method="lora"), gpu(22), RAGGED, LLAMA7)
    assert all(c.name != "4-bit scales" for c in lora.choices)
    int8 = speed_auto.plan(qlora(**{"quantization.bits": 8}), gpu(22), RAGGED, LLAMA7)
    assert all(c.name != "4-bit scales" for c in int8.choices)
    fsdp = speed_auto.plan(qlora(**{"distributed.strategy": "fsdp"}), gpu(22), RAGGED, LLAMA7)
    assert "FSDP" in choice(fsdp, "4-bit scales").reason and not fsdp.config.quantization.unpack_scales
    cpu = speed_auto.Facts(device_kind="cpu", precision="fp32", device_name="cpu", cpu_count=2)
    on_cpu = speed_auto.plan(qlora(), cpu, RAGGED, LLAMA7)
    assert choice(on_cpu, "4-bit scales").value == "double-quantised"
    assert not on_cpu.config.quantization.unpack_scales


def test_the_oom_wizard_counts_them_in_what_ran_and_offers_them_back():
    settings, _ = as_run(type("S", (), {"plan": {}})(), {"unpack_scales": True, "packing": "none"})
    assert settings["quantization.unpack_scales"] is True
    settings, _ = as_run(type("S", (), {"plan": {}})(), {"unpack_scales": False, "packing": "none"})
    assert "quantization.unpack_scales" not in settings
    cfg = config_from_dotted({**ARTICLE_13B, "quantization.unpack_scales": True})
    shape = load_shape(cfg.model.name)
    a = analyse(cfg, oom_event(), shape, DATA, H200, load_catalog(user_file=None))
    option = {o.keys: o for o in a.options}[("unpack_scales",)]
    assert option.config == {"quantization.unpack_scales": False} and option.effect == "none"
    assert option.speed == 1.0 and "two kernels more" in " ".join(option.speed_reasons)
    assert a.estimate.peak_bytes - estimate_memory(
        workload_from_config(config_from_dotted(ARTICLE_13B), shape)
    ).peak_bytes == pytest.approx(unpacked_scales_bytes(shape), abs=1)
    packed = analyse(
        config_from_dotted(ARTICLE_13B), oom_event(), shape, DATA, H200, load_catalog(user_file=None)
    )
    assert ("unpack_scales",) not in {o.keys for o in packed.options}


def test_the_layer_bench_times_the_linears_with_their_scales_unpacked(tmp_path, monkeypatch):
    """bench/lora_kernel_rate.py --unpack-scales (run with and without on a GPU: what a dequantisation
    saves); on the CPU its smoke run unpacks all seven linears and still agrees with peft's layer."""
    import json

    from conftest import ROOT

    pytest.importorskip("bitsandbytes", reason=BNB)
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import lora_kernel_rate

    out = tmp_path / "r.json"
    assert lora_kernel_rate.main(["--smoke", "--unpack-scales", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["scales_unpacked"]["weights"] == 7 and record["scales_unpacked"]["bytes"] > 0
    assert all(record["agreement"][k] < 0.02 for k in ("output", "input_grad", "lora_A_grad", "lora_B_grad"))


@pytest.mark.slow
@pytest.mark.skipif("not has_cuda()", reason="needs a CUDA GPU")
@pytest.mark.parametrize("fused", [False, True], ids=["peft", "fused"])
def test_on_the_gpu_unpacked_scales_train_bit_for_bit_and_take_what_they_report(fused):
    """bitsandbytes' CUDA kernels, bf16 autocast as the trainer runs: the same outputs and gradients
    with the scales unpacked, and the device memory grows by the bytes the unpacking reports."""
    model = peft_model(four_bit=True, dropout=0.1, device="cuda")
    if fused:
        fused_lora.apply(model)
    x = torch.randn(4, 9, 64, device="cuda")
    packed = run(model, x, autocast=torch.bfloat16)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    got = quant_scales.unpack(model)
    torch.cuda.synchronize()
    grown = torch.cuda.memory_allocated() - before
    unpacked = run(model, x, autocast=torch.bfloat16)
    assert torch.equal(packed[0], unpacked[0]) and torch.equal(packed[1], unpacked[1])
    assert all(torch.equal(packed[2][k], unpacked[2][k]) for k in packed[2])
    # the allocator rounds each tensor up to 512 bytes: the fp32 scales of a 48 x 64 weight (48 of
    # them) take one block where the packed ones took three (codes, their scales, their map)
    assert got["weights"] == 1 and abs(grown - got["bytes"]) <= 3 * 512
