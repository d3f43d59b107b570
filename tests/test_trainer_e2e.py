"""The real thing, end to end on the CPU: the CLI, the trainer subprocess, the channel, the run directory."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import time
from pathlib import Path

import psutil
import pytest
from conftest import (
    cockpit,
    cockpit_bg,
    events,
    has_cuda,
    only_run,
    wait_event,
    wait_for,
    wait_run_dir,
    write_config,
)

from cockpit.protocol.events import undeclared
from cockpit.run import process, rundir
from cockpit.run.status import run_status
from train_backend import test_aids

pytestmark = pytest.mark.slow
SECRET = "hf_TESTSECRETabcdefghijklmnop123456"


def step_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if re.search(r"T\d\d:\d\d:\d\d step \d+/", line)]


def modules_of(env: dict, role: str) -> set[str]:
    found = set()
    for path in Path(env["COCKPIT_TEST_MODULES_DIR"]).glob(f"{role}-*.txt"):
        found |= set(path.read_text().split())
    assert found, f"no {role} process recorded its modules"
    return found


def test_full_run_headless(tmp_path, env):
    env = dict(env, HF_TOKEN=SECRET)
    config = write_config(tmp_path / "c.yaml")
    proc = cockpit(["train", str(config), "--no-ui", "--log-every", "0"], env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = only_run(env)
    evs = events(run)
    types = [e["type"] for e in evs]
    for expected in ("hello", "phase", "data", "model", "train_begin", "log", "checkpoint", "done"):
        assert expected in types
    assert types.index("data") < types.index("model") < types.index("train_begin") < types.index("log")
    # every field the real trainer sends is declared in cockpit/protocol/events.py
    assert {e["type"]: undeclared(e) for e in evs if undeclared(e)} == {}
    assert evs[-1]["type"] == "done" and evs[-1]["status"] == "finished" and evs[-1]["step"] == 8
    logs = [e for e in evs if e["type"] == "log"]
    assert [e["step"] for e in logs] == list(range(1, 9))
    last = logs[-1]
    memory = ("mem_allocated_bytes", "mem_reserved_bytes", "mem_peak_bytes") if has_cuda() else ("rss_bytes",)
    for field in (
        "loss",
        "learning_rate",
        "grad_norm",
        "epoch",
        "tokens_per_s",
        "samples_per_s",
        "step_time_s",
        "tokens_seen",
        "data_wait_s",
        "compute_s",
        "data_wait_share",
        "tokens_per_micro_batch",
        "gc_s",
        "gc_full",
        *memory,
    ):
        assert last[field] is not None, field
    assert last["tokens_per_s"] > 0 and last["total_steps"] == 8
    # micro-batches of 4 rows of at most max_length 64; the wait is a share of the window
    assert 0 < last["tokens_per_micro_batch"] <= 4 * 64 and 0 <= last["data_wait_share"] <= 1
    assert last["gc_s"] >= 0 and last["gc_full"] >= 0  # Python's collector, timed per step
    data = next(e for e in evs if e["type"] == "data")
    assert data["samples"] == 345 and data["tokens_min"] > 0 and data["tokens_max"] >= data["tokens_p95"]
    # plain (non-terminal) output: timestamped lines, one per step with --log-every 0
    assert len(step_lines(proc.stdout)) == 8 and "done: finished at step 8" in proc.stdout
    # the quick preflight's summary comes first, then the run's own timestamped lines
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("preflight (quick"), lines[0]
    block_end = next((i for i, line in enumerate(lines) if "--skip-preflight" in line), 0)
    assert lines[block_end + 1][:4].isdigit(), lines[: block_end + 2]

    # run directory: owner-only, complete checkpoints, final adapter, no secret anywhere
    assert stat.S_IMODE(run.stat().st_mode) == 0o700
    assert (
        stat.S_ISFIFO((run / "control").stat().st_mode)
        and stat.S_IMODE((run / "control").stat().st_mode) == 0o600
    )
    kept = rundir.RunDir(run).complete_checkpoints()
    assert [p.name for p in kept] == ["checkpoint-4", "checkpoint-8"]
    assert (run / "final" / "adapter_config.json").is_file()
    for name in ("events.jsonl", "backend.log", "config.yaml", "trainer.json"):
        assert SECRET not in (run / name).read_text(errors="replace"), name
    assert SECRET not in proc.stdout + proc.stderr

    listed = json.loads(cockpit(["runs", "--json"], env).stdout)
    assert listed[0]["status"] == "finished" and listed[0]["step"] == 8

    # attach to the finished run: the whole history again, same ending
    attach = cockpit(["attach", run.name, "--no-ui", "--log-every", "0"], env, timeout=60)
    assert attach.returncode == 0
    assert step_lines(attach.stdout) == step_lines(proc.stdout) and "done: finished" in attach.stdout

    # the recorder wrote the telemetry history beside the events, and left with the trainer
    from cockpit.telemetry.history import read_history

    history = read_history(run / "telemetry.jsonl")
    assert history.bins and history.bins[-1]["host"]["trainer_rss_max_bytes"] > 0
    pgid = json.loads((run / "trainer.json").read_text())["pgid"]
    wait_for(lambda: process.group_members(pgid) == [], 10, what="the recorder to end with the trainer")

    # import boundaries on the real processes
    assert "textual" not in modules_of(env, "client") and "torch" not in modules_of(env, "client")
    trainer_modules = modules_of(env, "trainer")
    assert "torch" in trainer_modules and "textual" not in trainer_modules
    assert not {"screens", "widgets"} & trainer_modules


def test_trainer_sigkilled_then_restart_continues_the_step_count(tmp_path, env):
    config = write_config(tmp_path / "c.yaml", {"training.max_steps": 14, "output.save_steps": 5})
    env = {**env, **test_aids.environ(step_sleep_s=0.25)}
    proc = cockpit(["train", str(config), "--no-ui", "--check"], env)
    assert proc.returncode == 0
    client = cockpit_bg(["train", str(config), "--no-ui"], env)
    run = wait_run_dir(env)
    wait_event(run, lambda e: e["type"] == "checkpoint" and e["step"] == 5)
    wait_event(run, lambda e: e["type"] == "log" and e["step"] >= 7)
    trainer = json.loads((run / "trainer.json").read_text())
    os.killpg(trainer["pgid"], signal.SIGKILL)
    assert client.wait(timeout=30) == 1  # the client saw the trainer die without a final event
    out = client.stdout.read()
    assert "killed by SIGKILL" in out

    listed = json.loads(cockpit(["runs", "--json"], env).stdout)
    assert listed[0]["status"] == "failed"
    kept = rundir.RunDir(run).complete_checkpoints()
    assert kept[-1].name == "checkpoint-5"

    restart = cockpit(["restart", run.name, "--no-ui", "--log-every", "0"], env)
    assert restart.returncode == 0, restart.stdout + restart.stderr
    evs = events(run)
    hellos = [e for e in evs if e["type"] == "hello"]
    assert len(hellos) == 2 and hellos[1]["resume_from"].endswith("checkpoint-5")
    second = evs[evs.index(hellos[1]) :]
    steps = [e["step"] for e in second if e["type"] == "log"]
    assert steps[0] == 6 and steps[-1] == 14
    assert second[-1]["type"] == "done" and second[-1]["step"] == 14
    for ckpt in rundir.RunDir(run).complete_checkpoints():
        state = json.loads((ckpt / "trainer_state.json").read_text())
        assert state["global_step"] == int(ckpt.name.split("-")[1])


def test_client_sigkilled_training_finishes_and_attach_follows_live(tmp_path, env):
    config = write_config(tmp_path / "c.yaml", {"training.max_steps": 16})
    env = {**env, **test_aids.environ(step_sleep_s=0.3)}
    client = cockpit_bg(["train", str(config), "--no-ui"], env)
    run = wait_run_dir(env)
    wait_event(run, lambda e: e["type"] == "log" and e["step"] >= 2)
    client.kill()
    client.wait(timeout=10)
    assert process.is_alive(rundir.RunDir(run)), "the trainer must outlive its client"
    # a new client attaches: replays history, then follows live to the end
    attach = cockpit(["attach", "--no-ui", "--log-every", "0"], env, timeout=120)
    assert attach.returncode == 0, attach.stdout + attach.stderr
    assert "step 1/16" in attach.stdout and "done: finished at step 16" in attach.stdout
    assert events(run)[-1]["type"] == "done"


def test_commands_pause_resume_save_stop(tmp_path, env):
    config = write_config(tmp_path / "c.yaml", {"training.max_steps": 200, "output.save_steps": 1000})
    env = {**env, **test_aids.environ(step_sleep_s=0.2)}
    client = cockpit_bg(["train", str(config), "--no-ui", "--log-every", "0"], env)
    run = wait_run_dir(env)
    wait_event(run, lambda e: e["type"] == "log" and e["step"] >= 2)

    assert cockpit(["pause"], env).returncode == 0
    paused = wait_event(run, lambda e: e["type"] == "paused")
    time.sleep(1.0)
    assert run_status(rundir.RunDir(run)).state == "paused"
    steps_while_paused = {e["step"] for e in events(run) if e["type"] == "log" and e["step"] > paused["step"]}
    assert not steps_while_paused
    # the step it paused at is logged before the pause is said: its loss is on screen while paused
    # (HF Trainer logs a step after on_step_end, where the pause waited before)
    said = events(run)
    at = next(i for i, e in enumerate(said) if e["type"] == "paused")
    assert [e["step"] for e in said[:at] if e["type"] == "log"][-1] == paused["step"]
    assert cockpit(["resume"], env).returncode == 0
    wait_event(run, lambda e: e["type"] == "resumed")
    wait_event(run, lambda e: e["type"] == "log" and e["step"] > paused["step"] + 1)

    assert cockpit(["save"], env).returncode == 0
    saved = wait_event(run, lambda e: e["type"] == "checkpoint")
    assert saved["step"] % 1000 != 0

    stop = cockpit(["stop", "--timeout", "60"], env)
    assert stop.returncode == 0 and "stopped" in stop.stdout
    assert client.wait(timeout=30) == 3  # stopped
    done = events(run)[-1]
    assert done["type"] == "done" and done["status"] == "stopped"
    assert rundir.RunDir(run).complete_checkpoints()[-1].name == f"checkpoint-{done['step']}"
    acks = [e for e in events(run) if e["type"] == "command"]
    assert [a["name"] for a in acks] == ["pause", "resume", "save", "stop"]
    assert cockpit(["pause", run.name], env).returncode == 1  # nothing to command any more


@pytest.mark.parametrize(
    ("workers", "outcome", "term_timeout"),
    [
        # the worker dies of the group's SIGTERM and the trainer gives up: terminated; the grace
        # leaves a loaded 2-core box time to end the trainer once its worker died
        (1, "terminated", "10"),
        # the trainer takes SIGTERM as 'stop' but is stuck inside a 60 s step: SIGKILL once the
        # grace is over, however long it is (a short one keeps the test short)
        (0, "killed", "3"),
    ],
)
def test_stop_escalates_and_leaves_no_orphan(tmp_path, env, workers, outcome, term_timeout):
    config = write_config(
        tmp_path / "c.yaml",
        {"training.max_steps": 5, "training.dataloader_num_workers": workers},
    )
    env = {**env, **test_aids.environ(step_sleep_s=60)}
    client = cockpit_bg(["train", str(config), "--no-ui"], env)
    run = wait_run_dir(env)
    wait_event(run, lambda e: e["type"] == "train_begin")
    pgid = json.loads((run / "trainer.json").read_text())["pgid"]
    wait_for(lambda: len(process.group_members(pgid)) >= 1 + workers, 60, what="the dataloader worker")
    started = time.monotonic()
    stop = cockpit(["stop", run.name, "--timeout", "1", "--term-timeout", term_timeout], env)
    assert stop.stdout.strip().endswith(outcome), stop.stdout + stop.stderr
    assert "asked the trainer to stop" in stop.stderr and "SIGTERM to its process group" in stop.stderr
    assert time.monotonic() - started < 30
    assert process.group_members(pgid) == []
    client.wait(timeout=30)
    assert json.loads(cockpit(["runs", "--json"], env).stdout)[0]["status"] == "failed"


@pytest.mark.parametrize(
    ("overrides", "kind", "needle"),
    [
        ({"dataset.path": "@nofield"}, "data", "columns are: prompt, answer"),
        ({"model.name": "@badmodel"}, "model_load", "could not load the tokenizer from local path"),
        ({"model.name": "nobody/no-such-model"}, "model_load", "HF_ENDPOINT"),
        ({"@aids": {"fail_at_step": 3, "fail_kind": "oom"}}, "oom", "Tried to allocate 2.00 GiB"),
    ],
)
def test_failures_become_one_classified_error_event(tmp_path, env, overrides, kind, needle):
    if overrides.get("dataset.path") == "@nofield":
        data = tmp_path / "qa.jsonl"
        data.write_text("".join(json.dumps({"prompt": f"q{i}", "answer": f"a{i}"}) + "\n" for i in range(5)))
        overrides = {"dataset.path": str(data)}
    if overrides.get("model.name") == "@badmodel":
        folder = tmp_path / "broken-model"
        folder.mkdir()
        (folder / "config.json").write_text('{"model_type": "llama"}')
        overrides = {"model.name": str(folder)}
    if "@aids" in overrides:  # test aids go in the trainer's environment, never its config
        env = {**env, **test_aids.environ(**overrides["@aids"])}
        overrides = {}
    config = write_config(tmp_path / "c.yaml", overrides)
    proc = cockpit(["train", str(config), "--no-ui"], env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    run = only_run(env)
    evs = events(run)
    errors = [e for e in evs if e["type"] == "error"]
    assert len(errors) == 1 and evs[-1] == errors[0]
    error = errors[0]
    assert error["kind"] == kind and needle in error["message"] + error["hint"] + str(error.get("oom"))
    assert error["hint"] and "Traceback" in error["traceback"]
    assert f"ERROR ({kind})" in proc.stdout
    assert json.loads((run / "trainer.json").read_text())  # the run directory stays
    if kind == "oom":
        assert error["oom"]["requested_bytes"] == 2 * 2**30
        assert error["oom"]["total_bytes"] == pytest.approx(23.65 * 2**30, rel=1e-3)
        assert error["step"] is None or error["phase"] == "training"
    trainer_pid = json.loads((run / "trainer.json").read_text())["pid"]
    assert not psutil.pid_exists(trainer_pid) or psutil.Process(trainer_pid).status() == psutil.STATUS_ZOMBIE


def test_disk_full_during_a_save_keeps_earlier_checkpoints_and_resumes(tmp_path, env):
    config = write_config(
        tmp_path / "c.yaml",
        {"training.max_steps": 12, "output.save_steps": 4},
    )
    env = {**env, **test_aids.environ(fail_at_step=8, fail_kind="disk_full")}
    proc = cockpit(["train", str(config), "--no-ui"], env)
    assert proc.returncode == 1
    run = only_run(env)
    error = events(run)[-1]
    assert error["type"] == "error" and error["kind"] == "disk" and "No space left" in error["message"]
    assert error["checkpoints"] == ["checkpoint-4"]
    assert [p.name for p in rundir.RunDir(run).complete_checkpoints()] == ["checkpoint-4"]
    # the half-written save was never taken for a checkpoint; a restart resumes from step 4, and
    # goes past step 8: the fault, still in its environment, fires in a run's first trainer only
    restart = cockpit(["restart", run.name, "--no-ui", "--log-every", "0"], env)
    assert restart.returncode == 0, restart.stdout + restart.stderr
    assert "resuming from checkpoint-4" in restart.stdout
    assert "removed an unfinished checkpoint save" in restart.stdout
    assert events(run)[-1]["status"] == "finished"


def test_bad_config_never_creates_a_run(tmp_path, env):
    config = write_config(tmp_path / "c.yaml", {"model.name": str(tmp_path / "nope")})
    proc = cockpit(["train", str(config), "--no-ui"], env)
    assert proc.returncode == 2
    assert "model.name: local path" in proc.stderr and "does not exist" in proc.stderr
    assert not (Path(env["COCKPIT_HOME"]) / "runs").exists()


@pytest.mark.skipif("has_cuda()", reason="needs a machine without a GPU")
def test_qlora_without_gpu_is_refused_before_a_run_exists(tmp_path, env):
    config = write_config(tmp_path / "c.yaml", {"method": "qlora"})
    proc = cockpit(["train", str(config), "--no-ui"], env)
    assert proc.returncode == 2
    said = " ".join(proc.stderr.split())  # wrapped at words to the terminal (80 columns here)
    assert f"{config}: cannot start on this machine" in said and "needs a CUDA GPU" in said
    assert not (Path(env["COCKPIT_HOME"]) / "runs").exists()
