"""Will the next checkpoint fit on its disk? The arithmetic, and the words for a full disk.

Pure Python, no torch: the trainer measures (free bytes, the last checkpoint, the model's
parameters) and asks here. A save that cannot fit is never started, since a half-written
save can fill the disk and take the run down with it.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from cockpit.fmt import GIB
from cockpit.models.memory import OPTIMIZER_STATE_BYTES
from cockpit.paths import cockpit_command

# on top of the expected size: the estimate's own error, a checkpoint that grows a little
# (trainer state, optimizer bookkeeping) and what the run's logs write meanwhile
SPACE_MARGIN = 0.10
# tokenizer, scheduler, RNG and trainer-state files an estimate does not count, and file-system slack:
# half the checkpoint, at least MIN_RESERVE_BYTES (a tokenizer.json is up to ~17 MB), at most
# SPACE_RESERVE_BYTES (so a 3 MB adapter is not refused on a small disk for want of 256 MiB)
SPACE_RESERVE_BYTES = 256 * 2**20
MIN_RESERVE_BYTES = 16 * 2**20


def reserve_bytes(checkpoint_bytes: int) -> int:
    return min(SPACE_RESERVE_BYTES, max(MIN_RESERVE_BYTES, checkpoint_bytes // 2))


@dataclass(frozen=True)
class CheckpointSize:
    """What one checkpoint is expected to take, and where the figure comes from."""

    bytes: int
    basis: str  # "checkpoint-4 measured 1.2 GiB" or "estimated: weights ... + ... states ..."


def estimate_checkpoint_bytes(
    *,
    trainable_params: int,
    trainable_bytes: int,
    saved_weight_bytes: int,
    optimizer: str,
    weight_copies: int = 1,
) -> CheckpointSize:
    """A checkpoint before any was written: the saved weights (all of them for a full fine-tune, the
    adapter otherwise) times the copies written, plus the optimizer's states for every trainable
    parameter (bytes per parameter from the memory model's table; None there: two states in the
    parameter's own dtype, as AdamW keeps them)."""
    if optimizer not in OPTIMIZER_STATE_BYTES:
        raise ValueError(f"optimizer {optimizer!r}: expected one of {', '.join(OPTIMIZER_STATE_BYTES)}")
    per_param = OPTIMIZER_STATE_BYTES[optimizer]
    optimizer_bytes = 2 * trainable_bytes if per_param is None else per_param * trainable_params
    weights = saved_weight_bytes * weight_copies
    copies = f" x {weight_copies} copies" if weight_copies > 1 else ""
    return CheckpointSize(
        weights + optimizer_bytes,
        f"estimated: weights {bytes_text(saved_weight_bytes)}{copies} + {optimizer} states "
        f"{bytes_text(optimizer_bytes)}",
    )


def measured_checkpoint(folder: Path) -> CheckpointSize:
    size = folder_bytes(folder)
    return CheckpointSize(size, f"{folder.name} measured {bytes_text(size)}")


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in Path(folder).rglob("*") if f.is_file())


def free_bytes(path: Path | str) -> int:
    """Bytes an unprivileged writer may still use on the file system holding `path`."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def free_text(path: Path | str) -> str:
    """What is left on the file system of `path`, now: its bytes, and its inodes when none is left
    (a disk of many small files refuses new ones with bytes to spare, and says the same ENOSPC)."""
    st = os.statvfs(path)
    free = bytes_text(st.f_bavail * st.f_frsize)
    if st.f_files and st.f_favail == 0:
        return (
            f"no free inodes (all {st.f_files:,} files in use; `df -i {path}`) though {free} is free, "
            f"on {path}"
        )
    return f"{free} free now on {path}"


@dataclass(frozen=True)
class SpaceCheck:
    step: int
    needed_bytes: int
    free_bytes: int
    path: str
    basis: str
    reserve_bytes: int = SPACE_RESERVE_BYTES

    @property
    def fits(self) -> bool:
        return self.free_bytes >= self.needed_bytes

    def message(self) -> str:
        # the figures first: the live view shows the first 300 characters
        short = bytes_text(self.needed_bytes - self.free_bytes)
        return (
            f"checkpoint-{self.step} not started: it needs about {bytes_text(self.needed_bytes)} and "
            f"{bytes_text(self.free_bytes)} is free ({short} short) on {self.path}; expected size: "
            f"{self.basis}, + {SPACE_MARGIN:.0%} + {bytes_text(self.reserve_bytes)} reserve"
        )


def check_space(step: int, size: CheckpointSize, free: int, path: Path | str) -> SpaceCheck:
    reserve = reserve_bytes(size.bytes)
    needed = math.ceil(size.bytes * (1 + SPACE_MARGIN)) + reserve
    return SpaceCheck(step, needed, free, str(path), size.basis, reserve)


def disk_full_hint(
    *,
    method: str | None = None,
    checkpoints_kept: int | None = None,
    run_id: str = "RUN",
    checkpoints: list[str] | None = None,
) -> str:
    """The fixes for a full disk, the same whether the guard refused a save or a write failed.

    `checkpoints`: the run's complete checkpoints, oldest first (None: not known)."""
    me = cockpit_command()
    fixes = [f"Free space on that disk (`df -h`; old runs: `{me} runs`, then delete their folders)"]
    if checkpoints_kept is None or checkpoints_kept > 1:
        now = f"now {checkpoints_kept}; " if checkpoints_kept else ""
        fixes.append(
            f"keep fewer checkpoints: output.checkpoints_kept: 1 ({now}a restart reads the run's config.yaml)"
        )
    fixes.append("put the runs directory on a bigger disk (output.dir) for the next run")
    if checkpoints:
        then = f"Then continue with `{me} restart {run_id}`: it resumes from {checkpoints[-1]}, intact."
    elif checkpoints is None:
        then = f"Then continue with `{me} restart {run_id}`: complete checkpoints are intact."
    else:
        then = (
            f"Then `{me} restart {run_id}` starts again from step 0 (no checkpoint was complete yet); "
            "the run directory is intact."
        )
    text = "; ".join(fixes) + ". " + then
    if method in (None, "full"):
        text += (
            " A full fine-tune's checkpoint holds every weight and two optimizer states per parameter; a "
            "LoRA/QLoRA checkpoint holds only the adapter (method: lora or qlora), a small fraction of that."
        )
    return text


def bytes_text(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    if n < 2**20:
        return f"{n / 1024:.1f} KiB"
    if n < GIB:
        return f"{n / 2**20:.1f} MiB"
    return f"{n / GIB:.2f} GiB" if n < 10 * GIB else f"{n / GIB:.1f} GiB"
