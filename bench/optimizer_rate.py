#!/usr/bin/env python3
"""How fast the trainer's optimizer step runs, by optimizer, on the GPU (one GPU, CUDA).

The speed model (cockpit/models/speed.py) costs an optimizer step as the bytes its kernels move
(OPTIMIZER_BYTES, counted from the sources, with HF Trainer's gradient clipping) at the card's
bandwidth, plus, for bitsandbytes' optimizers, a host time per tensor (they synchronise the device
after each). This times the step as HF Trainer runs it, `clip_grad_norm_` then `step()`, on fp32
parameters shaped as a model's (a full fine-tune's masters) and on many small ones (LoRA adapters'
A and B), so that the bytes' share of the bandwidth and the time per tensor can be told apart:

- `model`: every weight of `--arch` (default llama-3.2-1b: 146 tensors, 1.24B parameters);
- `adapters`: 448 tensors of 16 x 4096 and 4096 x 16 (a 7B's seven linears, r 16, 32 layers).

  python bench/optimizer_rate.py [--out optimizer_rate.json] [--steps 8]

Writes one JSON object: machine, versions, and per optimizer and case the median step time, the
counted bytes, their share of the datasheet bandwidth (REFERENCE_BANDWIDTH_GBS) and the time per
tensor.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cockpit.models import shipped  # noqa: E402
from cockpit.models.speed import OPTIMIZER_BYTES  # noqa: E402

REFERENCE_BANDWIDTH_GBS = 4800.0  # the H200's datasheet HBM3e bandwidth (the catalog's figure)
OPTIMIZERS = ("adamw_torch", "adamw_torch_fused", "adamw_8bit", "paged_adamw_8bit", "paged_adamw_32bit")


def model_shapes(arch: str) -> list[tuple[int, ...]]:
    c = shipped.hf_config_dict(arch)
    h, i, layers = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    heads = c["num_attention_heads"]
    kv = c.get("num_key_value_heads", heads)
    d = c.get("head_dim") or h // heads
    per_layer = [(heads * d, h), (kv * d, h), (kv * d, h), (h, heads * d), (i, h), (i, h), (h, i), (h,), (h,)]
    shapes = [(c["vocab_size"], h)] + per_layer * layers + [(h,)]
    if not c.get("tie_word_embeddings"):
        shapes.append((c["vocab_size"], h))
    return shapes


def adapter_shapes() -> list[tuple[int, ...]]:
    return [(16, 4096), (4096, 16)] * (7 * 32)


def make_optimizer(name: str, params):
    import torch

    if name == "adamw_torch":
        return torch.optim.AdamW(params, lr=1e-5, foreach=True)
    if name == "adamw_torch_fused":
        return torch.optim.AdamW(params, lr=1e-5, fused=True)
    import bitsandbytes as bnb

    return {
        "adamw_8bit": bnb.optim.AdamW8bit,
        "paged_adamw_8bit": bnb.optim.PagedAdamW8bit,
        "paged_adamw_32bit": bnb.optim.PagedAdamW32bit,
    }[name](params, lr=1e-5)


def time_step(name: str, shapes: list[tuple[int, ...]], steps: int) -> dict:
    import torch

    params = [torch.nn.Parameter(torch.randn(s, device="cuda") * 0.02) for s in shapes]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    opt = make_optimizer(name, params)
    times = []
    for k in range(steps + 3):
        torch.cuda.synchronize()
        started = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(params, 0.3)
        opt.step()
        torch.cuda.synchronize()
        if k >= 3:  # the first steps make the states
            times.append(time.perf_counter() - started)
    n = sum(p.numel() for p in params)
    del opt, params
    torch.cuda.empty_cache()
    step_s = statistics.median(times)
    counted = OPTIMIZER_BYTES[name] * n
    return {
        "optimizer": name,
        "tensors": len(shapes),
        "params": n,
        "step_s": step_s,
        "step_s_all": [round(t, 6) for t in times],
        "counted_bytes": counted,
        "bandwidth_share": counted / step_s / (REFERENCE_BANDWIDTH_GBS * 1e9),
        "per_tensor_s": step_s / len(shapes),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("optimizer_rate.json"))
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--arch", default="llama-3.2-1b")
    args = ap.parse_args()
    import torch

    started = time.time()
    rows = []
    for case, shapes in (("model", model_shapes(args.arch)), ("adapters", adapter_shapes())):
        for name in OPTIMIZERS:
            try:
                row = {"case": case, **time_step(name, shapes, args.steps)}
            except Exception as exc:  # an optimizer that cannot run here is recorded, not fatal
                row = {"case": case, "optimizer": name, "error": f"{type(exc).__name__}: {exc}"[:300]}
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "step_s_all"}), flush=True)
    versions = {"torch": torch.__version__, "cuda": torch.version.cuda}
    try:
        import bitsandbytes

        versions["bitsandbytes"] = bitsandbytes.__version__
    except ImportError:
        pass
    record = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "machine": torch.cuda.get_device_name(0),
        "versions": versions,
        "arch": args.arch,
        "reference_bandwidth_gbs": REFERENCE_BANDWIDTH_GBS,
        "rows": rows,
    }
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {args.out} ({time.time() - started:.0f} s)")


if __name__ == "__main__":
    main()
