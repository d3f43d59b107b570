"""What one preflight check answers: a verdict with its measured value, threshold and fix.

Shared by every group of checks (host, disk, network, GPU, software) and by the
preflight runner, the screen and the JSON report.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

STATUSES = ("pass", "warn", "fail", "skip")
EXIT_CODES = {"pass": 0, "skip": 0, "warn": 1, "fail": 2}


@dataclass(frozen=True)
class CheckResult:
    id: str  # stable, e.g. "disk.read_speed.cache"
    group: str  # gpu | performance | host | disk | network | software
    title: str  # what was checked, for people
    status: str  # pass | warn | fail | skip
    value: str = ""  # what was measured, with units ("1.9 GB/s", "driver 535.104.05")
    threshold: str = ""  # what it was judged against ("NVMe reads >= 1.5 GB/s")
    fix: str = ""  # one sentence: what to do (empty on pass)
    evidence: dict[str, Any] = field(default_factory=dict)  # the raw numbers behind the verdict
    duration_s: float = 0.0

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"check {self.id}: status {self.status!r} is not one of {', '.join(STATUSES)}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class UnsizedModel:
    """The planned model, named but not sized (its hub did not answer for config.json): the checks
    it would size say that they could not, why, and what to do."""

    name: str  # as given: "meta-llama/Llama-2-7b-hf"
    cause: str  # "could not fetch config.json from https://huggingface.co (...)"
    fix: str  # what to do to size it

    @property
    def words(self) -> str:
        return f"{self.name}'s size unknown: {self.cause}"


def exit_code(results: list[CheckResult]) -> int:
    """0 all pass (or skipped), 1 warnings, 2 failures."""
    return max((EXIT_CODES[r.status] for r in results), default=0)
