"""The cost side of the finish line with the real trainer on the CPU (tiny model): cost.on_end after the final
save (from --then), the summary a headless run prints, `cockpit runs --json` on it, report_to
tensorboard with no secret written; the budget stopping a run with a checkpoint and refusing a
restart; on_end after a failure, failing, once. One finished run is shared by the tests that
only read it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import ROOT, SUPPORT, cockpit, events, only_run, wait_for, write_config

from cockpit.money import end_runner
from cockpit.run.rundir import RunDir
from train_backend import test_aids

pytestmark = pytest.mark.slow
# the tests that read the shared run go to one worker, so that it is built once
SHARED = pytest.mark.xdist_group("finish-cost-run")
SECRETS = {
    "HF_TOKEN": "hf_FINISHsecretABCDEFGHIJ0123456789",
    "WANDB_API_KEY": "wandbFINISHsecret0123456789abcd",
}
# what the end command sees: the adapter is written (final/ listed) and the run's end recorded
ON_END = (
    'ls final > seen_final.txt; grep -c \'"type":"done"\' events.jsonl > seen_done.txt; echo ran >> count.txt'
)


def make_env(root: Path, cache: Path) -> dict:
    (root / "modules").mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update(
        COCKPIT_HOME=str(root / "home"),
        COCKPIT_CACHE=str(cache),
        COCKPIT_TEST_MODULES_DIR=str(root / "modules"),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_CACHE=str(cache / "datasets"),
        PYTHONPATH=os.pathsep.join(
            p for p in [str(SUPPORT), str(ROOT), os.environ.get("PYTHONPATH", "")] if p
        ),
        PYTHONUNBUFFERED="1",
        **SECRETS,
    )
    return env


@pytest.fixture(scope="module")
def finished(tmp_path_factory, cache_dir):
    """One real run, 6 steps, a checkpoint every 3, report_to tensorboard, on_end from --then."""
    root = tmp_path_factory.mktemp("finished")
    env = make_env(root, cache_dir)
    config = write_config(
        root / "recipe.yaml",
        {"training.max_steps": 6, "output.save_steps": 3, "report_to": ["tensorboard"]},
    )
    proc = cockpit(["train", str(config), "--no-ui", "--skip-preflight", "--then", ON_END], env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = only_run(env)
    wait_for(lambda: (run / "count.txt").exists(), 60, what="the end command")
    return env, run, proc


@SHARED
def test_on_end_runs_once_after_the_final_save(finished):
    _env, run, proc = finished
    seen = (run / "seen_final.txt").read_text().split()
    assert "adapter_model.safetensors" in seen and "adapter_config.json" in seen
    assert (run / "seen_done.txt").read_text().strip() == "1"  # the run's end was on disk before it
    wait_for(lambda: (run / "count.txt").read_text() == "ran\n", 10, what="one run of on_end")
    evs = events(run)
    types = [e["type"] for e in evs]
    assert types.index("done") < types.index("end_command")
    ended = [e for e in evs if e["type"] == "end_command"]
    assert [e["state"] for e in ended] == ["started", "finished"] and ended[-1]["run_status"] == "finished"
    log = (run / "backend.log").read_text()
    assert "on_end: the run finished; running: ls final" in log and "on_end: done in" in log
    assert "when the run ends: ls final" in proc.stderr  # said at the start
    # a second runner for the same ending does nothing
    pid = json.loads((run / "trainer.json").read_text())["pid"]
    assert end_runner.run_end(RunDir(run), pid) == 0
    assert (run / "count.txt").read_text() == "ran\n"


@SHARED
def test_the_headless_run_ends_with_its_summary(finished):
    _env, run, proc = finished
    lines = proc.stdout.splitlines()
    at = lines.index("summary:")
    summary = lines[at + 1 :]
    assert summary[0].startswith("finished: step 6/6 in ") and " at $2.00/h" in summary[0]
    last_loss = [e for e in events(run) if e["type"] == "log"][-1]["loss"]
    assert summary[1].startswith(f"train loss {last_loss:.4f} (last logged; run mean ")
    assert summary[1].endswith(", no eval")
    assert summary[2] == f"adapter: {run / 'final'}"
    assert summary[3:5] == [f"next: cockpit chat {run.name}", f"      cockpit export {run.name}"]
    assert summary[5].startswith("on_end: ls final > seen_final.txt")
    assert any("on_end: the run finished; running:" in line for line in lines[:at])


@SHARED
def test_runs_json_describes_the_run(finished):
    env, run, _proc = finished
    proc = cockpit(["runs", "--json"], env)
    (row,) = json.loads(proc.stdout)
    evs = events(run)
    assert row["run"] == run.name and row["status"] == "finished" and row["config"] == "recipe.yaml"
    assert row["step"] == 6 and row["total_steps"] == 6
    assert row["final_loss"] == [e for e in evs if e["type"] == "log"][-1]["loss"]
    assert row["started_ts"] == next(e for e in evs if e["type"] == "hello")["ts"]
    assert row["duration_s"] > 0
    # duration_s is rounded to 0.01 s, the cost is not: they agree within that rounding
    assert row["cost_usd"] == pytest.approx(2.0 * row["duration_s"] / 3600, abs=2.0 * 0.0051 / 3600)
    assert row["checkpoints_bytes"] > 0 and row["adapter"] == str(run / "final")


@SHARED
def test_report_to_tensorboard_writes_into_the_run_and_no_secret_anywhere(finished):
    _env, run, _proc = finished
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    for path in run.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for secret in SECRETS.values():
                assert secret.encode() not in data, f"{secret[:6]}... in {path}"


def test_the_budget_stops_the_run_with_a_checkpoint_and_a_restart_is_refused(tmp_path, cache_dir):
    env = make_env(tmp_path, cache_dir)
    # $3.60/h is $0.001 a second: the model's load alone spends the $0.001 budget, so the first
    # step's end reaches it
    overrides = {"training.max_steps": 20, "cost.price_per_hour": 3.6, "cost.max_usd": 0.001}
    config = write_config(tmp_path / "c.yaml", overrides)
    proc = cockpit(["train", str(config), "--no-ui", "--skip-preflight"], env)
    assert proc.returncode == 3, proc.stdout + proc.stderr  # stopped
    run = only_run(env)
    evs = events(run)
    reached = next(e for e in evs if e["type"] == "budget")
    done = evs[-1]
    assert done["type"] == "done" and done["status"] == "stopped" and done["reason"] == "budget"
    assert reached["cost_usd"] >= 0.001 and reached["max_usd"] == 0.001
    assert done["step"] == reached["step"] < 20
    checkpoint = next(e for e in evs if e["type"] == "checkpoint" and e["step"] == done["step"])
    assert Path(checkpoint["path"]).is_dir() and (Path(checkpoint["path"]) / "cockpit-complete.json").exists()
    assert "stopped at the budget ($0.0010)" in proc.stdout
    assert f"next: cockpit restart {run.name} --max-usd N" in proc.stdout
    again = cockpit(["restart", run.name, "--no-ui"], env)
    assert again.returncode == 2
    assert f"cost.max_usd is $0.0010 but run {run.name} has already cost $" in again.stderr
    assert sum(e["type"] == "hello" for e in events(run)) == 1  # no trainer started


def test_on_end_after_a_failure_that_fails_itself(tmp_path, cache_dir):
    env = {**make_env(tmp_path, cache_dir), **test_aids.environ(fail_at_step=4)}
    overrides = {
        "training.max_steps": 6,
        "output.save_steps": 2,
        "cost.on_end": 'echo "status $COCKPIT_RUN_STATUS" >> ends.txt; exit 3',
    }
    proc = cockpit(["train", str(write_config(tmp_path / "c.yaml", overrides)), "--no-ui"], env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    run = only_run(env)
    wait_for(lambda: any(e.get("state") == "failed" for e in events(run) if e["type"] == "end_command"), 60)
    assert (run / "ends.txt").read_text() == "status failed\n"
    assert "on_end FAILED (exit 3)" in (run / "backend.log").read_text()
    assert "on_end FAILED (exit 3)" in proc.stdout and "the run directory is intact" in proc.stdout
    error = next(e for e in events(run) if e["type"] == "error")
    assert error["checkpoints"] == ["checkpoint-2"] and (run / "checkpoints" / "checkpoint-2").is_dir()
    assert (run / "config.yaml").is_file() and "summary:" in proc.stdout
    pid = json.loads((run / "trainer.json").read_text())["pid"]
    assert end_runner.run_end(RunDir(run), pid) == 0  # never twice
    assert (run / "ends.txt").read_text() == "status failed\n"


def test_a_wall_clock_step_mid_run_bills_nothing_and_is_said_once(tmp_path, cache_dir):
    """The clock stepped +1 h mid-run (as NTP does): the run was billed the hour ($0.038 -> $2.04) and
    cost.max_usd stopped it at once. Time and cost now come from the trainer's monotonic clock
    (mono_s), and the step is said once."""
    import itertools
    import re

    from conftest import cockpit_bg, wait_event, wait_run_dir

    from cockpit.run import journal

    env = make_env(tmp_path, cache_dir)
    trigger = tmp_path / "step-the-clock"
    env["COCKPIT_TEST_CLOCK_STEP"] = f"{trigger}:3600"
    env.update(test_aids.environ(step_sleep_s=0.2))
    overrides = {"training.max_steps": 30, "cost.max_usd": 0.5}  # $2/h
    client = cockpit_bg(["train", str(write_config(tmp_path / "c.yaml", overrides)), "--no-ui"], env)
    try:
        run = wait_run_dir(env)
        wait_event(run, lambda e: e["type"] == "log" and e["step"] >= 3, timeout=240)
        trigger.touch()
        out, err = client.communicate(timeout=300)
    finally:
        client.kill()
    assert client.returncode == 0, out + err  # finished: not stopped by the budget at the step
    evs = events(run)
    logs = [e for e in evs if e["type"] == "log"]
    assert any(b["ts"] - a["ts"] > 3000 for a, b in itertools.pairwise(logs)), "the clock was not stepped"
    said = [
        e for e in evs if e["type"] == "warning" and "the wall clock was stepped by +1:00:" in e["message"]
    ]
    assert len(said) == 1 and "counted on the monotonic clock" in said[0]["message"]
    assert not any(e["type"] == "budget" for e in evs)
    state = journal.fold(run / "events.jsonl")
    assert state.billed_s() < 600 and state.cost_so_far() < 0.35, state.billed_s()
    elapsed = re.findall(r"elapsed (\d+):(\d\d):(\d\d)", out)
    assert elapsed and all(int(h) == 0 and int(m) < 10 for h, m, _s in elapsed), elapsed[-3:]
    assert "no event from the trainer" not in out
