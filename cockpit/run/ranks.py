"""Several GPUs, several machines: how a run is launched and how its ranks end (no torch here).

A run with `gpus: 1` on one machine starts `python -m train_backend train RUN` as before.
With `gpus > 1` or `distributed.nnodes > 1` the supervisor starts

    python -m train_backend.launcher RUN torchrun --nproc-per-node N ... -m train_backend train RUN

which runs torchrun (or `accelerate launch`) in its own process, the leader of the run's
process group, and writes the run's final `error` event when a rank failed. Each rank
leaves files in the run directory (names below): `rank-N.json` (who it is, for the
supervisor), `backend.rankN.log` (its output; rank 0 of each node writes the events and
`backend.log`), and `rank-N.error.json` when it failed, which the launcher folds into
one `error` event that names the rank (`fold_rank_errors`).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cockpit.config.schema import TrainConfig

LAUNCHER_MODULE = "train_backend.launcher"
# NVLink SHARP (multicast) stays off unless the user turns it on: on shared hosts a program
# using it can take every GPU of the host out of service (see docs/multi_gpu.md)
DEFAULT_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}


def rank_record_path(run_path: Path, rank: int) -> Path:
    return Path(run_path) / f"rank-{rank}.json"


def rank_error_path(run_path: Path, rank: int) -> Path:
    return Path(run_path) / f"rank-{rank}.error.json"


def rank_log_path(run_path: Path, rank: int) -> Path:
    return Path(run_path) / f"backend.rank{rank}.log"


def is_distributed(cfg: TrainConfig) -> bool:
    return cfg.gpus > 1 or cfg.distributed.nnodes > 1


def world_size(cfg: TrainConfig) -> int:
    return cfg.gpus * cfg.distributed.nnodes


# ---------------------------------------------------------------- launching


def torchrun_args(cfg: TrainConfig, run_path: Path) -> list[str]:
    """torchrun's arguments: one process per GPU, no restarts (a failed rank fails the run)."""
    d = cfg.distributed
    args = ["--nproc-per-node", str(cfg.gpus), "--max-restarts", "0", "--monitor-interval", "0.5"]
    if d.nnodes > 1:
        assert d.rdzv_endpoint is not None  # the config's check requires one with nnodes > 1
        args += [
            "--nnodes",
            str(d.nnodes),
            "--node-rank",
            str(d.node_rank),
            "--rdzv-backend",
            "static",
            "--rdzv-endpoint",
            d.rdzv_endpoint,
        ]
    elif d.master_port is not None:
        args += ["--nnodes", "1", "--rdzv-backend", "static", "--rdzv-endpoint", f"127.0.0.1:{d.master_port}"]
    else:
        args += ["--standalone"]  # a local rendezvous on a free port
    return [*args, "-m", "train_backend", "train", str(run_path)]


def accelerate_args(cfg: TrainConfig, run_path: Path) -> list[str]:
    """`accelerate launch`'s arguments for the same job (accelerate runs torchrun inside)."""
    d = cfg.distributed
    host, port = (d.rdzv_endpoint or f"127.0.0.1:{d.master_port or 29500}").rsplit(":", 1)
    return [
        "--multi_gpu",
        "--num_processes",
        str(world_size(cfg)),
        "--num_machines",
        str(d.nnodes),
        "--machine_rank",
        str(d.node_rank),
        "--main_process_ip",
        host.strip("[]"),
        "--main_process_port",
        port,
        "--rdzv_backend",
        "static",
        "--max_restarts",
        "0",
        "--monitor_interval",
        "0.5",
        "--mixed_precision",
        "no",  # the trainer's SFTConfig sets the precision
        "--dynamo_backend",
        "no",
        "-m",
        "train_backend",
        "train",
        str(run_path),
    ]


def trainer_command(cfg: TrainConfig, run_path: Path) -> list[str]:
    """The command the supervisor starts for this run."""
    if not is_distributed(cfg):
        return [sys.executable, "-m", "train_backend", "train", str(run_path)]
    launcher = cfg.distributed.launcher
    args = torchrun_args(cfg, run_path) if launcher == "torchrun" else accelerate_args(cfg, run_path)
    return [sys.executable, "-m", LAUNCHER_MODULE, str(run_path), launcher, *args]


def launch_env(cfg: TrainConfig, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Variables the ranks need beyond the user's own (which win).

    One process on a box of several GPUs would get all of them and HF Trainer would wrap the
    model in nn.DataParallel (which TRL refuses): a one-GPU run sees only the first GPU it is
    allowed (the first of CUDA_VISIBLE_DEVICES, else GPU 0)."""
    if environ is None:
        environ = os.environ
    if not is_distributed(cfg):
        visible = [d.strip() for d in environ.get("CUDA_VISIBLE_DEVICES", "0").split(",") if d.strip()]
        return {"CUDA_VISIBLE_DEVICES": visible[0]} if visible else {}
    env = {k: v for k, v in DEFAULT_ENV.items() if k not in environ}
    if "OMP_NUM_THREADS" not in environ:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        env["OMP_NUM_THREADS"] = str(max(1, cores // max(1, cfg.gpus)))
    return env


# ---------------------------------------------------------------- ranks


def rank_records(run_path: Path) -> list[dict[str, Any]]:
    """What each rank of this node wrote about itself at start (pid, create time, ranks)."""
    records = []
    for path in sorted(Path(run_path).glob("rank-*.json")):
        if path.name.endswith(".error.json"):
            continue
        try:
            records.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return sorted(records, key=lambda r: r.get("rank", 0))


def live_rank_pids(run_path: Path) -> list[int]:
    """Pids of this node's ranks that still run (their recorded start time matches)."""
    import psutil

    from cockpit.run import pids

    alive = []
    for record in rank_records(run_path):
        try:
            proc = psutil.Process(record["pid"])
            if pids.same_process(proc, record) and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc.pid)
        except (psutil.Error, KeyError):
            continue
    return alive


def kill_ranks(run_path: Path, sig: int = signal.SIGKILL) -> list[int]:
    """Signal every live rank's process group (torchrun starts each rank in a session of its own)."""
    hit = []
    for pid in live_rank_pids(run_path):
        try:
            os.killpg(pid, sig)
            hit.append(pid)
        except (ProcessLookupError, PermissionError):
            continue
    return hit


def clear_rank_files(run_path: Path) -> None:
    """A restarted run starts with no rank records or errors of the previous attempt."""
    for path in Path(run_path).glob("rank-*.json"):
        path.unlink(missing_ok=True)


def read_rank_errors(run_path: Path) -> list[dict[str, Any]]:
    errors = []
    for path in Path(run_path).glob("rank-*.error.json"):
        try:
            errors.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return errors


def _is_peer_loss(error: dict[str, Any]) -> bool:
    """A rank that failed only because another one went away (its collective broke)."""
    text = str(error.get("message", "")).lower()
    return any(
        needle in text
        for needle in (
            "connection closed by peer",
            "connection reset by peer",
            "broken pipe",
            "gloo/transport",
            "distbackenderror",
            "nccl communicator was aborted",
            "watchdog caught collective operation timeout",
        )
    )


def _log_name(rank: int, info: dict[str, Any]) -> str:
    return "backend.log" if info.get("local_rank") == 0 else f"backend.rank{rank}.log"


def fold_rank_errors(
    errors: list[dict[str, Any]], failures: dict[int, dict[str, Any]] | None = None
) -> dict[str, Any] | None:
    """One `error` event's fields from the ranks' error files and the launcher's exit codes.

    The root cause is the earliest error of a rank that did not fail only because a peer went
    away; the others are listed in `failed_ranks`. `failures` (rank -> {exitcode, signal, log_tail})
    covers ranks that died without writing a file (killed, segfault).
    """
    failures = failures or {}
    if not errors and not failures:
        return None
    reported = {e.get("rank") for e in errors}
    silent = sorted(r for r in failures if r not in reported)  # died without a word: killed, segfault
    causes = sorted((e for e in errors if not _is_peer_loss(e)), key=lambda e: e.get("ts", 0.0))
    ordered = causes + sorted((e for e in errors if _is_peer_loss(e)), key=lambda e: e.get("ts", 0.0))
    if causes or not silent:
        root = dict(ordered[0])
        rest = ordered[1:]
    else:
        rank = silent[0]
        info = failures[rank]
        how = (
            f"killed by {info['signal']}"
            if info.get("signal")
            else f"exited with code {info.get('exitcode')}"
        )
        root = {
            "kind": "other",
            "rank": rank,
            "message": f"rank {rank} {how} without reporting an error",
            "hint": "Something outside Python ended it: the kernel's OOM killer (dmesg | grep -i kill), a "
            f"segfault in a native library, or a signal. Its output is in {_log_name(rank, info)}.",
            "phase": None,
            "step": None,
            "oom": None,
            "traceback": info.get("log_tail", ""),
        }
        silent = silent[1:]
        rest = ordered
    others = [
        {"rank": e.get("rank"), "kind": e.get("kind"), "message": e.get("message", "")[:300]} for e in rest
    ]
    others += [
        {"rank": r, "kind": "other", "message": f"exit code {failures[r].get('exitcode')}"} for r in silent
    ]
    root_rank = root.get("rank")
    message = root.get("message", "")
    if root_rank is not None and not message.startswith("rank "):
        message = f"rank {root_rank}: {message}"
    hint = root.get("hint", "")
    if root_rank is not None and root.get("local_rank", root_rank) != 0 and "backend.rank" not in hint:
        hint += f" Rank {root_rank}'s output: backend.rank{root_rank}.log."
    if others:
        also = ", ".join(f"rank {o['rank']}" for o in others)
        hint += f" (also failed: {also}, after it)"
    fields = {k: root.get(k) for k in ("kind", "phase", "step", "oom", "traceback", "checkpoints")}
    fields.update(message=message, hint=hint, rank=root_rank, failed_ranks=others)
    fields["kind"] = fields["kind"] or "other"
    return fields
