"""The GGUF the export wrote, read back and held to the merged model's next-token logits.

The file is read with the gguf package's own reader and dequantizer, one tensor at a time, into the
merged model itself (already written as safetensors, so nothing else needs it): the check costs one
tensor in fp32 on top of the model, not a second model. The GGUF tensor names and llama's rotary
row order are undone by the gguf package's name map and transformers' GGUF tensor processor, not by
the converter's own tables, so a converter that misnames or misorders a tensor is read back wrong and
fails.

Two figures. The weights: each tensor read back against the merged weight it replaces, as a relative
RMS error, against its own GGUF type's tolerance (cockpit.results.merge_check.WEIGHT_TOLERANCE: a
damaged, zeroed, misnamed or misordered tensor reads near 1 or above, a rounded one at most a few
tenths): this decides whether the file passes. The logits: each of the merge check's prompts is run;
the gap is the largest |Δ| of the last position's logits relative to that position's largest logit,
the worst of the prompts, against the file type's tolerance (ROUND_TRIP_TOLERANCE, from trained
models). A gap over it with every weight within its rounding is the quantisation's own effect on this
model (a random-weight 7B moves its logits by the whole of them at 4 bits): said as a warning, the file
kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

FAILED_SUFFIX = ".failed-check.gguf"


class ReadBackError(RuntimeError):
    """The file cannot be read into the model (a tensor missing, unknown or of another shape)."""


@dataclass(frozen=True)
class ReadBack:
    """One file's read-back: the `export_readback` event's fields."""

    file: str
    file_type: str
    tensors: int
    inputs: int
    gaps: list[float]  # per prompt: max |Δ| of the last position's logits / its largest logit
    gap: float | None  # the worst of them; None when the file could not be read into the model
    tolerance: float
    top1_same: int  # prompts whose most likely next token is the same
    elapsed_s: float
    passed: bool  # read, and every weight within its type's rounding
    logits_passed: bool  # gap <= tolerance
    weights_error: float | None = None  # the worst tensor's relative RMS error, by its tolerance
    weights_tensor: str | None = None  # that tensor (GGUF name) and its type
    weights_type: str | None = None
    weights_tolerance: float | None = None
    weights_by_type: dict[str, float] | None = None  # each GGUF type's worst relative error
    kept_as: str | None = None  # a failed file's new name
    problem: str | None = None  # why the file could not be read into the model

    def to_event(self) -> dict[str, Any]:
        return asdict(self)


def next_token_gaps(reference: list, candidate: list) -> tuple[list[float], int]:
    """(gap per prompt, prompts with the same top token), from each prompt's last position."""
    gaps, same = [], 0
    for ref, got in zip(reference, candidate):
        a, b = ref[0, -1].float(), got[0, -1].float()
        largest = float(a.abs().max())
        gaps.append(float((a - b).abs().max()) / largest if largest > 0 else float((a - b).abs().max()))
        same += int(int(a.argmax()) == int(b.argmax()))
    return gaps, same


@dataclass(frozen=True)
class WeightError:
    """The tensor read back furthest from the merged weight it replaced, for its type."""

    tensor: str
    ggml_type: str
    error: float  # ||read - merged|| / ||merged||
    tolerance: float

    @property
    def passed(self) -> bool:
        return self.error <= self.tolerance


def load_into(
    path: Path, model, progress: Callable[[int, int], None] = lambda done, total: None
) -> tuple[int, WeightError | None, dict[str, float]]:
    """The GGUF's weights dequantized into `model`'s parameters, in place: the tensors read, the one
    furthest (by its type's tolerance) from the weight it replaced, and each type's worst relative
    error. Every parameter of the model must come from the file (tied ones once)."""
    import numpy as np
    import torch
    from gguf import GGUFReader
    from gguf.quants import dequantize
    from transformers.modeling_gguf_pytorch_utils import TENSOR_PROCESSORS, TensorProcessor

    from cockpit.results.merge_check import weight_tolerance

    reader = GGUFReader(str(path))
    arch = str(reader.fields["general.architecture"].contents())
    heads = {
        "num_attention_heads": reader.fields[f"{arch}.attention.head_count"].contents(),
        "num_key_value_heads": reader.fields[f"{arch}.attention.head_count_kv"].contents(),
    }
    processor = TENSOR_PROCESSORS.get(arch, TensorProcessor)(config=heads)
    to_hf = gguf_to_hf_names(model, arch)
    params = dict(model.named_parameters())  # a tied weight once
    unread = set(params)
    tensors = list(reader.tensors)
    worst: WeightError | None = None
    by_type: dict[str, float] = {}
    for done, tensor in enumerate(tensors, start=1):
        processed = processor.process(
            weights=dequantize(tensor.data, tensor.tensor_type),
            name=tensor.name,
            tensor_key_mapping=to_hf,
            parsed_parameters={},
        )
        hf_name = to_hf.get(processed.name)
        if hf_name is None:
            if tensor.name == "rope_freqs.weight":  # llama 3's rotary factors: no parameter
                continue
            raise ReadBackError(f"{path.name}: tensor {tensor.name!r} maps to no parameter of the model")
        param = params.get(hf_name)
        if param is None:  # e.g. output.weight where this model ties it to the embeddings
            raise ReadBackError(f"{path.name}: tensor {tensor.name!r} ({hf_name}) is not a parameter here")
        weights = np.ascontiguousarray(processed.weights)
        if not weights.flags.writeable:  # an f32 tensor is a view of the read-only file
            weights = weights.copy()
        if tuple(weights.shape) != tuple(param.shape):
            shapes = f"{tuple(weights.shape)}, {hf_name} {tuple(param.shape)}"
            raise ReadBackError(f"{path.name}: tensor {tensor.name!r} has shape {shapes}")
        with torch.no_grad():
            read = torch.from_numpy(weights).to(param.device, torch.float32)
            merged = param.detach().float()
            scale = float(merged.norm())
            error = float((read - merged).norm()) / scale if scale > 0 else float(read.norm())
            del merged
            param.copy_(read)
            del read
        found = WeightError(
            tensor.name, tensor.tensor_type.name, error, weight_tolerance(tensor.tensor_type.name)
        )
        by_type[found.ggml_type] = max(by_type.get(found.ggml_type, 0.0), round(error, 6))
        if worst is None or found.error / found.tolerance > worst.error / worst.tolerance:
            worst = found
        unread.discard(hf_name)
        progress(done, len(tensors))
    if unread:
        missing = ", ".join(sorted(unread)[:4]) + (" ..." if len(unread) > 4 else "")
        raise ReadBackError(f"{path.name}: no tensor for {len(unread)} parameter(s) of the model: {missing}")
    return len(tensors), worst, by_type


def gguf_to_hf_names(model, arch: str) -> dict[str, str]:
    """GGUF tensor name -> the model's parameter name, by the gguf package's own name map (as
    transformers' get_gguf_hf_weights_map does, without its map built again for every submodule)."""
    from gguf import MODEL_ARCH_NAMES, get_tensor_name_map

    arch_key = next(key for key, name in MODEL_ARCH_NAMES.items() if name == arch)
    name_map = get_tensor_name_map(arch_key, model.config.num_hidden_layers)
    out = {}
    for hf_name in model.state_dict():
        base, _, suffix = hf_name.rpartition(".")
        gguf_name = name_map.get_name(base)
        if gguf_name is not None:
            out[f"{gguf_name}.{suffix}"] = hf_name
    return out


def read_back(
    path: Path,
    file_type: str,
    model,
    logits: Callable[[Any], list],
    reference: list,
    tolerance: float,
    progress: Callable[[int, int], None] = lambda done, total: None,
) -> ReadBack:
    """`path` read into `model` (whose weights it replaces): each tensor against the weight it replaces,
    then the next-token logits on the prompts against `reference` (the merged model's, from
    `logits(model)` before). A file that cannot be read, or whose weights are not what its types round
    them to, fails and is renamed to NAME.failed-check.gguf, so that nothing takes it for a checked
    model; logits over `tolerance` with the weights within it are said (`logits_passed`)."""
    started = time.time()
    problem, gap, gaps, same, count, worst, by_type = None, None, [], 0, 0, None, None
    try:
        count, worst, by_type = load_into(path, model, progress)
    except ReadBackError as exc:
        problem = str(exc)
    else:
        gaps, same = next_token_gaps(reference, logits(model))
        gap = max(gaps)
    logits_passed = gap is not None and gap <= tolerance
    passed = problem is None and (worst is None or worst.passed)
    kept_as = None
    if not passed:
        failed = path.with_name(path.name.removesuffix(".gguf") + FAILED_SUFFIX)
        path.rename(failed)
        kept_as = failed.name
    return ReadBack(
        file=path.name,
        file_type=file_type,
        tensors=count,
        inputs=len(gaps),
        gaps=[round(g, 6) for g in gaps],
        gap=None if gap is None else round(gap, 6),
        tolerance=tolerance,
        top1_same=same,
        elapsed_s=round(time.time() - started, 2),
        passed=passed,
        logits_passed=logits_passed,
        weights_error=None if worst is None else round(worst.error, 6),
        weights_tensor=None if worst is None else worst.tensor,
        weights_type=None if worst is None else worst.ggml_type,
        weights_tolerance=None if worst is None else worst.tolerance,
        weights_by_type=by_type,
        kept_as=kept_as,
        problem=problem,
    )


def corrupt(path: Path, tensor_name: str) -> None:
    """Zero one tensor's bytes in the file (the test aid `corrupt_gguf_tensor`): a damaged file."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path), "r+")
    found = [t for t in reader.tensors if t.name == tensor_name]
    if not found:
        names = ", ".join(t.name for t in reader.tensors[:6])
        raise ReadBackError(f"corrupt_gguf_tensor: no tensor {tensor_name!r} in {path.name} ({names}, ...)")
    found[0].data[...] = 0
    reader.data.flush()
