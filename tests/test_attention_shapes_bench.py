"""bench/attention_shapes.py without a GPU: the packed rows' mask it times is the one the trainer's
attention gets (causal within a sample, nothing across samples), and its CPU smoke run records
each backend's new-width cost as the first call less the steady one."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import attention_shapes

    return attention_shapes


def test_the_rows_are_filled_to_the_width_with_samples_of_the_ragged_lengths(bench):
    rows = bench.sample_lengths(496, rows=9, seed=3)
    assert len(rows) == 9
    for row in rows:
        assert sum(row) == 496
        assert all(n <= 512 for n in row) and all(n >= 32 for n in row[:-1])
    assert rows == bench.sample_lengths(496, rows=9, seed=3)  # seeded


def test_the_mask_is_causal_inside_each_sample_and_closed_between_samples(bench):
    import torch

    mask = bench.packed_mask([[3, 2], [5]], 5, torch.device("cpu"))
    assert mask.shape == (2, 1, 5, 5)
    first = mask[0, 0].int().tolist()
    assert first == [
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0],
        [0, 0, 0, 1, 0],  # the second sample sees none of the first
        [0, 0, 0, 1, 1],
    ]
    assert torch.equal(mask[1, 0], torch.ones(5, 5, dtype=torch.bool).tril())


def test_the_smoke_run_records_each_backends_first_and_steady_calls(bench, tmp_path, capsys):
    out = tmp_path / "shapes.json"
    assert bench.main(["--smoke", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["smoke"] and record["layout"] == {"heads": 4, "kv_heads": 2, "head_dim": 16}
    by = {b["backend"]: b for b in record["backends"]}
    assert set(by) == {"flash", "math"}
    assert not by["flash"]["masked"] and [w["width"] for w in by["flash"]["widths"]] == [64]
    assert by["math"]["masked"] and [w["width"] for w in by["math"]["widths"]] == [48, 32]
    for b in by.values():
        for w in b["widths"]:
            assert w["new_width_extra_s"] == pytest.approx(w["first_s"] - w["steady_s"], abs=2e-5)
        assert b["host_issue_s"] > 0
    assert "new width" in capsys.readouterr().out


def test_a_backend_not_known_is_refused_by_name(bench, tmp_path):
    with pytest.raises(SystemExit, match="not one of cudnn, efficient, flash, math"):
        bench.main(["--smoke", "--backends", "cudnn,fast", "--out", str(tmp_path / "x.json")])
