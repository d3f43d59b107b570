"""`cockpit-sync.json`: what a sync target holds of one run, written last at every sync.

The target's layout, one folder per run (its id, as on the machine it came from):

    TARGET/<run id>/
        cockpit-sync.json   this manifest: the newest checkpoint and its files, the ones kept
        config.yaml         the run's config (no secrets: the run directory never holds one)
        events.jsonl        its events, as far as the last whole line when copied
        checkpoints/checkpoint-<step>/   complete checkpoints, each with its completion marker
        final/              the final adapter, once the run finished

A checkpoint is copied before the manifest names it, so a copy cut short (a lost machine, a lost
link) is never taken for a checkpoint: `cockpit restart --from` reads the manifest, and checks
each file it lists against its size.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cockpit.run import rundir

MANIFEST_NAME = "cockpit-sync.json"
FORMAT = 1
RECORD_FILES = (rundir.CONFIG_NAME, rundir.EVENTS_NAME, rundir.EVENTS_FALLBACK_NAME)


@dataclass
class Manifest:
    run_id: str
    checkpoint: str | None = None  # the newest checkpoint on the target: what a restart resumes from
    step: int | None = None
    saved_at: float | None = None  # when the trainer saved it (its completion marker)
    synced_at: float = field(default_factory=time.time)
    checkpoints: list[str] = field(default_factory=list)  # every checkpoint on the target, oldest first
    files: dict[str, int] = field(default_factory=dict)  # the newest checkpoint's files: path -> bytes
    final: bool = False  # final/ is there
    format: int = FORMAT

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> Manifest | None:
        """The manifest in `text`, or None when it is none this cockpit reads."""
        try:
            data: Any = json.loads(text)
        except ValueError:
            return None
        if (
            not isinstance(data, dict)
            or data.get("format") != FORMAT
            or not isinstance(data.get("run_id"), str)
        ):
            return None
        try:
            return cls(
                run_id=data["run_id"],
                checkpoint=data.get("checkpoint"),
                step=data.get("step"),
                saved_at=data.get("saved_at"),
                synced_at=float(data.get("synced_at") or 0.0),
                checkpoints=[str(c) for c in data.get("checkpoints") or []],
                files={str(k): int(v) for k, v in (data.get("files") or {}).items()},
                final=bool(data.get("final")),
            )
        except (TypeError, ValueError):
            return None

    def with_checkpoint(
        self, name: str, step: int, saved_at: float | None, files: dict[str, int], keep: int
    ) -> tuple[Manifest, list[str]]:
        """The manifest once checkpoint `name` is on the target, and the names of the older ones to
        delete there (the target keeps the newest `keep`, as the run directory does)."""
        present = sorted({*self.checkpoints, name}, key=step_of)
        kept, dropped = present[-keep:], present[:-keep]
        updated = Manifest(
            run_id=self.run_id,
            checkpoint=name,
            step=step,
            saved_at=saved_at,
            checkpoints=kept,
            files=files,
            final=self.final,
        )
        return updated, dropped


def step_of(name: str) -> int:
    try:
        return int(name.rsplit("-", 1)[-1])
    except ValueError:
        return -1


def files_of(folder: Path) -> dict[str, int]:
    """Every file under `folder`: its path relative to it -> its size."""
    return {
        path.relative_to(folder).as_posix(): path.stat().st_size
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def saved_at(checkpoint: Path) -> float | None:
    """When the trainer marked the checkpoint complete (its marker's saved_at)."""
    try:
        value = json.loads((checkpoint / rundir.COMPLETE_MARKER).read_text()).get("saved_at")
    except (OSError, ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, (int, float)) else None
