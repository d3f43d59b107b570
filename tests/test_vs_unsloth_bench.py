"""bench/vs_unsloth.py's own arithmetic, without a GPU or unsloth: the timed rate both sides share,
the ratio and its spread, the sequences, and a cockpit config the loader accepts."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT

from cockpit.config import load as config_load


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import vs_unsloth

    return vs_unsloth


def test_the_timed_rate_starts_at_the_end_of_the_warm_up(bench):
    marks = [
        {"step": 1, "t": 10.0, "tokens": 1000, "loss": 9.0},
        {"step": 2, "t": 12.0, "tokens": 2000, "loss": 8.0},  # the last warm-up step ends here
        {"step": 3, "t": 13.0, "tokens": 3100, "loss": 7.5},
        {"step": 4, "t": 14.0, "tokens": 4000, "loss": 7.0},
    ]
    # (4000 - 2000) tokens over (14 - 12) s = 1000 tokens/s over 2 timed steps
    assert bench.timed_rate(marks, warmup=2) == (1000.0, 7.0, 2)
    assert bench.timed_rate([], warmup=2) == (None, None, 0)


def test_the_ratio_of_means_and_the_spread_of_pairs(bench):
    runs = [
        {"side": "cockpit", "tokens_per_s": 1100.0, "device_used_gib": 17.0},
        {"side": "unsloth", "tokens_per_s": 1000.0, "device_used_gib": 15.0},
        {"side": "unsloth", "tokens_per_s": 1250.0, "device_used_gib": 15.5},
        {"side": "cockpit", "tokens_per_s": 1150.0, "device_used_gib": 17.5},
    ]
    s = bench.summarize(runs, flops_per_token=27e9, peak=989e12)
    # means 1125 / 1125 = 1.0; pairs 1100/1250 = 0.88 .. 1150/1000 = 1.15
    assert (s["ratio"], s["ratio_min"], s["ratio_max"]) == (1.0, 0.88, 1.15)
    assert (s["max_used_gib_cockpit"], s["max_used_gib_unsloth"]) == (17.5, 15.5)
    assert runs[0]["mfu"] == round(1100 * 27e9 / 989e12, 4)  # 3.0%
    assert "1.00x | 0.88-1.15 | 17.5 / 15.5" in bench.table(
        {"rows": [{"id": "r", "runs": runs, "summary": s}]}
    )


def test_the_sequences_are_seeded_and_in_bounds(bench, tmp_path):
    a = bench.write_sequences(tmp_path / "a.jsonl", (32, 512), 40, 32000)
    b = bench.write_sequences(tmp_path / "b.jsonl", (32, 512), 40, 32000)
    assert a == b and all(32 <= n <= 512 for n in a)
    assert (tmp_path / "a.jsonl").read_text() == (tmp_path / "b.jsonl").read_text()
    first = json.loads((tmp_path / "a.jsonl").read_text().splitlines()[0])["input_ids"]
    assert len(first) == a[0] and min(first) >= 3


def test_the_cockpit_side_is_a_valid_qlora_config_with_the_shared_settings(bench, tmp_path):
    path = tmp_path / "c.yaml"
    bench.write_sequences(tmp_path / "d.jsonl", (2048, 2048), 2, 32000)
    path.write_text(bench.cockpit_config("synthetic:llama-2-7b", tmp_path / "d.jsonl", 2048, 23, 22.0, False))
    cfg = config_load.load_config(path)
    assert (cfg.method, cfg.quantization.bits, cfg.lora.r, cfg.lora.dropout) == ("qlora", 4, 16, 0.0)
    assert cfg.lora.target_modules == bench.TARGETS and cfg.emulate_vram_gib == 22.0
    assert cfg.training.micro_batch_size * cfg.training.gradient_accumulation_steps == bench.SAMPLES_PER_STEP
    assert (cfg.training.optimizer, cfg.training.max_steps, cfg.speed.mode) == ("adamw_8bit", 23, "auto")
