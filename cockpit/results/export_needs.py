"""Will the export fit? RAM and disk it needs, from the base's parameter count, against what is free.

RAM: the base in the export dtype (merged in place) plus the largest tensor in fp32, twice: while
it is converted to GGUF, and while the GGUF is read back into the model, dequantized and reordered
(train_backend/export/readback.py replaces the merged weights in place: no second model). Disk: each
file predicted before the export starts (`Needs.files`): the merged safetensors (parameters x the
dtype's bytes), the GGUF (parameters x the type's bits a weight, per part of the model when its
shape is known, plus the tokenizer's metadata), or the adapter's own size when nothing is merged.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import psutil

from cockpit import fmt
from cockpit.models.shape import ModelShape
from cockpit.paths import cockpit_command

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
# a block of 32 values: q8_0 32 bytes + a f16 scale; q5_1 16 + 4 (high bits) + scale and min; q5_0
# 16 + 4 + scale; q4_0 16 + scale (gguf_file counts the parts written in other types when the shape
# is known)
GGUF_BYTES_PER_PARAM = {"f16": 2.0, "q8_0": 34 / 32, "q5_1": 24 / 32, "q5_0": 22 / 32, "q4_0": 18 / 32}
# K-quants: the f16 file llama-quantize reads, and its output at llama.cpp's bits per weight for a
# 7B (its README's table: Q6_K 6.56, Q5_K_M 5.70, Q4_K_M 4.89), both on disk until the f16 goes
K_BITS = {"q6_k": 6.56, "q5_k_m": 5.70, "q4_k_m": 4.89}
OVERHEAD_BYTES = 512 * 2**20  # tokenizer, config, the Python process itself
# the types the converter writes below 8 bits keep the embeddings and output layer q8_0; a weight
# whose rows are not whole 32-value blocks stays f16; norms and biases f32 (train_backend/export/to_gguf.py)
SMALL_TYPES = ("q5_1", "q5_0", "q4_0")
BLOCK = 32
# the GGUF's metadata, mostly the tokenizer (tokens with their lengths, types, scores or merges):
# measured 30 B a vocabulary entry on the shipped tiny model (31,168 B for 1,024), ~36 on SmolLM2's 49,152
METADATA_BYTES_PER_TOKEN = 40


@dataclass(frozen=True)
class FilePrediction:
    """One file the export will write: its predicted size and what it is computed from."""

    what: str  # merged safetensors | GGUF q4_0 | ...
    bytes: int
    parts: str

    def line(self) -> str:
        return f"{self.what}: ~{fmt.size(self.bytes)} ({self.parts})"


def gguf_file(gguf: str, params: int, shape: ModelShape | None) -> FilePrediction:
    """The GGUF of one of the converter's own types: from the model's shape when it is known (each
    part at the bits it is written in, and the tokenizer's metadata), else parameters x bits."""
    bits = GGUF_BYTES_PER_PARAM[gguf] * 8
    if shape is None:
        return FilePrediction(
            f"GGUF {gguf}",
            int(params * bits / 8),
            f"{_count(params)} params x {bits:g} bits (shape unknown)",
        )
    outer_bits = GGUF_BYTES_PER_PARAM["q8_0"] * 8 if gguf in SMALL_TYPES else bits
    outer = shape.embedding_params + shape.lm_head_params
    at_type = at_f16 = 0
    for fan_in, fan_out in shape.linear_shapes().values():
        if fan_in % BLOCK == 0:
            at_type += fan_in * fan_out
        else:
            at_f16 += fan_in * fan_out
    at_type, at_f16 = at_type * shape.num_layers, at_f16 * shape.num_layers
    norms = shape.layer_other_params * shape.num_layers + shape.hidden_size
    metadata = shape.vocab_size * METADATA_BYTES_PER_TOKEN
    total = (at_type * bits + outer * outer_bits + at_f16 * 16 + norms * 32) / 8 + metadata
    parts = [f"{_count(at_type)} layer weights x {bits:g} bits"]
    outer_what = "embeddings" if shape.tie_embeddings else "embeddings and output"
    parts.append(f"{_count(outer)} {outer_what} x {outer_bits:g} bits")
    if at_f16:
        parts.append(f"{_count(at_f16)} in rows not of 32-value blocks x 16 bits")
    parts.append(f"{_count(norms)} norms x 32 bits")
    parts.append(f"metadata {shape.vocab_size:,} tokens x {METADATA_BYTES_PER_TOKEN} B")
    return FilePrediction(f"GGUF {gguf}", int(total), " + ".join(parts))


def _count(n: int) -> str:
    return fmt.params(n) if n >= 1e6 else f"{n:,}"


def predicted_files(
    params: int, dtype: str, merge: bool, gguf: str | None, adapter_bytes: int, shape: ModelShape | None
) -> list[FilePrediction]:
    """The files the export writes, each with its predicted size, in the order they are written."""
    if not (merge or gguf):
        return [FilePrediction("the adapter", adapter_bytes, "copied as trained")]
    files = [
        FilePrediction(
            f"merged safetensors ({dtype})",
            params * DTYPE_BYTES[dtype],
            f"{_count(params)} params x {DTYPE_BYTES[dtype]} B",
        )
    ]
    if gguf in K_BITS:
        f16 = gguf_file("f16", params, shape)
        files.append(FilePrediction("GGUF f16 (removed once quantised)", f16.bytes, f16.parts))
        files.append(
            FilePrediction(
                f"GGUF {gguf}",
                int(params * K_BITS[gguf] / 8),
                f"{_count(params)} params x {K_BITS[gguf]} bits",
            )
        )
    elif gguf:
        files.append(gguf_file(gguf, params, shape))
    return files


@dataclass(frozen=True)
class Needs:
    params: int
    ram_bytes: int
    disk_bytes: int
    ram_free: int
    disk_free: int
    disk_where: str
    ram_parts: str
    disk_parts: str
    files: tuple[FilePrediction, ...] = ()

    @property
    def problems(self) -> list[str]:
        out = []
        if self.ram_bytes > self.ram_free:
            out.append(
                f"not enough RAM: the export needs ~{fmt.size(self.ram_bytes)} ({self.ram_parts}), "
                f"{fmt.size(self.ram_free)} is available. Close what holds memory, or export on a machine "
                "with more RAM."
            )
        if self.disk_bytes > self.disk_free:
            out.append(
                f"not enough disk at {self.disk_where}: the export needs ~{fmt.size(self.disk_bytes)} "
                f"({self.disk_parts}), {fmt.size(self.disk_free)} is free. Free space "
                f"({cockpit_command()} runs --prune) or write elsewhere with --to DIR."
            )
        return out

    def line(self) -> str:
        return (
            f"needs ~{fmt.size(self.ram_bytes)} RAM of {fmt.size(self.ram_free)} available, "
            f"~{fmt.size(self.disk_bytes)} disk of {fmt.size(self.disk_free)} free at {self.disk_where}"
        )

    def lines(self) -> list[str]:
        """Before the export starts: the RAM with its parts, then each file's predicted size."""
        return [f"RAM: ~{fmt.size(self.ram_bytes)} ({self.ram_parts})", *(f.line() for f in self.files)]


def free_disk_bytes(path: Path) -> int:
    return shutil.disk_usage(path).free


def available_ram_bytes() -> int:
    return psutil.virtual_memory().available


def existing_parent(path: Path) -> Path:
    path = path.resolve()
    while not path.exists():
        path = path.parent
    return path


def estimate(
    params: int,
    largest_tensor: int,
    dtype: str,
    merge: bool,
    gguf: str | None,
    adapter_bytes: int,
    out_dir: Path,
    shape: ModelShape | None = None,
) -> Needs:
    weights = params * DTYPE_BYTES[dtype]
    if merge or gguf:
        ram = weights + OVERHEAD_BYTES
        ram_parts = f"{_count(params)} params x {DTYPE_BYTES[dtype]} B ({dtype})"
    else:  # the adapter is copied: no model is loaded
        ram = OVERHEAD_BYTES
        ram_parts = "no model is loaded to copy an adapter"
    if gguf:
        ram += 2 * largest_tensor * 4
        ram_parts += f" + the largest tensor in fp32 twice ({fmt.size(2 * largest_tensor * 4)})"
    ram_parts += f" + {fmt.size(OVERHEAD_BYTES)} for the process"
    files = predicted_files(params, dtype, merge, gguf, adapter_bytes, shape)
    disk = sum(f.bytes for f in files)
    disk_parts = " + ".join(f"{f.what} {fmt.size(f.bytes)}" for f in files)
    where = existing_parent(out_dir)
    return Needs(
        params=params,
        ram_bytes=int(ram),
        disk_bytes=int(disk),
        ram_free=available_ram_bytes(),
        disk_free=free_disk_bytes(where),
        disk_where=str(where),
        ram_parts=ram_parts,
        disk_parts=disk_parts,
        files=tuple(files),
    )
