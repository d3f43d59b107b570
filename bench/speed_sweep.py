#!/usr/bin/env python3
"""Micro-batch sweeps through the product, to calibrate the speed model (card picker).

On an H200 a small micro-batch is dominated by per-step overhead (kernel launches,
Python, TRL's per-step metrics), a large one by arithmetic: only a sweep over the
micro-batch at a fixed model separates the two, which a speed model must do before its
figures can be carried to other cards. Each point runs like bench/memory_points.py
(real `cockpit train --no-ui`, synthetic weights, full-length sequences, NVML sampled
from outside) with more steps for a steadier median.

  python bench/speed_sweep.py [--points sweep|weak|kernels|heldout|long|retime|probe|probe-more|long-more|
                                        heldout-long]
                              [--only NAME ...] [--budget-s 300] [--slow-host]
                              [--out sweep.jsonl]

`--points weak` re-measures, with 12 steps (10 timed after the first two), the memory points whose
speed the model missed most held out, timed over 3-5 steps only (docs/estimator.md): fp32 and
8-bit/paged full fine-tunes, 8-bit optimizers with checkpointing, 8192-token rows, a 152k
vocabulary. Same names and settings as bench/memory_points.py, so bench/fit_speed.py takes the
12-step run of a configuration in place of its shorter ones. `--points kernels` measures pairs
that differ in one setting in one call: LoRA dropout 0.1 against 0, Liger's kernels on against off.
`--points heldout`: configurations the committed speed model has never seen (Liger on four
architectures, full fine-tune, LoRA and QLoRA), then the memory points still timed over 5 steps.
`--points long`: rows of 4096 to 16384 tokens, where attention weighs most. `--points retime`: the
configurations still timed over 5-8 steps only, at 12, the worst missed first. `--points probe`: the
host-bound configurations the model missed most, with the host probe every run now records
(train_backend/speed/host_probe.py); with `--slow-host` the trainer shares CPU core 0 with a busy loop.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import memory_points as mp

QV = ["q_proj", "v_proj"]


def point(arch: str, method: str, mb: int, ckpt: bool, seq: int = 512, **extra) -> tuple[str, str, dict]:
    overrides = {
        "training.max_length": seq,
        "training.micro_batch_size": mb,
        "training.gradient_checkpointing": ckpt,
        "training.optimizer": "paged_adamw_32bit" if method == "qlora" else "adamw_torch",
    }
    if method != "full":
        overrides.update({"lora.r": 64, "lora.target_modules": QV})
    overrides.update(extra)
    return arch, method, overrides


SWEEP = {
    # a micro-batch sweep at one model separates per-step overhead from arithmetic
    **{f"sw-l2-7b-qlora-mb{mb}": point("llama-2-7b", "qlora", mb, False) for mb in (1, 4, 16)},
    "sw-l2-7b-qlora-ckpt-mb8": point("llama-2-7b", "qlora", 8, True),
    **{f"sw-l32-1b-full-mb{mb}": point("llama-3.2-1b", "full", mb, False) for mb in (2, 16)},
    "sw-q25-1.5b-lora-mb8": point("qwen2.5-1.5b", "lora", 8, False),
    "sw-l2-7b-lora-all-ckpt-mb8": point(
        "llama-2-7b", "lora", 8, True, **{"lora.target_modules": "all-linear"}
    ),
    # GQA, a 128k vocabulary, long sequences, an 8-bit optimizer
    "sw-l31-8b-qlora-all-ckpt-1k-mb4": point(
        "llama-3.1-8b",
        "qlora",
        4,
        True,
        seq=1024,
        **{"lora.target_modules": "all-linear", "lora.r": 16, "training.optimizer": "paged_adamw_8bit"},
    ),
}

# ordered by value (the budget cuts the tail): the worst held-out misses first
WEAK_NAMES = (
    "l32-1b-full-fp32",
    "l32-1b-full-8bit-ckpt",
    "l2-7b-qlora-long-ckpt-8bit",
    "l32-1b-lora-2x8192-ckpt",
    "q25-1.5b-lora-long-ckpt",
    "l32-1b-full-paged32",
    "l32-1b-lora-4k",
    "q25-1.5b-lora-8x2048-vocab152k",
    "l2-7b-lora-all-ckpt",
    # 5-step points the mechanisms model still misses most held out (docs/estimator.md): the two
    # Qwen2.5 ones, and a Llama 3.2 1B full fine-tune measured on the same machine beside them (the
    # 2026-11-30 machine ran host-bound points up to a third slower than later ones)
    "q25-1.5b-full-adamw-ckpt",
    "q25-1.5b-qlora-mb16",
    "l32-1b-full-adamw",
)
WEAK = {name: mp.CONFIGS[name] for name in WEAK_NAMES}

# Pairs that differ in one setting, measured in one device call (machines drift by up to a third
# between calls, a setting's effect is a few percent to a third): LoRA dropout 0.1 against 0 (peft puts
# nn.Identity there, no kernel), and speed: auto with Liger's kernels against without, on the unsloth
# comparison's 7B QLoRA (r 16 on all seven linears, 8-bit AdamW) and a 1B full fine-tune; and the
# worst point held out (Qwen2.5 1.5B LoRA at 2 x 2048), again beside its Llama siblings.
_ALL7 = mp._VS["lora.target_modules"]  # the unsloth comparison's seven linears
_VS7 = {"lora.r": 16, "lora.target_modules": _ALL7, "training.optimizer": "adamw_8bit"}
_AUTO = {"speed.mode": "auto"}  # the batch keys as written (speed.keep): auto adds Liger where it imports
_NO_LIGER = {"speed.mode": "auto", "speed.fused_kernels": "off"}
KERNELS = {
    "k-l2-7b-qlora7-ckpt-mb8-d01": point("llama-2-7b", "qlora", 8, True, **_VS7),
    "k-l2-7b-qlora7-ckpt-mb8-d0": point("llama-2-7b", "qlora", 8, True, **_VS7, **{"lora.dropout": 0.0}),
    "k-l2-7b-qlora7-ckpt-mb8-d0-auto": point(
        "llama-2-7b", "qlora", 8, True, **_VS7, **_NO_LIGER, **{"lora.dropout": 0.0}
    ),
    "k-l2-7b-qlora7-ckpt-mb8-d0-liger": point(
        "llama-2-7b", "qlora", 8, True, **_VS7, **_AUTO, **{"lora.dropout": 0.0}
    ),
    "k-l2-7b-qlora7-ckpt-mb8-d01-liger": point("llama-2-7b", "qlora", 8, True, **_VS7, **_AUTO),
    "k-l2-7b-qlora7-mb8-d01": point("llama-2-7b", "qlora", 8, False, **_VS7),
    "k-l2-7b-qlora7-mb8-d0": point("llama-2-7b", "qlora", 8, False, **_VS7, **{"lora.dropout": 0.0}),
    "k-l2-7b-qlora7-mb8-d0-liger": point(
        "llama-2-7b", "qlora", 8, False, **_VS7, **_AUTO, **{"lora.dropout": 0.0}
    ),
    "sw-l32-1b-full-mb16": SWEEP["sw-l32-1b-full-mb16"],
    "k-l32-1b-full-mb16-liger": point("llama-3.2-1b", "full", 16, False, **_AUTO),
    "q25-1.5b-lora-long-ckpt": mp.CONFIGS["q25-1.5b-lora-long-ckpt"],
    "l32-1b-lora-2x8192-ckpt": mp.CONFIGS["l32-1b-lora-2x8192-ckpt"],
}


# New configurations, never measured before the speed model that predicts them was committed (Liger
# modelled, 2026-12-03): held out by construction; the fit takes them only after they are reported as
# new points (docs/estimator.md). Then the memory points still timed over 5 steps only, at 12.
_LIGER7 = {**_VS7, **_AUTO, "lora.dropout": 0.0}
HELDOUT = {
    "n-l31-8b-qlora7-liger-mb8": point("llama-3.1-8b", "qlora", 8, False, **_LIGER7),
    "n-q25-1.5b-lora-liger-4x1024-ckpt": point(
        "qwen2.5-1.5b",
        "lora",
        4,
        True,
        seq=1024,
        **{**_AUTO, "lora.target_modules": "all-linear", "lora.r": 16},
    ),
    "n-l32-1b-full-liger-8x1024-ckpt": point("llama-3.2-1b", "full", 8, True, seq=1024, **_AUTO),
    "n-l2-7b-qlora-qv-liger-mb16": point("llama-2-7b", "qlora", 16, False, **_AUTO),
    "n-l2-7b-lora7-liger-4x1024-ckpt": point("llama-2-7b", "lora", 4, True, seq=1024, **_LIGER7),
    **{
        name: mp.CONFIGS[name]
        for name in (
            "q25-1.5b-qlora-mb16",
            "l31-8b-qlora-all-ckpt",
            "l32-1b-full-adamw",
            "q25-1.5b-full-adamw-ckpt",
            "l31-8b-qlora-qv-mb8",
            "l2-7b-qlora-liger-16x512-host",
        )
    },
}


# Long rows, where attention's kernels take a large share of the step: until these, one point
# (l32-1b-lora-2x8192-ckpt) carried all that the fit knew of them (docs/estimator.md).
_LONG = {"lora.r": 16, "lora.target_modules": "all-linear"}
LONG = {
    "long-l32-1b-lora-1x16384-ckpt": point("llama-3.2-1b", "lora", 1, True, seq=16384, **_LONG),
    "long-q25-1.5b-lora-2x8192-ckpt": point("qwen2.5-1.5b", "lora", 2, True, seq=8192, **_LONG),
    "long-l32-1b-lora-4x4096": point("llama-3.2-1b", "lora", 4, False, seq=4096, **_LONG),
}


# The configurations still timed over 5-8 steps only (bench/fit_speed.py keeps a configuration's
# runs of >= 10 steps in place of shorter ones), at 12: ordered by how far the model misses them held
# out (bench/results/2026-12-03-fit-speed-loo-final.txt), the worst first, as the budget cuts the tail.
RETIME_NAMES = (
    "l2-7b-qlora-liger-8x512-host",
    "sw-l2-7b-lora-all-ckpt-mb8",
    "l31-8b-qlora-4x2048-vocab128k",
    "sw-l32-1b-full-mb1",
    "l2-7b-qlora-adamw8bit-nockpt",
    "l2-7b-lora-paged8bit-ckpt",
    "l32-1b-lora-8x2048-vocab128k",
    "l2-7b-qlora-liger-2x512-ckpt",
    "sw-q25-1.5b-lora-mb8",
)
_EARLIER = {"sw-l32-1b-full-mb1": point("llama-3.2-1b", "full", 1, False)}  # the first sweep's
RETIME = {name: {**mp.CONFIGS, **SWEEP, **_EARLIER}[name] for name in RETIME_NAMES}

# The configurations the model missed most held out that the host's speed sets (the 7B ones first: one
# synthetic build), re-timed with the host probe the trainer now records (train_backend/speed/host_probe.py),
# then two host-bound anchors; `--slow-host` runs them with the trainer sharing a core with a busy loop.
PROBE_NAMES = (
    "l2-7b-qlora-liger-2x512-ckpt",
    "sw-l2-7b-lora-all-ckpt-mb8",
    "k-l2-7b-qlora7-mb8-d0-liger",
    "sw-l2-7b-qlora-mb1",
    "l2-7b-lora-paged8bit-ckpt",
    "q25-1.5b-full-adamw-ckpt",
    "n-q25-1.5b-lora-liger-4x1024-ckpt",
    "sw-l32-1b-full-mb1",
)
# then, in a second call, the host-bound configurations the fit with the first call's probed runs missed
# most held out (bench/results/2026-12-03-fit-speed-loo-probe-1.txt), and the 1B anchor the first
# call's budget skipped
PROBE_MORE_NAMES = (
    "l2-7b-qlora-long-ckpt-8bit",
    "sw-l2-7b-qlora-mb4",
    "l2-7b-lora-all-ckpt",
    "sw-l32-1b-full-mb1",
    "l32-1b-full-paged32",
    "l32-1b-lora-4k",
    "long-l32-1b-lora-1x16384-ckpt",
    "l32-1b-full-8bit-ckpt",
    "l32-1b-full-adamw",
)
# Long rows again, new configurations (none measured before; the host probe in each): left out, the one
# 16384-token point was the held-out worst with the probed runs in (-34.1%,
# bench/results/2026-12-03-fit-speed-loo-probe-2.txt), an extrapolation from rows of 8192 at most
LONG_MORE = {
    "long-l32-1b-lora-1x12288-ckpt": point("llama-3.2-1b", "lora", 1, True, seq=12288, **_LONG),
    "long-l32-1b-lora-1x16384": point("llama-3.2-1b", "lora", 1, False, seq=16384, **_LONG),
    "long-q25-1.5b-lora-1x16384-ckpt": point("qwen2.5-1.5b", "lora", 1, True, seq=16384, **_LONG),
}
# New configurations for the model with the measured attention kernel (cockpit/speed/model.py
# ATTENTION_KERNELS), run after it was committed: held out by construction (bench/speed_new_points.py
# --model-commit). Both head widths, rows of 1024-8192, LoRA, a full fine-tune and a 7B QLoRA
HELDOUT_LONG = {
    "h-l32-1b-lora-2x4096-ckpt": point("llama-3.2-1b", "lora", 2, True, seq=4096, **_LONG),
    "h-q25-1.5b-lora-4x4096": point("qwen2.5-1.5b", "lora", 4, False, seq=4096, **_LONG),
    "h-l32-1b-lora-8x1024": point("llama-3.2-1b", "lora", 8, False, seq=1024, **_LONG),
    "h-q25-1.5b-full-1x8192-ckpt": point("qwen2.5-1.5b", "full", 1, True, seq=8192),
    "h-l2-7b-qlora-1x8192-ckpt": point("llama-2-7b", "qlora", 1, True, seq=8192),
}
_ANY = {**mp.CONFIGS, **SWEEP, **_EARLIER, **KERNELS, **HELDOUT, **LONG}
PROBE = {name: _ANY[name] for name in PROBE_NAMES}
PROBE_MORE = {name: _ANY[name] for name in PROBE_MORE_NAMES}

POINT_SETS = {
    "sweep": SWEEP,
    "weak": WEAK,
    "kernels": KERNELS,
    "heldout": HELDOUT,
    "long": LONG,
    "retime": RETIME,
    "probe": PROBE,
    "probe-more": PROBE_MORE,
    "long-more": LONG_MORE,
    "heldout-long": HELDOUT_LONG,
}


def take_points_option(argv: list[str]) -> tuple[str, list[str]]:
    """`--points NAME` (one of POINT_SETS; default sweep), removed from memory_points' argv."""
    if "--points" not in argv:
        return "sweep", argv
    i = argv.index("--points")
    if i + 1 >= len(argv) or argv[i + 1] not in POINT_SETS:
        raise SystemExit(
            "--points takes sweep (the micro-batch sweep), weak (the weak points, 12 steps), kernels "
            "(pairs: LoRA dropout 0.1 / 0, Liger's kernels on / off), heldout (new configurations, "
            "then the 5-step memory points at 12 steps), long (rows of 4096-16384 tokens), retime (the "
            "configurations still timed over 5-8 steps, at 12) probe or probe-more (host-bound "
            "points with the host probe), long-more (new long-row points) or heldout-long (new points "
            "for the measured attention kernel)"
        )
    return argv[i + 1], argv[:i] + argv[i + 2 :]


if __name__ == "__main__":
    which, sys.argv = take_points_option(sys.argv)
    chosen = POINT_SETS[which]
    mp.STEPS = 12
    mp.CONFIGS.clear()
    mp.CONFIGS.update(chosen)
    if "--out" not in sys.argv:
        sys.argv += ["--out", "speed_sweep.jsonl"]
    if "--budget-s" not in sys.argv:
        sys.argv += ["--budget-s", "300"]
    mp.main()
