"""bench/preference_memory.py --smoke: the GPU calibration bench's own path on the CPU (the tiny model,
2 steps of each objective): every run finishes and logs its figures, each has the memory model's
prediction and its reference, and the JSON and the table are written. Marked `bench`: out of the
default run (`make bench-smoke` runs it)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.bench]  # make bench-smoke, and CI after the suite


@pytest.mark.timeout(600)
def test_the_bench_smoke_run_measures_every_objective(tmp_path, env):
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "bench/preference_memory.py",
            "--smoke",
            "--out",
            str(out),
            "--workdir",
            str(tmp_path),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=580,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    runs = json.loads((out / "preference-memory.json").read_text())["runs"]
    assert [r["objective"] for r in runs] == ["dpo", "kto", "orpo"]
    assert [r["reference"] for r in runs] == ["adapter_off", "adapter_off", "none"]
    for r in runs:
        assert r["returncode"] == 0 and r["preference_logs"] == 2, r
        assert r["predicted_gib"] > 0 and r["seq_len_counted"] <= 64 and "nvidia_smi_gib" not in r
    table = (out / "preference-memory.txt").read_text()
    assert "tiny:lora:64:mb=2:ckpt=0:opt=adamw_torch:kto" in table and "pred GiB" in table
