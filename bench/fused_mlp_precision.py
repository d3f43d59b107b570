"""How far bf16 lands from fp32 for peft's layers, the fused LoRA linears and the fused MLP block
(with Liger's SwiGLU kernels and with PyTorch's ops), per output and per gradient: which part of
the block adds error. On a CUDA GPU by default (bitsandbytes' kernels for the 4-bit base);
`--device cpu` runs the same on the CPU (bitsandbytes' CPU path, PyTorch's ops).

    python3 bench/fused_mlp_precision.py --out OUT.json [--hidden 64 --inter 172] [--seeds 1]
        [--compute-dtype float32|bfloat16] [--residual fp32|bf16] [--device cuda|cpu]

The fp32 reference runs the 4-bit layers' matmuls in fp32 too. `--residual fp32` (the default,
the GPU test's setting): the model's own weights, norms and residual stream in fp32 under bf16
autocast, the 4-bit layers at `--compute-dtype`. `--residual bf16`: as the trainer loads a model (every
weight outside the adapters in bf16, the 4-bit layers' compute dtype bf16, the residual stream bf16);
the fp32 reference is the same model before the cast. With several seeds (a fresh model and batch
each) the summary gives, per variant, the median and the range over seeds of its error over peft's,
and how many seeds pass the GPU test's rule (tests/test_fused_mlp.py: each of logits, dx and every
gradient within 2x peft's error + 0.001).

Writes {"machine": ..., "cases": [{"seed": s, "base": "4-bit", "variant": ..., "logits": err, "dx":
err, "grads": {group: relative err}}], "summary": [...]}: errors are
max |bf16 - fp32|, gradients relative to the fp32 gradient's largest magnitude, grouped by layer part
and factor (gate_proj.lora_A, ...).
"""

from __future__ import annotations

import argparse
import builtins
import contextlib
import json
import platform
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def build(four_bit: bool, hidden: int, inter: int, compute_dtype: str, seed: int = 0, device: str = "cuda"):
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
    model.to(device).train()
    return model


def set_compute_dtype(model, dtype) -> None:
    """The 4-bit layers' compute dtype (bitsandbytes runs their matmuls in it)."""
    for module in model.modules():
        if getattr(module, "compute_dtype", None) is not None:
            module.compute_dtype = dtype


def to_trainer_dtypes(model) -> None:
    """As the trainer loads a model: every weight outside the adapters in bf16, the 4-bit layers'
    compute dtype bf16 (bnb_4bit_compute_dtype), so the residual stream is bf16."""
    import torch

    set_compute_dtype(model, torch.bfloat16)
    for name, p in model.named_parameters():
        if p.dtype == torch.float32 and "lora_" not in name:
            p.data = p.data.to(torch.bfloat16)


def step(model, x, bf16: bool):
    import torch

    model.zero_grad(set_to_none=True)
    embeds = model.get_input_embeddings()(x).detach()
    embeds = (embeds if embeds.dtype == torch.bfloat16 else embeds.float()).requires_grad_()
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=bf16):
        out = model(inputs_embeds=embeds, labels=x)
    out.loss.backward()
    grads = {n: p.grad.float().clone() for n, p in model.named_parameters() if p.requires_grad}
    return out.logits.float(), embeds.grad.float(), grads


def errors(got, exact) -> dict:
    groups: dict[str, float] = {}
    params: dict[str, float] = {}
    for name, g in got[2].items():
        ref = exact[2][name]
        key = re.sub(r".*\.(\w+_proj)\.(lora_[AB])\..*", r"\1.\2", name)
        rel = float((g - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
        groups[key] = max(groups.get(key, 0.0), rel)
        params[name] = rel
    return {
        "logits": float((got[0] - exact[0]).abs().max()),
        "dx": float((got[1] - exact[1]).abs().max()),
        "grads": {k: round(v, 6) for k, v in sorted(groups.items())},
        "params": params,
    }


def passes_gpu_test_rule(case: dict, peft: dict) -> bool:
    """tests/test_fused_mlp.py's GPU rule: logits, dx and each gradient within 2x peft's + 0.001."""
    if any(case[k] > 2 * peft[k] + 1e-3 for k in ("logits", "dx")):
        return False
    return all(err <= 2 * peft["params"][name] + 1e-3 for name, err in case["params"].items())


def summary(cases: list[dict]) -> list[dict]:
    """Per base and variant: its error over peft's of the same seed (median, range) and the seeds
    that pass the GPU test's rule."""
    out = []
    peft = {(c["seed"], c["base"]): c for c in cases if c["variant"] == "peft"}
    for base, variant in dict.fromkeys((c["base"], c["variant"]) for c in cases if c["variant"] != "peft"):
        rows = [c for c in cases if c["base"] == base and c["variant"] == variant]
        entry: dict = {"base": base, "variant": variant, "seeds": len(rows)}
        for what in ("logits", "dx", "grad"):
            ratios = []
            for c in rows:
                ref = peft[(c["seed"], base)]
                if what == "grad":
                    got, want = max(c["grads"].values()), max(ref["grads"].values())
                else:
                    got, want = c[what], ref[what]
                ratios.append(got / want if want > 0 else float("inf"))
            entry[what] = {"median": round(statistics.median(ratios), 3), "min": round(min(ratios), 3),
                           "max": round(max(ratios), 3)}  # fmt: skip
        entry["pass_gpu_test_rule"] = sum(passes_gpu_test_rule(c, peft[(c["seed"], base)]) for c in rows)
        out.append(entry)
    return out


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
    ap.add_argument("--residual", default="fp32", choices=("fp32", "bf16"), help="bf16: as the trainer loads")
    ap.add_argument("--seeds", type=int, default=1, help="a fresh model and batch for each")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    args = ap.parse_args(argv)
    import torch

    from train_backend.speed import fused_lora, fused_mlp

    on_gpu = args.device == "cuda"
    bases = [False, True]
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        bases = [False]
        print("bitsandbytes does not import here: the 16-bit base only", file=sys.stderr)
    cases = []
    for seed in range(args.seeds):
        for four_bit in bases:
            # the reference in fp32 throughout, the 4-bit layers' matmuls too; then their compute dtype
            model = build(four_bit, args.hidden, args.inter, "float32", seed, args.device)
            gen = torch.Generator().manual_seed(seed + 1)
            x = torch.randint(0, 128, (2, args.tokens), generator=gen).to(args.device)
            exact = step(model, x, bf16=False)
            if args.residual == "bf16":
                to_trainer_dtypes(model)
            else:
                set_compute_dtype(model, getattr(torch, args.compute_dtype))
            base = "4-bit" if four_bit else "16-bit"

            def case(variant: str, seed=seed, base=base, model=model, x=x, exact=exact) -> dict:
                return {"seed": seed, "base": base, "variant": variant, **errors(step(model, x, True), exact)}

            cases.append(case("peft"))
            fused_lora.apply(model)
            cases.append(case("fused linears"))
            fused_mlp.apply(model)
            if on_gpu:  # Liger's kernels run on a GPU only
                cases.append(case("fused MLP, Liger"))
            with liger_hidden():
                fused_mlp.swiglu.cache_clear()
                cases.append(case("fused MLP, torch ops"))
            fused_mlp.swiglu.cache_clear()
    record = {
        "machine": {
            "device": torch.cuda.get_device_name(0) if on_gpu else platform.processor() or platform.machine(),
            "torch": torch.__version__,
            "python": platform.python_version(),
        },
        "shape": {"hidden": args.hidden, "inter": args.inter, "tokens": 2 * args.tokens},
        "compute_dtype": args.compute_dtype,
        "residual": args.residual,
        "cases": [{k: v for k, v in c.items() if k != "params"} for c in cases],  # per parameter: too long
        "summary": summary(cases),
    }
    Path(args.out).write_text(json.dumps(record, indent=1))
    for c in cases:
        worst = max(c["grads"].items(), key=lambda kv: kv[1])
        head = f"seed {c['seed']} {c['base']:6} {c['variant']:22} logits {c['logits']:.5f} dx {c['dx']:.6f}"
        print(f"{head} worst grad {worst[0]} {worst[1]:.5f}")
    for e in record["summary"]:
        ratios = " ".join(
            f"{k} {e[k]['median']:.2f}x ({e[k]['min']:.2f}-{e[k]['max']:.2f})"
            for k in ("logits", "dx", "grad")
        )
        print(f"{e['base']:6} {e['variant']:22} over peft: {ratios}; "
              f"GPU test's rule passed on {e['pass_gpu_test_rule']} of {e['seeds']} seeds")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
