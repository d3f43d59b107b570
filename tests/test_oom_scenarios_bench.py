"""bench/oom_scenarios.py's verdict on the emulated size: NVML's bytes above idle against the
size in bytes (GiB = 2^30, as `--emulate-vram NGiB` gives the trainer), never a rounded figure."""

from __future__ import annotations

import pytest
from conftest import ROOT

from cockpit.fmt import GIB


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import oom_scenarios

    return oom_scenarios


@pytest.mark.parametrize(
    ("used", "held"),
    [
        (24 * GIB, True),  # exactly the size: a real card holds it
        (24 * GIB + 1, False),
        (int(24.004 * GIB), False),  # prints as 24.00 at two decimals: the bytes decide
        (int(24.03 * GIB), False),  # the H200 run of 2026-12-02 (qwen2.5-1.5b 8 x 2048)
        (int(23.97 * GIB), True),
    ],
)
def test_the_verdict_compares_bytes_with_bytes(bench, used, held):
    verdict = bench.held_to_emulated_size(used, 24)
    assert verdict["held_to_emulated_size"] is held and verdict["limit_bytes"] == 24 * GIB
    assert verdict["nvml_max_bytes"] == used and verdict["nvml_max_gib"] == round(used / GIB, 3)


def test_the_table_says_over_where_the_bytes_are_over(bench):
    over = {"name": "x", "card_gib": 24, **bench.held_to_emulated_size(int(24.004 * GIB), 24)}
    held = {"name": "y", "card_gib": 20, **bench.held_to_emulated_size(int(19.8 * GIB), 20)}
    text = bench.markdown({"scenarios": [over, held]})
    assert "x 24.004 of 24 GiB (OVER)" in text and "y 19.800 of 20 GiB." in text


def test_the_dpo_scenario_is_a_valid_pair_config_that_runs_out_on_its_card(bench, tmp_path):
    """Issue 40's OOM: DPO on a 7B QLoRA at 2048 tokens without checkpointing, on an emulated 24 GiB
    card: the config loads as a DPO run on plain-text pairs (TRL packs none), and the memory model
    puts it over the card (the relaunch that must fix it runs on a GPU)."""
    import yaml

    from cockpit.config.load import load_config
    from cockpit.models.memory import estimate_memory, workload_from_config
    from cockpit.models.shape import load_shape

    s = bench.SCENARIOS["dpo-7b-qlora-2048-24gib"]
    data = bench.dataset(s, tmp_path, steps=2)
    pair = yaml.safe_load(data.read_text().splitlines()[0])
    assert set(pair) == {"prompt", "chosen", "rejected"} and pair["chosen"] != pair["rejected"]
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(bench.config_for(s, data, 2, tmp_path / "runs")))
    cfg = load_config(str(path))
    assert cfg.objective == "dpo" and "packing" not in yaml.safe_load(path.read_text())["training"]
    peak = estimate_memory(workload_from_config(cfg, load_shape(cfg.model.name))).peak_bytes
    assert peak > s.card_gib * GIB  # it must run out there
