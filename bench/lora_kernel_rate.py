#!/usr/bin/env python3
"""The fused LoRA layer (train_backend/speed/fused_lora.py) against peft's, timed alone on one GPU.

One model shape's adapted linears (`--layers` decoder layers' worth of the seven: q, k, v, o,
gate, up, down), 4-bit nf4 bases (bitsandbytes' Linear4bit, double quant, bf16 compute; `--lora`:
16-bit bases) with r-16 adapters in fp32 as peft makes them, under bf16 autocast as the trainer
runs. Three ways, in turns (base, peft, fused; `--rounds` times; medians):

- base: the frozen linears alone (bitsandbytes' own autograd function), no adapter;
- peft: peft's LoRA layers as they are (speed.backend: hf);
- fused: the same layers through fused_lora.apply (speed.backend: auto).

What the speed model needs (cockpit/speed/model.py), per adapted linear:

- host: a forward and a forward + backward of every linear at `--host-tokens` (16: the device
  idles, the wall time is the host's), per linear and pass, each way less the base;
- device: a forward + backward at `--device-tokens` (CUDA events, the host far ahead), each way
  less the base, as bytes per token per adapted input and output feature at the card's bandwidth
  (the unit of speed.ADAPTER_BYTES);
- the fused layer's share of peft's extra time, host and device: speed.FUSED_ADAPTER_HOST_SHARE
  and FUSED_ADAPTER_BYTES_SHARE are those shares of this record (`--solve`);
- agreement: the fused layer's output and gradients (input, A, B) against peft's on the same
  input, as the largest difference over the largest value.

  python bench/lora_kernel_rate.py --out lora_kernel_rate.json
  python bench/lora_kernel_rate.py --solve bench/results/2026-12-04-lora-kernel-rate-h200.json
  python bench/lora_kernel_rate.py --unpack-scales --out OUT.json   # the same, 4-bit scales unpacked
  python bench/lora_kernel_rate.py --smoke --out OUT.json      # CPU: tiny shapes, a check only
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

REFERENCE_BANDWIDTH_GBS = 4800.0  # the H200's datasheet HBM3e bandwidth (the catalog's figure)
RANK = 16
WAYS = ("base", "peft", "fused")


def build(arch: str, layers: int, four_bit: bool, device: str):
    """(peft model, [(name, in, out)]): `layers` copies of the shape's seven linears, adapted."""
    import torch
    from peft import LoraConfig, get_peft_model

    shape = load_shape(f"synthetic:{arch}")
    linears = [(f"l{i}_{n}", io[0], io[1]) for i in range(layers) for n, io in shape.linear_shapes().items()]

    class Linears(torch.nn.Module):
        def __init__(self):
            super().__init__()
            for name, n_in, n_out in linears:
                if four_bit:
                    import bitsandbytes as bnb

                    lin = bnb.nn.Linear4bit(
                        n_in, n_out, bias=False, compute_dtype=torch.bfloat16, quant_type="nf4"
                    )
                    lin.weight = bnb.nn.Params4bit(
                        torch.randn(n_out, n_in, dtype=torch.bfloat16) * n_in**-0.5,
                        requires_grad=False,
                        quant_type="nf4",
                        compress_statistics=True,
                    )
                else:
                    lin = torch.nn.Linear(n_in, n_out, bias=False, dtype=torch.bfloat16)
                    lin.weight.requires_grad_(False)
                setattr(self, name, lin)

        def forward(self, x):
            return x

    torch.manual_seed(0)
    model = Linears().to(device)
    config = LoraConfig(
        r=RANK,
        lora_alpha=RANK,
        lora_dropout=0.0,
        target_modules=[n for n, _, _ in linears],
        init_lora_weights=False,  # B not zero, so that the check compares real gradients
    )
    return get_peft_model(model, config), linears


def inputs(linears, tokens: int, device: str):
    import torch

    widths = sorted({n_in for _, n_in, _ in linears} | {n_out for _, _, n_out in linears})
    g = torch.Generator(device="cpu").manual_seed(1)
    x = {w: torch.randn(tokens, w, generator=g).to(device, torch.bfloat16).requires_grad_() for w in widths}
    dy = {w: torch.randn(tokens, w, generator=g).to(device, torch.bfloat16) for w in widths}
    return x, dy


def step(model, linears, x, dy, way: str, backward: bool, device: str):
    import torch

    outs, grads = [], []
    with torch.autocast(device, dtype=torch.bfloat16):
        for name, n_in, n_out in linears:
            layer = getattr(model.base_model.model, name)
            y = layer.base_layer(x[n_in]) if way == "base" else layer(x[n_in])
            outs.append(y)
            grads.append(dy[n_out])
    if backward:
        torch.autograd.backward(outs, grads)
    return outs


def set_way(model, way: str) -> None:
    from train_backend.speed import fused_lora

    fused_lora.remove(model)
    if way == "fused":
        fused_lora.apply(model)


def sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def host_times(model, linears, tokens: int, iters: int, rounds: int, device: str) -> dict:
    """Per way, median seconds per linear of a forward and of a forward + backward (device idle)."""
    x, dy = inputs(linears, tokens, device)
    got = {w: {"forward": [], "forward_backward": []} for w in WAYS}
    for _ in range(rounds):
        for way in WAYS:
            set_way(model, way)
            for kind, backward in (("forward", False), ("forward_backward", True)):
                step(model, linears, x, dy, way, backward, device)  # warm
                sync(device)
                started = time.perf_counter()
                for _ in range(iters):
                    step(model, linears, x, dy, way, backward, device)
                    for t in x.values():
                        t.grad = None
                sync(device)
                got[way][kind].append((time.perf_counter() - started) / iters / len(linears))
    set_way(model, "peft")
    return {w: {k: statistics.median(v) for k, v in kinds.items()} for w, kinds in got.items()}


def device_times(model, linears, tokens: int, iters: int, rounds: int, device: str) -> dict:
    """Per way, median seconds of a forward + backward of every linear at `tokens` (CUDA events)."""
    import torch

    x, dy = inputs(linears, tokens, device)
    got = {w: [] for w in WAYS}
    for _ in range(rounds):
        for way in WAYS:
            set_way(model, way)
            step(model, linears, x, dy, way, True, device)
            sync(device)
            for _ in range(iters):
                if device == "cuda":
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    step(model, linears, x, dy, way, True, device)
                    end.record()
                    end.synchronize()
                    got[way].append(start.elapsed_time(end) / 1e3)
                else:
                    started = time.perf_counter()
                    step(model, linears, x, dy, way, True, device)
                    got[way].append(time.perf_counter() - started)
                for t in x.values():
                    t.grad = None
    set_way(model, "peft")
    return {w: statistics.median(v) for w, v in got.items()}


def agreement(model, linears, tokens: int, device: str) -> dict:
    """The fused layer against peft's on one linear: largest difference over largest value."""
    import torch

    name, n_in, n_out = max(linears[:7], key=lambda item: item[1] * item[2])
    layer = getattr(model.base_model.model, name)
    g = torch.Generator(device="cpu").manual_seed(2)
    x0 = torch.randn(tokens, n_in, generator=g).to(device, torch.bfloat16)
    dy = torch.randn(tokens, n_out, generator=g).to(device, torch.bfloat16)
    results = {}
    for way in ("peft", "fused"):
        set_way(model, way)
        layer.zero_grad(set_to_none=True)
        x = x0.clone().requires_grad_()
        with torch.autocast(device, dtype=torch.bfloat16):
            y = layer(x)
        y.backward(dy)
        results[way] = {
            "output": y.detach().float(),
            "input_grad": x.grad.float(),
            "lora_A_grad": layer.lora_A["default"].weight.grad.float(),
            "lora_B_grad": layer.lora_B["default"].weight.grad.float(),
        }
    set_way(model, "peft")
    return {
        "linear": name,
        **{
            k: float((results["fused"][k] - results["peft"][k]).abs().max() / results["peft"][k].abs().max())
            for k in results["peft"]
        },
    }


def solve(record: dict) -> dict:
    """The fused layer's share of peft's extra time (over the bare base), host and device, and
    each way's figures in the speed model's units."""
    host = record["host"]
    per_pass = {w: host[w]["forward"] for w in WAYS}
    backward = {w: host[w]["forward_backward"] - host[w]["forward"] for w in WAYS}
    dev = record["device"]
    features = record["features"]
    tokens = record["device_tokens"]
    bandwidth = record["bandwidth_gbs"] * 1e9

    def share(values):
        return (values["fused"] - values["base"]) / (values["peft"] - values["base"])

    def per_feature(way):  # bytes per token per adapted input and output feature
        return (dev[way] - dev["base"]) * bandwidth / (tokens * features)

    return {
        "host_share_forward": round(share(per_pass), 4),
        "host_share_backward": round(share(backward), 4),
        "host_share": round(share({w: host[w]["forward_backward"] for w in WAYS}), 4),
        "device_share": round(share(dev), 4),
        "host_adapter_s_forward": {w: round(per_pass[w] - per_pass["base"], 8) for w in ("peft", "fused")},
        "adapter_bytes": {w: round(per_feature(w), 2) for w in ("peft", "fused")},
    }


def versions() -> dict:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for name in ("torch", "peft", "bitsandbytes", "transformers"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--solve", type=Path, help="a record of this script: print the shares")
    ap.add_argument("--arch", default="llama-2-7b")
    ap.add_argument("--layers", type=int, default=4, help="decoder layers' worth of the seven linears")
    ap.add_argument("--lora", action="store_true", help="16-bit bases (LoRA) instead of 4-bit (QLoRA)")
    ap.add_argument(
        "--unpack-scales",
        action="store_true",
        help="4-bit bases with their double-quantised scales unpacked into fp32 "
        "(quantization.unpack_scales): run with and without to time what it saves a dequantisation",
    )
    ap.add_argument("--host-tokens", type=int, default=16)
    ap.add_argument("--device-tokens", type=int, default=8192)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="CPU, synthetic:tiny, one round: the check only")
    a = ap.parse_args(argv)
    if a.solve:
        print(json.dumps(solve(json.loads(a.solve.read_text())), indent=1))
        return 0
    if not a.out:
        ap.error("--out is needed (or --solve)")
    import torch

    device = "cuda" if torch.cuda.is_available() and not a.smoke else "cpu"
    if a.smoke:
        a.arch, a.layers, a.host_tokens, a.device_tokens, a.iters, a.rounds = "tiny", 1, 4, 64, 2, 1
    model, linears = build(a.arch, a.layers, not a.lora, device)
    unpacked = None
    if a.unpack_scales and not a.lora:
        from train_backend.speed import quant_scales

        unpacked = quant_scales.unpack(model)
    started = time.time()
    record = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu",
        "torch_device": device,
        "versions": versions(),
        "arch": a.arch,
        "layers": a.layers,
        "linears": len(linears),
        "features": sum(n_in + n_out for _, n_in, n_out in linears),
        "four_bit": not a.lora,
        "scales_unpacked": unpacked,
        "rank": RANK,
        "host_tokens": a.host_tokens,
        "device_tokens": a.device_tokens,
        "bandwidth_gbs": REFERENCE_BANDWIDTH_GBS,
        "agreement": agreement(model, linears, min(a.device_tokens, 1024), device),
        "host": host_times(model, linears, a.host_tokens, a.iters, a.rounds, device),
        "device": device_times(model, linears, a.device_tokens, a.iters, a.rounds, device),
    }
    if device == "cuda":
        from train_backend.speed import host_probe as host_speed

        probe = host_speed.measure()
        record["host_probe_ms"] = probe["ms"] if probe else None
    record["solved"] = solve(record)
    record["wall_s"] = round(time.time() - started, 1)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({k: record[k] for k in ("machine", "agreement", "solved", "wall_s")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
