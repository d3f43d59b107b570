"""What each source is (a local file, a save_to_disk folder, a hub dataset), which splits it has,
and its rows as a stream: read as the trainer will read them, never loaded whole.

A split that the source lacks is refused for every kind of source: a local file has only
`train` (datasets' own name for the one split of a file).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cockpit.config.schema import DatasetSource
from train_backend.data import LOCAL_BUILDERS, demo_dataset_path
from train_backend.datacheck import reader
from train_backend.datacheck.reader import RawRow

BATCH_ROWS = 256  # rows taken at once from a columnar source (parquet, save_to_disk, the hub)


@dataclass
class Problem:
    """A data error or a warning: what, where, what was expected and the fix."""

    code: str
    message: str
    fix: str = ""
    expected: str = ""
    source: int | None = None
    file: str | None = None
    rows: list[dict] = field(default_factory=list)  # the first few: {"row": 4, "line": 5}
    count: int = 1
    byte: int | None = None

    def to_dict(self) -> dict:
        out = {"code": self.code, "message": self.message, "fix": self.fix, "expected": self.expected}
        out.update(source=self.source, file=self.file, rows=self.rows, count=self.count)
        if self.byte is not None:
            out["byte"] = self.byte
        return out


@dataclass
class Opened:
    number: int  # from 1
    spec: DatasetSource
    kind: str  # jsonl | json | csv | parquet | saved | hub
    label: str  # as the config names it
    file: str | None = None  # the local file read
    bytes: int | None = None
    splits: list[str] = field(default_factory=list)
    num_rows: int | None = None  # known before reading (parquet, save_to_disk, some hub datasets)
    columns: list[str] | None = None  # known before reading (a schema)
    rows: Callable[[], Iterator[RawRow]] | None = None  # None: it cannot be read (see problem)
    problem: Problem | None = None

    def entry(self) -> dict[str, Any]:
        """The source as the report's `sources` list shows it."""
        return {
            "number": self.number,
            "path": self.label,
            "kind": self.kind,
            "file": self.file,
            "bytes": self.bytes,
            "splits": self.splits,
            "split": self.spec.split,
            "weight": self.spec.weight,
            "samples": self.spec.samples,
        }


def open_source(number: int, spec: DatasetSource, limit_bytes: int, split_key: str) -> Opened:
    """The source, ready to stream; `problem` set (and no rows) when it cannot be read as asked.
    `split_key`: the config key of its split, for the message."""
    label = str(spec.path)
    path = demo_dataset_path() if spec.path == "demo" else str(Path(label).expanduser())
    local = Path(path)
    if local.is_dir():
        return _saved(number, spec, label, local, split_key)
    if local.is_file():
        return _file(number, spec, label, local, limit_bytes, split_key)
    if local.exists() or _looks_local(label):
        problem = Problem(
            "not_found",
            f"{label!r} does not exist",
            expected="an existing data file or save_to_disk folder",
            fix="check the path (cockpit data names the closest files)",
        )
        return Opened(number, spec, "file", label, file=path, problem=problem)
    return _hub(number, spec, label, split_key)


def _looks_local(label: str) -> bool:
    from cockpit.config.sources import looks_local

    return looks_local(label)


def _file(number: int, spec: DatasetSource, label: str, local: Path, limit: int, split_key: str) -> Opened:
    suffix = local.suffix.lower()
    size = local.stat().st_size
    kind = {".jsonl": "jsonl", ".json": "json", ".csv": "csv", ".parquet": "parquet"}.get(suffix)
    opened = Opened(number, spec, kind or "file", label, file=str(local), bytes=size, splits=["train"])
    if kind is None:
        opened.problem = Problem(
            "suffix",
            f"{label!r} has suffix {local.suffix!r}, which is not a data file the trainer reads",
            expected=f"one of {', '.join(LOCAL_BUILDERS)}, or a folder written by save_to_disk",
            fix="rename it to its real format (e.g. .jsonl for one JSON object per line)",
        )
        return opened
    if spec.split != "train":
        opened.problem = Problem(
            "split",
            f"{split_key}: {spec.split!r}, but {label!r} is one file: its rows are all the split 'train' "
            "(a local file has no other split)",
            expected="split: train for a local file",
            fix="set split: train (or leave it out). To evaluate on held-out rows, set "
            "dataset.eval_fraction: 0.05, or put them in a file of their own: dataset.eval_split: eval.jsonl",
        )
        return opened
    if size == 0 or not _has_bytes(local):
        opened.problem = Problem(
            "empty_file",
            f"{label!r} is empty",
            expected="one sample per row",
            fix="give a file with rows, e.g. one JSON object per line",
        )
        return opened
    if kind == "parquet":
        import pyarrow.parquet as pq

        meta = pq.ParquetFile(str(local))
        opened.num_rows = meta.metadata.num_rows
        opened.columns = list(meta.schema_arrow.names)
        opened.rows = lambda: _parquet_rows(str(local))
    elif kind == "csv":
        opened.rows = lambda: reader.csv_rows(str(local), limit)
    elif kind == "json" and reader.starts_with_array(str(local)):
        opened.rows = lambda: reader.json_array(str(local), limit)
    else:
        opened.rows = lambda: reader.json_lines(str(local), limit)
    return opened


def _has_bytes(path: Path) -> bool:
    """Whether the file holds more than whitespace (read in chunks: it may be large)."""
    with open(path, "rb") as f:
        while chunk := f.read(1 << 16):
            if chunk.strip():
                return True
    return False


def _parquet_rows(path: str) -> Iterator[RawRow]:
    import pyarrow.parquet as pq

    row = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS):
        for value in batch.to_pylist():
            row += 1
            yield RawRow(row, None, 0, value=value)


def _saved(number: int, spec: DatasetSource, label: str, local: Path, split_key: str) -> Opened:
    opened = Opened(number, spec, "saved", label, file=str(local))
    if not any((local / name).is_file() for name in ("dataset_dict.json", "dataset_info.json", "state.json")):
        opened.problem = Problem(
            "not_saved",
            f"{label!r} is a folder, but not one written by datasets' save_to_disk",
            expected="a folder with dataset_dict.json or dataset_info.json (save_to_disk writes them)",
            fix="point dataset.path at a data file in it (.jsonl, .json, .csv, .parquet), or save the "
            "dataset with save_to_disk",
        )
        return opened
    import datasets

    try:
        loaded = datasets.load_from_disk(str(local))
    except Exception as exc:  # the library's many types: the reason is what matters
        opened.problem = Problem("not_saved", f"{label!r} cannot be read: {type(exc).__name__}: {exc}")
        return opened
    if isinstance(loaded, datasets.DatasetDict):
        opened.splits = list(loaded.keys())
        if spec.split not in loaded:
            opened.problem = _missing_split(label, spec.split, opened.splits, split_key)
            return opened
        loaded = loaded[spec.split]
    else:
        opened.splits = ["train"]
        if spec.split != "train":
            opened.problem = _missing_split(label, spec.split, opened.splits, split_key)
            return opened
    opened.num_rows = len(loaded)
    opened.columns = list(loaded.column_names)
    opened.bytes = sum(f.stat().st_size for f in local.rglob("*.arrow"))
    opened.rows = lambda: _dataset_rows(loaded)
    return opened


def _dataset_rows(dataset) -> Iterator[RawRow]:
    row = 0
    for batch in dataset.iter(batch_size=BATCH_ROWS):
        names = list(batch)
        for values in zip(*(batch[n] for n in names)):
            row += 1
            yield RawRow(row, None, 0, value=dict(zip(names, values)))


def _missing_split(label: str, split: str, splits: list[str], split_key: str) -> Problem:
    return Problem(
        "split",
        f"{split_key}: {split!r} is not a split of {label!r}; its splits are: {', '.join(splits)}",
        expected=f"one of {', '.join(splits)}",
        fix=f"set the split to one of them; to hold out eval rows from {splits[0]!r}, set "
        "dataset.eval_fraction: 0.05",
    )


def _hub(number: int, spec: DatasetSource, label: str, split_key: str) -> Opened:
    opened = Opened(number, spec, "hub", label)
    import datasets

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    try:
        builder = datasets.load_dataset_builder(label)
        info = builder.info.splits or {}
        opened.splits = list(info) or list(datasets.get_dataset_split_names(label))
        if builder.info.features is not None:
            opened.columns = list(builder.info.features)
    except Exception as exc:  # not found, gated, unreachable: the reason is the library's
        offline = " (HF_DATASETS_OFFLINE or HF_HUB_OFFLINE is set)" if _offline() else ""
        reason = (str(exc).splitlines() or [""])[0][:300]
        opened.problem = Problem(
            "hub",
            f"{label!r} is not a local file, and the hub at {endpoint}{offline} has no dataset of that "
            f"name that could be read: {type(exc).__name__}: {reason}",
            expected="a local file or folder, or a hub dataset id (org/name)",
            fix="check the name; a local file needs its path (./data.jsonl); set HF_ENDPOINT to a mirror "
            "when the hub is unreachable, HF_TOKEN for a gated dataset",
        )
        return opened
    if spec.split not in opened.splits:
        opened.problem = _missing_split(label, spec.split, opened.splits, split_key)
        return opened
    split_info = info.get(spec.split) if isinstance(info, dict) else None
    opened.num_rows = getattr(split_info, "num_examples", None) or None
    opened.bytes = getattr(split_info, "num_bytes", None) or None
    opened.rows = lambda: _hub_rows(label, spec.split)
    return opened


def _hub_rows(label: str, split: str) -> Iterator[RawRow]:
    import datasets

    streamed = datasets.load_dataset(label, split=split, streaming=True)
    for row, value in enumerate(streamed, 1):
        yield RawRow(row, None, 0, value=dict(value))


def _offline() -> bool:
    return any(os.environ.get(k) for k in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"))
