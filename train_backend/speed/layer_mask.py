"""Exactly the plan's decoder layers checkpointed (`speed: auto`'s partial recomputation).

transformers checkpoints every n-th layer (`every_n_layers`), which for 32 layers gives 32, 16, 11,
8, ... and nothing between 16 and 32: a plan that fits with 22 recomputed layers would have to
recompute all 32. For such a count the trainer enables checkpointing on every layer (every_n_layers
1) and, from the callback's on_train_begin (after the trainer has enabled it), `mask` turns it off
again on all but `k` of the layers, spread evenly over the depth. Each decoder layer (transformers'
GradientCheckpointingLayer) reads its own `gradient_checkpointing` flag when it is called.

TRL's DPO and KTO trainers run the reference's forward inside `disable_gradient_checkpointing`,
which enables checkpointing again afterwards on every layer (the every_n_layers of the arguments
goes to torch's checkpoint, which ignores it): the callback puts the plan's layers back before each
micro-batch's forward, or from the first step on every layer would be recomputed, slower than the
plan counted.
"""

from __future__ import annotations

from transformers import TrainerCallback


def spread(k: int, layers: int) -> list[int]:
    """The indices of `k` of `layers` layers, spread evenly (the first one always among them)."""
    k = max(0, min(k, layers))
    return sorted({(i * layers) // k for i in range(k)}) if k else []


def checkpointed_layers(model) -> list:
    """The decoder layers transformers checkpoints now, in the forward's order."""
    return [m for m in decoder_layers(model) if m.gradient_checkpointing]


def mask(model, k: int) -> tuple[int, int]:
    """Leave `k` of the checkpointed layers checkpointed, the others not: (kept, of how many)."""
    flagged = checkpointed_layers(model)
    keep = set(spread(k, len(flagged)))
    for i, layer in enumerate(flagged):
        layer.gradient_checkpointing = i in keep
    return len(keep), len(flagged)


class PlannedLayers(TrainerCallback):
    """The plan's checkpointed layers, set at the start of training (exactly `layers` of them where
    `exact`) and put back before each micro-batch where something turned more on; a `warning` event
    where the model had fewer checkpointed layers than the plan counted on."""

    def __init__(self, layers: int, emitter, exact: bool = True) -> None:
        self.layers, self.emitter, self.exact = layers, emitter, exact
        self.planned: list[tuple] = []  # (layer, checkpointed) for every decoder layer

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if model is None:
            return
        if self.exact:
            kept, flagged = mask(model, self.layers)
            if flagged and kept < self.layers:
                self.emitter.emit(
                    "warning",
                    message=f"speed: auto planned {self.layers} checkpointed layers; the model has {flagged}",
                    hint="",
                )
        self.planned = [(layer, bool(layer.gradient_checkpointing)) for layer in decoder_layers(model)]

    def on_step_begin(self, args, state, control, **kwargs):
        self.restore()

    def on_substep_end(self, args, state, control, **kwargs):
        self.restore()

    def restore(self) -> None:
        for layer, checkpointed in self.planned:
            layer.gradient_checkpointing = checkpointed


def decoder_layers(model) -> list:
    from transformers.modeling_layers import GradientCheckpointingLayer

    return [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
