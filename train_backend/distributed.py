"""One rank of a run on several GPUs (or machines): who it is, where it writes, how ranks agree.

torchrun (through `train_backend.launcher`) starts `python -m train_backend train RUN` once
per GPU with RANK, LOCAL_RANK, WORLD_SIZE... set. Here:

- Output. Local rank 0 of each node writes the events (to RUN/events.jsonl, opened by path:
  the launcher holds the original stdout) and its output to backend.log; every other rank
  writes its output to backend.rankN.log and no events (`RankEmitter`).
- Failure. A rank's `error` becomes RUN/rank-N.error.json, never an event: the launcher folds
  the files of all failed ranks into the one `error` event (cockpit.run.ranks).
- Commands. Local rank 0 reads the control FIFO; signals reach every rank (torchrun forwards
  SIGTERM). At every step end, and between phases, all ranks all-reduce (MAX, on a gloo group,
  so it never waits on the GPU) what they were asked: stop, save, pause. Every rank then acts
  on the same answer at the same step: no rank saves, stops or pauses alone, which would leave
  the others waiting in a collective. Pause and resume are rank 0's alone.
- Orphans. Each rank dies with its launcher (PR_SET_PDEATHSIG, SIGKILL): torchrun puts ranks in
  sessions of their own, so a SIGKILL to the launcher's process group would not reach them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from cockpit.models.sharding import choose_strategy as choose_sharding
from cockpit.run import ranks as plan
from train_backend.channel import Emitter, take_stdout
from train_backend.controls import Controls

PR_SET_PDEATHSIG = 1


@dataclass
class World:
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    run_path: Path
    launcher_pid: int | None = None
    backend: str | None = None
    strategy: str | None = None
    strategy_reason: str = ""
    node_pids: list[int] = field(default_factory=list)  # this node's ranks, for the GPU telemetry
    control_group: object = field(default=None, repr=False)

    @classmethod
    def from_env(cls, run_path: Path, environ: dict | None = None) -> World | None:
        """The rank's place in the job, or None when this process was not started by torchrun."""
        env = os.environ if environ is None else environ
        if "LOCAL_RANK" not in env or int(env.get("WORLD_SIZE", "1")) < 2:
            return None
        launcher = env.get("COCKPIT_LAUNCHER_PID")
        return cls(
            rank=int(env["RANK"]),
            local_rank=int(env["LOCAL_RANK"]),
            world_size=int(env["WORLD_SIZE"]),
            local_world_size=int(env.get("LOCAL_WORLD_SIZE", env["WORLD_SIZE"])),
            node_rank=int(env.get("GROUP_RANK", "0")),
            run_path=Path(run_path),
            launcher_pid=int(launcher) if launcher else None,
        )

    @property
    def writes_events(self) -> bool:
        return self.local_rank == 0

    @property
    def nnodes(self) -> int:
        return max(1, self.world_size // max(1, self.local_world_size))

    def describe(self) -> dict:
        return {
            "world_size": self.world_size,
            "nnodes": self.nnodes,
            "node_rank": self.node_rank,
            "gpus_per_node": self.local_world_size,
            "rank": self.rank,
            "backend": self.backend,
            "strategy": self.strategy,
            "strategy_reason": self.strategy_reason or None,
            "pids": self.node_pids,
        }

    # ------------------------------------------------------------ start of the process

    def bootstrap(self) -> int | None:
        """Die with the launcher, route output, record who we are. Returns the events fd (or None)."""
        die_with_parent(self.launcher_pid)
        if not self.writes_events:
            log = os.open(
                plan.rank_log_path(self.run_path, self.rank), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600
            )
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.close(log)
        os.close(take_stdout())  # Python's streams scrubbed, fd 1 onto fd 2; the protocol is elsewhere
        import torch

        if torch.cuda.is_available():  # before anything touches CUDA: this rank's GPU is its device
            torch.cuda.set_device(self.local_rank)
        record = {
            "rank": self.rank,
            "local_rank": self.local_rank,
            "node_rank": self.node_rank,
            "pid": os.getpid(),
            **_identity(),
            "started": time.time(),
        }
        _write_json(plan.rank_record_path(self.run_path, self.rank), record)
        if not self.writes_events:
            return None
        events = self.run_path / "events.jsonl"
        return os.open(events, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def init_process_group(self, device_kind: str, timeout_s: int) -> None:
        import datetime

        import torch
        import torch.distributed as dist

        timeout = datetime.timedelta(seconds=timeout_s)
        if device_kind == "cuda":
            torch.cuda.set_device(self.local_rank)
            self.backend = "nccl"
        else:
            self.backend = "gloo"
        if not dist.is_initialized():
            dist.init_process_group(backend=self.backend, timeout=timeout)
        # commands travel on the CPU: agreeing on them never waits for the GPU's queue
        self.control_group = dist.new_group(backend="gloo", timeout=timeout)
        everyone: list = [None] * self.world_size
        dist.all_gather_object(everyone, (self.node_rank, os.getpid()), group=self.control_group)
        self.node_pids = [pid for node, pid in everyone if node == self.node_rank]

    def write_error(self, fields: dict) -> None:
        record = dict(fields, rank=self.rank, local_rank=self.local_rank, node_rank=self.node_rank)
        record.update(pid=os.getpid(), ts=time.time())
        _write_json(plan.rank_error_path(self.run_path, self.rank), record)

    # ------------------------------------------------------------ training arguments

    def sft_overrides(self, cfg) -> dict:
        """What SFTConfig needs for this strategy on top of the one-GPU arguments."""
        out: dict = {"ddp_backend": self.backend, "ddp_timeout": cfg.distributed.timeout_s}
        if self.nnodes > 1:
            out["save_on_each_node"] = True  # every node's run directory can resume on its own
        if self.strategy == "ddp":
            # every trainable parameter gets a gradient every step (LoRA adapters; full weights)
            out["ddp_find_unused_parameters"] = False
            return out
        out["fsdp"] = True
        out["fsdp_config"] = {
            "version": 2,
            "reshard_after_forward": cfg.distributed.fsdp_sharding == "full_shard",
            "cpu_offload": cfg.distributed.fsdp_cpu_offload,
            "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",  # one unit per decoder layer (_no_split_modules)
            # FSDP recomputes per wrapped layer; HF's own checkpointing would all-gather twice
            "activation_checkpointing": cfg.training.gradient_checkpointing,
            "state_dict_type": "FULL_STATE_DICT",  # checkpoints and final/ load without FSDP
        }
        out["gradient_checkpointing"] = False
        return out

    def adapt_sft_config(self, args, cfg):
        import dataclasses

        return dataclasses.replace(args, **self.sft_overrides(cfg))


def choose_strategy(world: World, cfg, model_path: str, card_bytes: int | None) -> None:
    """Set `world.strategy` (ddp | fsdp) and the reason, from the config and the memory model."""
    replica = None
    if cfg.method == "full" and cfg.distributed.strategy == "auto":
        replica = _replica_bytes(cfg, model_path)
    emulated = getattr(cfg, "emulate_vram_gib", None)
    if emulated and card_bytes:
        card_bytes = min(card_bytes, int(emulated * 2**30))
    choice = choose_sharding(cfg.distributed.strategy, cfg.method, replica, card_bytes)
    world.strategy, world.strategy_reason = choice.strategy, choice.reason
    if world.strategy == "fsdp" and world.backend == "gloo":  # accelerate shards on GPUs only
        world.strategy = "ddp"
        world.strategy_reason += "; on the CPU accelerate runs FSDP as DDP, so DDP it is"


def _replica_bytes(cfg, model_path: str) -> int | None:
    """Per-GPU memory of this run under DDP, by the memory model."""
    import dataclasses

    from cockpit.models import memory as estimate
    from cockpit.models import shape as modelshape

    try:
        config = json.loads((Path(model_path) / "config.json").read_text())
        shape = modelshape.from_config_dict(config, cfg.model.name, "config.json")
        workload = dataclasses.replace(estimate.workload_from_config(cfg, shape), sharding="ddp")
        return estimate.estimate_memory(workload).peak_bytes
    except Exception:  # a hub id, an unknown architecture: no estimate, auto shards
        return None


@contextmanager
def local_first(world: World | None, timeout_s: float = 6 * 3600) -> Iterator[None]:
    """The block runs on each node's local rank 0 first (a download, a build), then on the others."""
    if world is None or world.control_group is None:
        yield
        return
    import datetime

    import torch.distributed as dist

    wait = datetime.timedelta(seconds=timeout_s)  # a 140 GB download takes long: a barrier of its own
    if not world.writes_events:
        dist.monitored_barrier(group=world.control_group, timeout=wait)
    yield
    if world.writes_events:
        dist.monitored_barrier(group=world.control_group, timeout=wait)


# ---------------------------------------------------------------- commands


class RankControls(Controls):
    """Controls whose stop/save/pause take effect on every rank at the same step.

    What this rank is asked (commands on local rank 0, signals on any rank) lands in
    `requests`; `agree()` (called by the step-end callback and between phases, on every
    rank in the same order) all-reduces the requests and sets the flags the loop reads.
    """

    def __init__(self, emitter: Emitter, world: World):
        super().__init__(emitter)
        self.world = world
        self.requests = Controls(emitter)
        self.wake = self.requests.wake
        self._training = False

    @property
    def training(self) -> bool:
        return self._training

    @training.setter
    def training(self, value: bool) -> None:
        self._training = value
        if hasattr(self, "requests"):
            self.requests.training = value

    def on_command(self, command: dict) -> None:
        if command["type"] in ("pause", "resume") and self.world.rank != 0:
            self.emitter.emit(
                "command",
                name=command["type"],
                accepted=False,
                detail=f"this is node {self.world.node_rank}: pause and resume go to node 0's run",
            )
            return
        self.requests.on_command(command)

    def on_signal(self, signum, frame) -> None:
        self.requests.on_signal(signum, frame)

    def on_run_dir_gone(self, reason: str) -> None:
        self.requests.on_run_dir_gone(reason)

    def agree(self) -> None:
        import torch
        import torch.distributed as dist

        if self.world.control_group is None:
            return  # before the process group: nothing to agree with yet
        asked = self.requests
        flags = torch.tensor(
            [
                asked.stop.is_set(),
                asked.save.is_set(),
                asked.paused.is_set() if self.world.rank == 0 else 0,
                asked.gone.is_set(),
            ],
            dtype=torch.int32,
        )
        dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=self.world.control_group)
        stop, save, paused, gone = (bool(v) for v in flags.tolist())
        if gone:
            self.gone.set()
        if stop:
            self.stop.set()
            asked.paused.clear()
        if save:
            self.save.set()
            asked.save.clear()  # taken: one save per request
        if paused and not stop:
            self.paused.set()
        else:
            self.paused.clear()


class RankEmitter(Emitter):
    """Events from local rank 0 only; errors go to the rank's error file; the rest is logged."""

    def __init__(self, fd: int | None, world: World):
        super().__init__(fd if fd is not None else -1)
        self.world = world
        self.writes = fd is not None

    def emit(self, msg_type: str, **fields) -> None:
        if msg_type == "error":
            self.world.write_error(fields)
            print(f"[rank {self.world.rank}] error: {fields.get('message', '')[:500]}", file=sys.stderr)
            return
        if msg_type in ("hello", "model"):
            fields["distributed"] = self.world.describe()
        if self.writes:
            super().emit(msg_type, **fields)
        elif msg_type not in ("log",):
            summary = fields.get("message") or fields.get("phase") or fields.get("name") or ""
            print(f"[rank {self.world.rank}] {msg_type} {summary}".rstrip(), file=sys.stderr)


# ---------------------------------------------------------------- helpers


def die_with_parent(launcher_pid: int | None) -> None:
    """SIGKILL this rank when its launcher dies, whatever killed the launcher."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        armed = libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        armed = False
    if launcher_pid is None:
        return
    if os.getppid() != launcher_pid:  # the launcher died before the request was in place
        os._exit(1)
    if not armed:  # not Linux: watch the parent instead
        threading.Thread(target=_watch_parent, args=(launcher_pid,), daemon=True).start()


def _watch_parent(launcher_pid: int) -> None:
    while os.getppid() == launcher_pid:
        time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGKILL)


def _identity() -> dict:
    """create_time and start_ticks (cockpit.run.pids): how the supervisor knows this rank again."""
    try:
        from cockpit.run import pids

        return pids.identity(os.getpid())
    except Exception:
        return {"create_time": None}


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, default=str)
    os.replace(tmp, path)
