"""speed: auto's exact count of checkpointed layers (train_backend/speed/layer_mask.py): transformers'
every_n_layers gives 32, 16, 11, ... of 32 layers; the trainer checkpoints every layer and turns all
but k off again at the start of training, spread over the depth. The gradients do not change, and
the plan's layers come back after TRL's reference forward turned every layer on again."""

from __future__ import annotations

import pytest

from train_backend.speed import layer_mask


@pytest.mark.parametrize(
    ("k", "layers", "want"), [(0, 8, []), (8, 8, list(range(8))), (3, 8, [0, 2, 5]), (5, 6, [0, 1, 2, 3, 4])]
)
def test_the_kept_layers_are_spread_over_the_depth(k, layers, want):
    got = layer_mask.spread(k, layers)
    assert got == want and len(got) == k


def _model(layers: int):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def _grads(model) -> list:
    import torch

    model.zero_grad()
    ids = torch.arange(24).reshape(2, 12) % 64
    model(input_ids=ids, labels=ids).loss.backward()
    return [p.grad.clone() for p in model.parameters()]


class _Emitter:
    def __init__(self) -> None:
        self.events: list = []

    def emit(self, kind, **fields) -> None:
        self.events.append((kind, fields))


def test_the_callback_leaves_exactly_k_layers_checkpointed_and_the_gradients_unchanged():
    import torch

    model = _model(6).train()
    plain = _grads(model)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    assert len(layer_mask.checkpointed_layers(model)) == 6
    emitter = _Emitter()
    layer_mask.PlannedLayers(4, emitter).on_train_begin(None, None, None, model=model)
    layers = model.model.layers
    assert [i for i, layer in enumerate(layers) if layer.gradient_checkpointing] == [0, 1, 3, 4]
    assert emitter.events == []
    for a, b in zip(plain, _grads(model), strict=True):
        torch.testing.assert_close(a, b)


def test_a_plan_counting_more_layers_than_the_model_checkpoints_is_said():
    model = _model(2).train()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    emitter = _Emitter()
    layer_mask.PlannedLayers(3, emitter).on_train_begin(None, None, None, model=model)
    assert len(layer_mask.checkpointed_layers(model)) == 2
    ((kind, fields),) = emitter.events
    assert kind == "warning" and "planned 3 checkpointed layers; the model has 2" in fields["message"]


@pytest.mark.parametrize("every", [1, 2])
def test_the_plans_layers_come_back_after_trls_reference_forward(every):
    """DPO and KTO run the reference inside trl's disable_gradient_checkpointing, which enables it again
    on every layer (every_n_layers in its arguments goes to torch's checkpoint): before the next
    micro-batch the callback puts the plan's layers back, whether every_n_layers or the mask set them."""
    from trl.models.utils import disable_gradient_checkpointing

    model = _model(4).train()
    kwargs = {"use_reentrant": False} | ({"every_n_layers": every} if every > 1 else {})
    model.gradient_checkpointing_enable(
        gradient_checkpointing_kwargs={"use_reentrant": False}, every_n_layers=every
    )
    callback = layer_mask.PlannedLayers(2, _Emitter(), exact=every == 1)
    callback.on_train_begin(None, None, None, model=model)
    planned = [layer.gradient_checkpointing for layer in model.model.layers]
    assert planned == [True, False, True, False]
    with disable_gradient_checkpointing(model, kwargs):
        assert not any(layer.gradient_checkpointing for layer in model.model.layers)
    assert all(layer.gradient_checkpointing for layer in model.model.layers)  # trl's re-enable: all
    callback.on_substep_end(None, None, None)
    assert [layer.gradient_checkpointing for layer in model.model.layers] == planned
    with disable_gradient_checkpointing(model, kwargs):
        pass
    callback.on_step_begin(None, None, None)  # before the next step's first micro-batch too
    assert [layer.gradient_checkpointing for layer in model.model.layers] == planned
