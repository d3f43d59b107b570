"""The fused LoRA layer (train_backend/speed/fused_lora.py): the same numbers as peft's layer, forward and
backward, on 16-bit and 4-bit bases, with dropout, bias, gradient checkpointing; peft's own forward
wherever the fused one does not apply; the plan's choice and its reasons."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import BNB, has_cuda  # noqa: F401 - has_cuda: skipif

from train_backend.speed import fused_lora

ROOT = Path(__file__).resolve().parent.parent


class Two(torch.nn.Module):
    def __init__(self, four_bit: bool, bias: bool, device: str = "cpu", dtype=torch.float32):
        super().__init__()
        if four_bit:
            bnb = pytest.importorskip("bitsandbytes", reason=BNB)

            self.q = bnb.nn.Linear4bit(64, 48, bias=bias, compute_dtype=dtype, quant_type="nf4")
            self.q.weight = bnb.nn.Params4bit(
                torch.randn(48, 64) * 0.1, requires_grad=False, quant_type="nf4"
            )
            if bias:
                self.q.bias = torch.nn.Parameter(torch.randn(48) * 0.1)
        else:
            self.q = torch.nn.Linear(64, 48, bias=bias)
        self.o = torch.nn.Linear(48, 32)
        self.to(device)  # quantises a 4-bit weight
        if not four_bit:
            self.q.to(dtype)

    def forward(self, x):
        return self.o(torch.nn.functional.silu(self.q(x)))


def peft_model(four_bit=False, bias=False, dropout=0.0, device="cpu", dtype=torch.float32, **lora):
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    config = LoraConfig(
        r=4, lora_alpha=8, lora_dropout=dropout, target_modules=["q"], init_lora_weights=False, **lora
    )
    model = get_peft_model(Two(four_bit, bias, device, dtype), config)
    model.train()
    return model


def run(model, x, seed=1, autocast=None):
    x = x.detach().clone().requires_grad_()
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)  # the same dropout mask both ways
    if autocast:
        with torch.autocast(x.device.type, dtype=autocast):
            y = model(x)
    else:
        y = model(x)
    (y.float().square().sum()).backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    return y.detach(), x.grad.detach(), grads


def assert_same(a, b, rtol=1e-5, atol=1e-6):
    (ya, xa, ga), (yb, xb, gb) = a, b
    torch.testing.assert_close(yb, ya, rtol=rtol, atol=atol)
    torch.testing.assert_close(xb, xa, rtol=rtol, atol=atol)
    assert ga.keys() == gb.keys() and any("lora_A" in k for k in ga)
    for k in ga:
        torch.testing.assert_close(gb[k], ga[k], rtol=rtol, atol=atol, msg=k)


@pytest.mark.parametrize("four_bit", [False, True])
@pytest.mark.parametrize("dropout", [0.0, 0.3])
@pytest.mark.parametrize("bias", [False, True])
def test_fused_layer_gives_peft_numbers_forward_and_backward(four_bit, dropout, bias):
    model = peft_model(four_bit, bias, dropout)
    x = torch.randn(3, 5, 64)
    before = run(model, x)
    assert fused_lora.apply(model) == {"fused": 1, "kept": {}}
    after = run(model, x)
    assert_same(before, after)
    # and the fused path ran: peft's forward is not called
    calls = []
    peft_forward = model.base_model.model.q.__dict__[fused_lora.ATTR]
    model.base_model.model.q.__dict__[fused_lora.ATTR] = lambda *a, **k: (
        calls.append(1) or peft_forward(*a, **k)
    )
    run(model, x)
    assert calls == []


def deviation(got, reference) -> dict:
    """Largest difference from an fp32 reference over its largest value, per output and gradient."""
    (y, x, g), (yr, xr, gr) = got, reference
    pairs = {"output": (y, yr), "input_grad": (x, xr), **{k: (g[k], gr[k]) for k in gr}}
    return {
        k: float((a.float() - b.float()).abs().max() / b.float().abs().max()) for k, (a, b) in pairs.items()
    }


def assert_bf16_no_worse_than_peft(model, x):
    """In bf16 the two round at different places: each is held to the fp32 result, the fused layer
    within peft's own bf16 error (x 1.5) and 2% of the largest value."""
    reference = run(model, x)
    peft_bf16 = deviation(run(model, x, autocast=torch.bfloat16), reference)
    fused_lora.apply(model)
    got = run(model, x, autocast=torch.bfloat16)
    assert got[0].dtype == torch.bfloat16
    fused_bf16 = deviation(got, reference)
    for k, err in fused_bf16.items():
        assert err <= max(1.5 * peft_bf16[k], 1e-3) and err < 0.02, (k, fused_bf16, peft_bf16)


def test_bf16_autocast_is_as_close_to_fp32_as_peft():
    assert_bf16_no_worse_than_peft(peft_model(four_bit=True), torch.randn(4, 7, 64))


def test_lora_factors_keep_their_dtype_and_get_gradients_in_it():
    model = peft_model()
    fused_lora.apply(model)
    _, _, grads = run(model, torch.randn(2, 3, 64), autocast=torch.bfloat16)
    a = model.base_model.model.q.lora_A["default"].weight
    assert (
        a.dtype == torch.float32 and grads["base_model.model.q.lora_A.default.weight"].dtype == torch.float32
    )


def test_gradient_checkpointing_recomputes_through_the_fused_layer():
    from torch.utils.checkpoint import checkpoint

    model = peft_model(four_bit=True)
    x = torch.randn(2, 6, 64)

    def ckpt(m, inp, reentrant):
        inp = inp.detach().clone().requires_grad_()
        m.zero_grad(set_to_none=True)
        y = checkpoint(m, inp, use_reentrant=reentrant)
        y.square().sum().backward()
        return y.detach(), inp.grad, {n: p.grad.clone() for n, p in m.named_parameters() if p.requires_grad}

    plain = run(model, x)
    fused_lora.apply(model)
    for reentrant in (False, True):
        assert_same(plain, ckpt(model, x, reentrant))


def test_peft_forward_kept_without_grad_disabled_adapters_and_merged():
    model = peft_model()
    fused_lora.apply(model)
    layer = model.base_model.model.q
    seen = []
    original = layer.__dict__[fused_lora.ATTR]
    layer.__dict__[fused_lora.ATTR] = lambda *a, **k: seen.append(1) or original(*a, **k)
    x = torch.randn(2, 64)
    with torch.no_grad():
        model(x)  # evaluation and generation: peft's (bitsandbytes' inference kernels for 4-bit)
    assert len(seen) == 1
    with model.disable_adapter():
        model(x)
    assert len(seen) == 2
    model.merge_adapter()
    model(x)
    assert len(seen) == 3
    model.unmerge_adapter()
    model(x)
    assert len(seen) == 3


def test_layers_it_cannot_take_keep_peft_and_say_why():
    dora = peft_model(use_dora=True)
    assert fused_lora.apply(dora) == {"fused": 0, "kept": {"a LoRA variant (DoRA)": 1}}
    two = peft_model()
    from peft import LoraConfig

    two.add_adapter("second", LoraConfig(r=2, target_modules=["q"]))
    assert fused_lora.apply(two) == {"fused": 0, "kept": {"more than one adapter": 1}}
    biased = peft_model(lora_bias=True, bias=True)
    assert fused_lora.apply(biased) == {"fused": 0, "kept": {"lora_bias": 1}}


def test_state_dict_and_remove_leave_peft_as_it_was():
    model = peft_model()
    keys = list(model.state_dict())
    x = torch.randn(2, 64)
    before = run(model, x)
    fused_lora.apply(model)
    assert list(model.state_dict()) == keys
    assert fused_lora.apply(model) == {"fused": 0, "kept": {}}  # applied once
    assert fused_lora.remove(model) == 1 and "forward" not in model.base_model.model.q.__dict__
    assert_same(before, run(model, x))


def test_the_bench_smoke_agrees_and_solves(tmp_path):
    pytest.importorskip("bitsandbytes", reason=BNB)  # the bench's layers are 4-bit
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "lora_kernel_rate.py"), "--smoke", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(out.read_text())
    for key in ("output", "input_grad", "lora_A_grad", "lora_B_grad"):
        assert record["agreement"][key] < 0.02, (key, record["agreement"])
    assert record["linears"] == 7 and record["four_bit"]
    assert set(record["solved"]) >= {"host_share", "device_share", "adapter_bytes"}


def test_solve_by_hand():
    sys.path.insert(0, str(ROOT / "bench"))
    import lora_kernel_rate

    record = {
        "host": {
            "base": {"forward": 10e-6, "forward_backward": 30e-6},
            "peft": {"forward": 110e-6, "forward_backward": 230e-6},
            "fused": {"forward": 35e-6, "forward_backward": 80e-6},
        },
        "device": {"base": 1.0, "peft": 1.5, "fused": 1.1},
        "features": 1000,
        "device_tokens": 100,
        "bandwidth_gbs": 0.001,
    }
    got = lora_kernel_rate.solve(record)
    assert got["host_share_forward"] == 0.25  # (35 - 10) / (110 - 10)
    assert got["host_share_backward"] == 0.25  # (45 - 20) / (120 - 20)
    assert got["host_share"] == 0.25  # (80 - 30) / (230 - 30)
    assert got["device_share"] == 0.2  # 0.1 / 0.5
    assert got["adapter_bytes"] == {
        "peft": 5.0,
        "fused": 1.0,
    }  # 0.5 s x 1e6 B/s / (100 tokens x 1000 features)


@pytest.mark.slow
@pytest.mark.skipif("not has_cuda()", reason="needs a CUDA GPU")
def test_on_the_gpu_4bit_bf16_is_as_close_to_fp32_as_peft():
    model = peft_model(four_bit=True, device="cuda")
    assert_bf16_no_worse_than_peft(model, torch.randn(4, 9, 64, device="cuda"))
