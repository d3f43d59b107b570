"""Shared by the benchmark scripts: the environment cockpit runs in, token files, and device-memory
sampling from outside the measured process."""

from __future__ import annotations

import json
import os
import random
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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

    def peak_gib(self, start: float = 0.0, end: float = float("inf")) -> float:
        window = [b for t, b in self.timeline if start <= t <= end]
        return max(window, default=0) / 2**30
