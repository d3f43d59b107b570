"""The finish line on the GPU machine: evaluation while training, samples before and after, and
`cockpit chat` on what it trained, through the product.

    python bench/finish_line.py --out bench/results/finish_line      # the H200: ~60 steps of the
        # article's QLoRA recipe on synthetic:llama-2-7b, eval every 20, 3 samples before/after
    python bench/finish_line.py --smoke --out /tmp/finish             # the tiny model on the CPU

It runs `cockpit train` headless, then reads the run's events: every eval (step, loss, seconds),
every sample (which weights, finish, tokens, seconds), the checkpoints and the best one by eval
loss, and what the eval passes and the samples cost against the training time. Then `cockpit
samples --json` and one `cockpit chat --checkpoint best --prompt` (its load and answer timed).
It writes finish_line.json into --out and prints a summary. `synthetic:` weights are random: the
answers say nothing of quality, only that the machinery runs and what it costs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import yaml
from common import run_cockpit
from gpu_runs import FULL, SMOKE, bench_env, events_of, prebuild

PROMPT = "What is the capital of France?"


def recipe(smoke: bool, steps: int, eval_steps: int) -> dict:
    """The article's QLoRA recipe (gpu_runs.FULL) on the shipped data with an eval split, or the tiny
    model's CPU run."""
    shape = SMOKE if smoke else FULL
    cfg = {
        "model": {"name": shape.model},
        "dataset": {"path": "demo", "eval_fraction": 0.1},
        "method": shape.method,
        "training": {
            "max_length": shape.max_length,
            "micro_batch_size": shape.micro_batch_size,
            "gradient_accumulation_steps": shape.accumulation,
            "max_steps": steps,
            "learning_rate": 2e-4 if not smoke else 1e-3,
            "lr_scheduler": "constant",
            "warmup": 0.03,
            "precision": shape.precision,
            "logging_steps": 1,
        },
        "output": {"save_steps": eval_steps, "checkpoints_kept": 2},
        "eval": {
            "steps": eval_steps,
            "prompts": 2 if smoke else 3,
            "max_new_tokens": 6 if smoke else 32,
            "max_samples": 8 if smoke else None,
        },
        "speed": {"mode": "off"},  # the recipe as the article writes it
    }
    for section, values in shape.extra.items():
        cfg.setdefault(section, {}).update(values)
    return cfg


def summarise(events: list[dict]) -> dict:
    evals = [e for e in events if e.get("type") == "eval"]
    samples = [e for e in events if e.get("type") == "sample"]
    checkpoints = [e for e in events if e.get("type") == "checkpoint"]
    done = next((e for e in reversed(events) if e.get("type") in ("done", "error")), {})
    runtime = done.get("runtime_s") or 0.0
    eval_s = sum(e["eval_s"] for e in evals)
    sample_s = sum(s.get("seconds") or 0.0 for s in samples)
    return {
        "status": done.get("status") or done.get("kind"),
        "train_runtime_s": runtime,
        "train_loss": done.get("train_loss"),
        "evals": [
            {k: e.get(k) for k in ("step", "stage", "eval_loss", "eval_samples", "eval_s")} for e in evals
        ],
        "eval_s_total": round(eval_s, 2),
        "samples": [
            {
                k: s.get(k)
                for k in ("stage", "checkpoint", "index", "finish", "new_tokens", "seconds", "output")
            }
            for s in samples
        ],
        "sample_s_total": round(sample_s, 2),
        "sample_tokens_per_s_median": round(
            statistics.median(s["new_tokens"] / s["seconds"] for s in samples if s.get("seconds")), 2
        )
        if samples
        else None,
        "checkpoints": [{k: c.get(k) for k in ("step", "eval_loss", "best_checkpoint")} for c in checkpoints],
        "best_checkpoint": done.get("best_checkpoint"),
        "best_eval_loss": done.get("best_eval_loss"),
        "final_eval_loss": done.get("eval_loss"),
        # what the finish line costs on top of training (train_runtime includes the in-loop evals and
        # checkpoint samples; the final eval and samples come after it)
        "eval_and_samples_share_of_runtime": round((eval_s + sample_s) / runtime, 4) if runtime else None,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="the tiny model on the CPU (the tests run this)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--steps", type=int, default=None, help="optimizer steps (default 60; smoke 6)")
    p.add_argument(
        "--eval-steps", type=int, default=None, help="eval (and checkpoint) every N (default 20; smoke 3)"
    )
    args = p.parse_args(argv)
    steps = args.steps or (6 if args.smoke else 60)
    eval_steps = args.eval_steps or (3 if args.smoke else 20)
    args.out.mkdir(parents=True, exist_ok=True)
    home = args.out / "home"
    env = bench_env(home)
    shape = SMOKE if args.smoke else FULL
    prebuild(shape, env)  # untimed, like a download
    config = args.out / "finish_line.yaml"
    config.write_text(yaml.safe_dump(recipe(args.smoke, steps, eval_steps), sort_keys=False))

    started = time.time()
    code, output = run_cockpit(["train", str(config), "--no-ui", "--skip-preflight"], env, timeout_s=3600)
    wall_s = round(time.time() - started, 1)
    (args.out / "train_output.txt").write_text(output)
    runs = sorted((home / "runs").iterdir())
    run = runs[-1]
    result = {"config": str(config), "run": str(run), "train_exit": code, "train_wall_s": wall_s}
    result.update(summarise(events_of(run)))

    code, output = run_cockpit(["samples", str(run), "--json"], env, timeout_s=120)
    try:
        book = json.loads(output) if code == 0 else {}
    except ValueError:
        book = {}
    result["samples_cli"] = {
        "exit": code,
        "labels": book.get("labels"),
        "prompts": len(book.get("prompts", [])),
    }

    which = "best" if result.get("best_checkpoint") else None
    chat = ["chat", str(run), "--prompt", PROMPT, "--max-new-tokens", "6" if args.smoke else "32"]
    if which:
        chat += ["--checkpoint", which]
    started = time.time()
    code, output = run_cockpit(chat, env, timeout_s=1800)
    lines = output.splitlines()
    result["chat"] = {
        "exit": code,
        "checkpoint": which or "final",
        "wall_s": round(time.time() - started, 1),
        "loaded": next((x for x in lines if x.startswith("loaded in")), None),
        "ended": next((x for x in lines if x.startswith("[")), None),
        "answer": lines[0] if lines else "",
    }
    (args.out / "finish_line.json").write_text(json.dumps(result, indent=1, ensure_ascii=False))
    print(f"run {run.name}: {result['status']} in {wall_s} s (training {result['train_runtime_s']} s)")
    for e in result["evals"]:
        print(f"  eval step {e['step']:>4} ({e['stage']}): loss {e['eval_loss']:.4f} in {e['eval_s']} s")
    print(
        f"  {len(result['samples'])} samples, {result['sample_s_total']} s in all, median "
        f"{result['sample_tokens_per_s_median']} tokens/s; eval + samples = "
        f"{result['eval_and_samples_share_of_runtime']} of the training time"
    )
    print(f"  best checkpoint {result['best_checkpoint']} ({result['best_eval_loss']})")
    print(f"  cockpit samples --json: {result['samples_cli']}")
    print(f"  cockpit chat: exit {code}, {result['chat']['loaded']} {result['chat']['ended']}")
    ok = result["status"] == "finished" and result["samples_cli"]["exit"] == 0 and code == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
