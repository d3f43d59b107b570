"""Shared by the benchmark scripts: the environment cockpit runs in, token files, and device-memory
sampling from outside the measured process."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


# what a `speed_plan` event decides (beside its figures): the benches record these of each run
PLAN_DECISIONS = (
    "micro_batch_size",
    "gradient_accumulation_steps",
    "checkpoint_layers",
    "checkpoint_offload",
    "packing",
    "attn_implementation",
    "liger",
    "lora_backend",
    "mlp_block",
    "read_figures",
    "unpack_scales",
    "pad_multiple",
)


def cockpit_env(home: Path, cache: Path | None = None, **extra: str) -> dict:
    """This environment with a private COCKPIT_HOME (and model cache, when given) and this checkout
    first on PYTHONPATH; `extra` variables on top."""
    env = dict(
        os.environ,
        COCKPIT_HOME=str(home),
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
    )
    if cache is not None:
        env["COCKPIT_CACHE"] = str(cache)
    return env | extra


def run_cockpit(args: list[str], env: dict, timeout_s: float | None = None) -> tuple[int | None, str]:
    """`python -m cockpit ARGS` from this checkout: its exit code (None when it ran past
    `timeout_s`) and its output, stdout then stderr."""
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "cockpit", *args],
            env=env,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        return proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        return None, f"timed out after {timeout_s:.0f} s\n{exc.stdout or ''}{exc.stderr or ''}"


def build_synthetic(arch: str, cache: Path, env: dict) -> Path:
    """synthetic:`arch` in bf16, built on the GPU into the model cache `cache` unless it is there
    already: untimed, like a download, so that no build shows in a measured peak. Its folder."""
    target = cache / "synthetic" / f"{arch}-bf16"
    if not (target / "config.json").is_file():
        subprocess.run(
            [sys.executable, "-m", "train_backend.synthetic", arch, str(target), "bf16", "cuda"],
            env=env,
            cwd=ROOT,
            check=True,
            stderr=subprocess.DEVNULL,
        )
    return target


def read_events(run_dir: Path) -> list[dict]:
    """A run directory's events.jsonl (a line cut short by a killed writer is skipped)."""
    out = []
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def host_probes(events: list[dict]) -> dict:
    """The run's host probe (train_backend/speed/host_probe.py) before the weights loaded and after the last
    step: the host's speed at feeding the GPU around the run, which moves between and within calls."""
    plan = next((e for e in events if e.get("type") == "speed_plan"), {})
    done = next((e for e in events if e.get("type") == "done"), {})
    return {"host_probe_ms": plan.get("host_probe_ms"), "host_probe_end_ms": done.get("host_probe_end_ms")}


def write_tokens(path: Path, vocab: int, length: int, count: int) -> None:
    """`count` pre-tokenized samples of `length` random ids (full length: no padding), seed 0."""
    rng = random.Random(0)
    with open(path, "w") as f:
        for _ in range(count):
            f.write(json.dumps({"input_ids": [rng.randrange(3, vocab) for _ in range(length)]}) + "\n")


def nvml_index() -> int:
    """The NVML index of the GPU this process's CUDA sees first: NVML ignores
    CUDA_VISIBLE_DEVICES, so two benchmarks on two GPUs of one box must each ask for theirs."""
    first = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip()
    return int(first) if first.isdigit() else 0


class DevicePeak:
    """NVML 'used' memory of this process's GPU (`nvml_index`) above the baseline taken at
    construction, sampled every 10 ms.

    Keeps a timeline of (time, bytes above baseline) so a caller can split the peak at
    an event (e.g. the load-time peak before training from the training peak).
    """

    def __init__(self, interval_s: float = 0.01):
        import pynvml

        pynvml.nvmlInit()
        self.nv, self.handle = pynvml, pynvml.nvmlDeviceGetHandleByIndex(nvml_index())
        self.base = pynvml.nvmlDeviceGetMemoryInfo(self.handle).used
        self.interval_s = interval_s
        self.timeline: list[tuple[float, int]] = []
        self.running = True
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while self.running:
            used = self.nv.nvmlDeviceGetMemoryInfo(self.handle).used
            self.timeline.append((time.time(), used - self.base))
            time.sleep(self.interval_s)

    def stop(self) -> float:
        """Stop sampling; the overall peak in GiB."""
        self.running = False
        self.thread.join()
        return self.peak_gib()

    def peak_bytes(self, start: float = 0.0, end: float = float("inf")) -> int:
        return max((b for t, b in self.timeline if start <= t <= end), default=0)

    def peak_gib(self, start: float = 0.0, end: float = float("inf")) -> float:
        return self.peak_bytes(start, end) / 2**30
