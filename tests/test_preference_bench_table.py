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
