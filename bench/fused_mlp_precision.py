"""How far bf16 lands from fp32 for peft's layers, the fused LoRA linears and the fused MLP block
(with Liger's SwiGLU kernels and with PyTorch's ops), per output and per gradient: which part of
the block adds error. Runs on a CUDA GPU (bitsandbytes' kernels for the 4-bit base).

    python3 bench/fused_mlp_precision.py --out OUT.json [--hidden 64 --inter 172]

Writes {"machine": ..., "cases": [{"base": "4-bit", "variant": ..., "logits": err, "dx": err,
"grads": {group: relative err}}]}: errors are max |bf16 - fp32|, gradients relative to the fp32
gradient's largest magnitude, grouped by layer part and factor (gate_proj.lora_A, ...).
"""

from __future__ import annotations

import argparse
import builtins
import contextlib
import json
import platform
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def build(four_bit: bool, hidden: int, inter: int, compute_dtype: str, seed: int = 0):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        hidden_size=hidden,
        intermediate_size=inter,
        num_attention_heads=4,
        num_key_value_heads=4,
        num_hidden_layers=2,
        vocab_size=128,
        attn_implementation="sdpa",
        use_cache=False,
    )
    model = LlamaForCausalLM(cfg)
    if four_bit:
        import bitsandbytes as bnb

        for module in list(model.modules()):
            for name, child in list(module.named_children()):
                if isinstance(child, torch.nn.Linear) and name != "lm_head":
                    q = bnb.nn.Linear4bit(
                        child.in_features,
                        child.out_features,
                        bias=False,
                        compute_dtype=getattr(torch, compute_dtype),
                    )
                    q.weight = bnb.nn.Params4bit(
                        child.weight.data.clone(), requires_grad=False, quant_type="nf4"
                    )
                    setattr(module, name, q)
    for p in model.parameters():
        p.requires_grad_(False)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    model = get_peft_model(
        model,
        LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=targets, init_lora_weights=False),
    )
    model.to("cuda").train()
    return model


def step(model, x, bf16: bool):
    import torch

    model.zero_grad(set_to_none=True)
    embeds = model.get_input_embeddings()(x).detach().float().requires_grad_()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
        out = model(inputs_embeds=embeds, labels=x)
    out.loss.backward()
    grads = {n: p.grad.float().clone() for n, p in model.named_parameters() if p.requires_grad}
    return out.logits.float(), embeds.grad.float(), grads


def errors(got, exact) -> dict:
    groups: dict[str, float] = {}
    for name, g in got[2].items():
        ref = exact[2][name]
        key = re.sub(r".*\.(\w+_proj)\.(lora_[AB])\..*", r"\1.\2", name)
        rel = float((g - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
        groups[key] = max(groups.get(key, 0.0), rel)
    return {
        "logits": float((got[0] - exact[0]).abs().max()),
        "dx": float((got[1] - exact[1]).abs().max()),
        "grads": {k: round(v, 6) for k, v in sorted(groups.items())},
    }


@contextlib.contextmanager
def liger_hidden():
    """liger_kernel cannot be imported inside: the block falls back to PyTorch's ops."""
    real_import = builtins.__import__

    def no_liger(name, *a, **kw):
        if name.startswith("liger_kernel"):
            raise ImportError("hidden for this case")
        return real_import(name, *a, **kw)

    builtins.__import__ = no_liger
    try:
        yield
    finally:
        builtins.__import__ = real_import


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--inter", type=int, default=172)
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--compute-dtype", default="float32", choices=("float32", "bfloat16"))
    args = ap.parse_args(argv)
    import torch

    from train_backend.speed import fused_lora, fused_mlp

    cases = []
    for four_bit in (False, True):
        model = build(four_bit, args.hidden, args.inter, args.compute_dtype)
        x = torch.randint(0, 128, (2, args.tokens), generator=torch.Generator().manual_seed(1)).cuda()
        exact = step(model, x, bf16=False)
        base = "4-bit" if four_bit else "16-bit"
        cases.append({"base": base, "variant": "peft", **errors(step(model, x, True), exact)})
        fused_lora.apply(model)
        cases.append({"base": base, "variant": "fused linears", **errors(step(model, x, True), exact)})
        fused_mlp.apply(model)
        cases.append({"base": base, "variant": "fused MLP, Liger", **errors(step(model, x, True), exact)})
        with liger_hidden():
            fused_mlp.swiglu.cache_clear()
            cases.append(
                {"base": base, "variant": "fused MLP, torch ops", **errors(step(model, x, True), exact)}
            )
        fused_mlp.swiglu.cache_clear()
    record = {
        "machine": {
            "gpu": torch.cuda.get_device_name(0),
            "torch": torch.__version__,
            "python": platform.python_version(),
        },
        "shape": {"hidden": args.hidden, "inter": args.inter, "tokens": 2 * args.tokens},
        "compute_dtype": args.compute_dtype,
        "cases": cases,
    }
    Path(args.out).write_text(json.dumps(record, indent=1))
    for c in cases:
        worst = max(c["grads"].items(), key=lambda kv: kv[1])
        head = f"{c['base']:6} {c['variant']:22} logits {c['logits']:.5f} dx {c['dx']:.6f}"
        print(f"{head} worst grad {worst[0]} {worst[1]:.5f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
