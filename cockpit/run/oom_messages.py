"""Reading CUDA out-of-memory messages (pure Python, shared by the trainer and the UI).

Two formats of PyTorch's caching allocator are in the wild (see
reference/memory.md): the newer one ("GPU 0 has a total capacity of ... of which ...
is free ... Of the allocated memory ... is allocated by PyTorch, and ... is reserved
by PyTorch but unallocated") and the older one ("(GPU 0; ... total capacity; ...
already allocated; ... free; ... reserved in total by PyTorch)"). Other kinds carry
no numbers: cuBLAS and bitsandbytes allocation failures (bitsandbytes' C code prints
"Error out of memory at line N in file F" and exits the process), `AcceleratorError`.

The host's OOM killer leaves no message at all: the trainer just dies of SIGKILL. The
cgroup's own count of OOM kills (`memory.events` in cgroup v2, `memory.oom_control` in
v1) tells it apart from a plain `kill -9`: `cgroup_memory` reads it.
"""

from __future__ import annotations

import re
import signal
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cockpit.paths import cockpit_command

_UNITS = {"bytes": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
# torch's format_size writes "0 bytes" below 1 KiB
_SIZE = r"([\d.]+) ?(bytes|B|KiB|MiB|GiB|TiB)"

_NEW = {
    "requested_bytes": rf"Tried to allocate {_SIZE}",
    "total_bytes": rf"total capacity of {_SIZE}",
    "free_bytes": rf"of which {_SIZE} is free",
    "process_bytes": rf"this process has {_SIZE} memory in use",
    "allocated_bytes": rf"Of the allocated memory {_SIZE} is allocated by PyTorch",
    "reserved_unallocated_bytes": rf"{_SIZE} is reserved by PyTorch but unallocated",
}
_OLD = {
    "requested_bytes": rf"Tried to allocate {_SIZE}",
    "total_bytes": rf"{_SIZE} total capacity",
    "allocated_bytes": rf"{_SIZE} already allocated",
    "free_bytes": rf"{_SIZE} free",
    "reserved_bytes": rf"{_SIZE} reserved in total by PyTorch",
}
_OTHER_KINDS = (
    ("cublas_alloc", re.compile(r"CUBLAS_STATUS_ALLOC_FAILED")),
    ("accelerator", re.compile(r"(AcceleratorError|CUDA error): out of memory", re.IGNORECASE)),
    ("bitsandbytes", re.compile(r"bitsandbytes.*(out of memory|alloc)", re.IGNORECASE | re.DOTALL)),
    # bitsandbytes' CUDA_CHECK_RETURN: fprintf(stderr, "Error %s at line %d in file %s"), then exit(1)
    ("bitsandbytes", re.compile(r"Error out of memory at line \d+ in file \S+")),
)


@dataclass
class OomInfo:
    kind: str  # allocator | cublas_alloc | accelerator | bitsandbytes | host
    format: str | None = None  # new | old for allocator messages
    gpu: int | None = None
    requested_bytes: int | None = None
    total_bytes: int | None = None
    free_bytes: int | None = None
    process_bytes: int | None = None
    allocated_bytes: int | None = None
    reserved_bytes: int | None = None
    reserved_unallocated_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _bytes(number: str, unit: str) -> int:
    return int(float(number) * _UNITS[unit])


def is_oom_message(text: str) -> bool:
    return parse_oom_message(text) is not None


def parse_oom_message(text: str) -> OomInfo | None:
    """The numbers in an OOM message, or None when the text is not an out-of-memory error."""
    if "out of memory" in text.lower() and "Tried to allocate" in text:
        fmt, patterns = ("new", _NEW) if "total capacity of" in text else ("old", _OLD)
        info = OomInfo(kind="allocator", format=fmt)
        for name, pattern in patterns.items():
            match = re.search(pattern, text)
            if match:
                setattr(info, name, _bytes(match.group(1), match.group(2)))
        gpu = re.search(r"GPU (\d+)", text)
        info.gpu = int(gpu.group(1)) if gpu else None
        if fmt == "new" and info.allocated_bytes is not None and info.reserved_unallocated_bytes is not None:
            info.reserved_bytes = info.allocated_bytes + info.reserved_unallocated_bytes
        if fmt == "old" and info.reserved_bytes is not None and info.allocated_bytes is not None:
            info.reserved_unallocated_bytes = max(0, info.reserved_bytes - info.allocated_bytes)
        return info
    for kind, regex in _OTHER_KINDS:
        if regex.search(text):
            return OomInfo(kind=kind)
    if "out of memory" in text.lower() and ("cuda" in text.lower() or "gpu" in text.lower()):
        return OomInfo(kind="accelerator")
    return None


# ---------------------------------------------------------------- the host's OOM killer


@dataclass(frozen=True)
class CgroupMemory:
    """What a process's memory cgroup says: its OOM kills so far and its limit."""

    path: str  # the cgroup's directory
    version: int  # 1 or 2
    oom_kills: int | None
    limit_bytes: int | None  # None: no limit ("max")
    peak_bytes: int | None = None


def _cgroup_line(proc_cgroup: Path) -> tuple[int, str] | None:
    """(version, path inside the hierarchy) of the memory cgroup from /proc/<pid>/cgroup."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if "memory" in controllers.split(","):
            return 1, path
    for line in lines:
        if line.startswith("0::"):
            return 2, line[3:]
    return None


def _number(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _keyed(path: Path, key: str) -> int | None:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return None


def cgroup_memory(
    proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")
) -> CgroupMemory | None:
    """The memory cgroup of a process (default: this one), or None where it cannot be read."""
    found = _cgroup_line(proc_cgroup)
    if found is None:
        return None
    version, inner = found
    folder = root / inner.lstrip("/") if version == 2 else root / "memory" / inner.lstrip("/")
    return cgroup_memory_at(str(folder), version)


def cgroup_memory_at(folder: str, version: int) -> CgroupMemory | None:
    """A cgroup read by its directory (also after the trainer is gone, with its /proc entry)."""
    path = Path(folder)
    if version == 2:
        if not (path / "memory.events").is_file():  # the root cgroup has none
            return None
        kills = _keyed(path / "memory.events", "oom_kill")
        return CgroupMemory(folder, 2, kills, _number(path / "memory.max"), _number(path / "memory.peak"))
    if not (path / "memory.oom_control").is_file():
        return None
    limit = _number(path / "memory.limit_in_bytes")
    if limit is not None and limit >= 1 << 60:  # v1 writes "no limit" as a huge number
        limit = None
    kills = _keyed(path / "memory.oom_control", "oom_kill")
    return CgroupMemory(folder, 1, kills, limit, _number(path / "memory.max_usage_in_bytes"))


@dataclass(frozen=True)
class SilentOom:
    info: dict[str, Any]  # the `oom` field of the error event
    message: str
    hint: str


def silent_oom(
    returncode: int | None, sig: int | None, log_tail: str, cgroup_record: dict[str, Any] | None
) -> SilentOom | None:
    """An out-of-memory death that left no error event, or None.

    The host's OOM killer: the trainer died of SIGKILL (or its client could not see how) and the
    OOM-kill count of its cgroup (`cgroup_record`, taken at launch) rose. bitsandbytes: the
    process exited non-zero after its C code printed "Error out of memory at line ...".
    """
    record = cgroup_record or {}
    if (sig == signal.SIGKILL or returncode is None) and record.get("path"):
        now = cgroup_memory_at(record["path"], record.get("version", 2))
        before = record.get("oom_kills")
        if now is not None and now.oom_kills is not None and before is not None and now.oom_kills > before:
            info = {
                "kind": "host",
                "host": True,
                "oom_kills_before": before,
                "oom_kills_after": now.oom_kills,
                "cgroup": now.path,
                "limit_bytes": now.limit_bytes,
                "peak_bytes": now.peak_bytes,
            }
            return SilentOom(
                info,
                "the host ran out of memory: the kernel's OOM killer killed the trainer "
                f"(OOM kills in its cgroup: {before} -> {now.oom_kills})",
                "Host RAM ran out, not GPU memory: loading (and quantising) a model holds its 16-bit "
                "shards in RAM, and each dataloader worker holds a copy of the dataset. Use an instance "
                "with more RAM (about 4x the VRAM) or fewer training.dataloader_num_workers, then continue "
                f"with `{cockpit_command()} restart RUN`.",
            )
    if returncode is not None and returncode > 0:
        parsed = parse_oom_message(log_tail)
        if parsed is not None and parsed.kind == "bitsandbytes":
            line = next((x for x in log_tail.splitlines() if "out of memory" in x), "out of memory")
            return SilentOom(
                parsed.to_dict(),
                f"bitsandbytes ran out of GPU memory and ended the process: {line.strip()}"[:500],
                "The GPU ran out of memory inside a bitsandbytes kernel; the OOM wizard lists what fits "
                f"(`{cockpit_command()} restart RUN --on-oom ask`).",
            )
    return None
