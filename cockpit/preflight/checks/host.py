"""Host preflight checks: usable CPU cores, RAM against VRAM and the model, swap.

Containers on rented boxes often see every host core and all host RAM through
`os.cpu_count()` and /proc/meminfo while a cgroup quota limits them to far less, so
the cgroup files are read too (from an injectable root, so tests use fake trees).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cockpit.fmt import gib
from cockpit.preflight.checks.base import CheckResult, UnsizedModel

CGROUP_ROOT = Path("/sys/fs/cgroup")
CORES_PER_GPU = 4  # tokenisation and data-loading workers per GPU
RAM_PER_VRAM = 4  # the article's rule: RAM >= 4x VRAM, written for a 24 GB card
RULE_UP_TO_VRAM_BYTES = 48 * 2**30  # the rule is judged on cards up to this; past it, it is advice
BIG_CARD_RAM_BYTES = 64 * 2**30  # a big card's box: enough RAM for loading and paged states of a QLoRA job
LOAD_HEADROOM_BYTES = 2 * 2**30  # OS, Python, CUDA context on the host side
# a cgroup v1 "no limit" is a huge page-rounded number, not a keyword
_UNLIMITED_BYTES = 1 << 60


@dataclass(frozen=True)
class MemoryFacts:
    ram_total_bytes: int  # what the kernel reports (the whole host inside many containers)
    swap_total_bytes: int
    cgroup_limit_bytes: int | None  # None: no memory limit

    @property
    def usable_bytes(self) -> int:
        if self.cgroup_limit_bytes is None:
            return self.ram_total_bytes
        return min(self.ram_total_bytes, self.cgroup_limit_bytes)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cgroup_cpu_limit(root: Path = CGROUP_ROOT) -> float | None:
    """CPUs allowed by the cgroup quota (v2 cpu.max, else v1 cfs quota/period); None: no quota."""
    text = _read(root / "cpu.max")
    if text:
        quota, _, period = text.partition(" ")
        if quota == "max":
            return None
        try:
            return int(quota) / int(period or "100000")
        except ValueError:
            return None
    for sub in ("cpu", "cpu,cpuacct", "cpuacct,cpu", ""):
        base = root / sub if sub else root
        quota_text, period_text = _read(base / "cpu.cfs_quota_us"), _read(base / "cpu.cfs_period_us")
        if quota_text is None or period_text is None:
            continue
        try:
            quota_us, period_us = int(quota_text), int(period_text)
        except ValueError:
            return None
        return None if quota_us <= 0 or period_us <= 0 else quota_us / period_us
    return None


def cgroup_memory_limit(root: Path = CGROUP_ROOT) -> int | None:
    """Bytes allowed by the cgroup (v2 memory.max, else v1 memory.limit_in_bytes); None: no limit."""
    for path in (
        root / "memory.max",
        root / "memory" / "memory.limit_in_bytes",
        root / "memory.limit_in_bytes",
    ):
        text = _read(path)
        if text is None:
            continue
        if text == "max":
            return None
        try:
            value = int(text)
        except ValueError:
            return None
        return None if value >= _UNLIMITED_BYTES else value
    return None


def _affinity_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _psutil_memory() -> tuple[int, int]:
    import psutil

    return psutil.virtual_memory().total, psutil.swap_memory().total


def memory_facts(
    cgroup_root: Path = CGROUP_ROOT, read_memory: Callable[[], tuple[int, int]] = _psutil_memory
) -> MemoryFacts:
    ram, swap = read_memory()
    return MemoryFacts(ram, swap, cgroup_memory_limit(cgroup_root))


def check_cpu(
    gpu_count: int = 1,
    cgroup_root: Path = CGROUP_ROOT,
    affinity_count: Callable[[], int] = _affinity_count,
) -> CheckResult:
    started = time.monotonic()
    affinity = affinity_count()
    quota = cgroup_cpu_limit(cgroup_root)
    usable = min(float(affinity), quota) if quota is not None else float(affinity)
    gpus = max(1, gpu_count)
    needed = CORES_PER_GPU * gpus
    limited_by = "cgroup quota" if quota is not None and quota < affinity else "CPU affinity"
    value = f"{usable:g} usable cores ({limited_by}) for {gpus} GPU{'s' if gpus > 1 else ''}"
    ok = usable >= needed
    return CheckResult(
        id="host.cpu",
        group="host",
        title="CPU cores available to this process",
        status="pass" if ok else "warn",
        value=value,
        threshold=f">= {CORES_PER_GPU} cores per GPU (>= {needed})",
        fix=""
        if ok
        else (
            f"Only {usable:g} cores for tokenisation and data loading: the GPU will wait on the CPU; "
            f"rent an instance with >= {needed} vCPUs or pre-tokenise the dataset and keep "
            "dataloader_num_workers small."
        ),
        evidence={
            "affinity_cores": affinity,
            "cgroup_quota_cores": quota,
            "usable_cores": usable,
            "gpus": gpus,
        },
        duration_s=time.monotonic() - started,
    )


def check_ram_vs_vram(vram_bytes: int | None, facts: MemoryFacts) -> CheckResult:
    started = time.monotonic()
    common = {"id": "host.ram_vram", "group": "host", "title": "RAM against GPU memory"}
    threshold = f"RAM >= {RAM_PER_VRAM}x VRAM"
    evidence = _memory_evidence(facts) | {"vram_bytes": vram_bytes}
    if not vram_bytes:
        return CheckResult(
            **common,
            status="skip",
            value="GPU memory unknown (no GPU seen yet)",
            threshold=threshold,
            evidence=evidence,
            duration_s=time.monotonic() - started,
        )
    ratio = facts.usable_bytes / vram_bytes
    evidence["ratio"] = round(ratio, 2)
    if vram_bytes > RULE_UP_TO_VRAM_BYTES:
        return _big_card_ram(common, facts, vram_bytes, ratio, evidence, started)
    status = "pass" if ratio >= RAM_PER_VRAM else ("warn" if ratio >= 1 else "fail")
    return CheckResult(
        **common,
        status=status,
        value=f"{gib(facts.usable_bytes, 1)} RAM for {gib(vram_bytes, 1)} VRAM ({ratio:.1f}x)",
        threshold=f"{threshold} (>= {gib(RAM_PER_VRAM * vram_bytes, 0)})",
        fix=""
        if status == "pass"
        else (
            f"Loading, quantising and paged optimizers stage data in host RAM: rent an instance with "
            f">= {gib(RAM_PER_VRAM * vram_bytes, 0)} RAM, or keep QLoRA with low_cpu_mem_usage."
        ),
        evidence=evidence,
        duration_s=time.monotonic() - started,
    )


def _big_card_ram(
    common: dict[str, Any],
    facts: MemoryFacts,
    vram_bytes: int,
    ratio: float,
    evidence: dict[str, Any],
    started: float,
) -> CheckResult:
    """An 80-192 GB card: 4x its memory (320-770 GB) is what no healthy box has and no job needs.
    The run's own need (its weights) is host.ram_model's check; this one asks for a floor, and
    gives the 4x rule as advice."""
    usable = facts.usable_bytes
    status = "pass" if usable >= BIG_CARD_RAM_BYTES else "warn"
    rule = f"{RAM_PER_VRAM}x VRAM ({gib(RAM_PER_VRAM * vram_bytes, 0)}) is the rule for 24 GB cards"
    return CheckResult(
        **common,
        status=status,
        value=f"{gib(usable, 1)} RAM for {gib(vram_bytes, 1)} VRAM ({ratio:.1f}x)",
        threshold=f">= {gib(BIG_CARD_RAM_BYTES, 0)} on a card over {gib(RULE_UP_TO_VRAM_BYTES, 0)}; {rule}, "
        "advice only; the run's weights are checked against RAM by host.ram_model",
        fix=""
        if status == "pass"
        else (
            f"{gib(usable, 1)} RAM is little for a {gib(vram_bytes, 0)} card: loading a model that uses "
            f"the card stages its weights in RAM; rent >= {gib(BIG_CARD_RAM_BYTES, 0)} RAM, "
            "or load it quantised."
        ),
        evidence=evidence | {"rule_applies": False},
        duration_s=time.monotonic() - started,
    )


def ram_needed_for_model(model_bytes: int) -> int:
    """Hard floor to load 16-bit weights: the weights, a quarter more for conversion buffers, the OS."""
    return int(model_bytes * 1.25) + LOAD_HEADROOM_BYTES


def check_ram_for_model(
    model_bytes: int | None, facts: MemoryFacts, unsized: UnsizedModel | None = None
) -> CheckResult:
    """`unsized`: a model was named but its size could not be read; the skip says why."""
    started = time.monotonic()
    common = {"id": "host.ram_model", "group": "host", "title": "RAM to load the planned model"}
    evidence = _memory_evidence(facts) | {"model_bytes": model_bytes}
    if not model_bytes:
        if unsized is not None:
            evidence |= {"model": unsized.name, "model_unknown": unsized.cause}
        return CheckResult(
            **common,
            status="skip",
            value=unsized.words if unsized else "no model planned",
            fix=unsized.fix if unsized else "",
            evidence=evidence,
            duration_s=time.monotonic() - started,
        )
    floor, comfortable = ram_needed_for_model(model_bytes), 2 * model_bytes
    usable = facts.usable_bytes
    status = "pass" if usable >= max(floor, comfortable) else ("warn" if usable >= floor else "fail")
    evidence |= {"floor_bytes": floor, "comfortable_bytes": comfortable}
    fix = ""
    if status == "fail":
        fix = (
            f"{gib(model_bytes, 1)} of 16-bit weights plus the OS do not fit in {gib(usable, 1)} RAM "
            f"(a 7B fp16 model is ~13 GB and 16 GB is not enough): rent >= {gib(comfortable, 0)} RAM or "
            "load the model quantised (QLoRA)."
        )
    elif status == "warn":
        fix = (
            f"Loading fits but tightly: add swap or rent >= {gib(comfortable, 0)} RAM so a second copy fits."
        )
    return CheckResult(
        **common,
        status=status,
        value=f"{gib(usable, 1)} RAM for {gib(model_bytes, 1)} of weights",
        threshold=f">= {gib(floor, 1)} to load, >= {gib(comfortable, 1)} comfortable",
        fix=fix,
        evidence=evidence,
        duration_s=time.monotonic() - started,
    )


def check_swap(
    facts: MemoryFacts, vram_bytes: int | None = None, model_bytes: int | None = None
) -> CheckResult:
    started = time.monotonic()
    usable = facts.usable_bytes
    tight = _ram_tight_for_card(usable, vram_bytes) or bool(model_bytes and usable < 2 * model_bytes)
    swap = facts.swap_total_bytes
    status = "warn" if tight and swap == 0 else "pass"
    return CheckResult(
        id="host.swap",
        group="host",
        title="Swap space",
        status=status,
        value=f"{gib(swap, 1)} swap" + (" (RAM is tight)" if tight else ""),
        threshold="some swap when RAM is tight",
        fix="RAM is tight and there is no swap: a loading peak will kill the process; add a swap file "
        "(fallocate -l 16G /swapfile && mkswap /swapfile && swapon /swapfile) or rent more RAM."
        if status == "warn"
        else "",
        evidence=_memory_evidence(facts) | {"ram_tight": tight},
        duration_s=time.monotonic() - started,
    )


def _ram_tight_for_card(usable: int, vram_bytes: int | None) -> bool:
    """Less RAM than host.ram_vram asks for this card: 4x its memory up to a 48 GB card, the big
    card's floor past it (4x an 80-192 GB card is what no healthy box has)."""
    if not vram_bytes:
        return False
    if vram_bytes > RULE_UP_TO_VRAM_BYTES:
        return usable < BIG_CARD_RAM_BYTES
    return usable < RAM_PER_VRAM * vram_bytes


def _memory_evidence(facts: MemoryFacts) -> dict[str, Any]:
    return {
        "ram_total_bytes": facts.ram_total_bytes,
        "cgroup_limit_bytes": facts.cgroup_limit_bytes,
        "usable_bytes": facts.usable_bytes,
        "swap_total_bytes": facts.swap_total_bytes,
    }
