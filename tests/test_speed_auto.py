"""speed: auto decides from stated facts: the card's memory, the data's lengths, what imports."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from cockpit.config import load as config_load
from cockpit.config import schema as config
from cockpit.fmt import GIB
from cockpit.live.event_text import describe
from cockpit.models.memory import SAFETY_MARGIN, Workload, estimate_memory, workload_from_config
from cockpit.models.shape import load_shape
from cockpit.speed import auto as speed_auto

LLAMA7 = load_shape("synthetic:llama-2-7b")
H200, _ = speed_auto.card_for("NVIDIA H200", int(139.8 * GIB))
FIXED = [512] * 224
_RNG = random.Random(0)
RAGGED = [_RNG.randint(32, 512) for _ in range(224)]


def gpu(memory_gib: float = 22.0, **kw) -> speed_auto.Facts:
    values = dict(
        device_kind="cuda",
        precision="bf16",
        device_name="NVIDIA H200",
        memory_bytes=int(memory_gib * GIB),
        memory_note=f"emulate_vram_gib {memory_gib:g}",
        capability="9.0",
        cpu_count=16,
        liger="0.8.5",
        liger_model=True,
        card=H200,
    )
    values.update(kw)
    return speed_auto.Facts(**values)


def qlora(**dotted) -> config.TrainConfig:
    return config_load.config_from_dotted({"model.name": "synthetic:llama-2-7b", **dotted})


def choice(plan, name):
    return next(c for c in plan.choices if c.name == name)


def test_fixed_length_data_is_not_packed_and_the_micro_batch_grows_inside_the_budget():
    plan = speed_auto.plan(qlora(), gpu(22), FIXED, LLAMA7)
    t = plan.config.training
    assert plan.packing == "none" and not t.packing
    assert "1.00 of them in a row" in choice(plan, "packing").reason
    assert t.micro_batch_size > 4  # the article's 4, grown
    assert 16 <= t.micro_batch_size * t.gradient_accumulation_steps < 16 + t.gradient_accumulation_steps
    assert plan.predicted_peak_bytes <= 22 * GIB * (1 - SAFETY_MARGIN)
    seed_like = Workload(shape=LLAMA7, micro_batch=4, grad_accum=4, gradient_checkpointing=True)
    from cockpit.speed.model import estimate_speed

    assert plan.predicted_tokens_per_s > 1.5 * estimate_speed(seed_like, H200).tokens_per_s
    # the fewest checkpointed layers: one step fewer and the same micro-batch would not fit
    if plan.checkpoint_layers:
        w = Workload(
            shape=LLAMA7,
            micro_batch=t.micro_batch_size,
            grad_accum=t.gradient_accumulation_steps,
            gradient_checkpointing=False,
        )
        assert estimate_memory(w).peak_bytes > plan.budget_bytes  # without checkpointing it does not fit


def test_ragged_data_is_packed_into_rows_keeping_the_samples_per_step():
    plan = speed_auto.plan(qlora(), gpu(22), RAGGED, LLAMA7)
    t = plan.config.training
    per_row = speed_auto.samples_per_row(RAGGED, 512)
    assert plan.packing == "rows" and plan.samples_per_row == pytest.approx(per_row, abs=1e-3)
    assert 1.6 < per_row < 2.0  # uniform 32..512 averages ~272 tokens
    rows = round(16 / per_row)
    assert rows <= t.micro_batch_size * t.gradient_accumulation_steps < rows + t.gradient_accumulation_steps
    assert "rows per step" in choice(plan, "micro-batch").value
    assert not plan.sft_packing  # rows are packed by the trainer, not by TRL's flattening


def test_flash_attention_packs_padding_free_and_an_unknown_kernel_does_not_pack():
    plan = speed_auto.plan(qlora(), gpu(22, flash_attention="flash_attention_2"), RAGGED, LLAMA7)
    assert plan.config.model.attn_implementation == "flash_attention_2"
    assert plan.packing == "flat" and plan.sft_packing
    eager = speed_auto.plan(qlora(**{"model.attn_implementation": "eager"}), gpu(22), RAGGED, LLAMA7)
    assert eager.packing == "rows" and choice(eager, "attention").source == "yours"
    speed_auto.PACKING_BY_ATTENTION.pop("eager")
    try:
        off = speed_auto.plan(qlora(**{"model.attn_implementation": "eager"}), gpu(22), RAGGED, LLAMA7)
    finally:
        speed_auto.PACKING_BY_ATTENTION["eager"] = "rows"
    assert off.packing == "none" and "does not keep packed samples apart" in choice(off, "packing").reason


def test_a_big_card_needs_no_checkpointing_and_a_small_one_checkpoints_more():
    big = speed_auto.plan(qlora(), gpu(139.8, memory_note="the card"), FIXED, LLAMA7)
    assert big.checkpoint_layers == 0 and big.config.training.micro_batch_size == 16
    assert not big.config.training.gradient_checkpointing
    small = speed_auto.plan(qlora(), gpu(12), FIXED, LLAMA7)
    assert small.checkpoint_layers > 0 and small.config.training.gradient_checkpointing
    assert small.predicted_peak_bytes <= 12 * GIB * (1 - SAFETY_MARGIN)
    if small.checkpoint_every > 1:  # transformers' every_n_layers; 1: all, then all but k turned off
        assert -(-32 // small.checkpoint_every) == small.checkpoint_layers
    else:
        assert small.checkpoint_every == 1


def test_any_count_of_recomputed_layers_is_tried_not_only_every_nth():
    """every_n_layers gives 32, 16, 11, 8, ... of 32 layers: nothing between 16 and 32. Across cards
    from 8 to 24 GiB the plan takes the fewest layers that fit, counts every_n_layers cannot give
    among them, each inside its budget."""
    nth = {-(-32 // n) for n in range(1, 33)}
    seen = {}
    for tenths in range(80, 241, 5):
        gib = tenths / 10
        plan = speed_auto.plan(qlora(), gpu(gib), FIXED, LLAMA7)
        assert plan.predicted_peak_bytes <= gib * GIB * (1 - SAFETY_MARGIN)
        k = plan.checkpoint_layers
        seen[gib] = k
        if k not in nth:
            assert (
                plan.checkpoint_every == 1 and "spread evenly" in choice(plan, "gradient checkpointing").value
            )
    assert any(k not in nth for k in seen.values()), seen


def test_explicit_values_win_and_say_so():
    cfg = config_load.config_from_dict(
        {
            "model": {"name": "synthetic:llama-2-7b"},
            "training": {"micro_batch_size": 4, "gradient_checkpointing": False, "dataloader_num_workers": 1},
        }
    )
    assert cfg.speed.keep == [
        "training.dataloader_num_workers",
        "training.gradient_checkpointing",
        "training.micro_batch_size",
    ]
    plan = speed_auto.plan(cfg, gpu(22), FIXED, LLAMA7)
    t = plan.config.training
    assert (t.micro_batch_size, t.gradient_accumulation_steps, t.gradient_checkpointing) == (4, 4, False)
    assert t.dataloader_num_workers == 1
    for name in ("micro-batch", "gradient checkpointing", "loader workers"):
        assert choice(plan, name).source == "yours" and "set in your config" in choice(plan, name).reason


def test_nothing_fits_keeps_the_config_and_warns():
    plan = speed_auto.plan(qlora(), gpu(4), FIXED, LLAMA7)
    assert plan.config.training.micro_batch_size == 4
    assert "expect an out-of-memory error" in choice(plan, "micro-batch").reason


def test_speed_off_runs_the_config_as_written():
    cfg = qlora(**{"speed.mode": "off", "training.packing": True})
    plan = speed_auto.plan(cfg, gpu(22), RAGGED, LLAMA7)
    assert plan.config is cfg and plan.mode == "off" and plan.sft_packing  # TRL's own packing
    assert [c.name for c in plan.choices] == ["speed", "cross-entropy"]


def test_on_the_cpu_nothing_changes_but_needless_checkpointing_and_loader_workers():
    cpu = speed_auto.Facts("cpu", "fp32", host_available_bytes=8 * GIB, cpu_count=2)
    plan = speed_auto.plan(
        qlora(**{"model.name": "synthetic:tiny"}), cpu, RAGGED, load_shape("synthetic:tiny")
    )
    t = plan.config.training
    assert plan.packing == "none" and not plan.liger and t.dataloader_num_workers == 0
    assert (t.micro_batch_size, t.gradient_accumulation_steps) == (4, 4)
    assert not t.gradient_checkpointing and "not needed" in choice(plan, "gradient checkpointing").reason
    assert "CUDA GPU" in choice(plan, "fused kernels").reason


def test_liger_is_used_only_where_it_imports_and_knows_the_model():
    assert speed_auto.plan(qlora(), gpu(22), FIXED, LLAMA7).liger
    missing = gpu(22, liger=None, liger_note="liger-kernel is not installed (pip install liger-kernel)")
    plan = speed_auto.plan(qlora(), missing, FIXED, LLAMA7)
    assert not plan.liger and "pip install liger-kernel" in choice(plan, "fused kernels").reason
    assert not speed_auto.plan(qlora(**{"speed.fused_kernels": "off"}), gpu(22), FIXED, LLAMA7).liger


def test_an_unknown_model_shape_keeps_the_batch_as_written():
    plan = speed_auto.plan(qlora(), gpu(22), FIXED, None, "architecture 'mamba' is not modelled")
    assert plan.config.training.micro_batch_size == 4
    assert "mamba" in choice(plan, "micro-batch").reason


def test_best_fit_decreasing():
    assert speed_auto.bfd_rows([5, 3, 2], 5) == 2
    assert speed_auto.bfd_rows([4, 4, 4, 4], 5) == 4
    assert speed_auto.bfd_rows([3, 3, 2, 2], 5) == 2
    assert speed_auto.bfd_rows([9, 1], 5) == 2  # longer than a row: truncated to it
    assert speed_auto.samples_per_row([2] * 8, 8) == 4.0


def test_cards_are_found_by_their_torch_names():
    assert speed_auto.card_for("NVIDIA GeForce RTX 4090", 24 * GIB)[0].name.endswith("4090")
    assert "H200" in speed_auto.card_for("NVIDIA H200", 140 * GIB)[0].name
    card, note = speed_auto.card_for("Imaginary Card 9000", 10 * GIB)
    assert "H200" in card.name and "not in the catalog" in note


def test_an_h100_sxm_is_not_taken_for_the_pcie_card_of_the_same_memory():
    """NVML names the SXM card "NVIDIA H100 80GB HBM3"; by memory alone it tied with the H100 PCIe
    (79.65 GiB both), whose 756 TFLOPS and 2.0 TB/s put every H100 plan's tokens/s 25-35% under what ran
    (a 7B QLoRA DPO: 2,836 planned at 7,667 measured, 2026-12-07). The speed model and the MFU's
    peak now name the same card."""
    for name, total, want in (
        ("NVIDIA H100 80GB HBM3", 85017493504, "H100 SXM"),
        ("NVIDIA H100 PCIe", 85017493504, "H100 PCIe"),
        ("NVIDIA A100-SXM4-80GB", 85 * 10**9, "A100 80GB SXM"),
    ):
        card, note = speed_auto.card_for(name, total)
        assert (card.name, note) == (want, ""), name
    sxm = speed_auto.card_for("NVIDIA H100 80GB HBM3", 85017493504)[0]
    assert (sxm.bf16_dense_tflops, sxm.bandwidth_gbs) == (989.0, 3350.0)


def test_the_config_keeps_explicit_keys_through_the_run_directory(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("training:\n  micro_batch_size: 4\n  max_steps: 5\n")
    cfg = config_load.load_config(path)
    assert cfg.speed.keep == ["training.micro_batch_size"]
    dumped = config.dump_config(cfg)
    assert "gradient_checkpointing" not in dumped and "micro_batch_size: 4" in dumped
    (tmp_path / "run.yaml").write_text(dumped)
    again = config_load.load_config(tmp_path / "run.yaml")
    assert again.speed.keep == ["training.micro_batch_size"] and again == cfg
    (tmp_path / "t.yaml").write_text(config.template())
    assert config_load.load_config(tmp_path / "t.yaml").speed.keep is None  # cockpit init pins nothing
    with pytest.raises(config.ConfigError, match=r"speed\.keep: 'training\.epochs' is not a key"):
        config_load.config_from_dict({"speed": {"keep": ["training.epochs"]}})


def test_the_plan_is_an_event_the_headless_view_prints():
    plan = speed_auto.plan(qlora(), gpu(22), RAGGED, LLAMA7)
    event = json.loads(json.dumps(plan.to_event()))
    text = describe({"type": "speed_plan", **event})
    lines = text.splitlines()
    assert lines[0] == "speed: auto" and len(lines) == 2 + len(plan.choices)  # + the FLOPs for MFU
    assert lines[-1].startswith("  MFU counts ") and "TFLOPS: H200 SXM, dense bf16" in lines[-1]
    assert any(line.startswith("  packing: rows of 512 [auto] - samples average") for line in lines)


def test_the_plan_carries_the_hosts_probe_and_scales_its_prediction_by_it():
    """The trainer's host probe (train_backend/speed/host_probe.py) reaches the plan as the card's
    host_scale: the event says both, the headless view prints them, and a slower host predicts a
    slower host-bound run."""
    from cockpit.speed import model as speed

    slow_card = replace(H200, host_scale=speed.host_scale_for(2 * speed.HOST_PROBE_REFERENCE_MS))
    small = {"training.micro_batch_size": 1, "training.gradient_accumulation_steps": 1}
    keep = {"speed.keep": ["training.micro_batch_size", "training.gradient_accumulation_steps"]}
    cfg = qlora(**small, **keep)
    reference = speed_auto.plan(cfg, gpu(80), FIXED, LLAMA7)
    slow = speed_auto.plan(
        cfg, gpu(80, card=slow_card, host_probe_ms=2 * speed.HOST_PROBE_REFERENCE_MS), FIXED, LLAMA7
    )
    event = slow.to_event()
    assert event["host_scale"] == 2.0 and event["host_probe_ms"] == 2 * speed.HOST_PROBE_REFERENCE_MS
    assert reference.to_event()["host_scale"] == 1.0 and reference.to_event()["host_probe_ms"] is None
    assert slow.predicted_tokens_per_s < 0.7 * reference.predicted_tokens_per_s
    text = describe({"type": "speed_plan", **event})
    assert "  host: the probe's step took " in text and "x2.00 the speed model's reference host" in text


def test_a_bare_off_in_yaml_turns_speed_off(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("speed: {mode: off, fused_kernels: off}\n")
    cfg = config_load.load_config(path)
    assert (cfg.speed.mode, cfg.speed.fused_kernels) == ("off", "off")
    (tmp_path / "again.yaml").write_text(config.dump_config(cfg))
    assert config_load.load_config(tmp_path / "again.yaml").speed.mode == "off"


def test_the_benchmark_reads_the_reference_loss_from_its_log(monkeypatch):
    from conftest import ROOT

    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import fast_vs_seed

    log = "{'loss': '11.2183', 'grad_norm': '0.5'}\n{'loss': 11.19, 'epoch': 0.5}\n{'train_loss': '11.3'}"
    assert [float(x) for x in fast_vs_seed.LOSS_RE.findall(log)] == [11.2183, 11.19]


@pytest.mark.slow
@pytest.mark.bench
def test_the_benchmark_smoke_run_writes_its_table(tmp_path, env):
    import subprocess
    import sys

    from conftest import ROOT

    out = tmp_path / "out"
    cmd = [sys.executable, str(ROOT / "bench" / "fast_vs_seed.py"), "--smoke", "--shapes", "mixed"]
    cmd += ["--budget-s", "0", "--out", str(out), "--workdir", str(tmp_path / "work")]
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((out / "fast_vs_seed.json").read_text())
    assert [r["run"] for r in result["runs"]] == ["speed: off", "speed: auto"]
    assert all(r["tokens_per_s"] > 0 and r["final_loss"] > 0 for r in result["runs"])
    assert result["runs"][1]["plan"]["mode"] == "auto" and "mixed" in result["summary"]
    assert (out / "fast_vs_seed.md").read_text().startswith("| run (in order) |")


def test_rows_are_padded_to_a_multiple_of_16_on_a_gpu_only():
    from train_backend.speed.setup import sft_kwargs

    plan = speed_auto.plan(qlora(), gpu(22), RAGGED, LLAMA7)
    assert plan.pad_multiple == speed_auto.PAD_MULTIPLE == 16
    assert "multiple of 16" in choice(plan, "row width").value
    assert plan.to_event()["pad_multiple"] == 16
    assert sft_kwargs(plan, None)["pad_to_multiple_of"] == 16  # TRL's collator too (unpacked rows)
    cpu = speed_auto.Facts("cpu", "fp32", host_available_bytes=8 * GIB, cpu_count=2)
    on_cpu = speed_auto.plan(
        qlora(**{"model.name": "synthetic:tiny"}), cpu, RAGGED, load_shape("synthetic:tiny")
    )
    assert on_cpu.pad_multiple == 1 and "pad_to_multiple_of" not in sft_kwargs(on_cpu, None)
    assert all(c.name != "row width" for c in on_cpu.choices)
    # flash-attention's flattened rows: TRL would count their padding as real tokens
    flat = speed_auto.plan(qlora(), gpu(22, flash_attention="flash_attention_2"), RAGGED, LLAMA7)
    assert (
        flat.packing == "flat"
        and flat.pad_multiple == 1
        and "pad_to_multiple_of" not in sft_kwargs(flat, None)
    )


def test_layer_inputs_go_to_host_memory_only_where_nothing_fits_without_them():
    cfg = qlora(**{"training.max_length": 512})
    roomy = gpu(7, host_available_bytes=64 * GIB)
    plan = speed_auto.plan(cfg, roomy, RAGGED, LLAMA7)
    t = plan.config.training
    assert plan.checkpoint_offload and t.checkpoint_offload and t.gradient_checkpointing
    assert plan.checkpoint_layers == 32 and plan.to_event()["checkpoint_offload"] is True
    why = choice(plan, "gradient checkpointing")
    assert why.value == "all 32 layers, inputs in host memory" and "pinned host memory" in why.reason
    assert plan.predicted_peak_bytes <= 7 * GIB * (1 - SAFETY_MARGIN)
    # its peak: the memory model's with every layer recomputed, less every layer input but two
    # (one copied back, one recomputed)
    w = replace(workload_from_config(plan.config, LLAMA7), precision="bf16", liger=True)
    on = estimate_memory(replace(w, checkpoint_offload=False))
    per_input = on.part("checkpoints").bytes / 32
    assert plan.predicted_peak_bytes == estimate_memory(w).peak_bytes
    assert abs(plan.predicted_peak_bytes - (on.peak_bytes - 30 * per_input)) <= 1
    # without host memory to spare: the largest split that fits with the inputs on the GPU
    no_host = speed_auto.plan(cfg, gpu(7, host_available_bytes=GIB // 4), RAGGED, LLAMA7)
    assert not no_host.checkpoint_offload
    assert no_host.config.training.micro_batch_size < t.micro_batch_size
    # a card with room never offloads
    assert not speed_auto.plan(cfg, gpu(22, host_available_bytes=64 * GIB), RAGGED, LLAMA7).checkpoint_offload


def test_checkpoint_offload_in_the_config_is_kept_either_way():
    on = qlora(**{"training.max_length": 512, "training.checkpoint_offload": True})
    assert "training.checkpoint_offload" in on.speed.keep
    plan = speed_auto.plan(on, gpu(22, host_available_bytes=64 * GIB), RAGGED, LLAMA7)
    assert plan.checkpoint_offload and plan.checkpoint_layers == 32
    why = choice(plan, "gradient checkpointing").reason
    assert why == "training.checkpoint_offload is set in your config"
    off = qlora(**{"training.max_length": 512, "training.checkpoint_offload": False})
    plan = speed_auto.plan(off, gpu(7, host_available_bytes=64 * GIB), RAGGED, LLAMA7)
    assert not plan.checkpoint_offload
    speed_off = qlora(**{"speed.mode": "off", "training.checkpoint_offload": True})
    assert speed_auto.plan(speed_off, gpu(22), RAGGED, LLAMA7).checkpoint_offload
    cpu = speed_auto.Facts("cpu", "fp32", host_available_bytes=8 * GIB, cpu_count=2)
    assert not speed_auto.plan(on, cpu, RAGGED, LLAMA7).checkpoint_offload


def test_the_lora_layers_are_fused_where_they_can_be_and_the_plan_says_why():
    plan = speed_auto.plan(qlora(), gpu(22), RAGGED, LLAMA7)
    fused = choice(plan, "LoRA layers")
    assert (plan.lora_backend, fused.value, fused.source) == ("fused", "fused", "auto")
    assert plan.to_event()["lora_backend"] == "fused"
    assert "one autograd function" in fused.reason and "less host time and memory traffic" in fused.reason
    written = speed_auto.plan(qlora(**{"speed.backend": "fused"}), gpu(22), RAGGED, LLAMA7)
    assert choice(written, "LoRA layers").source == "yours" and written.lora_backend == "fused"

    hf = speed_auto.plan(qlora(**{"speed.backend": "hf"}), gpu(22), RAGGED, LLAMA7)
    assert hf.lora_backend == "hf" and hf.to_event()["lora_backend"] == "hf"
    assert (choice(hf, "LoRA layers").value, choice(hf, "LoRA layers").source) == ("peft", "yours")
    assert choice(hf, "LoRA layers").reason == "speed.backend: hf"
    # the speed model rates the fused layers' split by their measured costs
    assert plan.predicted_tokens_per_s > hf.predicted_tokens_per_s

    int8 = speed_auto.plan(qlora(**{"quantization.bits": 8}), gpu(22), RAGGED, LLAMA7)
    assert int8.lora_backend == "hf" and "8-bit" in choice(int8, "LoRA layers").reason
    sharded = speed_auto.plan(qlora(**{"distributed.strategy": "fsdp"}), gpu(22), RAGGED, LLAMA7)
    assert sharded.lora_backend == "hf" and "FSDP" in choice(sharded, "LoRA layers").reason
    full = speed_auto.plan(qlora(method="full"), gpu(80), RAGGED, LLAMA7)
    assert full.lora_backend == "hf" and (
        choice(full, "LoRA layers").value,
        choice(full, "LoRA layers").source,
    ) == (
        "none",
        "fixed",
    )
    off = speed_auto.plan(qlora(**{"speed.mode": "off"}), gpu(22), RAGGED, LLAMA7)
    assert off.lora_backend == "hf"
    # on the CPU too: the same numbers with fewer kernels (tests/test_fused_lora.py)
    cpu = speed_auto.Facts(device_kind="cpu", precision="fp32", device_name="cpu", cpu_count=2)
    assert speed_auto.plan(qlora(method="lora"), cpu, RAGGED, LLAMA7).lora_backend == "fused"
