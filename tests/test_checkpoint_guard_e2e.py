"""End to end on the CPU: the disk-space guard refuses a checkpoint that cannot fit, before writing any
of it, and the last complete checkpoint stays whole (a restart from it: test_trainer_e2e's disk test)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from conftest import cockpit, events, only_run, write_config

from cockpit.run import disk_guard as checkpoint_space
from cockpit.run import rundir
from train_backend import test_aids

pytestmark = pytest.mark.slow
# synthetic:tiny with the test config's LoRA writes checkpoints of about 1.9 MiB (their reserve is the
# smallest one): the first one's estimate fits in this, and what is left after it cannot hold a second
FREE_BYTES = checkpoint_space.MIN_RESERVE_BYTES + 3_000_000


def test_a_checkpoint_that_cannot_fit_is_never_started(tmp_path, env):
    config = write_config(
        tmp_path / "c.yaml",
        {"training.max_steps": 4, "output.save_steps": 2},
    )
    env = {**env, **test_aids.environ(free_bytes=FREE_BYTES)}
    proc = cockpit(["train", str(config), "--no-ui", "--skip-preflight"], env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    run = only_run(env)
    evs = events(run)
    saved = [e["step"] for e in evs if e["type"] == "checkpoint"]
    error = evs[-1]
    assert saved == [2] and error["type"] == "error" and error["kind"] == "disk", error
    assert error["phase"] == "training" and error["checkpoints"] == ["checkpoint-2"]

    # the numbers: checkpoint-2 as measured, the margin and the reserve, against the aid's free bytes
    first = run / "checkpoints" / "checkpoint-2"
    size = checkpoint_space.folder_bytes(first)
    needed = math.ceil(size * (1 + checkpoint_space.SPACE_MARGIN)) + checkpoint_space.reserve_bytes(size)
    free = FREE_BYTES - checkpoint_space.folder_bytes(run / "checkpoints")
    expected = checkpoint_space.check_space(
        4, checkpoint_space.measured_checkpoint(first), free, run / "checkpoints"
    )
    assert expected.needed_bytes == needed and error["message"] == expected.message()
    assert error["hint"].startswith("Nothing of checkpoint-4 was written. Free space on that disk")
    assert "output.checkpoints_kept: 1 (now 2;" in error["hint"] and "output.dir" in error["hint"]
    assert f"`cockpit restart {run.name}`: it resumes from checkpoint-2, intact." in error["hint"]
    line = next(x for x in proc.stdout.splitlines() if "ERROR (disk)" in x)
    assert "checkpoint-4 not started: it needs about" in line

    # nothing of the refused save on disk; checkpoint 2 complete and untouched
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["README.md", "checkpoint-2"]
    assert [p.name for p in rundir.RunDir(run).complete_checkpoints()] == ["checkpoint-2"]
    assert json.loads((first / rundir.COMPLETE_MARKER).read_text())["step"] == 2

    # every file of checkpoint 2 loads (torch in a child: the test process stays torch-free)
    load = (
        "import json, sys, torch\n"
        "from safetensors import safe_open\n"
        "d = sys.argv[1]\n"
        "with safe_open(d + '/adapter_model.safetensors', 'pt') as f: n = len(list(f.keys()))\n"
        "opt = torch.load(d + '/optimizer.pt', weights_only=True)\n"
        "torch.load(d + '/scheduler.pt', weights_only=True)\n"
        "print(n, len(opt['state']), json.load(open(d + '/trainer_state.json'))['global_step'])\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", load, str(first)], capture_output=True, text=True, timeout=120
    )
    tensors, states, global_step = (int(x) for x in loaded.stdout.split())
    assert tensors > 0 and states == tensors and global_step == 2, loaded.stdout + loaded.stderr


def test_two_ranks_refuse_the_same_checkpoint_together(tmp_path, env):
    """Rank 0 measures, every rank gets its verdict: both stop at checkpoint 4, none starts writing it."""
    config = write_config(
        tmp_path / "c.yaml",
        {"gpus": 2, "training.max_steps": 4, "output.save_steps": 2},
    )
    env = {**env, **test_aids.environ(free_bytes=FREE_BYTES)}
    proc = cockpit(["train", str(config), "--no-ui", "--skip-preflight"], env)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = only_run(env)
    error = events(run)[-1]
    assert error["type"] == "error" and error["kind"] == "disk", error
    # the launcher names the rank whose error came first (either: they decide at the same step),
    # and the other rank took the same decision
    first, message = error["message"].split(": ", 1)
    assert first in ("rank 0", "rank 1") and message.startswith("checkpoint-4 not started: it needs about")
    other = 1 if first == "rank 0" else 0
    assert error["failed_ranks"] == [{"rank": other, "kind": "disk", "message": message[:300]}]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["README.md", "checkpoint-2"]
