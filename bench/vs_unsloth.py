#!/usr/bin/env python3
"""`speed: auto` against unsloth's recommended QLoRA path, side by side on one GPU.

Per row (a model shape x token lengths x memory cap), in a mirrored order (cockpit, unsloth,
unsloth, cockpit) so drift of the machine shows in the spread:

- cockpit: `cockpit train --no-ui` with `speed: auto` (the default), QLoRA nf4 + double quant;
- unsloth: `FastLanguageModel.from_pretrained(load_in_4bit=True)`, `get_peft_model(...,
  use_gradient_checkpointing="unsloth")`, TRL's `SFTTrainer` with padding-free batches on ragged
  rows (no padding, every sample kept whole, so a step holds the same samples as cockpit's),
  in its own process with its own packages first on the path (`--unsloth-path`, default
  /tmp/unsloth-site:/tmp/site: unsloth pins trl<=1.15 and datasets<5, the product runs 1.16/5.2).

Both get: the same synthetic weights (train_backend.synthetic, bf16, built once and untimed),
the same token sequences (seed 0; ragged 32..512 or all 2048 long), LoRA r 16, alpha 16,
dropout 0 on all seven linears, the same samples per optimizer step (16), adamw_8bit at a
constant 2e-4, max_grad_norm 1.0, and the same memory cap (cockpit's `emulate_vram_gib`; the
unsloth process caps PyTorch's allocator the same way: the limit less what sits outside it,
lowered again at each step's begin).

Measured the same way on both sides: real tokens/s over the timed steps (from the end of the
last warm-up step to the end of the last step; never padding), the peak of
NVML 'used' memory (what nvidia-smi shows) above the idle baseline, sampled from this process
every 10 ms, the loss logged at the last step, and the MFU of each run (cockpit.speed.flops:
model FLOPs per real token, the same for both sides of a row, over the card's dense bf16 peak).
The cockpit side's tokens are TRL's count in its `log` events. The unsloth side's are counted by
this bench from the data it wrote (`TokenCounter`): unsloth replaces SFTTrainer.compute_loss with
its own, which never records TRL's `num_tokens`, and Trainer's own counter is off by default, so
the first H200 run (2026-12-02) read a constant 0 there and got no rate. The counter names each
sample a batch was collated from (by its first ids), adds the lengths this bench drew, checks them
against the collated batch's shape, and a callback stamps the time at each optimizer step's end
(after a CUDA synchronize).

  python3 bench/vs_unsloth.py --out $OUT                         # every row: 2 x 2 x 2, long
  python3 bench/vs_unsloth.py --out $OUT --archs llama-2-7b --lengths ragged --caps 22
  python3 bench/vs_unsloth.py --smoke --out OUT                  # CPU: synthetic:tiny, LoRA

Writes OUT/vs_unsloth.json, OUT/vs_unsloth.md (the table for docs/benchmarks.md) and
OUT/vs_unsloth.log (each run's output). --smoke runs the cockpit side on the CPU (LoRA on
synthetic:tiny, a few steps) and tries the unsloth side there (16-bit LoRA; recorded as skipped,
with the reason, when unsloth does not import or cannot train there).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
RANK = 16
LENGTHS = {"ragged": (32, 512), "full": (2048, 2048)}
GIB = 2**30
SAMPLES_PER_STEP = 16  # cockpit's default step (micro-batch 4 x 4), which speed: auto keeps
WORKER_FLAG = "--unsloth-worker"


# ---------------------------------------------------------------- the unsloth side (own process)


def unsloth_worker(spec_path: str) -> int:
    """Runs under unsloth's own path; imports nothing of the product. Writes spec['result']."""
    spec = json.loads(Path(spec_path).read_text())
    out = Path(spec["result"])
    try:
        import unsloth  # noqa: F401  (first, as unsloth asks: it patches transformers and trl)
    except Exception as exc:  # the reason goes into the table
        out.write_text(json.dumps({"skipped": f"unsloth does not import: {type(exc).__name__}: {exc}"}))
        return 0
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import SFTConfig, SFTTrainer
    from unsloth import FastLanguageModel

    cuda = torch.cuda.is_available()
    cap = _cap_allocator(spec.get("cap_gib")) if cuda else None
    started = time.time()
    model, tokenizer = FastLanguageModel.from_pretrained(
        model_name=spec["model"],
        max_seq_length=spec["max_length"],
        dtype=torch.bfloat16 if cuda else None,
        load_in_4bit=spec["four_bit"],
    )
    model = FastLanguageModel.get_peft_model(
        model,
        r=RANK,
        lora_alpha=RANK,
        lora_dropout=0,
        bias="none",
        target_modules=TARGETS,
        use_gradient_checkpointing="unsloth",
        random_state=0,
    )
    load_s = time.time() - started
    rows = [json.loads(line) for line in Path(spec["data"]).read_text().splitlines() if line.strip()]
    dataset = Dataset.from_list([{"input_ids": r["input_ids"]} for r in rows])
    steps = spec["warmup"] + spec["steps"]
    profile_steps = spec.get("profile_steps") or 0
    marks: list[dict] = []
    counter = TokenCounter(
        {sample_key(r["input_ids"]): len(r["input_ids"]) for r in rows},
        spec["max_length"],
        spec["padding_free"],
    )
    timer = step_marks_callback(
        TrainerCallback,
        counter,
        marks,
        on_begin=(lambda: _recap(cap)) if cap is not None else None,
        sync=torch.cuda.synchronize if cuda else None,
    )

    args = SFTConfig(
        output_dir=spec["workdir"],
        per_device_train_batch_size=spec["micro"],
        gradient_accumulation_steps=spec["accum"],
        max_steps=steps + profile_steps,
        learning_rate=2e-4,
        lr_scheduler_type="constant",
        warmup_steps=0,
        optim="adamw_8bit" if cuda else "adamw_torch",
        max_grad_norm=1.0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        bf16=cuda,
        max_length=spec["max_length"],
        packing=False,
        padding_free=spec["padding_free"],
        dataset_num_proc=1,
        dataloader_num_workers=0,  # collated in this process, where TokenCounter sees each batch
        seed=0,
    )
    callbacks = [timer]
    if profile_steps:  # after the timed steps: the profiler slows the steps it records
        sys.path.append(spec["repo"])  # last: unsloth's own packages stay first
        from train_backend.profiling import make_profile_callback

        Path(spec["workdir"]).mkdir(parents=True, exist_ok=True)

        callbacks.append(make_profile_callback(Path(spec["workdir"]), steps + 1, profile_steps))
    trainer = SFTTrainer(
        model=model, processing_class=tokenizer, train_dataset=dataset, args=args, callbacks=callbacks
    )
    counter.attach(trainer)
    trainer.train()
    versions = {}
    for name in (
        "unsloth",
        "unsloth_zoo",
        "torch",
        "transformers",
        "trl",
        "peft",
        "bitsandbytes",
        "datasets",
    ):
        try:
            versions[name] = __import__(name).__version__
        except Exception:
            versions[name] = None
    result = {
        "marks": marks,
        "load_s": round(load_s, 1),
        "peak_reserved_gib": round(torch.cuda.max_memory_reserved() / GIB, 2) if cuda else None,
        "alloc_retries": torch.cuda.memory_stats().get("num_alloc_retries", 0) if cuda else None,
        "versions": versions,
        "cap": cap,
        "count": counter.summary(),
    }
    profile = Path(spec["workdir"]) / "profile.json"
    if profile_steps and profile.is_file():
        result["profile"] = json.loads(profile.read_text())
    out.write_text(json.dumps(result))
    return 0


KEY_IDS = 16  # a sample is named by its first ids (random in 3..vocab: unique in practice)


def sample_key(ids) -> tuple:
    return tuple(int(i) for i in list(ids)[:KEY_IDS])


class TokenCounter:
    """The real tokens the unsloth side trained on, from the data this bench wrote, at step ends.

    attach() wraps the trainer's data collator (which sees each batch's samples, in the order the
    loader yields them: Trainer collects a step's micro-batches before its first training_step,
    and accelerate's loader collates one batch ahead) and its training_step (one call per
    micro-batch, in the same order). Each training_step takes the oldest collated batch: its
    samples' lengths as this bench drew them (capped at max_length) are the tokens counted. The
    batch the model got is checked against it: padding-free (one flat row, no attention mask),
    its positions (the input_ids' shape, no GPU sync) must equal the collated samples' lengths;
    padded, hold at least them. Where no collated batch is waiting (a collator the wrapper did not
    reach), the batch itself is counted (flat: its positions; padded: its attention mask) and
    `source` says so.
    """

    def __init__(self, known: dict[tuple, int], max_length: int, padding_free: bool):
        self.known, self.max_length, self.padding_free = known, max_length, padding_free
        self.pending: deque[list[tuple[int | None, int]]] = deque()
        self.tokens = 0  # counted real tokens (the bench's lengths of the samples trained on)
        self.positions = 0  # the trained batches' positions (padding included where padded)
        self.micro_batches = self.samples = self.unmatched = self.from_batch = self.padded = 0
        self.problems: list[str] = []

    def attach(self, trainer) -> None:
        collate, step = trainer.data_collator, trainer.training_step

        def counting_collator(features):
            self.pending.append(self.identify(features))
            return collate(features)

        def counting_step(model, inputs, *args, **kwargs):
            self.consume(inputs)
            return step(model, inputs, *args, **kwargs)

        trainer.data_collator = counting_collator
        trainer.training_step = counting_step

    def identify(self, features) -> list[tuple[int | None, int]]:
        """(the bench's length or None when the sample is not one of its, the collated length)."""
        out = []
        for f in features:
            ids = f["input_ids"]
            ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
            known = self.known.get(sample_key(ids))
            if known is None:  # a token put in front (BOS) shifts the key by one
                known = self.known.get(sample_key(ids[1:]))
            out.append((None if known is None else min(known, self.max_length), len(ids)))
        return out

    def consume(self, inputs) -> None:
        ids = inputs["input_ids"]
        positions = 1
        for n in ids.shape:
            positions *= int(n)
        # TRL's padding-free collator flattens the samples into one row and drops the mask
        mask = inputs.get("attention_mask")
        flat = mask is None
        self.micro_batches += 1
        self.positions += positions
        if self.padding_free and not flat:
            self.padded += 1
        if not self.pending:
            self.from_batch += 1
            self.tokens += positions if flat else int(mask.sum())
            return
        batch = self.pending.popleft()
        self.samples += len(batch)
        counted = 0
        for known, collated in batch:
            if known is None:
                self.unmatched += 1
                counted += collated
            else:
                counted += known
        self.tokens += counted
        collated = sum(c for _, c in batch)
        if collated != counted:
            self._problem(f"micro-batch {self.micro_batches}: collated {collated} tokens, drawn {counted}")
        if positions < collated or (flat and positions != collated):
            self._problem(
                f"micro-batch {self.micro_batches}: the model got {positions} positions for "
                f"{collated} collated tokens{' (padding-free)' if flat else ''}"
            )

    def _problem(self, text: str) -> None:
        if len(self.problems) < 5:
            self.problems.append(text)

    def summary(self) -> dict:
        source = "the bench's lengths of the samples each micro-batch was collated from"
        if self.from_batch:
            source += (
                f"; {self.from_batch} micro-batches counted from the batch itself (no collated samples seen)"
            )
        return {
            "source": source,
            "tokens": self.tokens,
            "positions": self.positions,
            "micro_batches": self.micro_batches,
            "samples": self.samples,
            "unmatched_samples": self.unmatched,
            # asked for padding-free, given padded batches (unsloth's CPU fallback pads)
            "padded_micro_batches": self.padded if self.padding_free else None,
            "problems": self.problems,
        }


def step_marks_callback(base, counter: TokenCounter, marks: list[dict], on_begin=None, sync=None):
    """A callback (on `base`, transformers' TrainerCallback) that appends, at each optimizer step's
    end, {step, t, tokens} with the counter's running total, after `sync` (the GPU's queue drained,
    so the time is the step's real end), and the loss when the step logs one."""

    class StepMarks(base):
        def on_step_begin(self, args, state, control, **kw):
            if on_begin is not None:
                on_begin()

        def on_step_end(self, args, state, control, **kw):
            if sync is not None:
                sync()
            marks.append(
                {
                    "step": state.global_step,
                    "t": time.time(),
                    "tokens": counter.tokens,
                    "positions": counter.positions,
                }
            )

        def on_log(self, args, state, control, logs=None, **kw):
            logs = logs or {}
            if marks and marks[-1]["step"] == state.global_step and "loss" in logs:
                marks[-1]["loss"] = float(logs["loss"])
                if "num_tokens" in logs:  # TRL's count, where it is logged: kept beside ours
                    marks[-1]["trl_tokens"] = logs["num_tokens"]

    return StepMarks()


def _cap_allocator(cap_gib: float | None) -> dict | None:
    """As cockpit's emulate_vram_gib: cap PyTorch's allocator at the limit less what sits outside it."""
    if not cap_gib:
        return None
    import torch

    torch.cuda.init()
    free, total = torch.cuda.mem_get_info()
    outside = max(0, total - free - torch.cuda.memory_reserved())
    limit = int(cap_gib * GIB)
    torch.cuda.set_per_process_memory_fraction((limit - outside) / total)
    return {"limit": limit, "outside_max": outside, "total": total}


def _recap(cap: dict) -> None:
    import torch

    free, total = torch.cuda.mem_get_info()
    outside = max(0, total - free - torch.cuda.memory_reserved())
    if outside > cap["outside_max"]:
        torch.cuda.set_per_process_memory_fraction(max(1, cap["limit"] - outside) / total)
        cap["outside_max"] = outside


# ---------------------------------------------------------------- this process: data, runs, table


def write_sequences(path: Path, bounds: tuple[int, int], count: int, vocab: int, seed: int = 0) -> list[int]:
    """`count` samples of random ids (3..vocab-1), lengths drawn uniformly in `bounds` (seed 0)."""
    low, high = bounds
    rng = random.Random(seed)
    out = []
    with open(path, "w") as f:
        for _ in range(count):
            n = rng.randint(low, high)
            out.append(n)
            f.write(json.dumps({"input_ids": [rng.randrange(3, vocab) for _ in range(n)]}) + "\n")
    return out


def cockpit_config(
    model: str,
    data: Path,
    max_length: int,
    steps: int,
    cap: float | None,
    smoke: bool,
    profile_steps: int = 0,
    backend: str = "auto",
    packed_scales: bool = False,
    mlp_block: bool = False,
    eager_figures: bool = False,
    liger: bool = True,
) -> str:
    """`steps` timed and warm-up steps; `profile_steps` more after them, profiled (debug.profile_steps);
    `backend`: speed.backend (auto: the fused LoRA layers; hf: peft's own); `packed_scales`: the 4-bit
    scales kept double-quantised (quantization.unpack_scales: false, which speed: auto then keeps);
    `eager_figures`: speed.read_figures: each_micro_batch (not the default at_log,
    train_backend/step_figures.py); `liger` false:
    speed.fused_kernels: off (no Liger kernels)."""
    keep_packed = ", unpack_scales: false" if packed_scales else ""
    method = (
        "method: lora"
        if smoke
        else f"method: qlora\nquantization: {{bits: 4, quant_type: nf4, double_quant: true{keep_packed}}}"
    )
    lines = [
        f'model: {{name: "{model}"}}',
        f'dataset: {{path: "{data}", format: tokens}}',
        method,
        f"lora: {{r: {RANK}, alpha: {RANK}, dropout: 0.0, target_modules: [{', '.join(TARGETS)}]}}",
        "training:",
        f"  max_length: {max_length}",
        f"  max_steps: {steps + profile_steps}",
        "  learning_rate: 2.0e-4",
        "  lr_scheduler: constant",
        "  warmup: 0",
        f"  optimizer: {'adamw_torch' if smoke else 'adamw_8bit'}",
        "  max_grad_norm: 1.0",
        "  logging_steps: 1",
        "output: {save_steps: 100000, save_final: false}",
    ]
    if cap:
        lines.append(f"emulate_vram_gib: {cap:g}")
    speed = (
        ([f"backend: {backend}"] if backend != "auto" else [])
        + (["mlp_block: fused"] if mlp_block else [])
        + (["read_figures: each_micro_batch"] if eager_figures else [])
        + ([] if liger else ["fused_kernels: off"])
    )
    if speed:
        lines.append(f"speed: {{{', '.join(speed)}}}")
    if profile_steps:
        lines.append(f"debug: {{profile_steps: {profile_steps}, profile_from_step: {steps + 1}}}")
    return "\n".join(lines) + "\n"


def timed_rate(marks: list[dict], warmup: int) -> tuple[float | None, float | None, int]:
    """Real tokens/s from the end of step `warmup` to the last step's end, the last loss, steps timed.

    No rate (None) where no step counted tokens or the count did not grow over the timed steps
    (a counter that stayed at 0 is not a rate of 0): `no_rate_reason` says which."""
    marks = [m for m in marks if m.get("tokens") is not None]
    if not marks:
        return None, None, 0
    start = next((m for m in marks if m["step"] == warmup), marks[0])
    end = marks[-1]
    if end["t"] <= start["t"] or end["tokens"] <= start["tokens"]:
        return None, end.get("loss"), 0
    return (
        (end["tokens"] - start["tokens"]) / (end["t"] - start["t"]),
        end.get("loss"),
        end["step"] - start["step"],
    )


def no_rate_reason(marks: list[dict], warmup: int) -> str:
    counted = [m for m in marks if m.get("tokens") is not None]
    if not counted:
        return "no step counted tokens"
    start = next((m for m in counted if m["step"] == warmup), counted[0])
    end = counted[-1]
    if end["step"] <= start["step"]:
        return "no step timed after the warm-up"
    if end["tokens"] <= start["tokens"]:
        return f"the token count stayed at {end['tokens']} from step {start['step']} to {end['step']}"
    return "the steps' times did not advance"


def peak_sampler(smoke: bool):
    if smoke:
        return None
    sys.path.insert(0, str(ROOT / "bench"))
    from common import DevicePeak

    return DevicePeak()


def parse_rows(text: str) -> list[tuple[str, str, str]]:
    """`arch:lengths:cap,...` -> [(arch, lengths, cap)]: the rows to run, none other."""
    rows = []
    for item in text.split(","):
        parts = item.strip().split(":")
        if len(parts) != 3 or parts[1] not in LENGTHS:
            raise SystemExit(
                f"--rows: {item!r} is not arch:lengths:cap with lengths one of {', '.join(LENGTHS)}"
            )
        try:
            float(parts[2])
        except ValueError:
            raise SystemExit(f"--rows: {item!r}: the cap {parts[2]!r} is not a number of GiB") from None
        rows.append((parts[0], parts[1], parts[2]))
    return rows


def matched_cap(runs: list[dict]) -> float | None:
    """The cap for the cockpit run held to unsloth's memory: the highest nvidia-smi peak (above
    idle) of the row's unsloth runs, rounded up to 0.05 GiB (none when unsloth did not run)."""
    peaks = [r["device_used_gib"] for r in runs if r["side"] == "unsloth" and r.get("device_used_gib")]
    return math.ceil(max(peaks) * 20 - 1e-9) / 20 if peaks else None


def step_times(marks: list[dict], warmup: int) -> list[float]:
    """Each timed step's interval from the previous step's end, in seconds (a stall shows as one)."""
    timed = [m for m in marks if m["step"] >= warmup]
    return [round(b["t"] - a["t"], 4) for a, b in itertools.pairwise(timed)]


STALL_FIELDS = ("data_wait_s", "compute_s", "gc_s", "gc_full", "tokens_per_micro_batch", "alloc_retries")


def stall_detail(logs: list[dict], stalled: list[int]) -> list[dict]:
    """What the `log` events say of each stalled step and the step before it: the data wait, compute,
    Python's garbage collector (time a step, full collections), tokens a micro-batch and the
    allocator's retries, with torch's reserved GiB (a pause with none of these is the GPU's, or a
    host stall none of them counts)."""
    by_step = {e["step"]: e for e in logs}
    out = []
    for step in stalled:
        for s in (step - 1, step):
            e = by_step.get(s)
            if e is None:
                continue
            row = {"step": s, **{k: e.get(k) for k in STALL_FIELDS}}
            if e.get("mem_reserved_bytes") is not None:
                row["mem_reserved_gib"] = round(e["mem_reserved_bytes"] / GIB, 2)
            out.append(row)
    return out


def stall_note(run: dict) -> str:
    """The table's words on a run's stalled steps: each one's data wait and collector time."""
    stalled = set(run.get("stalled_steps") or [])
    parts = [
        f"{d['step']}: data wait {d['data_wait_s']:.2f} s, gc {d['gc_s']:.2f} s"
        for d in run.get("stall_detail") or []
        if d["step"] in stalled and d.get("data_wait_s") is not None and d.get("gc_s") is not None
    ]
    return f"; {'; '.join(parts)}" if parts else ""


def stalled_steps(marks: list[dict], warmup: int, factor: float = 2.0) -> list[int]:
    """Timed steps whose interval from the previous step's end is over `factor` x the median."""
    timed = [m for m in marks if m["step"] >= warmup]
    gaps = [(b["step"], b["t"] - a["t"]) for a, b in itertools.pairwise(timed)]
    if len(gaps) < 3:
        return []
    median = statistics.median(g for _, g in gaps)
    return [step for step, g in gaps if g > factor * median]


SIDES = (
    "cockpit",
    "cockpit-hf",
    "cockpit-packed",
    "cockpit-mlp",
    "cockpit-eager",
    "cockpit-noliger",
    "unsloth",
)
COCKPIT_SIDES = SIDES[:-1]  # a side at its row's cap


def sides_order(text: str) -> list[str]:
    """--sides: the runs of each row in order; a cockpit side may take @GIB or @unsloth-memory."""
    order = [x.strip() for x in text.split(",") if x.strip()]
    for side in order:
        name, _, cap = side.partition("@")
        bad = name not in SIDES or (name == "unsloth" and cap)
        if not bad and cap and cap != "unsloth-memory":
            try:
                float(cap)
            except ValueError:
                bad = True
        if bad:
            raise SystemExit(
                f"--sides: {side!r} is not one of {', '.join(SIDES)} (a cockpit side with @GIB or "
                "@unsloth-memory)"
            )
    return order


def cap_free(side: str) -> bool:
    """A side whose run does not depend on the row's cap: unsloth (its recipe uses what it uses, far
    under 22 GiB) and the cockpit held to unsloth's memory (capped at that, not at the row's cap)."""
    return side == "unsloth" or side.endswith("@unsloth-memory")


def run_cockpit(row: dict, a, work: Path, log, cap: float | None = None, side: str = "cockpit") -> dict:
    cap = row["cap"] if cap is None else cap
    config = work / f"{side}-{row['id']}.yaml"
    backend = "hf" if side.startswith("cockpit-hf") else "auto"
    config.write_text(
        cockpit_config(
            row["model"],
            row["data"],
            row["max_length"],
            a.warmup + a.steps,
            cap,
            a.smoke,
            a.profile_steps,
            backend,
            packed_scales=side.startswith("cockpit-packed"),
            mlp_block=side.startswith("cockpit-mlp"),
            eager_figures=side.startswith("cockpit-eager"),
            liger=not side.startswith("cockpit-noliger"),
        )
    )
    sys.path.insert(0, str(ROOT / "bench"))
    from common import PLAN_DECISIONS, cockpit_env

    env = cockpit_env(work / "home", work / "cache")
    home = work / "home" / "runs"
    before = set(home.iterdir()) if home.is_dir() else set()
    peak = peak_sampler(a.smoke)
    started = time.time()
    cmd = [
        sys.executable,
        "-m",
        "cockpit",
        "train",
        str(config),
        "--no-ui",
        "--skip-preflight",
        "--log-every",
        "0",
    ]
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=a.run_timeout_s)
    wall = time.time() - started
    used = round(peak.stop(), 2) if peak else None
    log.write(f"\n==== {side} {row['id']} (cap {cap} GiB)\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}\n")
    made = set(home.iterdir()) - before if home.is_dir() else set()
    if not made:
        return {
            "side": side,
            "cap_gib": cap,
            "failed": f"exit {proc.returncode}, no run directory",
            "wall_s": round(wall, 1),
        }
    events = []
    for line in (next(iter(made)) / "events.jsonl").read_text().splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    plan = next((e for e in events if e["type"] == "speed_plan"), {})
    logs = [e for e in events if e["type"] == "log" and e.get("loss") is not None]
    marks = [
        {"step": e["step"], "t": e["ts"], "tokens": e.get("tokens_seen"), "loss": e["loss"]}
        for e in logs
        if e["step"] <= a.warmup + a.steps  # the profiled steps after them are slower
    ]
    rate, loss, timed = timed_rate(marks, a.warmup)
    stalled = stalled_steps(marks, a.warmup)
    out = {
        "side": side,
        "cap_gib": cap,
        "tokens_per_s": round(rate, 1) if rate is not None else None,
        "loss": loss,
        "timed_steps": timed,
        "stalled_steps": stalled,
        "stall_detail": stall_detail(logs, stalled),
        "step_s": step_times(marks, a.warmup),
        "alloc_retries": logs[-1].get("alloc_retries") if logs else None,
        "device_used_gib": used,
        "peak_allocated_gib": round(max((e.get("mem_peak_bytes") or 0) for e in logs) / GIB, 2)
        if logs
        else None,
        "wall_s": round(wall, 1),
        "no_rate": None if rate is not None else no_rate_reason(marks, a.warmup),
        "plan": {
            k: plan.get(k) for k in (*PLAN_DECISIONS, "flops", "host_probe_ms", "predicted_tokens_per_s")
        },
        "lora_fused": next((e.get("lora_fused") for e in events if e["type"] == "model"), None),
    }
    profile = next(iter(made)) / "profile.json"
    if profile.is_file():
        out["profile"] = json.loads(profile.read_text())
    if proc.returncode != 0:
        error = next((e for e in reversed(events) if e["type"] == "error"), {})
        out["failed"] = f"{error.get('kind', f'exit {proc.returncode}')}: {error.get('message', '')}"[:300]
    return out


# a profiled unsloth step took ~46 s on an H200 (2 steps in 93 s, 2026-12-02): the run's timeout
# grows by this much a profiled step, so that the profile does not cost the run its result
UNSLOTH_PROFILED_STEP_S = 75


def unsloth_timeout(run_timeout_s: int, profile_steps: int) -> int:
    return run_timeout_s + UNSLOTH_PROFILED_STEP_S * (profile_steps or 0)


def run_unsloth(row: dict, a, work: Path, log) -> dict:
    micro = a.unsloth_micro
    spec = {
        "model": str(row["model_dir"]),
        "data": str(row["data"]),
        "max_length": row["max_length"],
        "cap_gib": row["cap"],
        "four_bit": not a.smoke,
        "padding_free": row["lengths"] == "ragged",
        "micro": micro,
        "accum": max(1, SAMPLES_PER_STEP // micro),
        "warmup": a.warmup,
        "steps": a.steps,
        "profile_steps": a.profile_steps,
        "repo": str(ROOT),
        "workdir": str(work / f"unsloth-out-{row['id']}"),
        "result": str(work / f"unsloth-{row['id']}-{time.time_ns()}.json"),
    }
    spec_path = work / f"unsloth-spec-{row['id']}.json"
    spec_path.write_text(json.dumps(spec))
    env = dict(os.environ, PYTHONPATH=a.unsloth_path, UNSLOTH_DISABLE_STATISTICS="1", HF_HUB_OFFLINE="1")
    peak = peak_sampler(a.smoke)
    started = time.time()
    timeout = unsloth_timeout(a.run_timeout_s, a.profile_steps)
    try:
        proc = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), WORKER_FLAG, str(spec_path)],
            env=env,
            cwd=work,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        code, text = proc.returncode, proc.stdout[-6000:] + "\n" + proc.stderr[-6000:]
    except subprocess.TimeoutExpired as exc:
        said = (exc.stdout or b"")[-3000:], (exc.stderr or b"")[-6000:]
        said = [x.decode(errors="replace") if isinstance(x, bytes) else x for x in said]
        code, text = None, f"{said[0]}\n{said[1]}\ntimed out after {timeout} s"
    wall = time.time() - started
    used = round(peak.stop(), 2) if peak else None
    log.write(f"\n==== unsloth {row['id']}\n{text}\n")
    result_path = Path(spec["result"])
    if not result_path.is_file():
        last = [line for line in text.splitlines() if line.strip()][-1:] or ["no output"]
        why = f"exit {code}: {last[0][:240]}"
        return {"side": "unsloth", "skipped" if a.smoke else "failed": why, "wall_s": round(wall, 1)}
    result = json.loads(result_path.read_text())
    if "skipped" in result:
        return {"side": "unsloth", "skipped": result["skipped"][:300], "wall_s": round(wall, 1)}
    result["marks"] = [m for m in result["marks"] if m["step"] <= a.warmup + a.steps]
    rate, loss, timed = timed_rate(result["marks"], a.warmup)
    return {
        "side": "unsloth",
        "tokens_per_s": round(rate, 1) if rate is not None else None,
        "no_rate": None if rate is not None else no_rate_reason(result["marks"], a.warmup),
        "loss": loss,
        "timed_steps": timed,
        "stalled_steps": stalled_steps(result["marks"], a.warmup),
        "step_s": step_times(result["marks"], a.warmup),
        "alloc_retries": result.get("alloc_retries"),
        "token_count": result.get("count"),
        "device_used_gib": used,
        "peak_reserved_gib": result.get("peak_reserved_gib"),
        "wall_s": round(wall, 1),
        "load_s": result.get("load_s"),
        "plan": {
            "micro_batch_size": micro,
            "gradient_accumulation_steps": spec["accum"],
            "padding_free": spec["padding_free"],
            "gradient_checkpointing": "unsloth",
        },
        "versions": result.get("versions"),
        "profile": result.get("profile"),
    }


def run_row(
    row: dict, order: list[str], a, log, shared: dict, took: dict, began: float, rows: list
) -> list[dict]:
    """The runs of one row, side by side in `order`. A side that does not depend on the cap
    (cap_free) is taken from an earlier row of the same model and lengths under
    --share-across-caps; a run that would end past --budget-s is skipped; after each run the rows
    so far go to vs_unsloth.partial.json (kept if the call ends early)."""
    runs: list[dict] = []
    for side in order:
        key = (row["arch"], row["lengths"], side)
        if a.share_across_caps and cap_free(side) and key in shared:
            first_row, first = shared[key]
            runs.append({**first, "shared_from": first_row})
            print(f"{row['id']} {side}: the run of {first_row}", file=sys.stderr, flush=True)
            continue
        if time.time() - began + took.get(side, 0.0) > a.budget_s:
            print(f"skipping {side} {row['id']}: past --budget-s", file=sys.stderr)
            continue
        t0 = time.time()
        if side == "unsloth":
            r = run_unsloth(row, a, a.workdir, log)
        elif side in COCKPIT_SIDES:
            r = run_cockpit(row, a, a.workdir, log, side=side)
        elif not side.endswith("@unsloth-memory"):  # at a cap of --cockpit-caps
            r = run_cockpit(row, a, a.workdir, log, cap=float(side.split("@")[1]), side=side)
        else:  # held to the memory unsloth used in this row
            cap_m = matched_cap(runs)
            if cap_m is None:
                continue
            r = run_cockpit(row, a, a.workdir, log, cap=cap_m, side=side)
        took_s = time.time() - t0
        took[side] = max(took.get(side, 0.0), took_s)
        runs.append(r)
        if a.share_across_caps and cap_free(side):
            shared[key] = (row["id"], r)
        got = r.get("tokens_per_s") or r.get("no_rate") or r.get("failed") or r.get("skipped")
        said = f"{row['id']} {side}: {got} tok/s, {r.get('device_used_gib')} GiB, {took_s:.0f} s"
        print(said, file=sys.stderr, flush=True)
        log.flush()
        partial = {"id": row["id"], "runs": runs, "in_progress": True}
        (a.out / "vs_unsloth.partial.json").write_text(  # kept if the call times out
            json.dumps({"rows": [*rows, partial]}, indent=1, default=str) + "\n"
        )
    return runs


def mfu_inputs(arch: str, lengths: list[int], max_length: int, device_name: str, total_bytes: int | None):
    """Model FLOPs per real token of this row (QLoRA: frozen base) and the card's dense bf16 peak."""
    sys.path.insert(0, str(ROOT))
    from cockpit.models.shape import load_shape
    from cockpit.speed import auto as speed_auto
    from cockpit.speed import flops

    shape = load_shape(f"synthetic:{arch}")
    context = flops.attention_context(lengths, max_length)
    per_token = flops.flops_per_token(shape, "qlora", RANK, TARGETS, context).model
    if not device_name:
        return per_token, None, "no GPU"
    from cockpit.gpus.catalog import find_card

    card = find_card(device_name)  # the NVML name's card ("H100 80GB HBM3" is the SXM)
    if card is not None:
        return per_token, card.bf16_dense_tflops * 1e12, card.name
    speed_card, note = speed_auto.card_for(device_name, total_bytes)
    return per_token, (None if note else speed_card.bf16_dense_tflops * 1e12), speed_card.name + note


def summarize(runs: list[dict], flops_per_token: float, peak: float | None) -> dict:
    got = {
        side: [r["tokens_per_s"] for r in runs if r["side"] == side and r.get("tokens_per_s")]
        for side in ("cockpit", "unsloth")
    }
    for r in runs:
        r["mfu"] = (
            round(r["tokens_per_s"] * flops_per_token / peak, 4) if peak and r.get("tokens_per_s") else None
        )
    out = {"flops_per_token": round(flops_per_token), "peak_flops": peak}
    # the default over each other side, on the same cap: speed.backend auto (fused LoRA layers) over hf
    # (peft's), the scales unpacked (speed: auto, where it has room) over packed, the figures read at
    # the log over each micro-batch, Liger's kernels (where they import) over none; each at the row's
    # cap against the default there, and held to unsloth's memory against the default held there
    # (name prefixed held_)
    for side, name in (
        ("cockpit-hf", "fused_over_hf"),
        ("cockpit-packed", "unpacked_over_packed"),
        ("cockpit-eager", "at_log_over_each_micro_batch"),
        ("cockpit-noliger", "liger_over_off"),
    ):
        for suffix, prefix in (("", ""), ("@unsloth-memory", "held_")):
            default = [
                r["tokens_per_s"] for r in runs if r["side"] == "cockpit" + suffix and r.get("tokens_per_s")
            ]
            other = [r["tokens_per_s"] for r in runs if r["side"] == side + suffix and r.get("tokens_per_s")]
            if other and default:
                pairs = [t / b for t in default for b in other]
                out.update(
                    {
                        prefix + name: round(statistics.mean(default) / statistics.mean(other), 3),
                        f"{prefix}{name}_min": round(min(pairs), 3),
                        f"{prefix}{name}_max": round(max(pairs), 3),
                    }
                )
    if got["cockpit"] and got["unsloth"]:
        pairs = [c / u for c in got["cockpit"] for u in got["unsloth"]]
        out.update(
            ratio=round(statistics.mean(got["cockpit"]) / statistics.mean(got["unsloth"]), 3),
            ratio_min=round(min(pairs), 3),
            ratio_max=round(max(pairs), 3),
        )
    used = {
        side: [r["device_used_gib"] for r in runs if r["side"] == side and r.get("device_used_gib")]
        for side in ("cockpit", "unsloth")
    }
    out.update({f"max_used_gib_{side}": max(v) if v else None for side, v in used.items()})
    matched = [r for r in runs if r["side"] == "cockpit@unsloth-memory" and r.get("tokens_per_s")]
    if matched and got["unsloth"]:
        m = matched[-1]
        out.update(
            matched_cap_gib=m.get("cap_gib"),
            matched_used_gib=m.get("device_used_gib"),
            matched_ratio=round(m["tokens_per_s"] / statistics.mean(got["unsloth"]), 3),
            matched_ratio_min=round(m["tokens_per_s"] / max(got["unsloth"]), 3),
            matched_ratio_max=round(m["tokens_per_s"] / min(got["unsloth"]), 3),
        )
    return out


def table(result: dict) -> str:
    lines = [
        "| row | side (in order) | real tokens/s | MFU | nvidia-smi peak GiB | loss at last step | plan |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        for r in row["runs"]:
            what = r.get("failed") or r.get("skipped")
            plan = r.get("plan") or {}
            plan_text = ", ".join(f"{k} {v}" for k, v in plan.items() if k != "flops" and v is not None)
            if what:
                lines.append(
                    f"| {row['id']} | {r['side']} | {'skipped' if 'skipped' in r else 'failed'}: "
                    f"{what} | | {r.get('device_used_gib', '')} | | {plan_text} |"
                )
                continue
            mfu = f"{r['mfu']:.1%}" if r.get("mfu") is not None else "-"
            rate = (
                f"{r['tokens_per_s']:.0f}"
                if r.get("tokens_per_s") is not None
                else f"no rate: {r.get('no_rate') or 'no token count'}"
            )
            count = r.get("token_count") or {}
            if count.get("problems") or count.get("unmatched_samples"):
                rate += (
                    f" (count checks: {len(count['problems'])} differences, "
                    f"{count['unmatched_samples']} samples not the bench's; in the json)"
                )
            if count.get("padded_micro_batches"):
                rate += f" ({count['padded_micro_batches']} of {count['micro_batches']} micro-batches padded)"
            if r.get("stalled_steps"):
                rate += f" (slow steps {r['stalled_steps']}{stall_note(r)})"
            loss = f"{r['loss']:.4f}" if r.get("loss") is not None else "-"
            side = r["side"] + (
                f" (cap {r['cap_gib']:g} GiB)" if r["side"] != "unsloth" and r.get("cap_gib") else ""
            )
            if r.get("shared_from"):
                side += f" (the run of {r['shared_from']}, not repeated)"
            lines.append(
                f"| {row['id']} | {side} | {rate} | {mfu} | "
                f"{r.get('device_used_gib') or '-'} | {loss} | {plan_text} |"
            )
    lines += [
        "",
        "| row | cockpit/unsloth tokens/s (means) | spread (pairs) | max GiB cockpit / unsloth "
        "| cockpit held to unsloth's memory: /unsloth (spread), GiB used of cap |",
        "|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        s = row["summary"]
        ratio = f"{s['ratio']:.2f}x" if "ratio" in s else "-"
        spread = f"{s['ratio_min']:.2f}-{s['ratio_max']:.2f}" if "ratio" in s else "-"
        matched = (
            f"{s['matched_ratio']:.2f}x ({s['matched_ratio_min']:.2f}-{s['matched_ratio_max']:.2f}), "
            f"{s['matched_used_gib']} of {s['matched_cap_gib']}"
            if "matched_ratio" in s
            else "-"
        )
        lines.append(
            f"| {row['id']} | {ratio} | {spread} | {s['max_used_gib_cockpit'] or '-'} / "
            f"{s['max_used_gib_unsloth'] or '-'} | {matched} |"
        )
    profiled = [(row, r) for row in result["rows"] for r in row["runs"] if r.get("profile")]
    if profiled:
        kinds = ("matmul", "attention", "dequantisation", "triton", "elementwise", "copy", "memset", "other")
        lines += [
            "",
            "Profiled steps (after the timed ones; ms a step of device kernel time by kind; the host's "
            "operator time on the CPU):",
            "",
            "| row | side | wall ms/step | busy share | "
            + " | ".join(kinds)
            + " | kernels/step | launches/step |",
            "|---|---|---|---|" + "---|" * len(kinds) + "---|---|",
        ]
        for row, r in profiled:
            p = r["profile"]
            by = p["s_per_step_by_kind"]
            cells = " | ".join(f"{1000 * by[k]:.1f}" if k in by else "-" for k in kinds)
            kernels = sum(p["count_per_step_by_kind"].values())
            busy = f"{p['busy_share']:.0%}" if p.get("busy_share") is not None else "-"
            lines.append(
                f"| {row['id']} | {r['side']} | {1000 * p['wall_s_per_step']:.0f} | {busy} | {cells} | "
                f"{kernels:.0f} | {p['launches_per_step']:.0f} |"
            )
    return "\n".join(lines)


def arg_parser() -> argparse.ArgumentParser:
    """The command line's options (bench/table_job.sh's commands are checked against it)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for vs_unsloth.json, .md and .log")
    ap.add_argument("--archs", default="llama-2-7b,llama-3.1-8b")
    ap.add_argument("--lengths", default="ragged,full", help="comma-separated: ragged (32..512), full (2048)")
    ap.add_argument("--caps", default="22,80", help="memory caps in GiB, comma-separated")
    ap.add_argument(
        "--rows",
        default=None,
        help="only these rows, arch:lengths:cap comma-separated (e.g. llama-3.1-8b:ragged:22,"
        "llama-2-7b:full:22); instead of --archs x --lengths x --caps",
    )
    ap.add_argument("--warmup", type=int, default=3, help="steps before the timed ones")
    ap.add_argument("--steps", type=int, default=20, help="timed optimizer steps")
    ap.add_argument(
        "--profile-steps",
        type=int,
        default=0,
        help="profile this many steps after the timed ones on both sides (torch.profiler): device time "
        "by kind of kernel, launches per step",
    )
    ap.add_argument(
        "--unsloth-micro", type=int, default=4, help="unsloth's micro-batch (accumulation fills the step)"
    )
    ap.add_argument(
        "--order",
        choices=("mirrored", "once"),
        default="mirrored",
        help="mirrored: cockpit, unsloth, unsloth, cockpit per row; once: cockpit, unsloth",
    )
    ap.add_argument(
        "--unsloth-path", default="/tmp/unsloth-site:/tmp/site", help="PYTHONPATH of the unsloth side"
    )
    ap.add_argument(
        "--matched",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="add a cockpit run capped at the memory unsloth used in the row (its nvidia-smi peak)",
    )
    ap.add_argument(
        "--cockpit-caps",
        default="",
        help="comma-separated GiB: one more cockpit run per row at each of these caps (side cockpit@<cap>)",
    )
    ap.add_argument(
        "--sides",
        default="",
        help="the runs of a row in this order, instead of --order/--matched/--cockpit-caps: cockpit "
        "(speed.backend auto), cockpit-hf (speed.backend hf: peft's layers), cockpit-packed (the 4-bit "
        "scales kept double-quantised), cockpit-mlp (speed.mlp_block: fused), cockpit-eager "
        "(speed.read_figures: each_micro_batch), cockpit-noliger (speed.fused_kernels: off), unsloth; "
        "a cockpit side may take @GIB or @unsloth-memory, e.g. "
        "cockpit,cockpit-hf,unsloth,unsloth,cockpit-hf,cockpit",
    )
    ap.add_argument(
        "--share-across-caps",
        action="store_true",
        help="run unsloth and the cockpit held to unsloth's memory once per model and lengths, in the "
        "first row that asks for them; rows of other caps take those runs (marked shared_from): neither "
        "depends on the row's cap (unsloth's peak is far under both caps)",
    )
    ap.add_argument("--budget-s", type=float, default=510.0, help="start no run that would end after this")
    ap.add_argument("--run-timeout-s", type=int, default=400)
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "vs-unsloth")
    ap.add_argument("--smoke", action="store_true", help="CPU: synthetic:tiny, LoRA, 1 + 2 steps, one row")
    ap.add_argument(
        "--prepare-only",
        action="store_true",
        help="build the synthetic weights and the token files of the rows asked for, and stop (untimed)",
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    a = arg_parser().parse_args(argv)
    wanted = parse_rows(a.rows) if a.rows else None
    if wanted:  # the loops below cover these, and skip the other combinations
        a.archs, a.lengths, a.caps = (",".join(dict.fromkeys(r[i] for r in wanted)) for i in range(3))
    if a.smoke:
        a.archs, a.lengths, a.caps, a.warmup, a.steps, a.order = "tiny", "ragged", "0", 1, 2, "once"
    began = time.time()
    a.out.mkdir(parents=True, exist_ok=True)
    a.workdir.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT / "bench"))
    from common import build_synthetic, cockpit_env

    env = cockpit_env(a.workdir / "home", a.workdir / "cache")
    device_name, total = "", None
    if not a.smoke:
        import pynvml
        from common import nvml_index

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(nvml_index())
        device_name, total = pynvml.nvmlDeviceGetName(handle), pynvml.nvmlDeviceGetMemoryInfo(handle).total
    rows, took, shared = [], {}, {}
    with open(a.out / "vs_unsloth.log", "w") as log:
        for arch in a.archs.split(","):
            if a.smoke:
                model_dir = a.workdir / "cache" / "synthetic" / "tiny-fp32"
                if not (model_dir / "config.json").is_file():
                    subprocess.run(
                        [
                            sys.executable,
                            "-m",
                            "train_backend.synthetic",
                            "tiny",
                            str(model_dir),
                            "fp32",
                            "cpu",
                        ],
                        env=env,
                        cwd=ROOT,
                        check=True,
                    )
            else:
                model_dir = build_synthetic(arch, a.workdir / "cache", env)  # untimed, like a download
            vocab = json.loads((model_dir / "config.json").read_text())["vocab_size"]
            for lengths in a.lengths.split(","):
                if wanted and not any(r[:2] == (arch, lengths) for r in wanted):
                    continue
                max_length = 128 if a.smoke else LENGTHS[lengths][1]
                count = SAMPLES_PER_STEP * (a.warmup + a.steps) * 2
                data = a.workdir / f"data-{arch}-{lengths}.jsonl"
                drawn = write_sequences(data, (16, max_length) if a.smoke else LENGTHS[lengths], count, vocab)
                per_token, peak, card = mfu_inputs(arch, drawn, max_length, device_name, total)
                if a.prepare_only:
                    print(f"prepared {model_dir} and {data}", file=sys.stderr)
                    continue
                for cap_text in a.caps.split(","):
                    if wanted and (arch, lengths, cap_text) not in wanted:
                        continue
                    cap = float(cap_text) or None
                    row = {
                        "id": f"{arch} {lengths} {cap_text} GiB" if cap else f"{arch} {lengths}",
                        "arch": arch,
                        "lengths": lengths,
                        "cap": cap,
                        "max_length": max_length,
                        "model": str(model_dir),
                        "model_dir": model_dir,
                        "data": data,
                    }
                    order = ["cockpit", "unsloth"] + (["unsloth", "cockpit"] if a.order == "mirrored" else [])
                    if a.matched:
                        order.append("cockpit@unsloth-memory")
                    order += [f"cockpit@{c.strip()}" for c in a.cockpit_caps.split(",") if c.strip()]
                    if a.sides:
                        order = sides_order(a.sides)
                    runs = run_row(row, order, a, log, shared, took, began, rows)
                    rows.append(
                        {
                            "id": row["id"],
                            "arch": arch,
                            "lengths": lengths,
                            "cap_gib": cap,
                            "card": card,
                            "runs": runs,
                            "summary": summarize(runs, per_token, peak),
                        }
                    )
    result = {
        "bench": "vs_unsloth",
        "smoke": a.smoke,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "host": platform.node(),
        "gpu": device_name or None,
        "warmup_steps": a.warmup,
        "timed_steps": a.steps,
        "samples_per_step": SAMPLES_PER_STEP,
        "lora": {"r": RANK, "alpha": RANK, "dropout": 0.0, "targets": TARGETS},
        "rows": rows,
        "wall_s": round(time.time() - began, 1),
    }
    (a.out / "vs_unsloth.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    text = table(result)
    (a.out / "vs_unsloth.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == WORKER_FLAG:
        sys.exit(unsloth_worker(sys.argv[2]))
    sys.exit(main())
