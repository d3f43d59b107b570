"""The fused MLP block (train_backend/speed/fused_mlp.py, speed.mlp_block: fused): the same numbers as
peft's layers, forward and backward, on 16- and 4-bit bases, with gradient checkpointing; the
tensors a block saves for its backward counted against the memory model's formula, both ways;
the MLP's own forward wherever the block does not apply; the plan's choice and its memory."""

from __future__ import annotations

import pytest
import torch
from conftest import BNB, has_cuda  # noqa: F401 - has_cuda: skipif

from cockpit.config import load as config_load
from cockpit.models.memory import (
    Workload,
    block_saved_bytes_per_token,
    estimate_memory,
    fused_mlp_fewer_bytes_per_token,
)
from cockpit.models.shape import from_config_dict, load_shape
from train_backend.speed import fused_lora, fused_mlp

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
H, INTER, T = 64, 172, 24


def llama(four_bit=False, dropout=0.0, targets=TARGETS, act="silu", seed=0, dtype=torch.float32):
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        hidden_size=H,
        intermediate_size=INTER,
        num_attention_heads=4,
        num_key_value_heads=4,
        num_hidden_layers=2,
        vocab_size=128,
        hidden_act=act,
        attn_implementation="sdpa",
        use_cache=False,
    )
    model = LlamaForCausalLM(cfg).to(dtype)
    if four_bit:
        bnb = pytest.importorskip("bitsandbytes", reason=BNB)

        for module in list(model.modules()):
            for name, child in list(module.named_children()):
                if isinstance(child, torch.nn.Linear) and name != "lm_head":
                    q = bnb.nn.Linear4bit(
                        child.in_features, child.out_features, bias=False, compute_dtype=torch.float32
                    )
                    q.weight = bnb.nn.Params4bit(
                        child.weight.data.clone(), requires_grad=False, quant_type="nf4"
                    )
                    setattr(module, name, q.to("cpu"))
    for p in model.parameters():
        p.requires_grad_(False)
    config = LoraConfig(
        r=8, lora_alpha=16, lora_dropout=dropout, target_modules=targets, init_lora_weights=False
    )
    model = get_peft_model(model, config)
    model.train()
    return model


def step(model, ids, autocast=None):
    model.zero_grad(set_to_none=True)
    embeds = model.get_input_embeddings()(ids).detach().requires_grad_()
    with torch.autocast("cpu", dtype=autocast, enabled=autocast is not None):
        out = model(inputs_embeds=embeds, labels=ids)
    out.loss.backward()
    grads = {n: p.grad.detach().float().clone() for n, p in model.named_parameters() if p.requires_grad}
    return out.loss.detach().float(), out.logits.detach().float(), embeds.grad.detach().float(), grads


def assert_close(a, b, rtol=1e-5, atol=1e-6):
    assert torch.allclose(a[0], b[0], rtol=rtol, atol=atol), (a[0], b[0])
    assert torch.allclose(a[1], b[1], rtol=rtol, atol=atol)
    assert torch.allclose(a[2], b[2], rtol=rtol, atol=atol)
    assert a[3].keys() == b[3].keys() and len(a[3]) == 2 * 7 * 2
    for k in a[3]:
        assert torch.allclose(a[3][k], b[3][k], rtol=rtol, atol=atol), k


def ids(seed=1):
    return torch.randint(0, 128, (2, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("four_bit", [False, True], ids=["16-bit", "4-bit"])
def test_the_block_gives_peft_numbers_forward_and_backward(four_bit):
    model = llama(four_bit=four_bit)
    reference = step(model, ids())
    assert fused_lora.apply(model)["fused"] == 14
    linears_only = step(model, ids())
    assert fused_mlp.apply(model) == {"fused": 2, "kept": {}}
    fused = step(model, ids())
    assert_close(reference, fused)
    assert_close(linears_only, fused)
    assert fused_mlp.apply(model) == {"fused": 0, "kept": {}}  # applied once
    assert fused_mlp.remove(model) == 2
    assert_close(reference, step(model, ids()))


def test_the_block_under_gradient_checkpointing_gives_the_same_numbers():
    model = llama()
    fused_lora.apply(model)
    fused_mlp.apply(model)
    plain = step(model, ids())
    model.base_model.model.gradient_checkpointing_enable(
        gradient_checkpointing_kwargs={"use_reentrant": False}
    )
    assert_close(plain, step(model, ids()))


def test_in_bf16_the_block_is_as_close_to_fp32_as_peft():
    model = llama()
    exact = step(model, ids())
    peft_bf16 = step(model, ids(), autocast=torch.bfloat16)
    fused_lora.apply(model)
    fused_mlp.apply(model)
    fused_bf16 = step(model, ids(), autocast=torch.bfloat16)
    for part in (1, 2):  # logits, input gradient
        peft_err = (peft_bf16[part] - exact[part]).abs().max()
        assert (fused_bf16[part] - exact[part]).abs().max() <= 2 * peft_err + 1e-3
    worst_peft = max((peft_bf16[3][k] - exact[3][k]).abs().max() / exact[3][k].abs().max() for k in exact[3])
    worst = max((fused_bf16[3][k] - exact[3][k]).abs().max() / exact[3][k].abs().max() for k in exact[3])
    assert worst <= 2 * worst_peft + 1e-3


def test_a_4bit_base_computes_in_its_own_compute_dtype_under_autocast():
    """bitsandbytes runs a 4-bit layer's matmul in the layer's compute_dtype whatever autocast says;
    the fused layers keep to it (on the trainer's runs it is autocast's dtype, so nothing changes)."""
    weight = torch.nn.Parameter(torch.zeros(4, 4), requires_grad=False)
    weight.quant_state = object()
    base = torch.nn.Module()
    base.weight, base.compute_dtype = weight, torch.float32
    x = torch.zeros(2, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert fused_lora.compute_dtype(x, base) == (True, torch.float32)
        base.compute_dtype = torch.bfloat16
        assert fused_lora.compute_dtype(x, base) == (True, torch.bfloat16)
        plain = torch.nn.Linear(4, 4)  # a 16-bit base takes autocast's dtype
        assert fused_lora.compute_dtype(x, plain) == (True, torch.bfloat16)
    assert fused_lora.compute_dtype(x, plain) == (False, torch.float32)


def test_on_a_4bit_base_with_fp32_compute_the_block_in_bf16_is_no_worse_than_peft():
    """The GPU test's setting on the CPU: 4-bit layers whose compute_dtype is fp32, under bf16
    autocast. peft's base matmuls then run in fp32 (bitsandbytes' rule) and only its adapters in
    bf16; a block that ran its base in bf16 was up to 1.4x peft's worst gradient error here."""
    model = llama(four_bit=True)
    exact = step(model, ids())
    peft_bf16 = step(model, ids(), autocast=torch.bfloat16)
    fused_lora.apply(model)
    assert fused_mlp.apply(model)["fused"] == 2
    fused_bf16 = step(model, ids(), autocast=torch.bfloat16)
    for part in (1, 2):  # logits, input gradient
        assert (fused_bf16[part] - exact[part]).abs().max() <= (peft_bf16[part] - exact[part]).abs().max()
    for k in exact[3]:
        scale = exact[3][k].abs().max()
        fused_err = (fused_bf16[3][k] - exact[3][k]).abs().max() / scale
        assert fused_err <= (peft_bf16[3][k] - exact[3][k]).abs().max() / scale + 1e-4, k


def saved_per_token(model, layer: int, autocast=torch.bfloat16) -> float:
    """Bytes a token that decoder layer `layer` saves for its backward (distinct storages with a token
    dimension: activations, not weights), under bf16 autocast as the trainer runs."""
    layers = model.base_model.model.model.layers
    saved, current = {}, [None]

    def pack(t):
        if current[0] == layer and T in t.shape:
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    hooks = [
        layers[layer].register_forward_pre_hook(lambda m, a: current.__setitem__(0, layer)),
        layers[layer].register_forward_hook(lambda m, a, o: current.__setitem__(0, None)),
    ]
    ids_ = ids()
    try:
        with (
            torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t),
            torch.autocast("cpu", dtype=autocast),
        ):
            model(input_ids=ids_[:1], labels=ids_[:1])
    finally:
        for h in hooks:
            h.remove()
    return sum(saved.values()) / T


def test_a_block_saves_two_intermediate_tensors_fewer_as_the_memory_model_counts():
    model = llama(dtype=torch.bfloat16)  # a bf16 residual stream, as the trainer loads it
    model.base_model.model.enable_input_require_grads()
    fused_lora.apply(model)
    shape = from_config_dict(model.base_model.model.config.to_dict(), "tiny", "test")
    linears = saved_per_token(model, 1)
    fused_mlp.apply(model)
    block = saved_per_token(model, 1)
    # SiLU's output and down_proj's input, two bf16 tensors of INTER a token: exactly the formula's step
    assert linears - block == 4 * INTER
    assert fused_mlp_fewer_bytes_per_token(shape, liger=False) == 4 * INTER
    # and the formula counts the rest of the block to within the small tensors it leaves out (the
    # adapters' [tokens x r] products, rotary's cos and sin, the norms' fp32 scales)
    assert 0 < linears - block_saved_bytes_per_token(shape, False) < 0.2 * linears


def test_the_mlps_own_forward_runs_where_the_block_does_not_apply():
    model = llama()
    fused_lora.apply(model)
    assert fused_mlp.apply(llama(dropout=0.1)) == {
        "fused": 0,
        "kept": {"LoRA dropout (down_proj's mask would have to be kept)": 2},
    }
    assert fused_mlp.apply(llama(targets=["q_proj", "gate_proj", "up_proj"])) == {
        "fused": 0,
        "kept": {"down_proj has no LoRA adapter": 2},
    }
    assert fused_mlp.apply(llama(act="gelu")) == {"fused": 0, "kept": {"activation gelu": 2}}
    fused_mlp.apply(model)
    mlp = model.base_model.model.model.layers[0].mlp
    seen = []
    original = fused_mlp.FusedLoraMLP.apply
    fused_mlp.FusedLoraMLP.apply = lambda *a: seen.append(1) or original(*a)
    try:
        with torch.no_grad():
            model(input_ids=ids())
        assert seen == []  # evaluation and generation: the MLP's own forward
        with model.disable_adapter():
            step(model, ids())
        assert seen == []
        step(model, ids())
        assert len(seen) == 2
    finally:
        fused_mlp.FusedLoraMLP.apply = original
    assert fused_mlp.ATTR in mlp.__dict__


def test_the_plan_takes_the_block_where_asked_or_where_auto_finds_it_pays_and_gives_its_memory_to_the_split():
    from test_speed_auto import LLAMA7, RAGGED, choice, gpu

    from cockpit.speed import auto as speed_auto

    def cfg(**dotted):
        base = {"model.name": "synthetic:llama-2-7b", "lora.dropout": 0.0, "lora.target_modules": TARGETS}
        return config_load.config_from_dotted({**base, **dotted})

    assert cfg().speed.mlp_block == "auto"  # the default, since its GPU precision test passed
    default = speed_auto.plan(cfg(**{"speed.mlp_block": "off"}), gpu(22), RAGGED, LLAMA7)
    assert default.mlp_block == "off" and all(c.name != "MLP block" for c in default.choices)
    auto = speed_auto.plan(cfg(), gpu(22), RAGGED, LLAMA7)
    assert auto.mlp_block == "fused" and choice(auto, "MLP block").source == "auto"
    # with LoRA dropout (the config's default 0.1) auto keeps the MLP's own forward and says why
    own = speed_auto.plan(cfg(**{"lora.dropout": 0.1}), gpu(22), RAGGED, LLAMA7)
    assert own.mlp_block == "off" and "lora.dropout 0.1" in choice(own, "MLP block").reason
    fused = speed_auto.plan(cfg(**{"speed.mlp_block": "fused"}), gpu(22), RAGGED, LLAMA7)
    c = choice(fused, "MLP block")
    assert (fused.mlp_block, c.value, c.source) == ("fused", "fused", "yours")
    # Liger's SwiGLU (on in these facts) keeps no SiLU output: down_proj's input is what goes
    assert f"{2 * LLAMA7.intermediate_size / 1024:.0f} KiB a token less (down_proj's input)" in c.reason
    assert "which goes to the split" in c.reason and fused.to_event()["mlp_block"] == "fused"
    # the memory it frees goes to the split: no more layers recomputed, as fast or faster by the model
    assert fused.checkpoint_layers <= default.checkpoint_layers
    assert fused.predicted_tokens_per_s >= default.predicted_tokens_per_s
    dropout = speed_auto.plan(
        cfg(**{"speed.mlp_block": "fused", "lora.dropout": 0.1}), gpu(22), RAGGED, LLAMA7
    )
    assert dropout.mlp_block == "off" and "lora.dropout 0.1" in choice(dropout, "MLP block").reason
    hf = speed_auto.plan(cfg(**{"speed.mlp_block": "fused", "speed.backend": "hf"}), gpu(22), RAGGED, LLAMA7)
    assert hf.mlp_block == "off" and "fused LoRA layers" in choice(hf, "MLP block").reason


def test_the_memory_model_takes_the_tensors_out_of_the_block_before_its_fitted_scales():
    shape = load_shape("synthetic:llama-2-7b")
    i = shape.intermediate_size
    assert fused_mlp_fewer_bytes_per_token(shape, liger=False) == 4 * i
    assert fused_mlp_fewer_bytes_per_token(shape, liger=True) == 2 * i  # Liger keeps no SiLU output
    for liger, scale in ((False, 0.762), (True, 0.762 * 1.028)):
        w = Workload(
            shape=shape,
            micro_batch=4,
            grad_accum=4,
            gradient_checkpointing=False,
            lora_dropout=0.0,
            liger=liger,
        )
        plain, fused = estimate_memory(w), estimate_memory(Workload(**{**w.__dict__, "fused_mlp": True}))
        act = {p.key: p.bytes for p in plain.parts}["activations"]
        act_fused = {p.key: p.bytes for p in fused.parts}["activations"]
        fewer = fused_mlp_fewer_bytes_per_token(shape, liger)
        # scaled as the block is: less than the tensors' own bytes (0.762 < 1), the safe side
        assert act - act_fused == pytest.approx(
            w.tokens_per_micro_batch * shape.num_layers * fewer * scale, rel=1e-3
        )


def test_a_bare_off_in_yaml_is_off(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model: {name: synthetic:tiny}\nspeed:\n  mlp_block: off\n")
    assert config_load.load_config(path).speed.mlp_block == "off"


@pytest.mark.slow
@pytest.mark.skipif("not has_cuda()", reason="needs a CUDA GPU")
@pytest.mark.parametrize("four_bit", [False, True], ids=["16-bit", "4-bit"])
def test_on_the_gpu_the_block_in_bf16_is_as_close_to_fp32_as_peft(four_bit):
    """bitsandbytes' CUDA kernels and, where liger-kernel imports, Liger's SwiGLU kernels inside the
    block; bf16 autocast as the trainer runs."""
    model = llama(four_bit=four_bit).to("cuda")
    x = ids().to("cuda")

    def cuda_step(autocast=None):
        model.zero_grad(set_to_none=True)
        embeds = model.get_input_embeddings()(x).detach().requires_grad_()
        with torch.autocast("cuda", dtype=autocast or torch.float32, enabled=autocast is not None):
            out = model(inputs_embeds=embeds, labels=x)
        out.loss.backward()
        grads = {n: p.grad.float().clone() for n, p in model.named_parameters() if p.requires_grad}
        return out.logits.float(), embeds.grad.float(), grads

    exact = cuda_step()
    peft_bf16 = cuda_step(torch.bfloat16)
    fused_lora.apply(model)
    assert fused_mlp.apply(model)["fused"] == 2
    fused_bf16 = cuda_step(torch.bfloat16)
    for part in (0, 1):
        assert (fused_bf16[part] - exact[part]).abs().max() <= 2 * (
            peft_bf16[part] - exact[part]
        ).abs().max() + 1e-3
    for k in exact[2]:
        scale = exact[2][k].abs().max()
        assert (fused_bf16[2][k] - exact[2][k]).abs().max() / scale <= 2 * (
            peft_bf16[2][k] - exact[2][k]
        ).abs().max() / scale + 1e-3, k


def test_a_real_run_with_the_block_fuses_every_mlp_and_says_so(tmp_path, env):
    """The trainer end to end on the CPU (LoRA on synthetic:tiny, every linear, no dropout)."""
    from conftest import cockpit, events, only_run, write_config

    config = write_config(
        tmp_path / "c.yaml", {"speed.mlp_block": "fused", "training.max_steps": 3, "output.save_steps": 100}
    )
    proc = cockpit(["train", str(config), "--no-ui", "--log-every", "0"], env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    evs = events(only_run(env))
    plan = next(e for e in evs if e["type"] == "speed_plan")
    model = next(e for e in evs if e["type"] == "model")
    layers = load_shape("synthetic:tiny").num_layers
    assert plan["mlp_block"] == "fused" and model["mlp_fused"] == {"fused": layers, "kept": {}}
    assert evs[-1]["type"] == "done" and evs[-1]["status"] == "finished"
    assert "MLP block: fused" in proc.stdout


def test_the_plan_preview_prints_what_speed_auto_would_choose_for_a_bench_row(capsys, monkeypatch):
    """bench/plan_preview.py: the vs_unsloth row's plan before it runs; on the 7B ragged row at 22 GiB
    it is the split the H200 ran on 2026-12-04 (9 x 1; 11 layers recomputed then, when every_n_layers
    set the counts; 9 now that any count is tried) with the MLP's own forward, and the fused MLP block
    (speed.mlp_block: auto, the default, or fused) frees memory for fewer recomputed layers."""
    import json

    from conftest import ROOT

    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import plan_preview

    row = ["--arch", "llama-2-7b", "--lengths", "ragged", "--cap", "22"]
    assert plan_preview.main([*row, "--set", "speed.mlp_block=off"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert (plain["split"], plain["checkpoint_layers"]) == ("9 x 1", 9)
    assert plain["choices"]["4-bit scales"] == "fp32, unpacked once" and "MLP block" not in plain["choices"]
    assert plain["predicted_peak_gib"] <= plain["budget_gib"]
    assert plan_preview.main(row) == 0  # the default, auto: the block, as it frees recomputed layers
    auto = json.loads(capsys.readouterr().out)
    assert auto["choices"]["MLP block"] == "fused" and auto["checkpoint_layers"] < 9
    plan_preview.main(
        ["--arch", "llama-2-7b", "--lengths", "ragged", "--cap", "22", "--set", "speed.mlp_block=fused"]
    )
    fused = json.loads(capsys.readouterr().out)
    assert fused["choices"]["MLP block"] == "fused" and fused["checkpoint_layers"] < 9
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        plan_preview.main(["--set", "speed.mlp_block"])


def test_the_plan_preview_says_where_a_micro_batchs_time_goes_on_the_card_named(capsys, monkeypatch):
    """--card plans for another card (an H100 SXM's rate: slower than the H200 reference on the same
    split), --parts adds the speed model's breakdown of the plan's micro-batch: its parts add up to
    the micro-batch's device time, the longer of which and the host's is the micro-batch."""
    import json

    from conftest import ROOT

    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import plan_preview

    row = ["--arch", "llama-2-7b", "--lengths", "ragged", "--cap", "22"]
    plan_preview.main(row)
    h200 = json.loads(capsys.readouterr().out)
    assert "step_parts" not in h200
    plan_preview.main([*row, "--card", "NVIDIA H100 80GB HBM3", "--parts"])
    h100 = json.loads(capsys.readouterr().out)
    parts = h100["step_parts"]
    assert parts["card"] == "H100 SXM" and h100["split"] == h200["split"] == "9 x 1"
    assert h100["predicted_tokens_per_s"] < h200["predicted_tokens_per_s"]
    assert parts["tokens_per_micro_batch"] == 9 * 512
    device = sum(v for k, v in parts["parts_ms"].items() if k != "host")
    assert device == pytest.approx(parts["device_ms"], abs=0.2)
    assert parts["micro_batch_ms"] >= max(parts["device_ms"], parts["parts_ms"]["host"]) - 0.2
    assert set(parts["parts_ms"]) >= {"host", "arithmetic", "elementwise", "dequantisation", "adapters"}


def test_mlp_block_auto_takes_the_block_where_it_frees_recomputed_layers_and_not_elsewhere(
    capsys, monkeypatch
):
    """speed.mlp_block: auto fits the split both ways: on the 7B ragged row at 22 GiB the block frees
    memory for fewer recomputed layers and is rated faster (an H100 measured 1.17x there with it set), so it
    is taken, as `fused` would run it; on a card where nothing is recomputed without it the split
    cannot gain and the MLP keeps its own forward, the reason saying both splits."""
    import json

    from conftest import ROOT

    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import plan_preview

    def preview(*extra: str) -> dict:
        plan_preview.main(["--arch", "llama-2-7b", "--lengths", "ragged", *extra])
        return json.loads(capsys.readouterr().out)

    fused = preview("--cap", "22", "--set", "speed.mlp_block=fused")
    auto = preview("--cap", "22", "--set", "speed.mlp_block=auto")
    assert auto["choices"]["MLP block"] == "fused"
    assert (auto["split"], auto["checkpoint_layers"]) == (fused["split"], fused["checkpoint_layers"])
    assert auto["predicted_tokens_per_s"] == fused["predicted_tokens_per_s"]
    roomy = preview("--cap", "80", "--set", "speed.mlp_block=auto")
    plain = preview("--cap", "80")
    assert plain["checkpoint_layers"] == 0 and roomy["choices"]["MLP block"] == "the MLP's own"
    assert (roomy["split"], roomy["checkpoint_layers"]) == (plain["split"], 0)
    plan = plan_preview.plan_for("llama-2-7b", "ragged", 22, {"speed.mlp_block": "auto"})
    line = next(c for c in plan.choices if c.name == "MLP block")
    assert plan.mlp_block == "fused" and line.source == "auto"
    assert (
        "with it 9 x 1, 5 of 32 layers recomputed" in line.reason
        and "without it 9 x 1, 9 of 32" in line.reason
    )
    # at unsloth's memory on the 2048-token row the block lets 4 x 4 fit with the inputs in host memory,
    # where the MLP's own forward fits 2 x 8 without: a changed split the speed model rates faster
    held = plan_preview.plan_for("llama-2-7b", "full", 7.15, {"speed.mlp_block": "auto"})
    own = plan_preview.plan_for("llama-2-7b", "full", 7.15, {"speed.mlp_block": "off"})
    line = next(c for c in held.choices if c.name == "MLP block")
    assert held.mlp_block == "fused" and held.checkpoint_offload and not own.checkpoint_offload
    t, t_own = held.config.training, own.config.training
    assert (t.micro_batch_size, t.gradient_accumulation_steps) == (4, 4)
    assert (t_own.micro_batch_size, t_own.gradient_accumulation_steps) == (2, 8)
    assert held.predicted_tokens_per_s > own.predicted_tokens_per_s
    assert "with it 4 x 4, 32 of 32 layers recomputed, inputs in host memory" in line.reason
    dropout = plan_preview.plan_for(
        "llama-2-7b", "ragged", 22, {"speed.mlp_block": "auto", "lora.dropout": 0.1}
    )
    line = next(c for c in dropout.choices if c.name == "MLP block")
    assert dropout.mlp_block == "off" and "dropout" in line.reason
