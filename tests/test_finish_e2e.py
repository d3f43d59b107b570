"""The finish line end to end on the CPU: one real run of the tiny model with an eval split and
samples, shared by the tests that read it; `cockpit samples` and `cockpit chat` on it; and the
eval-data mistakes the trainer can only find once it reads the data."""

from __future__ import annotations

import json

import pytest
from conftest import cockpit, events, only_run, write_config

pytestmark = pytest.mark.slow
# the tests that read the shared run go to one worker, so that it is built once
SHARED = pytest.mark.xdist_group("finish-run")
PROMPTS = 2
MAX_NEW = 6
EVAL_ROWS = 16  # of the 34 held out: the eval passes stay cheap


@pytest.fixture(scope="module")
def finished(tmp_path_factory, cache_dir):
    """(run directory, events, the train command's output): 6 steps, eval every 2, checkpoints at 3 and 6."""
    import os

    from conftest import ROOT, SUPPORT

    tmp = tmp_path_factory.mktemp("finish")
    env = dict(
        os.environ,
        COCKPIT_HOME=str(tmp / "home"),
        COCKPIT_CACHE=str(cache_dir),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_CACHE=str(cache_dir / "datasets"),
        PYTHONPATH=os.pathsep.join([str(SUPPORT), str(ROOT), os.environ.get("PYTHONPATH", "")]),
        PYTHONUNBUFFERED="1",
    )
    env.pop("COCKPIT_TEST_MODULES_DIR", None)
    config = write_config(
        tmp / "c.yaml",
        {
            "training.max_steps": 6,
            "output.save_steps": 3,
            "output.checkpoints_kept": 1,
            "dataset.eval_fraction": 0.1,
            "eval.steps": 2,
            "eval.max_samples": EVAL_ROWS,
            "eval.prompts": PROMPTS,
            "eval.max_new_tokens": MAX_NEW,
        },
    )
    proc = cockpit(
        ["train", str(config), "--no-ui", "--log-every", "0", "--skip-preflight"], env, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = only_run(env)
    return run, events(run), proc.stdout, env


@SHARED
def test_eval_split_is_held_out_and_evaluated_every_eval_steps(finished):
    run, evs, out, _ = finished
    data = next(e for e in evs if e["type"] == "data")
    assert data["samples"] == 345 - round(345 * 0.1)  # the held-out rows are not trained on
    assert data["eval_source"].startswith("eval_fraction 0.1 of 345 samples, seed 42")
    evals = [e for e in evs if e["type"] == "eval"]
    assert [(e["step"], e["stage"]) for e in evals] == [(0, "base"), (2, "train"), (4, "train"), (6, "train")]
    assert data["eval_samples"] == EVAL_ROWS  # eval.max_samples of the held-out rows
    assert all(e["eval_samples"] == EVAL_ROWS and e["eval_tokens"] > 0 for e in evals)
    assert evals[-1]["eval_loss"] < evals[0]["eval_loss"]  # the held-out loss falls as it trains
    # the base's eval comes before the first step; each eval before its step's log event
    types = [(e["type"], e.get("step")) for e in evs]
    assert types.index(("eval", 0)) < types.index(("log", 1))
    assert types.index(("eval", 4)) < types.index(("log", 4))
    # the token cache holds what was trained on: the training rows only
    import datasets

    (cached,) = list((run / "data-cache").glob("*/state.json"))
    assert len(datasets.load_from_disk(str(cached.parent))) == data["samples"]
    assert "eval: base model, before step 1: loss" in out and " eval " in out.split("step 6/6")[1]


@SHARED
def test_the_best_checkpoint_by_eval_loss_is_marked_and_kept(finished):
    run, evs, out, _ = finished
    checkpoints = [e for e in evs if e["type"] == "checkpoint"]
    assert [c["step"] for c in checkpoints] == [3, 6]
    assert checkpoints[0]["eval_loss"] is None  # no eval at step 3 (every 2 steps)
    losses = {e["step"]: e["eval_loss"] for e in evs if e["type"] == "eval"}
    assert checkpoints[1]["eval_loss"] == pytest.approx(losses[6])
    done = evs[-1]
    assert done["type"] == "done" and done["best_checkpoint"] == "checkpoint-6"
    assert done["eval_loss"] == pytest.approx(losses[6])
    assert (run / "checkpoints" / done["best_checkpoint"]).is_dir()
    assert "(best: checkpoint-6," in out


@SHARED
def test_samples_before_step_one_at_each_checkpoint_and_at_the_end(finished):
    _run, evs, out, _ = finished
    samples = [e for e in evs if e["type"] == "sample"]
    stages = [(s["stage"], s["checkpoint"], s["index"]) for s in samples]
    assert stages == [
        ("base", None, 0),
        ("base", None, 1),
        ("checkpoint", "checkpoint-3", 0),
        ("checkpoint", "checkpoint-3", 1),
        ("checkpoint", "checkpoint-6", 0),
        ("checkpoint", "checkpoint-6", 1),
        ("final", "final", 0),
        ("final", "final", 1),
    ]
    types = [e["type"] for e in evs]
    assert types.index("sample") < types.index("log")  # the base answers before step 1
    for s in samples:
        assert 0 < s["new_tokens"] <= MAX_NEW and s["finish"] in ("eos", "stop", "length")
        assert s["seed"] == 42 and s["style"] == "llama2" and s["prompt"] and s["reference"]
    # greedy with the adapter off: the base answers are the untrained model's, asked twice the same
    assert samples[0]["prompt"] == samples[6]["prompt"]
    assert "sample 1/2 (base," in out and "sample 2/2 (final," in out


@SHARED
def test_cockpit_samples_json_and_text(finished):
    run, evs, _, env = finished
    proc = cockpit(["samples", str(run), "--json"], env)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["labels"] == ["base", "checkpoint-3", "checkpoint-6", "final"]
    assert data["max_new_tokens"] == MAX_NEW and data["seed"] == 42 and len(data["prompts"]) == PROMPTS
    first = data["prompts"][0]
    assert [a["label"] for a in first["answers"]] == data["labels"]
    sampled = [e for e in evs if e["type"] == "sample" and e["index"] == 0]
    assert [a["output"] for a in first["answers"]] == [s["output"] for s in sampled]
    text = cockpit(["samples", str(run)], env)
    assert text.returncode == 0 and "[1] " in text.stdout and "checkpoint-6:" in text.stdout


@SHARED
def test_cockpit_chat_one_shot_streams_the_answer_and_says_how_it_ended(finished):
    run, _, _, env = finished
    proc = cockpit(
        ["chat", str(run), "--prompt", "What is the opposite of loud?", "--max-new-tokens", "5"], env
    )
    assert proc.returncode == 0, proc.stderr
    assert (
        "with the adapter final of" in proc.stderr
        and "prompts as llama2; stops at: </s>, [INST]" in proc.stderr
    )
    end = [line for line in proc.stderr.splitlines() if line.startswith("[")][-1]
    assert end.split(":")[0] in ("[eos", "[stop", "[length") and "tokens in" in end
    tokens = int(end.split(": ")[1].split(" tokens")[0])
    assert 0 < tokens <= 5
    assert (run / "chat.log").is_file()  # the backend's library output, not the terminal


@SHARED
def test_cockpit_chat_refuses_a_checkpoint_that_does_not_exist(finished):
    run, _, _, env = finished
    proc = cockpit(["chat", str(run), "--checkpoint", "4", "--prompt", "hi"], env)
    assert proc.returncode == 2
    assert "has no complete checkpoint-4; its complete checkpoints are: steps 6" in proc.stderr
    assert "Leave --checkpoint out for the final adapter" in proc.stderr


def test_an_eval_split_the_dataset_does_not_have(tmp_path, env):
    import datasets

    rows = [{"text": f"<s>[INST] q{i} [/INST] a{i} </s>"} for i in range(20)]
    folder = tmp_path / "data"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)}).save_to_disk(str(folder))
    config = write_config(
        tmp_path / "c.yaml", {"dataset.path": str(folder), "dataset.eval_split": "validation"}
    )
    proc = cockpit(["train", str(config), "--no-ui", "--skip-preflight"], env)
    assert proc.returncode == 1
    error = next(e for e in events(only_run(env)) if e["type"] == "error")
    assert error["kind"] == "data" and error["phase"] == "preparing_data"
    assert error["message"] == f"dataset.eval_split: 'validation' not in {str(folder)!r}; splits are: train"


@pytest.mark.bench
def test_the_finish_line_bench_smoke(tmp_path, env):
    import subprocess
    import sys

    from conftest import ROOT

    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "finish_line.py"), "--smoke", "--out", str(out)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((out / "finish_line.json").read_text())
    assert result["status"] == "finished" and result["train_exit"] == 0
    assert [e["step"] for e in result["evals"]] == [0, 3, 6]
    assert {s["stage"] for s in result["samples"]} == {"base", "checkpoint", "final"}
    assert result["best_checkpoint"] in ("checkpoint-3", "checkpoint-6")
    assert result["samples_cli"] == {
        "exit": 0,
        "labels": ["base", "checkpoint-3", "checkpoint-6", "final"],
        "prompts": 2,
    }
    assert result["chat"]["exit"] == 0 and result["chat"]["checkpoint"] == "best"
    assert result["chat"]["loaded"].startswith("loaded in") and result["chat"]["ended"].startswith("[")
    assert result["eval_and_samples_share_of_runtime"] > 0


@SHARED
def test_work_between_steps_is_announced_by_a_busy_event(finished):
    """An eval pass, sampling and a checkpoint save say nothing until they end: the trainer says when
    each begins, so a client judges the silence by that work, not by the steps (cockpit.live.stall)."""
    from cockpit.run.state import RunState

    _run, evs, _out, _env = finished
    ends = {"eval": "eval", "checkpoint": "save", "sample": "samples"}
    checked = set()
    for i, e in enumerate(evs):
        if e["type"] not in ends or (e["type"] == "sample" and e["index"] != 0):
            continue
        before = next(b for b in reversed(evs[:i]) if b["type"] in ("busy", "log"))
        assert before["type"] == "busy" and before["what"] == ends[e["type"]], (e, before)
        assert before["step"] == e["step"]
        checked.add(e["type"])
    assert checked == {"eval", "checkpoint", "sample"}
    state = RunState()
    for e in evs:
        state.apply(e)
    assert state.busy is None and set(state.busy_s) == {"eval", "save", "samples"}
