#!/usr/bin/env python3
"""How fast the trainer's attention kernel runs, by row length and head width (one GPU, CUDA).

The speed model (cockpit/speed/model.py) costs causal attention by its FLOPs over a share of the
card's dense bf16 peak. One share for every row length left the fit to guess how that share moves
with the row: fitted on rows of 8,192 tokens at most, it missed the one 16,384-token run by a third
held out (docs/estimator.md). This measures the share directly, on the kernel the product's models
call: transformers' SDPA path (`sdpa_attention_forward`: grouped-query heads passed to PyTorch's
`scaled_dot_product_attention` with `enable_gqa` where transformers does so, else repeated), causal,
no mask (full-length rows), bf16, forward and backward timed apart with CUDA events.

FLOPs are counted as the speed model counts them: the forward 2 x rows x heads x seq^2 x head_dim
(QK^T and AV over half the square), the backward 2.5 times that. The share of the peak is those
FLOPs over the time and over REFERENCE_BF16_TFLOPS (the H200's dense bf16 datasheet rate).

  python bench/attention_rate.py [--out attention_rate.json] [--reps 10]
  python bench/attention_rate.py --fit bench/results/2026-12-04-attention-rate-h200.json

Writes one JSON object: machine, versions, and one row per (heads, kv heads, head_dim, seq, tokens).
`--fit` fits, for each head width and pass, the speed model's kernel model (speed.AttentionKernel: a
fixed time per call, then the FLOPs at share_max x seq / (seq + half_seq) of the peak) to a record's
rows by least squares of the log error (no GPU needed), and prints the constants with each row's
error: the speed model's ATTENTION_KERNELS (cockpit/speed/model.py), which a training step's
attention takes times one fitted ATTENTION_SCALE (docs/estimator.md).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cockpit.models.shape import load_shape  # noqa: E402
from cockpit.speed.model import REFERENCE_BF16_TFLOPS, AttentionKernel  # noqa: E402

# the shipped shapes' distinct attention layouts (heads, kv heads, head_dim), one architecture each
ARCHS = ("llama-3.2-1b", "qwen2.5-1.5b", "llama-2-7b", "llama-3.1-8b")
SEQS = (256, 512, 1024, 2048, 4096, 8192, 12288, 16384)
TOKENS = (4096, 16384)  # tokens per micro-batch: rows = max(1, tokens // seq)


def layout(arch: str) -> tuple[int, int, int]:
    s = load_shape(f"synthetic:{arch}")
    return s.num_heads, s.num_kv_heads, s.head_dim


def time_one(heads: int, kv: int, dim: int, seq: int, rows: int, reps: int) -> tuple[float, float]:
    """Median (forward_s, backward_s) of the kernel as transformers calls it."""
    import torch
    from transformers.integrations import sdpa_attention as sa

    dev = torch.device("cuda")
    q = torch.randn(rows, heads, seq, dim, device=dev, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(rows, kv, seq, dim, device=dev, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(rows, kv, seq, dim, device=dev, dtype=torch.bfloat16, requires_grad=True)
    gqa = heads != kv and sa.use_gqa_in_sdpa(None, k, v)

    def forward():
        kk, vv = k, v
        if heads != kv and not gqa:
            kk, vv = sa.repeat_kv(k, heads // kv), sa.repeat_kv(v, heads // kv)
        extra = {"enable_gqa": True} if gqa else {}
        return torch.nn.functional.scaled_dot_product_attention(
            q, kk, vv, is_causal=True, scale=dim**-0.5, **extra
        )

    grad = torch.randn(rows, heads, seq, dim, device=dev, dtype=torch.bfloat16)
    fw, bw = [], []
    for i in range(reps + 3):
        a, b, c = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        a.record()
        out = forward()
        b.record()
        out.backward(grad)
        c.record()
        torch.cuda.synchronize()
        q.grad = k.grad = v.grad = None
        if i >= 3:
            fw.append(a.elapsed_time(b) / 1e3)
            bw.append(b.elapsed_time(c) / 1e3)
    return statistics.median(fw), statistics.median(bw)


PASSES = {"forward": 1.0, "backward": 2.5}  # the counted FLOPs of a pass over the forward's


def kernel_inputs(row: dict, kind: str) -> tuple[float, float]:
    """(counted FLOPs of the pass, seq) of one measured row."""
    forward = 2.0 * row["rows"] * row["heads"] * row["seq"] ** 2 * row["head_dim"]
    return PASSES[kind] * forward, float(row["seq"])


def fit_kernels(record: dict) -> dict[int, dict[str, tuple[float, float, float, list[float]]]]:
    """For each head width and pass: (fixed_s, share_max, half_seq, the rows' log errors)."""
    import numpy as np
    from fit_speed import levenberg_marquardt

    peak = record["reference_bf16_tflops"] * 1e12
    out: dict[int, dict] = {}
    for dim in sorted({r["head_dim"] for r in record["rows"]}):
        rows = [r for r in record["rows"] if r["head_dim"] == dim]
        out[dim] = {}
        for kind in PASSES:

            def errors(x, rows=rows, kind=kind):
                return np.array(
                    [
                        math.log(
                            AttentionKernel(*np.exp(x)).seconds(*kernel_inputs(r, kind), peak)
                            / r[f"{kind}_s"]
                        )
                        for r in rows
                    ]
                )

            x, _ = levenberg_marquardt(errors, np.log([1e-4, 0.5, 1000.0]))
            out[dim][kind] = (*np.exp(x), list(errors(x)))
    return out


def print_fit(path: Path) -> None:
    record = json.loads(path.read_text())
    fitted = fit_kernels(record)
    for dim, passes in fitted.items():
        for kind, (fixed_s, share, half, errs) in passes.items():
            rms = math.sqrt(sum(e * e for e in errs) / len(errs))
            worst = max(errs, key=abs)
            print(
                f"head_dim {dim} {kind:8s}: fixed_s={fixed_s:.3e} share_max={share:.4f} half_seq={half:.0f}"
                f"   (log error rms {rms:.3f}, worst {worst:+.3f} over {len(errs)} rows)"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("attention_rate.json"))
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--fit", type=Path, help="fit the speed model's kernel constants to this record")
    args = ap.parse_args()
    if args.fit:
        print_fit(args.fit)
        return
    import torch
    import transformers

    rows_out = []
    started = time.time()
    for arch in ARCHS:
        heads, kv, dim = layout(arch)
        for tokens in TOKENS:
            for seq in SEQS:
                rows = max(1, tokens // seq)
                fw_s, bw_s = time_one(heads, kv, dim, seq, rows, args.reps)
                peak = REFERENCE_BF16_TFLOPS * 1e12
                row = {
                    "arch": arch,
                    "heads": heads,
                    "kv_heads": kv,
                    "head_dim": dim,
                    "seq": seq,
                    "rows": rows,
                    "tokens": rows * seq,
                    "forward_s": fw_s,
                    "backward_s": bw_s,
                }
                row["forward_share"] = kernel_inputs(row, "forward")[0] / fw_s / peak
                row["backward_share"] = kernel_inputs(row, "backward")[0] / bw_s / peak
                rows_out.append(row)
                print(
                    f"{arch:14s} h{heads}/{kv} d{dim} {rows:3d} x {seq:5d}: forward {fw_s * 1e3:7.3f} ms "
                    f"({row['forward_share']:.3f} of peak), backward {bw_s * 1e3:7.3f} ms "
                    f"({row['backward_share']:.3f})",
                    flush=True,
                )
    record = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "machine": torch.cuda.get_device_name(0),
        "host": platform.node(),
        "versions": {
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "transformers": transformers.__version__,
        },
        "reference_bf16_tflops": REFERENCE_BF16_TFLOPS,
        "counting": "forward 2 x rows x heads x seq^2 x head_dim (causal half); backward 2.5x the forward",
        "rows": rows_out,
    }
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {args.out} ({time.time() - started:.0f} s)")


if __name__ == "__main__":
    main()
