"""The verdict on a merge: do the merged weights give the logits that base + adapter give?

Both sides run in the export's dtype on the same device, on the same few inputs; the merged
weight W + (alpha/r)·B·A is rounded once to that dtype where the unmerged path rounds its two
products separately, so they differ by rounding, which adds up over the layers in 16-bit. The
gate is the root-mean-square of the logit difference over every position and vocabulary entry,
relative to the reference logits' RMS: at most 1e-4 in fp32, 1e-2 in fp16 and 6e-2 in bf16.
Measured on SmolLM2-135M (30 layers) with a LoRA adapter (docs/finish.md): the merge in fp32 is
exact to 1.7e-6; in bf16 the merged and unmerged models differ by 2.8e-2, as much as bf16
differs from fp32 on the unmerged model alone (2.7e-2), while the adapter moves the logits by
2.5e-1. So the merged model must also be nearer to base + adapter than the base alone is (the
adapter's own effect, measured with the adapter switched off): a merge that lost the adapter
fails. When the adapter's effect is within twice the rounding, the check says it cannot tell.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

RELATIVE_TOLERANCE = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 6e-2}
# the exported GGUF read back into the merged model, its logits (train_backend/export/readback.py; over
# the tolerance with every weight within WEIGHT_TOLERANCE: a warning, the file kept): max |Δ| of the
# last position's logits relative to its largest logit, the worst of the merge check's 3 prompts,
# both models in the export dtype): f16 rounds each weight once more, q8_0 quantises in blocks of 32
# (about 8 bits each), q5_1, q5_0 and q4_0 (layers at 6, 5.5 and 4.5 bits a weight, embeddings and
# output q8_0). Measured in bf16 on SmolLM2-135M, 2026-12-07: q8_0 0.039, q5_1 0.217, q5_0 0.201,
# q4_0 0.374 (the tiny model's q8_0 0.017, q5_1 0.071, q4_0 0.178; docs/finish.md); each tolerance is 2 to 2.5
# times that. A broken file reads near 1 (the output layer zeroed: 1.0)
ROUND_TRIP_TOLERANCE = {"f16": 3e-2, "q8_0": 0.1, "q5_1": 0.45, "q5_0": 0.45, "q4_0": 0.75}
# K-quants (llama.cpp's llama-quantize, not installed here): not measured; each takes the tolerance of
# the block type of no more bits a weight (q6_k 6.56 -> q5_1's 6, q5_k_m 5.70 -> q5_0's 5.5, q4_k_m
# 4.89 -> q4_0's 4.5)
ROUND_TRIP_TOLERANCE.update(q6_k=0.45, q5_k_m=0.45, q4_k_m=0.75)
# The read-back's pass or fail: each GGUF tensor against the merged weight it replaced, ||read - merged|| /
# ||merged||, by the tensor's own type (a q4_0 file keeps norms in F32 and embeddings in Q8_0). The gguf
# package's quantizers on 256 x 4096 draws, 2026-12-07 (Gaussian; Student-t 3, heavier tails): F16
# 0.0002, Q8_0 0.0054 / 0.0086, Q5_1 0.038 / 0.049, Q5_0 0.043 / 0.066, Q4_0 0.086 / 0.127; each tolerance
# is about 3x the heavier-tailed figure. K types from llama.cpp's llama-quantize on SmolLM2-135M: see
# docs/finish.md. A zeroed tensor reads 1.0, a misordered or misnamed one about 1.4.
WEIGHT_TOLERANCE = {
    "F32": 1e-5,
    "F16": 5e-3,
    "BF16": 5e-3,
    "Q8_0": 0.03,
    "Q6_K": 0.1,
    "Q5_1": 0.2,
    "Q5_0": 0.2,
    "Q5_K": 0.2,
    "Q4_1": 0.35,
    "Q4_0": 0.35,
    "Q4_K": 0.35,
    "Q3_K": 0.5,
}
WEIGHT_TOLERANCE_OTHER = 0.7  # a type not listed (Q2_K, the IQ types): below what a damaged tensor reads


def weight_tolerance(ggml_type: str) -> float:
    """The largest relative RMS error a tensor of this GGUF type (its GGMLQuantizationType name) may
    read back with."""
    return WEIGHT_TOLERANCE.get(ggml_type.upper(), WEIGHT_TOLERANCE_OTHER)


@dataclass(frozen=True)
class LogitsCheck:
    compared: str
    inputs: int
    positions: int
    rms_diff: float
    ref_rms: float
    max_abs_diff: float
    ref_max_abs: float
    tolerance: float
    top1_agree: float  # fraction of positions whose most likely next token is the same
    adapter_effect_rms: float | None = None  # RMS of (base + adapter) - base, the same inputs

    @property
    def relative(self) -> float:
        return self.rms_diff / self.ref_rms if self.ref_rms > 0 else float(self.rms_diff > 0)

    @property
    def within_adapter_effect(self) -> bool:
        """Nearer to base + adapter than the base alone (an adapter still at zero: nothing to lose)."""
        if not self.adapter_effect_rms:
            return True
        return self.rms_diff < self.adapter_effect_rms

    @property
    def discriminates(self) -> bool:
        """The adapter moves the logits well past the rounding: a lost adapter could not pass."""
        if not self.adapter_effect_rms:
            return False
        return self.adapter_effect_rms >= 2 * self.rms_diff

    @property
    def passed(self) -> bool:
        return self.relative <= self.tolerance and self.within_adapter_effect

    def to_event(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "relative": self.relative,
            "passed": self.passed,
            "discriminates": self.discriminates,
        }

    def describe(self) -> str:
        verdict = "passed" if self.passed else "FAILED"
        effect = ""
        if self.adapter_effect_rms:
            effect = f"; the adapter itself moves them by {self.adapter_effect_rms / self.ref_rms:.2e}"
            if not self.discriminates:
                effect += " (within twice the rounding: this check cannot tell it from a lost adapter)"
        return (
            f"{self.compared}: RMS Δlogit {self.relative:.2e} of the logits' RMS over {self.positions} "
            f"positions of {self.inputs} inputs (tolerance {self.tolerance:.0e}){effect}; max |Δ| "
            f"{self.max_abs_diff:.3g} of {self.ref_max_abs:.3g}; same top token at {self.top1_agree:.0%} "
            f"of positions: {verdict}"
        )


def verdict(compared: str, tolerance: float, **figures: Any) -> LogitsCheck:
    return LogitsCheck(compared=compared, tolerance=tolerance, **figures)


def describe_event(event: dict[str, Any]) -> str:
    """A check as the backend reported it (an `export_check` event)."""
    keys = LogitsCheck.__dataclass_fields__
    figures: dict[str, Any] = {k: event.get(k) for k in keys}
    return LogitsCheck(**figures).describe()


def describe_readback(event: dict[str, Any]) -> str:
    """A GGUF read back (an `export_readback` event), as one line."""
    if event.get("skipped"):
        return f"{event.get('file')}: not read back ({event.get('reason')})"
    verdict = "passed" if event.get("passed") else "FAILED"
    head = f"{event.get('file')} ({event.get('file_type')}) read back"
    gaps = ", ".join(f"{g:.3g}" for g in event.get("gaps") or [])
    kept = f"; kept as {event['kept_as']}" if event.get("kept_as") else ""
    if event.get("problem"):
        return f"{head}: {event['problem']}: {verdict}{kept}"
    weights = ""
    if event.get("weights_error") is not None:
        within = "within" if event.get("passed") else "NOT within"
        weights = (
            f"weights {within} their rounding, at worst {event['weights_error']:.3g} of their RMS "
            f"({event.get('weights_tensor')}, {event.get('weights_type')}; tolerance "
            f"{event.get('weights_tolerance')}); "
        )
    over = ""
    if event.get("passed") and event.get("logits_passed") is False:
        over = (
            f" (the logits moved more than {event.get('file_type')}'s tolerance, set on trained models: "
            "this model is that sensitive to the rounding; choose a type with more bits for fidelity)"
        )
    return (
        f"{head}: {weights}next-token max |Δ| {event.get('gap'):.3g} "
        f"of the largest logit (worst of {event.get('inputs')} prompts: {gaps}; tolerance "
        f"{event.get('tolerance')}), same top token on {event.get('top1_same')} of {event.get('inputs')}, "
        f"{event.get('tensors')} tensors in {event.get('elapsed_s', 0):.1f} s: {verdict}{over}{kept}"
    )
