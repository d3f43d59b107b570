"""A weights file cut short (a download or a copy that stopped): found from a loading error, measured
against its own header, so the error can name the file instead of blaming model.name."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import yaml

SUFFIX = ".safetensors"


@dataclass(frozen=True)
class Truncated:
    path: Path
    size: int  # bytes on disk
    declared: int  # bytes its header says the file holds (at least, when the header itself is cut)


def truncated_weights(exc: BaseException, run_dir: str | None) -> Truncated | None:
    """The first .safetensors file, among those the failed load touched (its traceback's locals) and
    those of the run's local model folder, that is shorter than its header declares."""
    for path in _candidates(exc, run_dir):
        found = truncation(path)
        if found is not None:
            return found
    return None


def truncation(path: Path) -> Truncated | None:
    """`path` measured against its header: 8 bytes of header length, the JSON header, then the data up
    to the largest `data_offsets` end. None when it is whole, or not readable as safetensors at all."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                return Truncated(path, size, 8)
            header_len = int.from_bytes(head, "little")
            if 8 + header_len > size:
                return Truncated(path, size, 8 + header_len)
            if header_len > 100 << 20:  # no real header is this large: not ours to judge
                return None
            header = json.loads(f.read(header_len))
    except (OSError, ValueError):
        return None
    ends = [
        entry["data_offsets"][1]
        for name, entry in header.items()
        if name != "__metadata__" and isinstance(entry, dict) and len(entry.get("data_offsets") or []) == 2
    ]
    declared = 8 + header_len + max(ends, default=0)
    return Truncated(path, size, declared) if size < declared else None


def _candidates(exc: BaseException, run_dir: str | None) -> list[Path]:
    seen: dict[Path, None] = {}
    for value in _traceback_values(exc):
        if isinstance(value, (str, os.PathLike)) and str(value).endswith(SUFFIX) and len(str(value)) < 4096:
            seen.setdefault(Path(value), None)
    folder = _local_model_folder(run_dir)
    if folder is not None:
        for path in sorted(folder.glob(f"*{SUFFIX}")):
            seen.setdefault(path, None)
    return [p for p in seen if p.is_file()]


def _traceback_values(exc: BaseException):
    """Every local value of every frame of exc's chain (the loader's `file`, `checkpoint_file`...)."""
    done: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in done:
        done.add(id(link))
        tb = link.__traceback__
        while tb is not None:
            yield from tb.tb_frame.f_locals.values()
            tb = tb.tb_next
        link = link.__cause__ or link.__context__


def _local_model_folder(run_dir: str | None) -> Path | None:
    """model.name of the run's config.yaml when it is a local folder."""
    if not run_dir:
        return None
    try:
        cfg = yaml.safe_load((Path(run_dir) / "config.yaml").read_text(encoding="utf-8")) or {}
        name = (cfg.get("model") or {}).get("name")
    except (OSError, yaml.YAMLError, AttributeError):
        return None
    if not isinstance(name, str):
        return None
    try:
        folder = Path(name).expanduser()
        return folder if folder.is_dir() else None
    except (OSError, ValueError):
        return None
