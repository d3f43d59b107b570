#!/usr/bin/env python3
"""What a row width the attention kernel has not seen before costs, by SDPA backend (one GPU).

Every cockpit run on ragged rows stalls 2-3 s with the GPU idle at a step whose row width is new
to the run (docs/benchmarks.md, "Stalls": steps 8, 20, 21, 22 unpadded; step 11 padded to 16),
and unsloth's runs of the same data do not. The profile of those runs shows PyTorch's SDPA going
to cuDNN's attention (`cudnn_generated_fort_native_sdpa_sm90_flash_*`), which builds an execution
graph for each new shape before it runs one; PyTorch's other backends (memory-efficient, flash)
build nothing. This times it where the trainer calls it: the packed rows' block-diagonal causal
mask (transformers builds it from position_ids that restart at each sample: train_backend/
packing.py), `--rows` rows of a width, the model's head layout, bf16, forward and backward.

For each backend (`--backends`, default cudnn, efficient, math; flash takes no mask and is timed
on the causal unmasked rows of `--causal-width` only):
- it is warmed up once at `--warm-width` (the kernels' modules load, its first graph is built);
- then for each of `--widths` (each new to the process): the first call's wall time, forward +
  backward, synchronised (a graph build shows here), and the median of `--reps` calls at that
  width after it (the steady cost); the new width's extra is the first less that median;
- the host's time to issue one forward + backward at the last width, unsynchronised (the
  host-bound ragged rows pay it 2-3 times a layer a step: forward, recomputed forward, backward).

  python3 bench/attention_shapes.py --out $OUT/attention_shapes.json            # one GPU
  python3 bench/attention_shapes.py --smoke --out OUT.json                      # CPU: a check only

A backend that refuses the inputs (no kernel for them on this card) is recorded with the reason.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cockpit.models.shape import load_shape  # noqa: E402

BACKENDS = {
    "cudnn": "CUDNN_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
    "flash": "FLASH_ATTENTION",
    "math": "MATH",
}
# widths of packed 512-token rows padded to 16 as the product pads them, none a multiple of another
WIDTHS = (496, 480, 464, 448, 432, 416)


def sample_lengths(width: int, rows: int, seed: int) -> list[list[int]]:
    """Each row's samples (lengths 32..512, as the ragged rows draw them) packed up to `width`."""
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(rows):
        left, row = width, []
        while left >= 32:
            n = min(left, rng.randint(32, 512))
            row.append(n)
            left -= n
        if left:
            row.append(left)  # the tail: a short sample (or padding: a sequence of its own)
        out.append(row)
    return out


def packed_mask(lengths: list[list[int]], width: int, device):
    """[rows, 1, width, width] bool: causal within each sample, nothing across samples."""
    import torch

    rows = []
    for row in lengths:
        ids = torch.cat([torch.full((n,), i) for i, n in enumerate(row)]).to(device)
        same = ids[:, None] == ids[None, :]
        rows.append(same & torch.ones(width, width, dtype=torch.bool, device=device).tril())
    return torch.stack(rows)[:, None]


def make_call(heads: int, kv: int, dim: int, rows: int, width: int, masked: bool, device, dtype, seed: int):
    """A forward + backward of SDPA as transformers' sdpa path calls it (grouped heads repeated)."""
    import torch
    import torch.nn.functional as F

    g = torch.Generator(device="cpu").manual_seed(seed)
    q = torch.randn(rows, heads, width, dim, generator=g).to(device, dtype).requires_grad_()
    k = torch.randn(rows, kv, width, dim, generator=g).to(device, dtype).requires_grad_()
    v = torch.randn(rows, kv, width, dim, generator=g).to(device, dtype).requires_grad_()
    mask = packed_mask(sample_lengths(width, rows, seed), width, device) if masked else None
    grad = torch.randn(rows, heads, width, dim, generator=g).to(device, dtype)

    def call():
        kk, vv = k, v
        if kv != heads:
            kk = k.repeat_interleave(heads // kv, dim=1)
            vv = v.repeat_interleave(heads // kv, dim=1)
        out = F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask, is_causal=mask is None)
        out.backward(grad)

    return call


def time_backend(name: str, layout: tuple[int, int, int], a, device, dtype) -> dict:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    heads, kv, dim = layout
    masked = name != "flash"
    widths = list(a.widths) if masked else [a.causal_width]
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    out: dict = {"backend": name, "masked": masked}

    def wall(call) -> float:
        sync()
        t0 = time.perf_counter()
        call()
        sync()
        return time.perf_counter() - t0

    with sdpa_kernel([getattr(SDPBackend, BACKENDS[name])]):
        try:
            warm = make_call(
                heads, kv, dim, a.rows, a.warm_width if masked else a.causal_width, masked, device, dtype, 0
            )
            out["warm_first_s"] = round(wall(warm), 5)
        except RuntimeError as exc:  # no kernel for these inputs here
            out["refused"] = str(exc).splitlines()[0][:300]
            return out
        per_width = []
        for i, width in enumerate(widths):
            call = make_call(heads, kv, dim, a.rows, width, masked, device, dtype, i + 1)
            first = wall(call)
            steady = statistics.median(wall(call) for _ in range(a.reps))
            per_width.append(
                {
                    "width": width,
                    "first_s": round(first, 5),
                    "steady_s": round(steady, 5),
                    "new_width_extra_s": round(first - steady, 5),
                }
            )
        out["widths"] = per_width
        out["median_new_width_extra_s"] = round(
            statistics.median(w["new_width_extra_s"] for w in per_width), 5
        )
        out["median_steady_s"] = round(statistics.median(w["steady_s"] for w in per_width), 5)
        issue = []
        for _ in range(a.reps):
            sync()
            t0 = time.perf_counter()
            call()
            issue.append(time.perf_counter() - t0)
        sync()
        out["host_issue_s"] = round(statistics.median(issue), 6)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("attention_shapes.json"))
    ap.add_argument("--arch", default="llama-2-7b", help="the head layout of this shipped shape")
    ap.add_argument("--backends", default="cudnn,efficient,flash,math")
    ap.add_argument("--rows", type=int, default=9, help="rows a micro-batch (the 7B ragged plan's 9)")
    ap.add_argument("--widths", default=",".join(map(str, WIDTHS)))
    ap.add_argument("--warm-width", type=int, default=512)
    ap.add_argument("--causal-width", type=int, default=2048, help="flash: unmasked rows of this width")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help="CPU: small heads and rows, math and flash only")
    a = ap.parse_args(argv)
    import torch

    a.widths = [int(w) for w in a.widths.split(",")]
    names = [b.strip() for b in a.backends.split(",") if b.strip()]
    for name in names:
        if name not in BACKENDS:
            raise SystemExit(f"--backends: {name!r} is not one of {', '.join(BACKENDS)}")
    shape = load_shape(f"synthetic:{a.arch}")
    layout = (shape.num_heads, shape.num_kv_heads, shape.head_dim)
    if a.smoke:
        device, dtype = torch.device("cpu"), torch.float32
        layout, a.rows, a.widths, a.warm_width, a.causal_width, a.reps = (4, 2, 16), 2, [48, 32], 64, 64, 2
        names = [n for n in names if n in ("math", "flash")]
    else:
        if not torch.cuda.is_available():
            raise SystemExit("attention_shapes: no CUDA device here (--smoke runs a CPU check)")
        device, dtype = torch.device("cuda"), torch.bfloat16
    record = {
        "bench": "attention_shapes",
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "host": platform.node(),
        "device": torch.cuda.get_device_name() if device.type == "cuda" else platform.processor(),
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "arch": a.arch,
        "layout": {"heads": layout[0], "kv_heads": layout[1], "head_dim": layout[2]},
        "rows": a.rows,
        "smoke": a.smoke,
        "backends": [time_backend(n, layout, a, device, dtype) for n in names],
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(record, indent=1) + "\n")
    for b in record["backends"]:
        if "refused" in b:
            print(f"{b['backend']:>9}: refused: {b['refused']}")
            continue
        print(
            f"{b['backend']:>9}: new width +{1000 * b['median_new_width_extra_s']:.1f} ms, "
            f"steady {1000 * b['median_steady_s']:.2f} ms, host {1e6 * b['host_issue_s']:.0f} us a call "
            f"(warm-up {b['warm_first_s']:.2f} s{', unmasked' if not b['masked'] else ''})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
