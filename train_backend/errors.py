"""Turning whatever went wrong into one classified `error` event and an exit code."""

from __future__ import annotations

import errno
import os
import re
import traceback
from dataclasses import dataclass
from pathlib import Path

import yaml

from cockpit import paths
from cockpit.config.schema import ConfigError
from cockpit.fmt import quoted
from cockpit.paths import cockpit_command
from cockpit.run import disk_guard as checkpoint_space
from cockpit.run import rundir
from cockpit.run.oom_messages import parse_oom_message
from train_backend import test_aids
from train_backend.weights_check import Truncated, truncated_weights

EXIT_CODES = {"other": 1, "config": 2, "data": 3, "model_load": 4, "oom": 5, "disk": 6, "gpu": 7}
# CUDA errors that mean the device itself failed or went away, not the program
_GPU_FAILURE = re.compile(
    r"GPU is lost|unspecified launch failure|device-side assert|an illegal memory access|"
    r"CUDA error: (unknown error|no CUDA-capable device|uncorrectable ECC)|ECC error|Xid|"
    r"NVML_ERROR_GPU_IS_LOST|cudaErrorDevicesUnavailable|CUDA driver version is insufficient",
    re.IGNORECASE,
)
# peft found none of lora.target_modules in the model: a config mistake, found with the weights loaded
_NO_TARGET = re.compile(r"NoMatchingPeftModuleError|Target modules .* not found in the base model")
# a write the file system refused (full disk or quota), as torch's zip writer, safetensors and the OS say it
WRITE_REFUSED = re.compile(
    r"inline_container\.cc.*unexpected pos|PytorchStreamWriter failed writing|file write failed|"
    r"No space left on device|Disk quota exceeded|os error (28|122)\b",
)


class DataError(ValueError):
    """The dataset cannot be trained on as configured (missing file, column, empty...)."""


class ModelLoadError(RuntimeError):
    """The model or tokenizer could not be loaded; the message says why and what to do."""


class CheckpointWontFit(OSError):
    """The disk-space guard refused a checkpoint save before it started (nothing was written)."""

    def __init__(self, check: checkpoint_space.SpaceCheck, hint: str):
        super().__init__(errno.ENOSPC, check.message())
        self.check = check
        self.hint = hint


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
    if isinstance(exc, ConfigError):  # one may carry its own hint (test_aids.AidError)
        return Classified("config", _bounded(str(exc)), getattr(exc, "hint", None) or _config_hint(run_dir))
    if _NO_TARGET.search(text):  # peft's NoMatchingPeftModuleError, or its ValueError of old
        return Classified(
            "config",
            f"lora.target_modules: no module of the model matches ({str(exc).split(chr(10))[0][:300]})",
            f"Name the model's linear layers (`{cockpit_command()} estimate CONFIG` lists them for modelled "
            "families) "
            "or use lora.target_modules: all-linear, and start again.",
        )
    if isinstance(exc, DataError):
        return Classified("data", _bounded(str(exc)), "Fix the dataset settings (dataset.*) and start again.")
    oom = parse_oom_message(text)
    if oom is not None or type(exc).__name__ == "OutOfMemoryError":
        info = oom.to_dict() if oom is not None else {"kind": "allocator"}
        info["exception"] = type(exc).__name__
        info["injected"] = test_aids.MARK in text
        return Classified(
            "oom",
            str(exc).split("\n")[0][:500],
            "The GPU ran out of memory. The OOM wizard ranks the changes that fit, with their cost (it opens "
            "in the live view; headless: --on-oom ask or auto). By hand: turn on "
            "training.gradient_checkpointing, lower training.micro_batch_size (raise "
            "gradient_accumulation_steps to keep the effective batch), or shorten training.max_length. "
            "The CUDA context is not reusable after an OOM: continue in a new process "
            f"({cockpit_command()} restart RUN).",
            info,
        )
    if isinstance(exc, CheckpointWontFit):
        return Classified("disk", exc.check.message(), exc.hint)
    refused = refused_write(exc)
    if refused is not None:
        return _disk_full(refused, phase, run_dir)
    if type(exc).__name__ == "RunDirectoryGone" or (run_dir and not Path(run_dir).is_dir()):
        # whatever failed, this is why
        gone = f"the run directory {run_dir} was deleted (or its disk unmounted) while the trainer ran"
        return Classified(
            "other",
            f"{gone}; {text}"[:2000],
            "Its checkpoints went with it: nothing is left to restart. Start a new run with "
            f"`{cockpit_command()} train CONFIG`, and keep the run directory until the run ends.",
        )
    refused = refused_permission(exc)
    if refused is not None and phase == "loading_model":
        return _not_writable(refused, run_dir)
    if _GPU_FAILURE.search(text):
        return Classified(
            "gpu",
            text.split("\n")[0][:600],
            "The GPU failed or vanished. Check `nvidia-smi` and `dmesg | grep -i xid`; the checkpoints are "
            f"intact: when the GPU answers again, continue with `{cockpit_command()} restart RUN`.",
        )
    if isinstance(exc, ModelLoadError) or phase == "loading_model":
        cut = truncated_weights(exc, run_dir)
        if cut is not None:
            return _truncated(cut, run_dir)
        return Classified(
            "model_load",
            text[:2000],
            "Check model.name: an existing local folder with config.json, a hub id reachable from here "
            "(set HF_ENDPOINT for a mirror, HF_TOKEN for gated models), or synthetic:<arch>.",
        )
    return Classified("other", text[:2000], "See the traceback and backend.log in the run directory.")


def _bounded(message: str, limit: int = 2000) -> str:
    """An error's message as the event carries it: a value it quotes in full (a pasted file) does not
    become a line of 100,000 characters; the traceback in backend.log keeps all of it."""
    if len(message) <= limit:
        return message
    return f"{message[:limit]}... ({len(message) - limit:,} characters more in backend.log)"


def _truncated(cut: Truncated, run_dir: str | None) -> Classified:
    run = Path(run_dir).name if run_dir else "RUN"
    return Classified(
        "model_load",
        f"{cut.path.name} ({cut.path}) is truncated: {cut.size:,} bytes on disk, its header declares "
        f"{cut.declared:,}; a download or a copy was cut short",
        f"Fetch or copy {cut.path.name} again (a hub model: delete it from the cache and download it again, "
        f"e.g. huggingface-cli download ORG/NAME; a local folder: copy it again from its source, then check "
        f"its size), then continue with `{cockpit_command()} restart {run}`.",
    )


def refused_write(exc: BaseException) -> BaseException | None:
    """The exception in exc's chain that says the file system refused a write, if one does.

    torch.save raises `inline_container.cc ... unexpected pos` with the OS error only in its context;
    safetensors says `I/O error: No space left on device (os error 28)`."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if isinstance(link, OSError) and link.errno in (errno.ENOSPC, errno.EDQUOT):
            return link
        if WRITE_REFUSED.search(str(link)):
            return link
        link = link.__cause__ or link.__context__
    return None


def refused_permission(exc: BaseException) -> OSError | None:
    """The OSError in exc's chain that says a file's permissions or a read-only file system refused it."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if isinstance(link, OSError) and link.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return link
        link = link.__cause__ or link.__context__
    return None


def _not_writable(exc: OSError, run_dir: str | None) -> Classified:
    """A model cache (COCKPIT_CACHE, HF_HOME) the trainer may not write: a fix about model.name would
    send the user the wrong way."""
    where = str(exc.filename or "")
    caches = {
        "COCKPIT_CACHE (synthetic: models)": paths.cache_root(),
        "HF_HOME (hub downloads)": Path(os.environ.get("HF_HOME") or "~/.cache/huggingface").expanduser(),
    }
    named = [key for key, cache in caches.items() if where and _related(Path(where), cache)]
    what = f"the model cache {quoted(where)}" if named else quoted(where)
    run = Path(run_dir).name if run_dir else "RUN"
    message = f"{what} cannot be written or read: {exc.strerror or exc} (while loading the model)"
    if named:
        hint = (
            f"Set {named[0]} to a folder you can write to (or make that one writable), then continue with "
            f"`{cockpit_command()} restart {run}`."
        )
    else:
        hint = (
            f"Make that path readable (and writable, if it is a cache), then `{cockpit_command()} restart "
            f"{run}`."
        )
    return Classified("disk", message, hint)


def _related(path: Path, folder: Path) -> bool:
    """`path` inside `folder`, or one of its parents (a cache's parent that cannot be made)."""
    try:
        path, folder = path.resolve(), folder.resolve()
    except OSError:
        return False
    return path.is_relative_to(folder) or folder.is_relative_to(path)


def _disk_full(exc: BaseException, phase: str, run_dir: str | None) -> Classified:
    free = ""
    settings: dict = {}
    where = _refused_where(exc, run_dir)
    if where:
        try:  # measured now: what the failed write left, where it was refused
            free = f", {checkpoint_space.free_text(where)}"
        except OSError:
            pass
    if where and run_dir and not _inside(where, run_dir):  # the model cache, a hub download
        first_line = str(exc).strip().split("\n")[0][:500]
        return Classified(
            "disk",
            f"disk full (or over quota) while {phase.replace('_', ' ')}{free}: {first_line}",
            f"Nothing of the run was lost. Free space on that disk (`df -h {where}`), or put the cache on a "
            "bigger disk (COCKPIT_CACHE for synthetic: models, HF_HOME for hub downloads), then continue "
            f"with `{cockpit_command()} restart {Path(run_dir).name}`.",
        )
    if run_dir:
        settings = _run_settings(run_dir)
        settings["checkpoints"] = [
            p.name for p in rundir.complete_checkpoints(Path(run_dir) / rundir.CHECKPOINTS_NAME)
        ]
    first_line = str(exc).strip().split("\n")[0][:500]
    text = f"{type(exc).__name__}: {first_line}" if not isinstance(exc, OSError) else first_line
    hint = checkpoint_space.disk_full_hint(
        method=settings.get("method"),
        checkpoints_kept=settings.get("checkpoints_kept"),
        run_id=Path(run_dir).name if run_dir else "RUN",
        checkpoints=settings.get("checkpoints"),
    )
    if phase == "training":  # checkpoint saves
        hint += (
            " A half-written checkpoint is never resumed from: its files are deleted when the write fails, "
            "its folder in checkpoints/.staging on restart."
        )
    return Classified(
        "disk", f"disk full (or over quota) while {phase.replace('_', ' ')}{free}: {text}", hint
    )


def _config_hint(run_dir: str | None) -> str:
    source = rundir.config_source(run_dir) if run_dir else None
    if source is None:
        return "Fix the key in the config (or --set it) and start again."
    return f"Fix the key in {source} (or --set it) and start again."


def _refused_where(exc: BaseException, run_dir: str | None) -> str | None:
    """The existing folder where the write was refused (the error's file, or its nearest existing
    parent), else the run directory."""
    name = getattr(exc, "filename", None)
    if isinstance(name, str) and name:
        path = Path(name)
        for candidate in (path, *path.parents):
            if candidate.exists():
                return str(candidate if candidate.is_dir() else candidate.parent)
    return run_dir


def _inside(path: str, folder: str) -> bool:
    try:
        return Path(path).resolve().is_relative_to(Path(folder).resolve())
    except OSError:
        return False


def _run_settings(run_dir: str) -> dict:
    """method and output.checkpoints_kept from the run's config.yaml, for the hint; {} if unreadable."""
    try:
        cfg = yaml.safe_load((Path(run_dir) / "config.yaml").read_text()) or {}
        return {
            "method": cfg.get("method"),
            "checkpoints_kept": (cfg.get("output") or {}).get("checkpoints_kept"),
        }
    except (OSError, yaml.YAMLError, AttributeError):
        return {}


def format_traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-20000:]
