"""The verdict on a merge: do the merged weights give the logits that base + adapter give?

Both sides run in the export's dtype on the same device, on the same few inputs; the merged
weight W + (alpha/r)·B·A is rounded once to that dtype where the unmerged path rounds its two
products separately, so they differ by rounding only. The largest absolute difference over every
position and vocabulary entry is compared with a tolerance relative to the largest reference
logit: 1e-4 in fp32, 5e-3 in fp16 (10 mantissa bits), 3e-2 in bf16 (7 bits). A wrong merge (a
missing scale, a transposed update, another adapter) is off by the adapter's whole effect,
far above these.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

RELATIVE_TOLERANCE = {"fp32": 1e-4, "fp16": 5e-3, "bf16": 3e-2}
# the exported GGUF read back against the merged model: f16 rounds each weight once more, q8_0
# quantises in blocks of 32 (about 8 bits each)
ROUND_TRIP_TOLERANCE = {"f16": 3e-2, "q8_0": 8e-2}


@dataclass(frozen=True)
class LogitsCheck:
    compared: str
    inputs: int
    positions: int
    max_abs_diff: float
    ref_max_abs: float
    tolerance: float
    top1_agree: float  # fraction of positions whose most likely next token is the same

    @property
    def relative(self) -> float:
        return self.max_abs_diff / self.ref_max_abs if self.ref_max_abs > 0 else float(self.max_abs_diff > 0)

    @property
    def passed(self) -> bool:
        return self.relative <= self.tolerance

    def to_event(self) -> dict:
        return {**asdict(self), "relative": self.relative, "passed": self.passed}

    def describe(self) -> str:
        verdict = "passed" if self.passed else "FAILED"
        return (
            f"{self.compared}: max |Δlogit| {self.max_abs_diff:.3g} over {self.positions} positions of "
            f"{self.inputs} inputs = {self.relative:.2e} of the largest logit ({self.ref_max_abs:.3g}); "
            f"tolerance {self.tolerance:.0e}: {verdict}; same top token at {self.top1_agree:.0%} of positions"
        )


def verdict(
    compared: str,
    max_abs_diff: float,
    ref_max_abs: float,
    tolerance: float,
    inputs: int,
    positions: int,
    top1_agree: float,
) -> LogitsCheck:
    return LogitsCheck(compared, inputs, positions, max_abs_diff, ref_max_abs, tolerance, top1_agree)


def describe_event(event: dict) -> str:
    """A check as the backend reported it (an `export_check` event)."""
    keys = ("compared", "inputs", "positions", "max_abs_diff", "ref_max_abs", "tolerance", "top1_agree")
    return LogitsCheck(**{k: event[k] for k in keys}).describe()
