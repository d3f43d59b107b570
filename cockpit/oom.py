"""Reading CUDA out-of-memory messages (pure Python, shared by the trainer and the UI).

Two formats of PyTorch's caching allocator are in the wild (see
reference/memory.md): the newer one ("GPU 0 has a total capacity of ... of which ...
is free ... Of the allocated memory ... is allocated by PyTorch, and ... is reserved
by PyTorch but unallocated") and the older one ("(GPU 0; ... total capacity; ...
already allocated; ... free; ... reserved in total by PyTorch)"). Other kinds carry
no numbers: cuBLAS and bitsandbytes allocation failures, `AcceleratorError`.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
_SIZE = r"([\d.]+) ?(B|KiB|MiB|GiB|TiB)"

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
)


@dataclass
class OomInfo:
    kind: str  # allocator | cublas_alloc | accelerator | bitsandbytes
    format: str | None = None  # new | old for allocator messages
    gpu: int | None = None
    requested_bytes: int | None = None
    total_bytes: int | None = None
    free_bytes: int | None = None
    process_bytes: int | None = None
    allocated_bytes: int | None = None
    reserved_bytes: int | None = None
    reserved_unallocated_bytes: int | None = None

    def to_dict(self) -> dict:
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
    for kind, pattern in _OTHER_KINDS:
        if pattern.search(text):
            return OomInfo(kind=kind)
    if "out of memory" in text.lower() and ("cuda" in text.lower() or "gpu" in text.lower()):
        return OomInfo(kind="accelerator")
    return None
