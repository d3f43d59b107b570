"""bench/preference_memory.py's settings and table without a run: the speed and vram keys reach the
config, a speed: auto run is held to its plan's peak, and its tokens/s is set against the same config
with speed off from the same call."""

from __future__ import annotations

import pytest
from conftest import ROOT


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import preference_memory

    return preference_memory


def test_speed_and_vram_keys_reach_the_config(bench, tmp_path):
    c = bench.parse_config("llama-2-7b:qlora:2048:speed=auto:vram=16")
    assert c["speed"] == "auto" and c["vram"] == 16.0 and c["mb"] == 2
    cfg = bench.config_dict(c, "dpo", tmp_path / "rows.jsonl", 4, smoke=False)
    assert cfg["speed"] == {"mode": "auto"} and cfg["emulate_vram_gib"] == 16.0
    plain = bench.config_dict(bench.parse_config("llama-2-7b:qlora:2048"), "dpo", tmp_path, 4, False)
    assert plain["speed"] == {"mode": "off"} and "emulate_vram_gib" not in plain
    for bad in ("llama-2-7b:qlora:2048:speed=fast", "llama-2-7b:qlora:2048:vram=lots"):
        with pytest.raises(SystemExit, match=r"speed is off or auto|vram wants a number"):
            bench.parse_config(bad)


def test_backend_and_liger_keys_tell_the_fused_layers_and_liger_apart(bench, tmp_path):
    c = bench.parse_config("llama-2-7b:qlora:2048:speed=auto:vram=16:backend=hf:liger=off")
    cfg = bench.config_dict(c, "dpo", tmp_path / "rows.jsonl", 4, smoke=False)
    assert cfg["speed"] == {"mode": "auto", "backend": "hf", "fused_kernels": "off"}
    for bad in ("llama-2-7b:qlora:2048:backend=peft", "llama-2-7b:qlora:2048:liger=maybe"):
        with pytest.raises(SystemExit, match=r"is one of"):
            bench.parse_config(bad)


def test_a_recorded_plan_is_predicted_again_as_the_plan_counts_it(bench, tmp_path):
    """--repredict of a speed: auto run: the plan's split, kernels and scales through the memory model
    (every layer recomputed: the checkpointed estimate, plus the unpacked scales), and with --card the
    speed model's tokens/s for that plan."""
    from dataclasses import replace

    import yaml

    from cockpit.models.memory import estimate_memory, unpacked_scales_bytes
    from cockpit.speed.model import CardSpeed, estimate_speed

    c = bench.parse_config("llama-2-7b:qlora:2048:speed=auto:vram=16")
    path, rows = tmp_path / "c.yaml", tmp_path / "rows.jsonl"
    rows.write_text("")
    path.write_text(yaml.safe_dump(bench.config_dict(c, "dpo", rows, 4, smoke=False)))
    plan = {"micro_batch_size": 2, "gradient_accumulation_steps": 1, "checkpoint_layers": 32,
            "checkpoint_offload": False, "liger": True, "lora_backend": "fused", "mlp_block": "off",
            "unpack_scales": True}  # fmt: skip
    w = bench.plan_workload(path, plan, 2046)
    assert (w.micro_batch, w.seq_len, w.liger, w.fused_lora, w.fused_mlp) == (2, 2046, True, True, False)
    want = estimate_memory(replace(w, gradient_checkpointing=True)).peak_bytes
    want += unpacked_scales_bytes(w.shape)
    assert bench.plan_peak(path, plan, 2046) == pytest.approx(want / 2**30)
    # every layer recomputed: the speed model's own figure on the H100 SXM (a pair's both sequences)
    h100 = CardSpeed("H100 SXM", 989.0, 3350.0)
    want_rate = estimate_speed(replace(w, gradient_checkpointing=True), h100).tokens_per_s
    assert bench.plan_speed(path, plan, 2046, "NVIDIA H100 80GB HBM3") == pytest.approx(want_rate)
    on_host = {**plan, "checkpoint_offload": True}  # the inputs' copy back costs time
    assert bench.plan_speed(path, on_host, 2046, "NVIDIA H100 80GB HBM3") < want_rate
    with pytest.raises(SystemExit, match="not a card"):
        bench.plan_speed(path, plan, 2046, "NVIDIA Nonesuch")


def test_a_speed_auto_run_reads_its_plan_and_is_compared_with_speed_off(bench):
    events = [
        {"type": "speed_plan", "micro_batch_size": 4, "gradient_accumulation_steps": 1,
         "checkpoint_layers": 9, "num_layers": 32, "lora_backend": "fused", "liger": True,
         "mlp_block": "off", "predicted_peak_bytes": 15 * 2**30, "predicted_tokens_per_s": 5000.0},
        {"type": "model", "lora_fused": {"fused": 224, "kept": {}}},
        {"type": "log", "tokens_per_s": 100.0},  # the warm-up step: left out
        {"type": "log", "tokens_per_s": 6000.0},
        {"type": "log", "tokens_per_s": 6200.0},
    ]  # fmt: skip
    figures = bench.plan_figures(events)
    assert figures["plan_predicted_gib"] == 15.0 and figures["tokens_per_s"] == 6100.0
    assert figures["plan"]["checkpoint_layers"] == 9 and figures["fused"]["lora_fused"]["fused"] == 224
    auto = {"name": "m:qlora:2048:speed=auto:vram=16:dpo", "objective": "dpo", "speed": "auto",
            "predicted_gib": 15.0, "returncode": 0, "reference": "adapter_off", **figures}  # fmt: skip
    off = {"name": "m:qlora:2048:vram=16:dpo", "objective": "dpo", "speed": "off", "predicted_gib": 10.0,
           "returncode": 0, "reference": "adapter_off", "tokens_per_s": 4000.0}  # fmt: skip
    text = bench.table([off, auto])
    line = next(x for x in text.splitlines() if x.startswith("m:qlora:2048:speed=auto:vram=16:dpo:"))
    assert "4 x 1, 9/32 layers recomputed, LoRA fused, Liger True" in line
    assert "6100 tokens/s (speed model 5000); speed off 4000: 1.52x" in line
    assert bench.plan_figures([{"type": "log", "tokens_per_s": 5.0}]) == {}  # speed off: no plan
