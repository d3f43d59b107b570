"""The live view's GPU benchmarks (bench/attach_overhead.py, input_bound.py, record_example.py) in
their `--smoke` mode: the shipped tiny model on the CPU, the real trainer, the real TUI in a
pseudo-terminal. What they measure needs the GPU machine; here they must run end to end and say
what they saw."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT
from support import benches

pytestmark = pytest.mark.slow


def run_bench(script: str, tmp_path, env, *args: str) -> dict:
    out = tmp_path / "out"
    benches.run_bench(script, env, "--smoke", "--out", str(out), *args)
    return json.loads((out / script.replace(".py", ".json")).read_text())


@pytest.mark.bench
def test_attach_overhead_runs_detached_then_attached(tmp_path, env):
    result = run_bench("attach_overhead.py", tmp_path, env, "--steps", "16")
    detached, attached = result["runs"]
    assert (detached["kind"], attached["kind"]) == ("detached", "attached")
    for run in (detached, attached):
        assert run["status"] == "finished" and run["view_drawn"] and run["trainer_ended"]
        assert run["steps_measured"] == 16 - 2 and run["tokens_per_s"] > 0
    assert detached["tui_exit"] == 4  # `d`: detached, training went on without it
    assert attached["tui_exit"] == 0 and attached["tui_cpu_s"] > 0  # `q` once the run had finished
    assert 0 < attached["tui_start_cpu_s"] < attached["tui_cpu_s"]  # imports and the first screen
    assert attached["tui_core_share_drawn"] > 0  # the live view's own, from then on
    assert result["ratio_attached_over_detached"] == pytest.approx(
        result["tokens_per_s_attached_mean"] / result["tokens_per_s_detached_mean"], abs=1e-3
    )
    assert result["bytecode"].startswith("compiled before the timed runs: ")
    assert result["tui_core_share_max"] == attached["tui_core_share"]
    assert result["tui_target_met"] == (attached["tui_core_share"] <= 0.03)


def test_a_py_spy_profile_is_summed_by_function_and_by_package(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    from pyspy_profile import summary

    raw = tmp_path / "raw.txt"
    raw.write_text(
        "<module> (cockpit/__main__.py:3);App.run (textual/app.py:10);"
        "Compositor.render (textual/_compositor.py:5) 6\n"
        "<module> (cockpit/__main__.py:3);App.run (textual/app.py:12);show (screens/run/view.py:20) 3\n"
        "<module> (cockpit/__main__.py:3);_find_and_load (<frozen importlib._bootstrap>:1) 1\n"
    )
    got = summary(raw)
    assert got["samples"] == 10
    top = dict((name, share) for share, name in got["top"])
    assert top["<module> (cockpit/__main__.py)"] == 1.0
    assert top["App.run (textual/app.py)"] == 0.9  # two line numbers, one function
    assert top["show (screens/run/view.py)"] == 0.3
    assert got["by_package"] == {"textual": 0.6, "screens": 0.3, "<frozen importlib>": 0.1}


def test_interleaved_spans_count_the_steps_that_began_and_ended_inside_them(monkeypatch):
    """bench/attach_overhead.py --order interleaved: a step counts for a span only when it began
    and ended inside it (the attach and the detach fall between spans); each kind's tokens/s is over
    its spans' pooled steps, and its spans' pattern has the two kinds centred on the same time."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import attach_overhead as ao

    def log(end: float, step_s: float) -> dict:
        return {"type": "log", "ts": end, "step_time_s": step_s}

    spans = [
        {"kind": "detached", "start": 0.0, "end": 10.0},
        {"kind": "attached", "start": 11.0, "end": 21.0},
        {"kind": "detached", "start": 22.0, "end": 32.0},
    ]
    events = [log(t, 2.0) for t in (2.0, 4.0, 6.0, 8.0, 10.0)]  # the first span: five whole steps
    events += [log(12.0, 2.0)]  # began at 10.0, before the attached span: not counted
    events += [log(t, 2.5) for t in (14.0, 16.5, 19.0, 21.5)]  # the last ends past the span
    events += [log(t, 2.0) for t in (24.0, 26.0, 28.0)] + [{"type": "gpu", "ts": 25.0}]
    pooled = ao.time_spans(spans, events, tokens_per_step=1000)
    assert [s["steps"] for s in spans] == [5, 3, 3]
    assert spans[1]["step_s_median"] == 2.5 and spans[1]["tokens_per_s"] == 400.0
    assert pooled == {"attached": 400.0, "detached": 500.0}
    empty = [{"kind": "attached", "start": 40.0, "end": 50.0}]
    assert ao.time_spans(empty, events, 1000) == {"attached": None, "detached": None}
    assert empty[0]["steps"] == 0 and "tokens_per_s" not in empty[0]
    units = [
        (k, u, sum(w for _, w in ao.INTERLEAVE_PATTERN[:i]) + u / 2)
        for i, (k, u) in enumerate(ao.INTERLEAVE_PATTERN)
    ]
    centre = {
        kind: sum(u * c for k, u, c in units if k == kind) / sum(u for k, u, _ in units if k == kind)
        for kind in ("attached", "detached")
    }
    assert centre["attached"] == centre["detached"]


@pytest.mark.bench
def test_input_bound_burns_the_collate_time_in_every_step(tmp_path, env):
    # 16 steps (~2.4 s of collation): the telemetry recorder, a process the trainer starts, samples
    # once a second from its start; on a loaded box a shorter run could end before its first sample
    result = run_bench("input_bound.py", tmp_path, env, "--collate-ms", "150", "--steps", "16")
    assert result["status"] == "finished" and result["dataloader_num_workers"] == 0
    # one micro-batch a step here, collated after 150 ms of CPU in the training process
    assert result["collate_s_per_step"] == 0.15 and result["step_s_median"] >= 0.15
    assert not result["gpu_telemetry"]  # no GPU: the rule has no GPU wait to judge here
    assert result["doctor_recorded"]["bins"] >= 1  # the recorder's telemetry was read back


@pytest.mark.bench
def test_record_example_copies_a_small_run_that_replays(tmp_path, env):
    result = run_bench("record_example.py", tmp_path, env, "--steps", "40")  # long enough to be sampled
    example = tmp_path / "out" / "h200-run"
    assert result["status"] == "finished" and result["under_1_mb"]
    assert sorted(p.name for p in example.iterdir()) == [
        "backend.log",
        "config.yaml",
        "events.jsonl",
        "telemetry.jsonl",
    ]
    assert result["replay"]["exit_code"] == 0
    assert any("finished" in line for line in result["replay"]["last_lines"])


def check_doctor_cases(result: dict) -> dict:
    cases = {c["case"]: c for c in result["cases"]}
    assert result["skipped"] == [] and result["budget_s"] is None  # no budget unless asked, on the CPU
    for case in cases.values():
        for run in case["runs"]:
            assert run["status"] == "finished" and run["real_tokens_per_s"] > 0
            assert run["tokens_per_micro_batch"] > 0 and 0 <= run["data_wait_share"] <= 1
        assert case["gain"] == pytest.approx(
            case["runs"][1]["real_tokens_per_s"] / case["runs"][0]["real_tokens_per_s"], abs=1e-3
        )
        # no GPU here: nothing named (the GPU rules need NVML), so live and replay agree
        assert all(not v["named_live"] and v["gone_after_fix"] is not False for v in case["rules"].values())
        assert result["live_and_replay_agree"][case["case"]]
    return cases


@pytest.mark.bench
def test_doctor_fixes_runs_each_case_before_and_after(tmp_path, env):
    result = run_bench(
        "doctor_fixes.py", tmp_path, env, "--steps", "4", "--only", "demo-packed", "slow-loader"
    )
    cases = check_doctor_cases(result)
    assert list(cases) == ["demo-packed", "slow-loader"]
    demo = cases["demo-packed"]
    assert [r["label"] for r in demo["runs"]] == ["before", "after", "wrong fix (more loader workers)"]
    # no speed model on the CPU: the finding's fallback, a micro-batch twice as large
    assert demo["fix"]["training.micro_batch_size"] == 8 and demo["runs"][1]["micro_batch"] == 8
    slow = cases["slow-loader"]
    assert slow["fix"] == {"training.dataloader_num_workers": 4}  # no finding to name them on the CPU: 4
    # the collator's burn is measured as data wait in the run that has no loader workers
    assert slow["runs"][0]["data_wait_share"] > slow["runs"][1]["data_wait_share"]


@pytest.mark.bench
def test_doctor_fixes_cpu_bound_fp32_and_foreign_cases(tmp_path, env):
    result = run_bench(
        "doctor_fixes.py", tmp_path, env, "--steps", "4", "--only", "cpu-bound", "fp32", "foreign"
    )
    cases = check_doctor_cases(result)
    assert list(cases) == ["cpu-bound", "fp32", "foreign"]
    cpu = cases["cpu-bound"]
    assert cpu["fix"] == {"training.logging_steps": 2}
    # the slow logging callback runs at every log: logging half as often spends less of each step there
    assert cpu["runs"][0]["logs_measured"] > cpu["runs"][1]["logs_measured"]
    # fp32 and foreign share their after: one run of the plain LoRA, alone
    assert cases["fp32"]["runs"][1] == cases["foreign"]["runs"][1]
    assert cases["fp32"]["runs"][0]["versions"]["precision"] == "fp32"
    assert cases["foreign"]["rules"]["foreign_process"]["named_replayed"] is None  # no process lists recorded
    # the lists the live doctor judged by, read beside the run (none on a CPU), and the trainer's pid
    seen = cases["foreign"]["gpu_processes_seen"]
    assert seen["by_gpu"] == {} and seen["error"] is not None
    assert isinstance(cases["foreign"]["trainer_pid"], int)


def test_doctor_fixes_plans_its_budget(tmp_path, env):
    """--budget-s skips (and names) the cases that would not end in time, before any run."""
    result = run_bench(
        "doctor_fixes.py", tmp_path, env, "--budget-s", "1", "--only", "demo-packed", "foreign"
    )
    assert result["cases"] == []
    assert [s["case"] for s in result["skipped"]] == ["demo-packed", "foreign"]
    assert "--budget-s 1: needs ~" in result["skipped"][0]["why"]


@pytest.mark.bench
def test_tui_cpu_measures_the_start_and_the_steady_share_of_a_played_run(tmp_path, env):
    """bench/tui_cpu.py, shortened: the TUI of `cockpit train` with a played trainer and a fake
    H100, its start-up CPU and its share over a window; then the pieces alone (--micro)."""
    out = tmp_path / "tui_cpu.json"
    bench = [sys.executable, str(ROOT / "bench" / "tui_cpu.py")]
    done = subprocess.run(
        [*bench, "--rounds", "1", "--window-s", "3", "--settle-s", "1", "--out", str(out)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = json.loads(out.read_text())["runs"]
    assert run["tui_exit"] == 4 and run["steps_played"] >= 1  # detached (`d`); the player played
    assert run["start_cpu_s"] > 0 and 0 < run["steady_share"] < 1 and run["out_bytes_per_s"] > 0
    micro = subprocess.run(
        [*bench, "--micro"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert micro.returncode == 0, micro.stderr[-3000:]
    pieces = json.loads(micro.stdout)[str(ROOT)]
    assert pieces["cockpit"].startswith(str(ROOT)) and pieces["sample_ms"] > 0
    assert pieces["plot_50000_points_ms"] > pieces["plot_1000_points_ms"] > 0
