"""bench/speed_sweep.py's point sets: the kernels pairs differ in the one setting their names say."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import speed_sweep


def test_points_option_takes_each_set_and_refuses_others():
    assert speed_sweep.take_points_option(["x", "--points", "kernels", "--out", "o"]) == (
        "kernels",
        ["x", "--out", "o"],
    )
    assert speed_sweep.take_points_option(["x"]) == ("sweep", ["x"])
    with pytest.raises(SystemExit, match="kernels"):
        speed_sweep.take_points_option(["x", "--points", "fast"])


def test_kernels_pairs_differ_in_one_setting():
    k = speed_sweep.KERNELS
    d01, d0 = k["k-l2-7b-qlora7-ckpt-mb8-d01"][2], k["k-l2-7b-qlora7-ckpt-mb8-d0"][2]
    assert {key for key in d0 if d0.get(key) != d01.get(key)} == {"lora.dropout"}
    liger, no_liger = k["k-l2-7b-qlora7-ckpt-mb8-d0-liger"][2], k["k-l2-7b-qlora7-ckpt-mb8-d0-auto"][2]
    assert {key for key in no_liger if no_liger.get(key) != liger.get(key)} == {"speed.fused_kernels"}
    assert len(k["k-l2-7b-qlora7-mb8-d0"][2]["lora.target_modules"]) == 7


def test_heldout_points_are_new_configurations_and_the_rest_were_timed_over_five_steps():
    """`--points heldout`: its n- points are configurations no earlier result holds (new to the speed
    model), each running speed: auto (Liger where it imports); the others are memory points whose only
    runs were timed over 5 steps."""
    import json

    results = Path(__file__).resolve().parent.parent / "bench" / "results"
    seen, steps = set(), {}
    for file in [*results.glob("*speed-sweep*.jsonl"), *results.glob("*memory-points*.jsonl")]:
        if "heldout" in file.name or "probe" in file.name:  # that call's, and re-timings made after it
            continue
        for line in file.read_text().splitlines():
            p = json.loads(line)
            if "name" in p:
                seen.add(json.dumps([p["arch"], p["method"], p["overrides"]], sort_keys=True))
                steps.setdefault(p["name"], set()).add(p.get("steps"))
    for name, (arch, method, overrides) in speed_sweep.HELDOUT.items():
        key = json.dumps([arch, method, overrides], sort_keys=True)
        if name.startswith("n-"):
            assert key not in seen, name
            assert overrides.get("speed.mode") == "auto", name
        else:
            assert steps[name] == {5}, name


def test_new_points_are_predicted_by_the_model_as_committed(tmp_path, capsys):
    """bench/speed_new_points.py reads the speed model from git (HEAD here), not the working tree."""
    import json

    import speed_new_points

    module = speed_new_points.model_at("HEAD")
    assert hasattr(module, "estimate_speed") and module.__name__ == "speed_HEAD"
    record = tmp_path / "r.jsonl"
    point = {
        "name": "n-x",
        "arch": "llama-2-7b",
        "method": "qlora",
        "overrides": {"training.max_length": 512, "training.micro_batch_size": 4},
        "tokens_per_s": 5000,
    }
    record.write_text(json.dumps({"bench": "x"}) + "\n" + json.dumps(point) + "\n")
    assert speed_new_points.main([str(record), "--model-commit", "HEAD", "--only-prefix", "n-"]) == 0
    out = capsys.readouterr().out
    assert "n-x" in out and "1 new runs: median |error|" in out
