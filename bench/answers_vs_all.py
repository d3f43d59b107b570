#!/usr/bin/env python3
"""Loss on the answers against loss on every token: SmolLM2-135M-Instruct (`cockpit fetch
smollm2-135m` once) trained twice on the same chat rows, `dataset.train_on: answers` and `all`,
same steps, seed and held-out rows, on the CPU, for each seed; then both final adapters (and the
base model) evaluated on the held-out rows twice: on the answers' tokens alone (the answers mask
of train_backend/answer_mask.py, for both models), and on every token.

The data is the shipped chat set (cockpit/data/demo/chat.jsonl, 40 single-turn chats, 14 with a
system turn): EVAL_ROWS of them held out (chosen with the seed) into an eval file that both
runs evaluate (`dataset.eval_split`), the rest trained on. The runs' own eval events count what
each trains on (answers, or every token); the figures that compare the two are the ones this
script computes the same way for both.

  python bench/answers_vs_all.py --out bench/results/DATE-answers-vs-all-cpu.txt [--steps 24]
                                 [--seeds 42 7]

Writes the report (commands, machine, versions, figures, samples) to --out and prints it.
Exits 1 when a run did not finish.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, cockpit_env, read_events, run_cockpit

sys.path.insert(0, str(ROOT))
from cockpit.models import packaged

CHAT = ROOT / "cockpit" / "data" / "demo" / "chat.jsonl"
EVAL_ROWS = 10
# one compute thread: on a small box shared with other work, torch's threads spin waiting for each
# other (tests/conftest.py measured 48 s of CPU against 19 s for a tiny run)
THREADS = 1
MODES = ("answers", "all")
CONFIG = """\
model:
  name: smollm2-135m
dataset:
  path: {train}
  eval_split: {eval}
  train_on: {mode}
method: lora
lora:
  r: 16
  alpha: 32
  dropout: 0.0
  target_modules: all-linear
training:
  max_length: 96
  micro_batch_size: 4
  gradient_accumulation_steps: 1
  max_steps: {steps}
  learning_rate: 2.0e-3
  lr_scheduler: cosine
  warmup: 2
  optimizer: adamw_torch
  max_grad_norm: 1.0
  gradient_checkpointing: false
  logging_steps: 1
  seed: {seed}
output:
  save_steps: 1000
eval:
  steps: 8
  prompts: 3
  max_new_tokens: 32
"""


def split_rows(folder: Path, seed: int) -> tuple[Path, Path]:
    rows = [line for line in CHAT.read_text().splitlines() if line.strip()]
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    held = sorted(order[:EVAL_ROWS])
    train, evaluation = folder / "train.jsonl", folder / "eval.jsonl"
    train.write_text("".join(rows[i] + "\n" for i in range(len(rows)) if i not in held))
    evaluation.write_text("".join(rows[i] + "\n" for i in held))
    return train, evaluation


def train(mode: str, folder: Path, data: tuple[Path, Path], steps: int, seed: int) -> dict:
    config = folder / f"{mode}.yaml"
    config.write_text(CONFIG.format(train=data[0], eval=data[1], mode=mode, steps=steps, seed=seed))
    home = folder / f"home-{mode}"
    env = cockpit_env(
        home, PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", OMP_NUM_THREADS=str(THREADS)
    )
    started, cpu_before = time.time(), _children_cpu_s()
    code, output = run_cockpit(["train", str(config), "--no-ui", "--skip-preflight", "--log-every", "0"], env)
    wall_s, cpu_s = time.time() - started, _children_cpu_s() - cpu_before
    runs = list((home / "runs").iterdir()) if (home / "runs").is_dir() else []
    evs = read_events(runs[0]) if runs else []
    done = next((e for e in evs if e["type"] == "done"), {})
    if code != 0 or done.get("status") != "finished":
        print(output[-4000:], file=sys.stderr)
        raise SystemExit(f"the {mode} run did not finish (exit {code})")
    return {
        "mode": mode,
        "config": config.read_text(),
        "wall_s": wall_s,
        "cpu_s": cpu_s,
        "run": runs[0],
        "data_line": next((line for line in output.splitlines() if " data: " in line), ""),
        "data": next(e for e in evs if e["type"] == "data"),
        "evals": [e for e in evs if e["type"] == "eval"],
        "logs": [e for e in evs if e["type"] == "log"],
        "samples": [e for e in evs if e["type"] == "sample" and e.get("stage") == "final"],
        "done": done,
    }


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def held_out_losses(model_dir: str, adapters: dict[str, Path | None], eval_file: Path) -> dict:
    """{name: {"answers": (loss, tokens), "all": (loss, tokens)}} on the eval rows, each model the
    base with its adapter (None: the base alone)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from train_backend.answer_mask import tokenize_with_mask
    from train_backend.evaluation import eval_loss

    torch.set_num_threads(THREADS)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    rows = [json.loads(line) for line in eval_file.read_text().splitlines() if line.strip()]
    masked = {
        how: [tokenize_with_mask(tokenizer, row, "messages", how, 96) for row in rows]
        for how in ("answers", "all")
    }
    out = {}
    for name, adapter in adapters.items():
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        if adapter is not None:
            model = PeftModel.from_pretrained(model, str(adapter))
        model.eval()
        out[name] = {}
        for how, samples in masked.items():
            loss, tokens = eval_loss(
                model,
                [s.input_ids for s in samples],
                4,
                tokenizer.pad_token_id or 0,
                [s.labels for s in samples],
            )
            out[name][how] = (loss, tokens)
    return out


def machine() -> list[str]:
    import importlib.metadata as md

    uname = subprocess.run(["uname", "-a"], capture_output=True, text=True).stdout.strip()
    versions = []
    for name in ("torch", "transformers", "peft", "trl", "datasets", "accelerate"):
        try:
            versions.append(f"{name} {md.version(name)}")
        except md.PackageNotFoundError:
            versions.append(f"{name} -")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    usable = len(os.sched_getaffinity(0))
    return [
        f"machine: {uname}",
        f"nproc: {os.cpu_count()} (usable: {usable}); python {platform.python_version()}",
        f"versions: {', '.join(versions)}",
        f"checkout: {commit.stdout.strip()}",
    ]


def report(args, results: dict) -> str:
    """`results`: {seed: (runs, losses)}."""
    seeds = " ".join(str(seed) for seed in results)
    lines = [
        f"# answers vs all on the CPU, {datetime.date.today().isoformat()}",
        "",
        f"command: python bench/answers_vs_all.py --out {args.out} --steps {args.steps} --seeds {seeds}",
        *machine(),
        "",
        f"data: {CHAT.relative_to(ROOT)} ({sum(1 for _ in CHAT.open())} chats); per seed, {EVAL_ROWS} held "
        "out (chosen with the seed) as dataset.eval_split, the rest trained on; SmolLM2-135M-Instruct, "
        f"LoRA r16 all-linear, {args.steps} steps of 4 rows, lr 2e-3 cosine, the seed as training.seed, "
        f"fp32 on the CPU ({THREADS} compute thread; wall times depend on what else the box runs)",
    ]
    summary = []
    for seed, (runs, losses) in results.items():
        lines += ["", f"## seed {seed}: the runs (each counts what it trains on in its own eval)"]
        for mode, run in runs.items():
            done, last = run["done"], run["logs"][-1]
            base = next((e for e in run["evals"] if e["stage"] == "base"), {})
            final = run["evals"][-1] if run["evals"] else {}
            lines += [
                f"{mode}: {run['data_line'].split(' data: ', 1)[-1]}",
                f"  train loss {done.get('train_loss'):.4f}; own eval loss {base.get('eval_loss'):.4f} "
                f"(base) -> {final.get('eval_loss'):.4f} (final) on {final.get('eval_tokens')} tokens; "
                f"trained_tokens_seen {last.get('trained_tokens_seen'):,} of tokens_seen "
                f"{last.get('tokens_seen'):,}; "
                f"{run['cpu_s']:.0f} s CPU, {run['wall_s']:.0f} s wall",
            ]
        lines += [
            "",
            f"## seed {seed}: held-out loss, every model measured the same way (train_backend.evaluation."
            "eval_loss; the answers mask of answer_mask.py for both)",
            f"{'model':16s} {'on the answers':>16s} {'on every token':>16s}",
        ]
        for name, figures in losses.items():
            a, t = figures["answers"], figures["all"]
            lines.append(f"{name:16s} {a[0]:>10.4f} ({a[1]:>3d}) {t[0]:>10.4f} ({t[1]:>4d})")
        a_ans, a_all = losses["trained answers"]["answers"][0], losses["trained all"]["answers"][0]
        summary.append((seed, a_ans, a_all))
        lines += ["", f"## seed {seed}: final samples (greedy, 32 new tokens)"]
        for mode, run in runs.items():
            for sample in run["samples"]:
                lines.append(
                    f"{mode:8s} [{sample['finish']}] {sample['prompt'][:60]!r} -> {sample['output'][:90]!r}"
                )
    lines += ["", "## held-out loss on the answers, train_on answers vs all"]
    for seed, a_ans, a_all in summary:
        lines.append(
            f"seed {seed}: answers {a_ans:.4f}, all {a_all:.4f} ({(a_ans - a_all) / a_all:+.1%} for answers)"
        )
    mean_ans = sum(a for _, a, _ in summary) / len(summary)
    mean_all = sum(b for _, _, b in summary) / len(summary)
    lower = sum(1 for _, a, b in summary if a < b)
    lines.append(
        f"mean: answers {mean_ans:.4f}, all {mean_all:.4f} ({(mean_ans - mean_all) / mean_all:+.1%}); "
        f"answers lower in {lower} of {len(summary)} seeds"
    )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 7])
    args = parser.parse_args()
    if not packaged.is_fetched("smollm2-135m"):
        raise SystemExit("smollm2-135m is not in the model cache: cockpit fetch smollm2-135m")
    results = {}
    for seed in args.seeds:
        with tempfile.TemporaryDirectory(prefix="answers-vs-all-") as tmp:
            folder = Path(tmp)
            data = split_rows(folder, seed)
            runs = {mode: train(mode, folder, data, args.steps, seed) for mode in MODES}
            adapters = {"base": None, **{f"trained {m}": Path(runs[m]["done"]["output"]) for m in MODES}}
            losses = held_out_losses(str(packaged.model_dir("smollm2-135m")), adapters, data[1])
        results[seed] = (runs, losses)
    text = report(args, results)
    Path(args.out).write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
