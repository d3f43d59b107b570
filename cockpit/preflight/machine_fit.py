"""Can this config start on this machine? Checked before a run directory is made, no torch.

What NVML says (GPUs visible, their compute capability, what CUDA_VISIBLE_DEVICES leaves to the
trainer) against what the config needs: QLoRA and the bitsandbytes optimizers need a CUDA GPU, bf16
needs compute capability 8.0 or newer (older cards only emulate it), fp16 needs a GPU, and `gpus: N`
needs N visible GPUs. Every problem is reported at once, each with its fix. A machine NVML cannot
see into (no driver) counts as no GPU: the trainer would find none either.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cockpit.config.schema import TrainConfig
from cockpit.gpus.catalog import find_card
from cockpit.models.memory import bitsandbytes_optimizer
from cockpit.telemetry import nvml_state
from cockpit.telemetry.nvml import NvmlSource

NVML_WAIT_S = 0.8
REAL_BF16_CAPABILITY = (8, 0)


@dataclass(frozen=True)
class Machine:
    """What the trainer would see: its GPUs (name, compute capability when known)."""

    gpus: tuple[tuple[str, tuple[int, int] | None], ...]
    why_none: str = ""  # when there is no GPU: NVML's error, or CUDA_VISIBLE_DEVICES

    def describe(self) -> str:
        if not self.gpus:
            return f"no CUDA GPU ({self.why_none})" if self.why_none else "no CUDA GPU"
        names = sorted({name for name, _ in self.gpus})
        return f"{len(self.gpus)} GPU{'s' if len(self.gpus) > 1 else ''} ({', '.join(names)})"


@dataclass(frozen=True)
class Problem:
    key: str  # the config key to change
    message: str  # what is wrong, and what to do

    def line(self) -> str:
        return f"{self.key}: {self.message}"


def _capability(gpu: dict[str, Any]) -> tuple[int, int] | None:
    cap = gpu.get("cuda_capability")
    if isinstance(cap, (tuple, list)) and len(cap) == 2:
        return int(cap[0]), int(cap[1])
    card = find_card(gpu.get("name"))
    if card is not None and card.compute_capability:
        major, _, minor = str(card.compute_capability).partition(".")
        return int(major), int(minor or 0)
    return None


def _visible_indices(count: int, env_value: str | None) -> tuple[list[int], str]:
    """The NVML indices CUDA_VISIBLE_DEVICES leaves to the trainer (UUIDs count as one each)."""
    if env_value is None:
        return list(range(count)), ""
    items = [s.strip() for s in env_value.split(",") if s.strip()]
    kept: list[int] = []
    for item in items:
        if item.lstrip("-").isdigit():
            index = int(item)
            if index < 0 or index >= count:
                break  # CUDA stops at the first invalid entry
            kept.append(index)
        else:
            kept.append(len(kept))  # a UUID or MIG name: one device, which one we cannot tell
    return kept[:count], "" if kept else f"CUDA_VISIBLE_DEVICES={env_value!r} hides every GPU"


def machine_from_nvml(state: nvml_state.NvmlState, cuda_visible: str | None = None) -> Machine:
    if state.error:
        return Machine((), state.error)
    indices, why = _visible_indices(len(state.gpus), cuda_visible)
    gpus = tuple(
        (str(state.gpus[i].get("name") or "GPU"), _capability(state.gpus[i]))
        for i in indices
        if i < len(state.gpus)
    )
    return Machine(gpus, why if not gpus else "")


def read_machine(nvml_source: Callable[[], NvmlSource], wait_s: float = NVML_WAIT_S) -> Machine:
    """NVML's answer within `wait_s`; a driver that hangs counts as no answer (the run is not held up)."""
    box: dict[str, Any] = {}

    def read() -> None:
        try:
            box["state"] = nvml_state.read_nvml(nvml_source(), extras=None)
        except Exception as exc:  # a source that cannot even be built
            box["state"] = nvml_state.NvmlState(error=f"NVML did not start: {exc}")

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(wait_s)
    state = box.get("state")
    if state is None:
        return Machine((), f"NVML did not answer within {wait_s:g} s; not checked against the GPUs")
    machine = machine_from_nvml(state, os.environ.get("CUDA_VISIBLE_DEVICES"))
    if not machine.gpus and state.error is None and not state.gpus:
        return Machine((), "NVML lists no GPU")
    return machine


def unanswered(machine: Machine) -> bool:
    """NVML did not answer in time: nothing is known, so nothing is refused."""
    return "did not answer within" in machine.why_none


def problems(cfg: TrainConfig, machine: Machine) -> list[Problem]:
    """Every reason this config cannot start on `machine`, each with what to do."""
    if unanswered(machine):
        return []
    out: list[Problem] = []
    t = cfg.training
    where = machine.describe()
    if not machine.gpus:
        if cfg.method == "qlora":
            out.append(
                Problem(
                    "method",
                    "qlora needs a CUDA GPU (bitsandbytes' 4/8-bit kernels) and none is visible here. "
                    "On the CPU use method: lora or full, or run on a GPU machine.",
                )
            )
        if bitsandbytes_optimizer(t.optimizer):
            out.append(
                Problem(
                    "training.optimizer",
                    f"{t.optimizer} is a bitsandbytes GPU optimizer and no GPU is visible here. "
                    "On the CPU use adamw_torch.",
                )
            )
        if t.precision == "fp16":
            out.append(
                Problem(
                    "training.precision", "fp16 needs a CUDA GPU and none is visible here. Use fp32 or auto."
                )
            )
    else:
        if t.precision == "bf16":
            old = [(n, c) for n, c in machine.gpus if c is not None and c < REAL_BF16_CAPABILITY]
            if old:
                name, cap = old[0]
                out.append(
                    Problem(
                        "training.precision",
                        f"bf16 asked for, but {name} (compute capability {cap[0]}.{cap[1]}) only emulates "
                        "bf16 (real bf16 needs 8.0 or newer). Use precision: fp16 or auto.",
                    )
                )
        if cfg.gpus > len(machine.gpus):
            out.append(
                Problem(
                    "gpus",
                    f"{cfg.gpus} GPUs asked for, but this machine shows the trainer {where}. "
                    f"Set gpus: {len(machine.gpus)} (or CUDA_VISIBLE_DEVICES to show more).",
                )
            )
        out += _bitsandbytes_problems(cfg)
    return out


def bitsandbytes_installed() -> bool:
    """Whether bitsandbytes can be imported here (looked up, not imported: the UI never loads it)."""
    import importlib.util

    return importlib.util.find_spec("bitsandbytes") is not None


def _bitsandbytes_problems(cfg: TrainConfig) -> list[Problem]:
    """QLoRA and the paged and 8-bit optimizers need bitsandbytes, which is the `gpu` extra
    (./install.sh puts it in where an NVIDIA GPU is): said before the start, not as an import error
    after the model loads."""
    if bitsandbytes_installed():
        return []
    fix = "install it: .venv/bin/pip install 'bitsandbytes>=0.45' (./install.sh does on a GPU machine)"
    out = []
    if cfg.method == "qlora":
        out.append(
            Problem("method", f"qlora needs bitsandbytes (its 4-bit layers), not installed here; {fix}")
        )
    optimizer = cfg.training.optimizer
    if bitsandbytes_optimizer(optimizer):
        out.append(
            Problem(
                "training.optimizer",
                f"{optimizer} comes from bitsandbytes, not installed here; {fix}, or use adamw_torch",
            )
        )
    return out
