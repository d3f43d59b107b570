"""Will the export fit? RAM and disk it needs, from the base's parameter count, against what is free.

RAM: the base in the export dtype (merged in place) plus the largest tensor in fp32 while it is
converted to GGUF. Disk: the merged safetensors, plus the GGUF (2 bytes per parameter in f16,
34 bytes per 32 in q8_0), or the adapter's own size when nothing is merged.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import psutil

from cockpit import fmt
from cockpit.paths import cockpit_command

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
# a block of 32 values: q8_0 32 bytes + a f16 scale; q5_1 16 + 4 (high bits) + scale and min; q5_0
# 16 + 4 + scale; q4_0 16 + scale. The q8_0 embeddings and output layer of the smaller ones are not
# counted: the estimate is the file of a model whose other weights dominate (a 7B's are ~97%)
GGUF_BYTES_PER_PARAM = {"f16": 2.0, "q8_0": 34 / 32, "q5_1": 24 / 32, "q5_0": 22 / 32, "q4_0": 18 / 32}
# K-quants: the f16 file llama-quantize reads, and its output at llama.cpp's bits per weight for a
# 7B (its README's table: Q6_K 6.56, Q5_K_M 5.70, Q4_K_M 4.89), both on disk until the f16 goes
K_BITS = {"q6_k": 6.56, "q5_k_m": 5.70, "q4_k_m": 4.89}
GGUF_BYTES_PER_PARAM.update({kind: 2.0 + bits / 8 for kind, bits in K_BITS.items()})
OVERHEAD_BYTES = 512 * 2**20  # tokenizer, config, the Python process itself


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
) -> Needs:
    weights = params * DTYPE_BYTES[dtype]
    if merge or gguf:
        ram = weights + OVERHEAD_BYTES
        ram_parts = f"{fmt.params(params)} params x {DTYPE_BYTES[dtype]} B ({dtype})"
    else:  # the adapter is copied: no model is loaded
        ram = OVERHEAD_BYTES
        ram_parts = "no model is loaded to copy an adapter"
    if gguf:
        ram += largest_tensor * 4
        ram_parts += f" + the largest tensor in fp32 ({fmt.size(largest_tensor * 4)})"
    if merge or gguf:
        disk = weights
        disk_parts = f"merged safetensors {fmt.size(weights)}"
    else:
        disk = adapter_bytes
        disk_parts = f"the adapter {fmt.size(adapter_bytes)}"
    if gguf:
        gguf_bytes = int(params * GGUF_BYTES_PER_PARAM[gguf])
        disk += gguf_bytes
        if gguf in K_BITS:
            k_bytes = int(params * K_BITS[gguf] / 8)
            disk_parts += f" + GGUF f16 {fmt.size(gguf_bytes - k_bytes)} + {gguf} {fmt.size(k_bytes)}"
        else:
            disk_parts += f" + GGUF {gguf} {fmt.size(gguf_bytes)}"
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
    )
