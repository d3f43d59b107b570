"""What an OOM remedy is judged against: what the failure itself says (`Observation`, read from the
run's `error` event by `observe`) and the card the run must fit (`Target`), with a predicted peak's
verdict on that card. Pure Python; `cockpit.oom.remedies` predicts and ranks the remedies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cockpit.fmt import GIB
from cockpit.gpus.card import Card
from cockpit.gpus.catalog import Catalog
from cockpit.models.memory import CUDA_CONTEXT_BYTES, SAFETY_MARGIN

if TYPE_CHECKING:
    from cockpit.config.schema import TrainConfig


@dataclass(frozen=True)
class Target:
    """The card the run must fit, and where its size comes from."""

    bytes: int | None
    source: str
    emulated: bool = False

    @property
    def usable_bytes(self) -> int | None:
        return None if self.bytes is None else int(self.bytes * (1 - SAFETY_MARGIN))


@dataclass(frozen=True)
class Observation:
    """What the failure itself says, in bytes (None where the message carries no figure)."""

    kind: str  # allocator | cublas_alloc | accelerator | bitsandbytes | host
    phase: str | None
    step: int | None
    seq_len: int | None
    batch_rows: int | None
    requested_bytes: int | None
    in_use_bytes: int | None  # the process, CUDA context included
    allocated_bytes: int | None
    reserved_unallocated_bytes: int | None
    non_pytorch_bytes: int | None  # in use outside the allocator: CUDA context, libraries
    free_bytes: int | None
    demand_bytes: int | None  # at least this was needed: what it held plus what it asked for
    demand_basis: str
    injected: bool = False
    host: bool = False
    details: dict[str, Any] = field(default_factory=dict)  # the event's `oom` as written


def observe(error: dict[str, Any]) -> Observation:
    oom = error.get("oom") or {}
    memory = oom.get("memory") or {}
    in_use = oom.get("process_bytes")
    reserved = oom.get("reserved_bytes")
    requested = oom.get("requested_bytes")
    non_pytorch = in_use - reserved if in_use is not None and reserved is not None else None
    demand = None
    basis = "no allocator figures in this kind of OOM: the predictions are the memory model's alone"
    if in_use is not None and requested is not None:
        demand = in_use + requested
        basis = "in use by the process + the allocation that failed"
    elif reserved is not None and requested is not None:
        demand = reserved + requested + CUDA_CONTEXT_BYTES
        basis = "reserved by PyTorch + the allocation that failed + a typical CUDA context (estimated)"
    elif memory.get("reserved_bytes") is not None:
        demand = memory["reserved_bytes"] + CUDA_CONTEXT_BYTES
        basis = "reserved by PyTorch at the failure + a typical CUDA context (estimated)"
    return Observation(
        kind=str(oom.get("kind") or "allocator"),
        phase=oom.get("phase") or error.get("phase"),
        step=oom.get("step") or error.get("step"),
        seq_len=oom.get("seq_len"),
        batch_rows=oom.get("batch_rows"),
        requested_bytes=requested,
        in_use_bytes=in_use,
        allocated_bytes=oom.get("allocated_bytes"),
        reserved_unallocated_bytes=oom.get("reserved_unallocated_bytes"),
        non_pytorch_bytes=non_pytorch,
        free_bytes=oom.get("free_bytes"),
        demand_bytes=demand,
        demand_basis=basis,
        injected=bool(oom.get("injected")),
        host=bool(oom.get("host")) or oom.get("kind") == "host",
        details=dict(oom),
    )


def device_card(device: dict[str, Any], catalog: Catalog | None) -> Card | None:
    """The catalog's card for a device name like "NVIDIA H200" (closest memory when several match)."""
    name = str(device.get("name") or "").replace("NVIDIA", "").strip()
    if not name or catalog is None:
        return None
    found = catalog.find(name)
    total = device.get("total_bytes")
    if len(found) > 1 and total:
        found.sort(key=lambda c: abs(c.vram_gib * GIB - total))
    return found[0] if found else None


def target_card(
    cfg: TrainConfig, oom: dict[str, Any], device: dict[str, Any], catalog: Catalog | None
) -> Target:
    """Emulated size first (the run was told to behave so), then the OOM message, the device, the catalog."""
    if cfg.emulate_vram_gib is not None:
        return Target(int(cfg.emulate_vram_gib * GIB), f"emulated {cfg.emulate_vram_gib:g} GiB card", True)
    if oom.get("total_bytes"):
        return Target(int(oom["total_bytes"]), f"GPU {oom.get('gpu') or 0} in the OOM message")
    if device.get("total_bytes"):
        return Target(int(device["total_bytes"]), f"{device.get('name')} (the trainer's report)")
    card = device_card(device, catalog)
    if card is not None:
        return Target(int(card.vram_gib * GIB), f"{card.name} (catalog)")
    return Target(None, "unknown card")


def verdict_of(peak: int | None, target: Target) -> tuple[str, int | None]:
    if peak is None or target.bytes is None:
        return "unknown", None
    if peak > target.bytes:
        return "no", target.bytes - peak
    usable = target.usable_bytes
    assert usable is not None  # the card's size is known
    return ("fits" if peak <= usable else "tight"), target.bytes - peak
