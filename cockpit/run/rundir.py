"""The run directory: one per run, owner-only, everything a later client needs.

<root>/<run id>/
    config.yaml      the resolved config (no secrets)
    events.jsonl     every protocol message, appended (the trainer's stdout)
    events-fallback.jsonl  the messages after events.jsonl stopped taking them (immutable, replaced)
    backend.log      everything else the trainer printed
    control          FIFO for commands (stop/save/pause/resume), mode 0600
    trainer.json     pid, process group, start time, boot id of the current trainer
    source.json      the config file the run was started from
    checkpoints/     checkpoint-<step>/ (complete ones carry COMPLETE_MARKER)
    final/           the final adapter (or model) after a finished run
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cockpit import paths
from cockpit.fmt import quoted

CONFIG_NAME = "config.yaml"
EVENTS_NAME = "events.jsonl"
EVENTS_FALLBACK_NAME = "events-fallback.jsonl"  # where the trainer goes on when events.jsonl refuses
LOG_NAME = "backend.log"
CONTROL_NAME = "control"
TRAINER_NAME = "trainer.json"
CHECKPOINTS_NAME = "checkpoints"
FINAL_NAME = "final"
SOURCE_NAME = "source.json"  # where the config came from (`cockpit runs` names it)
COMPLETE_MARKER = "cockpit-complete.json"
STAGING_NAME = ".staging"
REMOVING_PREFIX = ".removing-"  # a checkpoint being deleted: renamed aside first


class RunNotFound(LookupError):
    pass


@dataclass(frozen=True)
class RunDir:
    path: Path

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def config_path(self) -> Path:
        return self.path / CONFIG_NAME

    @property
    def events_path(self) -> Path:
        return self.path / EVENTS_NAME

    @property
    def events_fallback_path(self) -> Path:
        return self.path / EVENTS_FALLBACK_NAME

    @property
    def log_path(self) -> Path:
        return self.path / LOG_NAME

    @property
    def control_path(self) -> Path:
        return self.path / CONTROL_NAME

    @property
    def trainer_path(self) -> Path:
        return self.path / TRAINER_NAME

    @property
    def checkpoints_dir(self) -> Path:
        return self.path / CHECKPOINTS_NAME

    @property
    def final_dir(self) -> Path:
        return self.path / FINAL_NAME

    @property
    def source_path(self) -> Path:
        return self.path / SOURCE_NAME

    def config_name(self) -> str | None:
        """The file name of the config the run was started from; None when not recorded."""
        try:
            return Path(json.loads(self.source_path.read_text())["config"]).name
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def write_source(self, config: str | os.PathLike[str]) -> None:
        _write_private(self.source_path, json.dumps({"config": str(Path(config).expanduser().resolve())}))

    def complete_checkpoints(self) -> list[Path]:
        """Checkpoints whose save finished, oldest first."""
        return complete_checkpoints(self.checkpoints_dir)

    def config_price_per_hour(self) -> float | None:
        """`cost.price_per_hour` of the run's config.yaml (None: not set, or the file unreadable), so a
        client shows the cost from its first frame, before the trainer's hello is read."""
        import yaml  # only the clients that show a run need it

        from cockpit import yaml_text

        try:
            cost = (yaml_text.safe_load(self.config_path.read_text(encoding="utf-8")) or {}).get("cost") or {}
            price = cost.get("price_per_hour")
        except (OSError, yaml.YAMLError, AttributeError, UnicodeDecodeError):
            return None
        if isinstance(price, (int, float)) and not isinstance(price, bool) and price >= 0:
            return float(price)
        return None

    def read_trainer(self) -> dict[str, Any] | None:
        try:
            record: dict[str, Any] = json.loads(self.trainer_path.read_text())
            return record
        except (OSError, ValueError):
            return None


def complete_checkpoints(folder: Path) -> list[Path]:
    found = []
    if folder.is_dir():
        for child in folder.iterdir():
            match = re.fullmatch(r"checkpoint-(\d+)", child.name)
            if match and (child / COMPLETE_MARKER).is_file():
                found.append((int(match.group(1)), child))
    return [p for _, p in sorted(found)]


def incomplete_checkpoints(folder: Path) -> list[Path]:
    """checkpoint-N folders without the completion marker (a save or a removal killed midway: never
    resumed from) and checkpoints whose removal began."""
    found = []
    if folder.is_dir():
        for child in sorted(folder.iterdir()):
            unmarked = re.fullmatch(r"checkpoint-\d+", child.name) and not (child / COMPLETE_MARKER).is_file()
            if unmarked or child.name.startswith(REMOVING_PREFIX):
                found.append(child)
    return found


def remove_checkpoint(path: Path) -> None:
    """Renamed aside, then deleted: a kill in the middle leaves a `.removing-` folder that the next
    clean-up takes, never a checkpoint-N with some of its files."""
    aside = path if path.name.startswith(REMOVING_PREFIX) else path.with_name(REMOVING_PREFIX + path.name)
    if aside != path:
        shutil.rmtree(aside, ignore_errors=True)
        os.rename(path, aside)
    shutil.rmtree(aside, ignore_errors=True)


def slug(text: str) -> str:
    return (
        re.sub(r"[^A-Za-z0-9.]+", "-", text.split("/")[-1].replace("synthetic:", "")).strip("-")[:40] or "run"
    )


def create(root: Path | None, model_name: str, config_yaml: str) -> RunDir:
    """A new run directory (0700) with config, empty events/log files and the control FIFO."""
    root = Path(root).expanduser() if root else paths.runs_root()
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    base = f"{time.strftime('%Y%m%d-%H%M%S')}-{slug(model_name)}"
    for n in range(1000):
        path = root / (base if n == 0 else f"{base}-{n}")
        try:
            path.mkdir(mode=0o700)
            break
        except FileExistsError:
            continue
    else:
        raise RuntimeError(f"could not create a run directory under {root}")
    run = RunDir(path)
    try:
        _fill(run, config_yaml)
    except BaseException:  # no half-made run directory for `cockpit runs` to list as failed
        shutil.rmtree(path, ignore_errors=True)
        raise
    _register(run, paths.runs_root())
    return run


def _fill(run: RunDir, config_yaml: str) -> None:
    os.chmod(run.path, 0o700)  # mkdir's mode is filtered by the umask
    _write_private(run.config_path, config_yaml)
    _write_private(run.events_path, "")
    _write_private(run.log_path, "")
    os.mkfifo(run.control_path, 0o600)
    run.checkpoints_dir.mkdir(mode=0o700)


SOURCE_MARK = "# copied from: "  # the first line `cockpit train` writes into a run's config.yaml


def config_source(path: str | Path) -> str | None:
    """The user's config file a run's config.yaml was copied from, when the CLI recorded it."""
    try:
        first = (Path(path) / "config.yaml").read_text(encoding="utf-8").split("\n", 1)[0]
    except (OSError, UnicodeDecodeError):
        return None
    if not first.startswith(SOURCE_MARK):
        return None
    return first[len(SOURCE_MARK) :].strip() or None


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def _register(run: RunDir, default_root: Path) -> None:
    """Runs outside the default root get a symlink there, so `cockpit runs` finds every run."""
    if default_root.exists() and run.path.parent.resolve() == default_root.resolve():
        return
    link = default_root / run.run_id
    try:
        default_root.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not link.exists():
            link.symlink_to(run.path.resolve())
    except OSError:
        pass  # a read-only home is no reason to fail a run; the CLI says `cockpit runs` misses it


def is_listed(run: RunDir) -> bool:
    """Whether `cockpit runs` finds the run (in the default root, or linked from it)."""
    return any(r.path == run.path.resolve() for r in all_runs())


def all_runs(root: Path | None = None) -> list[RunDir]:
    root = Path(root).expanduser() if root else paths.runs_root()
    if not root.is_dir():
        return []
    runs = []
    for child in root.iterdir():
        target = child.resolve()
        if target.is_dir() and (target / EVENTS_NAME).exists():
            runs.append(RunDir(target))
    return sorted(runs, key=lambda r: r.run_id)


def _is_run_path(spec: str) -> bool:
    """Whether `spec` is the path of a run directory; a name the OS cannot take (too long, a NUL
    byte) is not."""
    try:
        return Path(spec).expanduser().is_dir() and (Path(spec).expanduser() / EVENTS_NAME).exists()
    except (OSError, ValueError):
        return False


def find(spec: str | None, root: Path | None = None) -> RunDir:
    """A run by path, id, unique id prefix, or the newest when spec is None or 'last'."""
    if spec and _is_run_path(spec):
        return RunDir(Path(spec).expanduser().resolve())
    runs = all_runs(root)
    where = root or paths.runs_root()
    if not runs:
        me = paths.cockpit_command()
        raise RunNotFound(f"no runs under {where}; start one with: {me} train CONFIG (or {me} demo)")
    if spec in (None, "", "last", "latest"):
        return runs[-1]
    exact = [r for r in runs if r.run_id == spec]
    if exact:
        return exact[0]
    matches = [r for r in runs if r.run_id.startswith(spec) or spec in r.run_id]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        me = paths.cockpit_command()
        raise RunNotFound(f"no run matches {quoted(spec)} under {where}; `{me} runs` lists them")
    shown = ", ".join(r.run_id for r in matches[:6])
    raise RunNotFound(f"{quoted(spec)} matches {len(matches)} runs: {shown}")
