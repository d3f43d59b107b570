"""bench/fused_mlp_precision.py on the CPU: every variant measured against peft's bf16 error on the
same seed, the summary's ratios and the GPU test's rule computed from the cases it wrote."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT


def test_the_bench_compares_each_variant_with_peft_seed_by_seed(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import fused_mlp_precision as bench

    out = tmp_path / "p.json"
    assert bench.main(["--device", "cpu", "--seeds", "2", "--residual", "bf16", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["residual"] == "bf16" and record["machine"]["torch"]
    cases = record["cases"]
    assert {c["seed"] for c in cases} == {0, 1} and "params" not in cases[0]
    for entry in record["summary"]:
        assert entry["variant"] in ("fused linears", "fused MLP, torch ops") and entry["seeds"] == 2
        rows = [c for c in cases if c["base"] == entry["base"] and c["variant"] == entry["variant"]]
        ratios = []
        for c in rows:
            peft = next(
                p
                for p in cases
                if p["seed"] == c["seed"] and p["base"] == c["base"] and p["variant"] == "peft"
            )
            ratios.append(c["dx"] / peft["dx"])
        assert entry["dx"]["min"] == pytest.approx(min(ratios), abs=1e-3)
        assert entry["dx"]["max"] == pytest.approx(max(ratios), abs=1e-3)
        assert 0 <= entry["pass_gpu_test_rule"] <= 2
    assert "over peft: logits" in capsys.readouterr().out


def test_the_gpu_test_rule_fails_a_variant_twice_as_far_as_peft_on_one_gradient(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import fused_mlp_precision as bench

    peft = {"logits": 0.01, "dx": 0.01, "params": {"a": 0.01, "b": 0.02}}
    assert bench.passes_gpu_test_rule({"logits": 0.02, "dx": 0.0, "params": {"a": 0.021, "b": 0.0}}, peft)
    assert not bench.passes_gpu_test_rule({"logits": 0.0, "dx": 0.0, "params": {"a": 0.0215, "b": 0.0}}, peft)
    assert not bench.passes_gpu_test_rule({"logits": 0.0215, "dx": 0.0, "params": {"a": 0.0, "b": 0.0}}, peft)
