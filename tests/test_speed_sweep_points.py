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

    module = speed_new_points.module_at("HEAD")
    assert hasattr(module, "estimate_speed") and module.__name__ == "model_HEAD"
    record = tmp_path / "r.jsonl"
    point = _qlora_7b_point("n-x", micro_batch=4, tokens_per_s=5000)
    record.write_text(json.dumps({"bench": "x"}) + "\n" + json.dumps(point) + "\n")
    assert speed_new_points.main([str(record), "--model-commit", "HEAD", "--only-prefix", "n-"]) == 0
    out = capsys.readouterr().out
    assert "n-x" in out and "1 new runs: median |error|" in out


def test_a_probed_new_point_is_predicted_at_its_own_hosts_speed(tmp_path, capsys):
    """A run that recorded the host probe is predicted with the host terms scaled by it, as its speed
    plan and the fit scale them: a host-bound 7B QLoRA at micro-batch 1 on a host twice as slow as
    the reference is predicted slower than on the reference host."""
    import json

    import speed_new_points

    from cockpit.speed import model as speed

    point = _qlora_7b_point("n-slow", micro_batch=1, tokens_per_s=1000)
    probed = dict(point, name="n-probed", host_probe_ms=2 * speed.HOST_PROBE_REFERENCE_MS)
    record = tmp_path / "r.jsonl"
    record.write_text(json.dumps(point) + "\n" + json.dumps(probed) + "\n")
    assert speed_new_points.main([str(record), "--model-commit", "HEAD"]) == 0
    rates = {
        line.split()[0]: float(line.split("predicted")[1].split()[0])
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("n-")
    }
    assert rates["n-probed"] < 0.7 * rates["n-slow"]


def test_the_memory_model_on_new_points_is_read_from_git(tmp_path, capsys):
    """bench/memory_new_points.py predicts each run's NVML peak with cockpit/models/memory.py as at
    the commit given, and leaves out the fit's reference points."""
    import json

    import memory_new_points
    import speed_new_points

    from cockpit.models import memory

    module = speed_new_points.module_at("HEAD", "cockpit/models/memory.py")
    assert module.__name__ == "memory_HEAD" and hasattr(module, "estimate_memory")
    overrides = {
        "training.max_length": 512,
        "training.micro_batch_size": 4,
        "training.gradient_checkpointing": False,
        "training.optimizer": "paged_adamw_32bit",
        "lora.r": 64,
        "lora.target_modules": ["q_proj", "v_proj"],
    }
    point = {"name": "n-mem", "arch": "llama-2-7b", "method": "qlora", "overrides": overrides}
    import fit_estimator

    (_, w, _), *_ = fit_estimator.points([_write(tmp_path, dict(point, device_used_gib=1.0))])
    peak_gib = memory.estimate_memory(w).peak_bytes / memory.GIB
    record = _write(tmp_path, dict(point, device_used_gib=round(peak_gib, 6)))
    assert memory_new_points.main([str(record), "--model-commit", "HEAD"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out[:-1]] == ["n-mem"]  # S0-S2 and the seed recipe left out
    assert out[-1].startswith("memory model at HEAD, 1 new runs: median |error| 0.0%, worst ")
    assert out[-1].endswith("0.0%")  # the measured peak is the prediction, to 6 digits
    assert json.loads(record.read_text())["name"] == "n-mem"


def _write(tmp_path, point: dict):
    import json

    path = tmp_path / f"{point['name']}-{point['device_used_gib']}.jsonl"
    path.write_text(json.dumps(point) + "\n")
    return path


def _qlora_7b_point(name: str, micro_batch: int, tokens_per_s: float) -> dict:
    """A speed sweep's record line for the 7B QLoRA at 512 tokens (the config's other defaults)."""
    overrides = {"training.max_length": 512, "training.micro_batch_size": micro_batch}
    return {
        "name": name,
        "arch": "llama-2-7b",
        "method": "qlora",
        "overrides": overrides,
        "tokens_per_s": tokens_per_s,
    }
