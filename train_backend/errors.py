"""Turning whatever went wrong into one classified `error` event and an exit code."""

from __future__ import annotations

import errno
import re
import shutil
import traceback
from dataclasses import dataclass

from cockpit.config import ConfigError
from cockpit.oom import parse_oom_message

EXIT_CODES = {"other": 1, "config": 2, "data": 3, "model_load": 4, "oom": 5, "disk": 6, "gpu": 7}
# CUDA errors that mean the device itself failed or went away, not the program
_GPU_FAILURE = re.compile(
    r"GPU is lost|unspecified launch failure|device-side assert|an illegal memory access|"
    r"CUDA error: (unknown error|no CUDA-capable device|uncorrectable ECC)|ECC error|Xid|"
    r"NVML_ERROR_GPU_IS_LOST|cudaErrorDevicesUnavailable|CUDA driver version is insufficient",
    re.IGNORECASE,
)


class DataError(ValueError):
    """The dataset cannot be trained on as configured (missing file, column, empty...)."""


class ModelLoadError(RuntimeError):
    """The model or tokenizer could not be loaded; the message says why and what to do."""


@dataclass
class Classified:
    kind: str
    message: str
    hint: str
    oom: dict | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.kind]


def classify(exc: BaseException, phase: str, run_dir: str | None = None) -> Classified:
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, ConfigError):
        return Classified("config", str(exc), "Fix the key in config.yaml (or --set it) and start again.")
    if isinstance(exc, DataError):
        return Classified("data", str(exc), "Fix the dataset settings (dataset.*) and start again.")
    oom = parse_oom_message(text)
    if oom is not None or type(exc).__name__ == "OutOfMemoryError":
        info = oom.to_dict() if oom is not None else {"kind": "allocator"}
        info["exception"] = type(exc).__name__
        info["injected"] = "(injected by debug.fail_at_step)" in text
        return Classified(
            "oom",
            str(exc).split("\n")[0][:500],
            "The GPU ran out of memory. The OOM wizard ranks the changes that fit, with their cost (it opens "
            "in the live view; headless: --on-oom ask or auto). By hand: turn on "
            "training.gradient_checkpointing, lower training.micro_batch_size (raise "
            "gradient_accumulation_steps to keep the effective batch), or shorten training.max_length. "
            "The CUDA context is not reusable after an OOM: continue in a new process (cockpit restart RUN).",
            info,
        )
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        free = ""
        if run_dir:
            usage = shutil.disk_usage(run_dir)
            free = f" ({usage.free / 2**30:.1f} GiB free on the run directory's disk)"
        return Classified(
            "disk",
            f"disk full while {phase.replace('_', ' ')}: {exc}{free}",
            "Free space or point output.dir at a bigger disk, then resume: checkpoints already written are "
            "intact (an unfinished one stays in checkpoints/.staging and is never resumed from).",
        )
    if _GPU_FAILURE.search(text):
        return Classified(
            "gpu",
            text.split("\n")[0][:600],
            "The GPU failed or vanished. Check `nvidia-smi` and `dmesg | grep -i xid`; the checkpoints are "
            "intact: when the GPU answers again, continue with `cockpit restart RUN`.",
        )
    if isinstance(exc, ModelLoadError) or phase == "loading_model":
        return Classified(
            "model_load",
            text[:2000],
            "Check model.name: an existing local folder with config.json, a hub id reachable from here "
            "(set HF_ENDPOINT for a mirror, HF_TOKEN for gated models), or synthetic:<arch>.",
        )
    return Classified("other", text[:2000], "See the traceback and backend.log in the run directory.")


def format_traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-20000:]
