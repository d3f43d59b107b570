#!/usr/bin/env python3
"""How fast the trainer's optimizer step runs, by optimizer, on the GPU (one GPU, CUDA).

The speed model (cockpit/speed/model.py) costs an optimizer step as the bytes its kernels move
(OPTIMIZER_BYTES, counted from the sources, with HF Trainer's gradient clipping) at the card's
bandwidth, plus, for bitsandbytes' optimizers, a host time per tensor (they synchronise the device
after each). This times the step as HF Trainer runs it, `clip_grad_norm_` then `step()`, on fp32
parameters shaped as a model's (a full fine-tune's masters) and on many small ones (LoRA adapters'
A and B), so that the bytes' share of the bandwidth and the time per tensor can be told apart:

- `model`: every weight of `--arch` (default llama-3.2-1b: 146 tensors, 1.24B parameters);
- `adapters`: 448 tensors of 16 x 4096 and 4096 x 16 (a 7B's seven linears, r 16, 32 layers).

  python bench/optimizer_rate.py [--out optimizer_rate.json] [--steps 8]
  python bench/optimizer_rate.py --solve bench/results/2026-12-04-optimizer-rate-h200.json

Writes one JSON object: machine, versions, and per optimizer and case the median step time and the
counted bytes (with, for a glance, the whole step's time over its bytes as a share of the datasheet
bandwidth, REFERENCE_BANDWIDTH_GBS, and over its tensors). `--solve` takes both cases of each
optimizer apart into a time per tensor and a share of the bandwidth: speed.OPTIMIZER_RATES.
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

from cockpit.models.shape import load_shape  # noqa: E402
from cockpit.speed.model import OPTIMIZER_BYTES  # noqa: E402

REFERENCE_BANDWIDTH_GBS = 4800.0  # the H200's datasheet HBM3e bandwidth (the catalog's figure)
OPTIMIZERS = ("adamw_torch", "adamw_torch_fused", "adamw_8bit", "paged_adamw_8bit", "paged_adamw_32bit")


def model_shapes(arch: str) -> list[tuple[int, ...]]:
    """Every trainable tensor of a full fine-tune of `arch` (speed.trainable_tensors counts them):
    the embeddings, each block's linears (out x in) and two norms, the final norm, an untied head."""
    s = load_shape(f"synthetic:{arch}")
    block = [(out, inp) for inp, out in s.linear_shapes().values()] + [(s.hidden_size,)] * 2
    head = [] if s.tie_embeddings else [(s.vocab_size, s.hidden_size)]
    return [(s.vocab_size, s.hidden_size)] + block * s.num_layers + [(s.hidden_size,)] + head


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


def solve_rates(record: dict) -> dict[str, tuple[float, float]]:
    """For each optimizer timed in both cases: (seconds per tensor, share of the bandwidth), the two
    unknowns of step_s = tensors x per_tensor + counted_bytes / (bandwidth x share) solved from the
    model's and the adapters' step (speed.OPTIMIZER_RATES are these)."""
    rows = {(r["case"], r["optimizer"]): r for r in record["rows"] if "step_s" in r}
    bandwidth = record["reference_bandwidth_gbs"] * 1e9
    out = {}
    for name in OPTIMIZERS:
        if ("model", name) not in rows or ("adapters", name) not in rows:
            continue
        big, small = rows[("model", name)], rows[("adapters", name)]
        a, b = big["tensors"], big["counted_bytes"] / bandwidth
        c, d = small["tensors"], small["counted_bytes"] / bandwidth
        det = a * d - b * c  # Cramer's rule on [[a, b], [c, d]] [per_tensor, 1 / share] = [t_big, t_small]
        per_tensor = (big["step_s"] * d - b * small["step_s"]) / det
        out[name] = (per_tensor, det / (a * small["step_s"] - c * big["step_s"]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("optimizer_rate.json"))
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--arch", default="llama-3.2-1b")
    ap.add_argument("--solve", type=Path, help="print the per-tensor time and bandwidth share of a record")
    args = ap.parse_args()
    if args.solve:
        for name, (per_tensor, share) in solve_rates(json.loads(args.solve.read_text())).items():
            print(f"{name:18s} {per_tensor * 1e6:6.2f} us a tensor, {share:.4f} of the bandwidth")
        return
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
