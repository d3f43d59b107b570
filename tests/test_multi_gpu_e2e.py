"""Several processes for real, on the CPU: torchrun through the launcher, gloo, the tiny model.

The same code path as on GPUs (nccl there, gloo here): the supervisor starts
`python -m train_backend.launcher`, torchrun starts one trainer per "GPU", and the tests
look at what a user sees: one event stream, errors that name the rank, stop and save that
reach every rank, and no rank left behind, whatever ended the run.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import ROOT, cockpit, events, only_run, wait_event, wait_for, write_config

from cockpit.config.load import load_config
from cockpit.config.schema import dump_config
from cockpit.run import process, rundir
from cockpit.run import ranks as distributed
from cockpit.run.control import send_command
from cockpit.run.status import run_status
from train_backend import test_aids

pytestmark = pytest.mark.slow
TWO = {"gpus": 2, "training.max_steps": 6, "output.save_steps": 3}


def rank_pids(run: Path) -> list[int]:
    return [r["pid"] for r in distributed.rank_records(run)]


def assert_all_gone(pids: list[int], timeout: float = 10.0) -> None:
    def gone() -> bool:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                continue
        return not alive

    wait_for(gone, timeout, what=f"processes {pids} to end")


def start(tmp_path: Path, overrides: dict, **aids) -> tuple[rundir.RunDir, subprocess.Popen]:
    """A run launched by the supervisor itself (as `cockpit train` does), no client attached;
    `aids`: test aids (train_backend.test_aids) in the trainer's environment."""
    cfg = load_config(write_config(tmp_path / "c.yaml", overrides))
    run = rundir.create(None, cfg.model.name, dump_config(cfg))
    return run, process.launch(run, extra_env=test_aids.environ(**aids))


def test_two_ranks_one_event_stream(tmp_path, env):
    proc = cockpit(["train", str(write_config(tmp_path / "c.yaml", TWO)), "--no-ui", "--skip-preflight"], env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = only_run(env)
    evs = events(run)
    types = [e["type"] for e in evs]
    assert types.count("hello") == 1 and types.count("done") == 1 and types.count("train_begin") == 1
    logs = [e["step"] for e in evs if e["type"] == "log"]
    assert logs == list(range(1, 7))  # each step once: only rank 0 writes
    hello = next(e for e in evs if e["type"] == "hello")
    world = hello["distributed"]
    assert world["world_size"] == 2 and world["backend"] == "gloo" and len(world["pids"]) == 2
    model = next(e for e in evs if e["type"] == "model")
    assert model["distributed"]["strategy"] == "ddp" and "lora" in model["distributed"]["strategy_reason"]
    assert evs[-1]["type"] == "done" and evs[-1]["status"] == "finished" and evs[-1]["step"] == 6
    # the ranks split the data: an epoch of the demo's 345 samples is ceil(345 / (2 ranks x 4)) steps
    last_log = [e for e in evs if e["type"] == "log"][-1]
    assert last_log["epoch"] == pytest.approx(6 / math.ceil(345 / 8), abs=1e-3)
    # rank 1 wrote its own log and no event; rank 0 kept backend.log
    rank1_log = (run / "backend.rank1.log").read_text()
    assert "[rank 1] done" in rank1_log
    # both ranks saved their part of each checkpoint; rank 0's files made it complete
    complete = rundir.complete_checkpoints(run / "checkpoints")
    assert [p.name for p in complete] == ["checkpoint-3", "checkpoint-6"]
    assert {p.name for p in complete[-1].glob("rng_state_*.pth")} == {"rng_state_0.pth", "rng_state_1.pth"}
    assert (run / "final" / "adapter_model.safetensors").is_file()
    assert_all_gone([*rank_pids(run), json.loads((run / "trainer.json").read_text())["pid"]])


def test_a_crashing_rank_is_reported_with_its_rank(tmp_path, env):
    config = write_config(tmp_path / "c.yaml", TWO)
    env = {**env, **test_aids.environ(fail_at_step=3, fail_rank=1)}
    proc = cockpit(["train", str(config), "--no-ui", "--skip-preflight"], env)
    assert proc.returncode != 0
    run = only_run(env)
    evs = events(run)
    errors = [e for e in evs if e["type"] == "error"]
    assert len(errors) == 1, errors  # one error for the run, not one per rank
    error = errors[0]
    assert error["rank"] == 1 and error["kind"] == "other" and error["phase"] == "training"
    assert error["message"].startswith("rank 1: RuntimeError: injected fault at step 3")
    assert "backend.rank1.log" in error["hint"]
    # rank 0 failed only because its peer went away: listed, not blamed
    assert [r["rank"] for r in error["failed_ranks"]] in ([0], [])
    assert "rank 1" in proc.stdout
    assert_all_gone(rank_pids(run))


def test_a_killed_rank_is_named(tmp_path, env):
    run, proc = start(tmp_path, {**TWO, "training.max_steps": 200}, step_sleep_s=0.2)
    wait_event(run.path, lambda e: e["type"] == "log" and e["step"] >= 2, timeout=90)
    victim = next(r for r in distributed.rank_records(run.path) if r["rank"] == 1)
    os.kill(victim["pid"], signal.SIGKILL)  # what the kernel's OOM killer does
    proc.wait(timeout=60)
    error = [e for e in events(run.path) if e["type"] == "error"][-1]
    assert error["rank"] == 1 and "killed by SIGKILL" in error["message"]
    assert "OOM killer" in error["hint"]
    assert_all_gone(rank_pids(run.path))


def test_pause_save_and_stop_reach_every_rank(tmp_path, env):
    run, proc = start(
        tmp_path, {**TWO, "training.max_steps": 200, "output.save_steps": 1000}, step_sleep_s=0.2
    )
    wait_event(run.path, lambda e: e["type"] == "log" and e["step"] >= 2, timeout=90)
    pids = rank_pids(run.path)
    assert len(pids) == 2
    send_command(run, "pause", sender="test")
    paused = wait_event(run.path, lambda e: e["type"] == "paused", timeout=60)
    time.sleep(1.5)  # every rank waits, agreeing each second that the pause holds
    assert max(e.get("step", 0) for e in events(run.path) if e["type"] == "log") <= paused["step"]
    send_command(run, "resume", sender="test")
    wait_event(run.path, lambda e: e["type"] == "log" and e["step"] > paused["step"], timeout=60)
    send_command(run, "save", sender="test")
    saved = wait_event(run.path, lambda e: e["type"] == "checkpoint", timeout=60)
    ckpt = Path(saved["path"])
    assert {p.name for p in ckpt.glob("rng_state_*.pth")} == {"rng_state_0.pth", "rng_state_1.pth"}
    outcome = process.stop(run, grace_s=60)
    assert outcome == "stopped"
    proc.wait(timeout=30)
    evs = events(run.path)
    done = evs[-1]
    assert done["type"] == "done" and done["status"] == "stopped"
    last = rundir.complete_checkpoints(run.checkpoints_dir)[-1]
    assert last.name == f"checkpoint-{done['step']}"  # both ranks stopped at the same step and saved it
    assert {p.name for p in last.glob("rng_state_*.pth")} == {"rng_state_0.pth", "rng_state_1.pth"}
    assert_all_gone(pids)


def test_sigterm_to_the_launcher_stops_every_rank_with_a_checkpoint(tmp_path, env):
    run, proc = start(
        tmp_path, {**TWO, "training.max_steps": 200, "output.save_steps": 1000}, step_sleep_s=0.2
    )
    wait_event(run.path, lambda e: e["type"] == "log" and e["step"] >= 2, timeout=90)
    pids = rank_pids(run.path)
    os.kill(proc.pid, signal.SIGTERM)  # what `cockpit stop` escalates to; torchrun passes it on
    proc.wait(timeout=40)
    done = events(run.path)[-1]
    assert done["type"] == "done" and done["status"] == "stopped"
    last = rundir.complete_checkpoints(run.checkpoints_dir)[-1]
    assert last.name == f"checkpoint-{done['step']}"
    assert {p.name for p in last.glob("rng_state_*.pth")} == {"rng_state_0.pth", "rng_state_1.pth"}
    assert_all_gone(pids)


def test_a_killed_launcher_takes_its_ranks_along(tmp_path, env):
    run, proc = start(tmp_path, {**TWO, "training.max_steps": 200}, step_sleep_s=0.2)
    wait_event(run.path, lambda e: e["type"] == "log", timeout=90)
    pids = rank_pids(run.path)
    os.kill(proc.pid, signal.SIGKILL)  # only the launcher: the ranks live in sessions of their own
    proc.wait(timeout=10)
    assert_all_gone(pids, timeout=10)
    assert run_status(run).state == "failed"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_nodes_on_loopback(tmp_path, env):
    """Two `cockpit train` on one machine as nodes 0 and 1 of one job (one process each); node 1
    starts its rank through `accelerate launch`, node 0 through torchrun: either joins the job. Their
    step figures wait on the device for the log (speed.read_figures: at_log): gathered over both ranks
    there, read at the log (train_backend/step_figures.py)."""
    endpoint = f"127.0.0.1:{free_port()}"
    procs = []
    for node in (0, 1):
        cfg = {
            "training.max_steps": 4,
            "output.save_steps": 1000,
            "output.dir": str(tmp_path / f"node{node}"),
            "distributed.nnodes": 2,
            "distributed.node_rank": node,
            "distributed.rdzv_endpoint": endpoint,
            "distributed.launcher": "torchrun" if node == 0 else "accelerate",
            "speed.read_figures": "at_log",
        }
        config = write_config(tmp_path / f"node{node}.yaml", cfg)
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "cockpit", "train", str(config), "--no-ui", "--skip-preflight"],
                env=env,
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outputs = [p.communicate(timeout=180)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-2000:] for o in outputs)
    for node in (0, 1):
        run = next((tmp_path / f"node{node}").iterdir())
        evs = events(run)
        hello = next(e for e in evs if e["type"] == "hello")
        assert hello["distributed"]["world_size"] == 2 and hello["distributed"]["node_rank"] == node
        assert hello["distributed"]["nnodes"] == 2
        assert evs[-1]["type"] == "done" and evs[-1]["status"] == "finished" and evs[-1]["step"] == 4
        assert (run / "final" / "adapter_model.safetensors").is_file()  # each node can go on alone
        logs = [e for e in evs if e["type"] == "log"]
        # both ranks' tokens, read at the log: 4 steps x 2 ranks x 4 samples, none under 25 tokens (the
        # demo's shortest; one rank's 16 samples average ~32, about 510)
        seen, trained = logs[-1]["tokens_seen"], logs[-1]["trained_tokens_seen"]
        assert isinstance(seen, int) and seen >= 4 * 2 * 4 * 25 and 0 < trained <= seen, logs[-1]
