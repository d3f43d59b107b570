"""Several GPUs of one card: tokens/s of a data-parallel job, from the one-GPU speed model and the
communication each optimizer step needs that compute does not hide.

Pure Python, no torch. Every GPU runs its own micro-batches at the one-GPU rate
(`cockpit.speed.model.estimate_speed`); on top of that, per GPU (docs/estimator.md, "Several GPUs",
derives the byte counts):

- DDP all-reduces the trainable gradients once per optimizer step (HF Trainer skips the gradient
  sync on the accumulation micro-batches): a ring moves 2(N-1)/N x gradient bytes per GPU. DDP
  starts each bucket's all-reduce while the backward goes on; only what does not fit behind the
  last micro-batch's backward, and at least the last bucket, is exposed;
- FSDP (full shard) all-gathers every unit's weights in the forward and again in the backward of
  each micro-batch, (N-1)/N x the unit's bytes each, and reduce-scatters the gradients once per
  optimizer step, (N-1)/N x gradient bytes. The next unit's all-gather is prefetched while the
  current one computes, so only the first unit of each pass is exposed, unless the gathers take
  longer than the compute; each GPU steps the optimizer for its 1/N of the trainable weights.

The link is the catalog's interconnect figure (`Card.nvlink`, as the shipped data states it), else
PCIe by the card's generation, at LINK_EFFICIENCY of its one-way rate. This is a model with stated
inputs, NOT calibrated on a measured multi-GPU run: its figures are marked so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from cockpit.models.memory import Workload, estimate_memory
from cockpit.speed.model import (
    OPTIMIZER_BYTES,
    CardSpeed,
    SpeedEstimate,
    estimate_speed,
    optimizer_step_s,
    trainable_tensors,
)
from cockpit.speed.model import trainable_params as count_trainable

if TYPE_CHECKING:
    from cockpit.gpus.card import Card

# share of a link's one-way rate that NCCL's collectives reach (an assumption: nccl-tests' bus
# bandwidth is typically 75-85% of the link); not measured here
LINK_EFFICIENCY = 0.8
# PCIe x16, one direction, GB/s: 4.0 (Ampere, Ada) 16 GT/s x 16 lanes; 5.0 (Hopper, Blackwell) 32 GT/s
PCIE_X16_ONE_WAY_GBS = {4: 31.5, 5: 63.0}
# DDP's default bucket (bucket_cap_mb=25): the last one's all-reduce starts after the backward ends
DDP_BUCKET_BYTES = 25 * 2**20
# share of a micro-batch's time that is backward (about twice the forward's work): the window in
# which DDP's bucketed all-reduce and FSDP's reduce-scatter overlap compute
BACKWARD_SHARE = 2 / 3
# an AMD Infinity Fabric figure is the sum over the 7 links of a fully connected 8-GPU mesh;
# N GPUs of it talk over N-1 of them
MESH_LINKS = 7
CALIBRATION = "not calibrated: a model with stated inputs (no measured multi-GPU run to fit it on)"


@dataclass(frozen=True)
class Interconnect:
    kind: str  # nvlink | bridge | mesh | pcie
    one_way_gbs: float  # the link's one-way rate this model uses, before LINK_EFFICIENCY
    label: str  # where the figure comes from, for people

    @property
    def effective_bytes_per_s(self) -> float:
        return self.one_way_gbs * 1e9 * LINK_EFFICIENCY


@dataclass(frozen=True)
class Communication:
    """One GPU's traffic in one optimizer step and the part of it compute does not hide."""

    sharding: str  # ddp | fsdp
    gpus: int
    link: Interconnect
    gather_bytes: int  # FSDP: all-gathered per micro-batch (forward + backward); DDP: 0
    gradient_bytes: int  # sent per optimizer step: DDP's all-reduce or FSDP's reduce-scatter
    gather_s: float  # per micro-batch
    gradient_s: float  # per optimizer step
    exposed_s: float  # per optimizer step, added to the one-GPU step time

    def to_dict(self) -> dict[str, Any]:
        return {
            "sharding": self.sharding,
            "gpus": self.gpus,
            "link": {
                "kind": self.link.kind,
                "one_way_gbs": self.link.one_way_gbs,
                "label": self.link.label,
                "efficiency": LINK_EFFICIENCY,
            },
            "gather_bytes_per_micro_batch": self.gather_bytes,
            "gradient_bytes_per_step": self.gradient_bytes,
            "gather_s_per_micro_batch": round(self.gather_s, 5),
            "gradient_s_per_step": round(self.gradient_s, 5),
            "exposed_s_per_step": round(self.exposed_s, 5),
        }


@dataclass(frozen=True)
class MultiSpeed:
    speed: SpeedEstimate  # the whole job: tokens/s of all GPUs together
    one_gpu: SpeedEstimate  # one GPU running the same micro-batches alone
    comm: Communication

    @property
    def scaling(self) -> float:
        """tokens/s over N x the one-GPU tokens/s (1.0: no loss to communication)."""
        return self.speed.tokens_per_s / (self.comm.gpus * self.one_gpu.tokens_per_s)


def interconnect(card: CardSpeed | Card, gpus: int) -> Interconnect:
    """The link N GPUs of `card` talk over: its stated NVLink / Infinity Fabric figure (both
    directions summed, as datasheets give it), else PCIe by generation."""
    stated = (getattr(card, "nvlink", None) or "").strip()
    figure = re.search(r"([0-9]+(?:\.[0-9]+)?)\s*GB/s", stated)
    if figure and "infinity" in stated.lower():
        links = min(gpus - 1, MESH_LINKS)
        one_way = float(figure.group(1)) / 2 * links / MESH_LINKS
        return Interconnect("mesh", one_way, f"Infinity Fabric {stated}: {links} of {MESH_LINKS} links")
    if figure and not stated.lower().startswith("bridge"):
        one_way = float(figure.group(1)) / 2
        return Interconnect("nvlink", one_way, f"NVLink {figure.group(0)} ({one_way:g} GB/s one way)")
    if figure and gpus == 2:  # a bridge joins two cards
        one_way = float(figure.group(1)) / 2
        return Interconnect("bridge", one_way, f"NVLink {stated} ({one_way:g} GB/s one way)")
    generation = pcie_generation(card)
    why = "" if not stated else f"; {stated} NVLink joins pairs only" if figure else f"; {stated}: no figure"
    one_way = PCIE_X16_ONE_WAY_GBS[generation]
    return Interconnect("pcie", one_way, f"PCIe {generation}.0 x16 ({one_way:g} GB/s one way{why})")


def pcie_generation(card: CardSpeed | Card) -> int:
    """5 from compute capability 9.0 (Hopper, Blackwell), else 4 (also when unknown: the slower)."""
    capability = str(getattr(card, "compute_capability", None) or "")
    match = re.match(r"([0-9]+)\.", capability)
    return 5 if match and int(match.group(1)) >= 9 else 4


def gathered_bytes(w: Workload) -> int:
    """Bytes of one whole copy of the weights FSDP gathers: the 16-bit compute copies (4-bit
    QLoRA linears packed as stored), with the adapters."""
    s = w.shape
    dtype = 4 if w.precision == "fp32" else 2  # accelerate's mixed precision: param_dtype
    if w.method == "full":
        return s.params * dtype
    adapters = s.lora_params(w.lora_r, w.lora_targets) * dtype
    if w.method == "qlora":
        linear = s.num_layers * s.layer_linear_params
        per_weight = 0.5 if w.quant_bits == 4 else 1.0
        return int(linear * per_weight) + (s.params - linear) * dtype + adapters
    return s.params * dtype + adapters


def gradient_bytes(w: Workload) -> int:
    """Bytes of the gradients reduced once per optimizer step: DDP's buckets (the memory model's
    `ddp_buckets` part, the gradients' own dtype); FSDP reduces in the 16-bit reduce_dtype."""
    if w.sharding == "ddp":
        buckets = estimate_memory(w).part("ddp_buckets")
        assert buckets is not None, "every estimate of DDP on more than one GPU has its buckets"
        return buckets.bytes
    return count_trainable(w) * (4 if w.precision == "fp32" else 2)


def communication(w: Workload, card: CardSpeed | Card, one_gpu: SpeedEstimate) -> Communication:
    """Traffic and exposed time per optimizer step of `w` (gpus > 1) on `card`."""
    n = w.gpus
    link = interconnect(card, n)
    rate = link.effective_bytes_per_s
    share = (n - 1) / n
    grads = gradient_bytes(w)
    backward_s = BACKWARD_SHARE * one_gpu.micro_batch_s  # the last micro-batch's backward
    if w.sharding == "ddp":
        gradient_s = 2 * share * grads / rate  # ring all-reduce
        last_bucket_s = 2 * share * min(grads, DDP_BUCKET_BYTES) / rate
        exposed = max(gradient_s - backward_s, last_bucket_s)
        return Communication("ddp", n, link, 0, grads, 0.0, gradient_s, exposed)
    units = w.shape.num_layers + 1  # one per decoder layer, and the root (embeddings, lm_head)
    gather = 2 * share * gathered_bytes(w)  # forward and backward
    gather_s = gather / rate
    gradient_s = share * grads / rate  # reduce-scatter
    exposed_gather = max(one_gpu.micro_batch_s, gather_s) - one_gpu.micro_batch_s + gather_s / units
    exposed_grad = max(gradient_s - backward_s, gradient_s / units)
    exposed = w.grad_accum * exposed_gather + exposed_grad
    return Communication("fsdp", n, link, int(gather), grads, gather_s, gradient_s, exposed)


def estimate_multi_speed(w: Workload, card: CardSpeed | Card) -> MultiSpeed:
    """Training throughput of `w` on `w.gpus` GPUs of `card` (sharding `w.sharding`), all GPUs
    together, in tokens processed per second."""
    if w.gpus < 2:
        raise ValueError(f"{w.gpus} GPU: use cockpit.speed.model.estimate_speed for one GPU")
    one = estimate_speed(replace(w, gpus=1, sharding="ddp"), card)
    comm = communication(w, card, one)
    optimizer_s = one.optimizer_step_s
    if w.sharding == "fsdp":  # each GPU steps its own shard
        shard_bytes = count_trainable(w) * OPTIMIZER_BYTES[w.optimizer] / w.gpus
        optimizer_s = optimizer_step_s(  # one shard of each tensor
            shard_bytes,
            card.bandwidth_gbs * 1e9,
            trainable_tensors(w),
            getattr(card, "host_scale", 1.0),
            w.optimizer,
        )
    step_s = one.micro_batch_s * w.grad_accum + optimizer_s + comm.exposed_s
    exposed_per_micro = comm.exposed_s / w.grad_accum
    # communication sets the pace when FSDP's gathers outlast a micro-batch's compute, or what is
    # exposed outweighs the rest of the step
    paced = comm.gather_s > one.micro_batch_s or comm.exposed_s > step_s - comm.exposed_s
    bound = "communication" if paced else one.bound
    speed = SpeedEstimate(
        tokens_per_s=w.gpus * w.forward_tokens_per_micro_batch * w.grad_accum / step_s,
        micro_batch_s=one.micro_batch_s + exposed_per_micro,
        optimizer_step_s=optimizer_s,
        parts_s={**one.parts_s, "communication": exposed_per_micro},
        step_s=step_s,
        bound=bound,
        card=card.name,
    )
    return MultiSpeed(speed, one, comm)


def multi_speed_inputs(multi: MultiSpeed) -> dict[str, Any]:
    """The stated inputs of a multi-GPU speed figure, for --json and the screens."""
    return {
        **multi.comm.to_dict(),
        "one_gpu_tokens_per_s": round(multi.one_gpu.tokens_per_s, 1),
        "scaling": round(multi.scaling, 3),
        "assumes": {
            "link_efficiency": LINK_EFFICIENCY,
            "backward_share": round(BACKWARD_SHARE, 3),
            "ddp_bucket_bytes": DDP_BUCKET_BYTES,
            "pcie_x16_one_way_gbs": PCIE_X16_ONE_WAY_GBS,
        },
        "extrapolated": True,
        "calibrated": False,
        "calibration": CALIBRATION,
    }
