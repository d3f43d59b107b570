"""The data check's reports, kept in the run-independent cache (`cockpit.paths.cache_root()`):
one per dataset, config and tokenizer, found again while every local file it read has the same
size and modification time. A hub source's report is kept for HUB_KEEP_S (the hub's copy may
change without a size to compare)."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cockpit import __version__, paths
from cockpit.config.schema import TrainConfig
from cockpit.config.sources import looks_local
from cockpit.datacheck.client import DataCheckAnswer, run_datacheck
from cockpit.models import packaged
from cockpit.models import shipped as shapes

CHECK_VERSION = 1  # raise when the check reads data differently
HUB_KEEP_S = 24 * 3600
FILES_PER_FOLDER = 1000  # files of a save_to_disk folder (or a model folder) whose stats go in the key


def cache_dir() -> Path:
    return paths.cache_root() / "datacheck"


def cache_key(cfg: TrainConfig) -> tuple[str, bool]:
    """(the key, whether a source is on the hub) for this config's data as the check reads it."""
    sources = cfg.dataset.source_list()
    hub = False
    stats = []
    for source in sources:
        if source.path == "demo":
            stats.append(["demo", __version__])
        elif looks_local(str(source.path)):
            stats.append(_stats(Path(str(source.path)).expanduser()))
        else:
            hub = True
            stats.append(["hub", str(source.path)])
    key = {
        "check": CHECK_VERSION,
        "cockpit": __version__,
        "dataset": json.loads(json.dumps(cfg.dataset, default=lambda o: o.__dict__)),
        "max_length": cfg.training.max_length,
        # a preference objective reads other files and columns, and cuts prompts (docs/preference.md)
        "objective": cfg.objective,
        "preference": json.loads(json.dumps(cfg.preference, default=lambda o: o.__dict__)),
        "eval_fraction": cfg.dataset.eval_fraction,
        "model": [cfg.model.name, cfg.model.revision, _tokenizer_stats(cfg.model.name)],
        "files": stats,
    }
    text = json.dumps(key, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24], hub


def _tokenizer_stats(name: str) -> list[Any]:
    if shapes.is_synthetic(name):
        return ["shipped", __version__]
    folder = packaged.model_dir(name) if packaged.is_packaged(name) else Path(name).expanduser()
    if folder.is_dir():
        return _stats(folder, pattern="tokenizer*")
    return ["hub", name]


def _stats(path: Path, pattern: str = "*") -> list[Any]:
    try:
        resolved = path.resolve()
        if resolved.is_file():
            st = resolved.stat()
            return [str(resolved), st.st_size, st.st_mtime_ns]
        found = []
        for i, item in enumerate(sorted(resolved.rglob(pattern))):
            if i >= FILES_PER_FOLDER:
                break
            if item.is_file():
                st = item.stat()
                found.append([str(item), st.st_size, st.st_mtime_ns])
        return found
    except OSError:
        return [str(path), None]


def cached_check(
    cfg: TrainConfig,
    *,
    fresh: bool = False,
    runner: Callable[..., DataCheckAnswer] = run_datacheck,
    **kwargs: Any,
) -> DataCheckAnswer:
    """The report of this config's data: from the cache when its files are unchanged (and `fresh`
    is off), else from a new check (kept for next time)."""
    key, hub = cache_key(cfg)
    path = cache_dir() / f"{key}.json"
    if not fresh:
        kept = _read(path, HUB_KEEP_S if hub else None)
        if kept is not None:
            return DataCheckAnswer(report=kept, cached=True)
    answer = runner(cfg, **kwargs)
    if answer.report is not None:
        _write(path, answer.report)
    return answer


def _read(path: Path, keep_s: float | None) -> dict[str, Any] | None:
    try:
        if keep_s is not None and time.time() - path.stat().st_mtime > keep_s:
            return None
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return report if isinstance(report, dict) and report.get("version") is not None else None


def _write(path: Path, report: dict[str, Any]) -> None:
    """Written aside and renamed: a report in the cache is whole or absent. A cache that cannot
    be written costs only the next check's time."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_name(f".{path.name}.{os.getpid()}")
        staging.write_text(json.dumps(report), encoding="utf-8")
        os.replace(staging, path)
    except OSError:
        pass
