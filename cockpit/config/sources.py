"""The dataset's sources: one (the `dataset` section itself) or several (`dataset: [...]`), each a
path that must exist when it looks local, and how several are mixed (`weight` or `samples`).

Sources are counted from 1 in every message, as `cockpit data` numbers them.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Union, get_args, get_origin

from cockpit.config.schema import ConfigError, DatasetSource, TrainConfig, is_section

LOCAL_SUFFIXES = (".json", ".jsonl", ".csv", ".parquet")
SINGLE_SOURCE_KEYS = (
    "path",
    "split",
    "format",
    "text_field",
    "messages_field",
    "prompt_field",
    "completion_field",
    "max_samples",
)
CLOSEST_NAMES = 3
NAME_MAX = 255  # a file name's longest on the file systems a run meets
QUOTED_CHARS = 120
LISTED_NAMES_MAX = 10_000  # a folder of millions of files is not read whole for a suggestion


class DataPathError(ConfigError):
    """A dataset path that looks local and is not there: a data error, found with the config."""

    kind = "data"


def short_form(raw: dict[str, Any]) -> dict[str, Any]:
    """`dataset: [a, b]` -> `dataset: {sources: [a, b]}`."""
    if isinstance(raw.get("dataset"), list):
        return {**raw, "dataset": {"sources": raw["dataset"]}}
    return raw


def section_list_element(hint: Any) -> type | None:
    """The section class of a `list[Section] | None` field, else None."""
    options = get_args(hint) if get_origin(hint) is Union or type(hint).__name__ == "UnionType" else (hint,)
    for option in options:
        if get_origin(option) is list and get_args(option) and is_section(get_args(option)[0]):
            element: type = get_args(option)[0]
            return element
    return None


def build_list(element: type, value: Any, key: str, build: Callable[[type, Any, str], Any]) -> list[Any]:
    """Each item of a list of sections validated as its section (`build`, the loader's own); a
    plain string stands for `{path: it}`."""
    if not isinstance(value, list) or not value:
        raise ConfigError(
            f"{key}: expected a list of sources, each with at least a path (e.g. - path: a.jsonl); "
            f"got {type(value).__name__}{' (empty)' if value == [] else ''}"
        )
    items = []
    for number, item in enumerate(value, 1):
        if isinstance(item, str):
            item = {"path": item}
        items.append(build(element, item, f"{key}[{number}]."))
    return items


def looks_local(path: str) -> bool:
    """A local file, not a hub id: it exists, has a data file's suffix, starts with / . or ~, has
    more than one slash, or its one slash follows a local folder (hub ids are org/name)."""
    if path in ("", "demo"):
        return False
    if _exists(path) or path.startswith(("/", ".", "~")) or "\\" in path:
        return True
    if Path(path).suffix.lower() in LOCAL_SUFFIXES or path.count("/") > 1:
        return True
    return "/" in path and _exists(path.split("/", 1)[0])


def check_path(key: str, path: str | None) -> None:
    """A path that looks local and does not exist: DataPathError with the closest names there."""
    if path is None or not path.strip():
        raise ConfigError(f"{key}: empty; give a local file, a save_to_disk folder, a hub id or 'demo'")
    if looks_local(path) and not _exists(path):
        raise DataPathError(f"{key}: {quoted(path)} does not exist ({not_found_words(path)}). {PATH_FIX}")


PATH_FIX = (
    "Give an existing .json/.jsonl/.csv/.parquet file, a folder written by datasets' save_to_disk, a hub "
    "id (org/name, no file suffix), or 'demo'."
)


def not_found_words(path: str) -> str:
    """`file not found in /data; closest names there: train.jsonl, test.jsonl`."""
    full = Path(path).expanduser()
    folder = full.parent if full.is_absolute() else (Path.cwd() / full).parent
    if len(full.name) > NAME_MAX:
        return f"a file name has at most {NAME_MAX} characters"
    if not _is_dir(folder):
        return f"file not found: its folder {quoted(str(folder))} does not exist"
    names = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                names.append(entry.name)
                if len(names) >= LISTED_NAMES_MAX:
                    break
    except OSError as exc:
        return f"file not found in {folder}, which cannot be listed ({exc.strerror or exc})"
    close = difflib.get_close_matches(full.name, names, n=CLOSEST_NAMES, cutoff=0.5)
    if not close:
        data = sorted(n for n in names if Path(n).suffix.lower() in LOCAL_SUFFIXES)[:CLOSEST_NAMES]
        there = f"; data files there: {', '.join(data)}" if data else "; no data file is there"
        return f"file not found in {folder}{there}"
    return f"file not found in {folder}; closest names there: {', '.join(close)}"


def check(cfg: TrainConfig, raw: dict[str, Any]) -> None:
    """Several sources: each with a path that exists when local, a weight or a sample count (not
    both), and the single source's keys left out beside them."""
    ds = cfg.dataset
    if ds.sources is None:
        return
    given = raw["dataset"] if isinstance(raw.get("dataset"), dict) else {}
    beside = [k for k in SINGLE_SOURCE_KEYS if given.get(k) is not None]
    if beside:
        raise ConfigError(
            f"dataset.{beside[0]}: set beside dataset.sources; with several sources each one has its own "
            "path, split, format and fields (and samples instead of max_samples): move it into the sources"
        )
    weighted = [n for n, s in enumerate(ds.sources, 1) if s.weight is not None]
    for number, source in enumerate(ds.sources, 1):
        key = f"dataset.sources[{number}]"
        check_path(f"{key}.path", source.path)
        if source.weight is not None and source.samples is not None:
            raise ConfigError(
                f"{key}: both weight ({source.weight:g}) and samples ({source.samples}); a source takes a "
                "share of the mix (weight) or a number of rows (samples): keep one"
            )
        if weighted and source.weight is None and source.samples is None:
            raise ConfigError(
                f"{key}: no weight, while source {weighted[0]} has one; give every source a weight (or a "
                "samples count), or none: then each source gives all its rows"
            )
    split = ds.eval_split
    if split is not None and not (looks_local(split) or Path(split).suffix.lower() in LOCAL_SUFFIXES):
        raise ConfigError(
            f"dataset.eval_split: {split!r} names a split, but the data has {len(ds.sources)} sources; give "
            "the eval rows as a file (dataset.eval_split: path/to/eval.jsonl) or hold part of the mix "
            "out with dataset.eval_fraction: 0.05"
        )


def mix_counts(kept: list[int], sources: list[DatasetSource]) -> list[int]:
    """Rows each source gives the mix, from its usable rows `kept`: `samples` as asked; the weighted
    sources' rows together, redrawn in proportion to their weights; otherwise all its rows."""
    pool = sum(n for n, s in zip(kept, sources) if s.weight is not None)
    total_weight = sum(s.weight for s in sources if s.weight is not None)
    counts = []
    for n, source in zip(kept, sources):
        if source.samples is not None:
            counts.append(source.samples if n else 0)
        elif source.weight is not None:
            counts.append(round(pool * source.weight / total_weight) if n else 0)
        else:
            counts.append(n)
    return counts


def quoted(value: str) -> str:
    """A path as a message quotes it: whole up to QUOTED_CHARS, else its start and end."""
    text = repr(value)
    return (
        text if len(text) <= QUOTED_CHARS else f"{text[: QUOTED_CHARS // 2]}...{text[-QUOTED_CHARS // 3 :]}"
    )


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def _exists(name: str) -> bool:
    try:
        return Path(name).expanduser().exists()
    except (OSError, ValueError):
        return False
