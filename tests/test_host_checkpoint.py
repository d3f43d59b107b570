"""Checkpointed layers with their inputs in host memory (train_backend/speed/host_checkpoint.py): the same
loss and gradients as transformers' own checkpointing, dropout included; and when the plan picks it."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from train_backend.speed import host_checkpoint  # noqa: E402

TARGETS = ["q_proj", "v_proj", "down_proj"]
FUSED_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _loss_and_grads(
    install: bool,
    dropout: float,
    input_grads: bool = True,
    device: str = "cpu",
    spy=None,
    fused: bool = False,
):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    model = transformers.LlamaForCausalLM(cfg).to(device)
    model = peft.get_peft_model(
        model,
        peft.LoraConfig(r=4, target_modules=FUSED_TARGETS if fused else TARGETS, lora_dropout=dropout),
    )
    if fused:  # speed: auto's fused LoRA layers and MLP block, as the trainer applies them
        from train_backend.speed import fused_lora, fused_mlp

        assert fused_lora.apply(model)["fused"] == 3 * 7
        assert fused_mlp.apply(model)["fused"] == 3
    model.train()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if input_grads:
        model.enable_input_require_grads()
    else:  # transformers marks them when checkpointing is enabled: undone here
        model.disable_input_require_grads()
    swapped = host_checkpoint.install(model) if install else 0
    if spy is not None and install:
        spy(model.base_model.model.model.layers[0]._gradient_checkpointing_func.offloader)
    ids = torch.randint(0, 64, (2, 10)).to(device)
    torch.manual_seed(1)  # the same dropout draws on both paths
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    grads = {n: p.grad.clone().cpu() for n, p in model.named_parameters() if p.requires_grad}
    copied = fallbacks = 0
    if install:
        layer = model.base_model.model.model.layers[0]
        copied = layer._gradient_checkpointing_func.offloader.copied_bytes
        fallbacks = layer._gradient_checkpointing_func.offloader.fallbacks
    # without marked inputs only the first layer falls back: its output needs a gradient (the adapters')
    assert fallbacks == (0 if input_grads else int(install))
    return out.loss.item(), grads, swapped, copied


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_the_same_loss_and_gradients_as_plain_checkpointing(dropout):
    loss, grads, _, _ = _loss_and_grads(False, dropout)
    loss2, grads2, swapped, copied = _loss_and_grads(True, dropout)
    assert swapped == 3  # every decoder layer
    assert copied == 3 * 2 * 10 * 32 * 4  # each layer's input (2 x 10 tokens x hidden 32, fp32) went out
    assert loss2 == loss
    assert grads.keys() == grads2.keys() and len(grads) == 3 * 3 * 2
    for name in grads:
        assert torch.equal(grads[name], grads2[name]), name
    assert any(g.abs().sum() > 0 for g in grads2.values())


def test_the_fused_mlp_block_recomputes_from_host_memory_to_the_same_numbers():
    """speed: auto takes the fused MLP block where it lets a larger micro-batch fit with the layers'
    inputs in host memory: the block's own autograd function recomputed by the host checkpoint gives
    what plain checkpointing of the same block gives."""
    loss, grads, _, _ = _loss_and_grads(False, 0.0, fused=True)
    loss2, grads2, swapped, _ = _loss_and_grads(True, 0.0, fused=True)
    assert swapped == 3 and loss2 == loss
    assert grads.keys() == grads2.keys() and len(grads) == 3 * 7 * 2
    for name in grads:
        assert torch.equal(grads[name], grads2[name]), name
    # every adapter's B learns (A's gradient is zero while B is, as peft initialises it)
    assert all(g.abs().sum() > 0 for n, g in grads2.items() if "lora_B" in n)


def test_keyword_tensors_are_refused_not_kept_on_the_device():
    fn = host_checkpoint.make_checkpoint_function()
    with pytest.raises(TypeError, match="positional tensors only"):
        fn(lambda x: x, hidden_states=torch.ones(2))


def test_a_model_without_checkpointed_layers_swaps_none():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    assert host_checkpoint.install(model) == 0


def test_without_input_gradients_the_adapters_still_learn():
    """With no input that needs a gradient an autograd Function's backward never runs: the layers
    fall back to torch's own checkpoint, and the adapters get the same gradients."""
    loss, grads, _, _ = _loss_and_grads(False, 0.0, input_grads=False)
    loss2, grads2, _, copied = _loss_and_grads(True, 0.0, input_grads=False)
    assert copied == 2 * 2 * 10 * 32 * 4 and loss2 == loss  # the second and third layers' inputs
    assert any(g.abs().sum() > 0 for g in grads2.values())
    for name in grads:
        assert torch.equal(grads[name], grads2[name]), name


def test_while_a_layer_recomputes_the_one_before_it_is_copied_back():
    """The backward recomputes layers 2, 1, 0: at 2 the input of 1 starts its copy back, at 1 that of 0."""
    seen = []

    def spy(offloader):
        real = offloader.prefetch

        def prefetch(kept):
            seen.append(next(i for i, r in enumerate(offloader.order) if r() is kept))
            real(kept)

        offloader.prefetch = prefetch

    _loss_and_grads(True, 0.0, spy=spy)
    assert seen == [1, 0]


@pytest.mark.slow
@pytest.mark.skipif("not torch.cuda.is_available()", reason="needs a CUDA GPU")
@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_on_the_gpu_prefetched_copies_give_plain_checkpointings_numbers(dropout):
    loss, grads, _, _ = _loss_and_grads(False, dropout, device="cuda")
    counts = []
    loss2, grads2, _, _ = _loss_and_grads(True, dropout, device="cuda", spy=counts.append)
    assert counts[0].prefetched == 2  # layers 1 and 0, each while the layer after it recomputed
    assert abs(loss2 - loss) < 1e-5
    for name in grads:
        torch.testing.assert_close(grads2[name], grads[name], rtol=1e-4, atol=1e-6, msg=name)
