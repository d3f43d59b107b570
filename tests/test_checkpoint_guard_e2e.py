"""End to end on the CPU: the disk-space guard refuses a checkpoint that cannot fit, and the run
continues from the last complete one once there is room."""

from __future__ import annotations

import json
import math

import pytest
from conftest import cockpit, events, only_run, write_config

from cockpit import checkpoint_space, rundir

pytestmark = pytest.mark.slow
# synthetic:tiny with the test config's LoRA writes checkpoints of about 1.9 MiB: the first one's
# estimate fits in this, and what is left after it cannot hold a second (the window allows +-25%)
FREE_BYTES = checkpoint_space.SPACE_RESERVE_BYTES + 3_000_000


def test_a_checkpoint_that_cannot_fit_is_never_started_and_the_run_resumes(tmp_path, env):
    config = write_config(
        tmp_path / "c.yaml",
        {"training.max_steps": 4, "output.save_steps": 2, "debug.free_bytes": FREE_BYTES},
    )
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
    needed = math.ceil(size * (1 + checkpoint_space.SPACE_MARGIN)) + checkpoint_space.SPACE_RESERVE_BYTES
    free = FREE_BYTES - checkpoint_space.folder_bytes(run / "checkpoints")
    assert (
        error["message"]
        == checkpoint_space.SpaceCheck(
            4,
            needed,
            free,
            str(run / "checkpoints"),
            f"checkpoint-2 measured {checkpoint_space.bytes_text(size)}",
        ).message()
    )
    assert error["hint"].startswith("Nothing of checkpoint-4 was written (complete: checkpoint-2).")
    assert "output.checkpoints_kept: 1 (now 2;" in error["hint"] and "output.dir" in error["hint"]
    assert f"cockpit restart {run.name}`" in error["hint"]
    line = next(x for x in proc.stdout.splitlines() if "ERROR (disk)" in x)
    assert "checkpoint-4 not started: it needs about" in line

    # nothing of the refused save on disk; checkpoint 2 complete and untouched
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["README.md", "checkpoint-2"]
    assert [p.name for p in rundir.RunDir(run).complete_checkpoints()] == ["checkpoint-2"]
    assert json.loads((first / rundir.COMPLETE_MARKER).read_text())["step"] == 2

    # room again: a restart loads checkpoint 2 and finishes
    run_cfg = run / "config.yaml"
    run_cfg.write_text(run_cfg.read_text().replace(f"free_bytes: {FREE_BYTES}", "free_bytes: null"))
    restart = cockpit(["restart", run.name, "--no-ui", "--log-every", "0"], env)
    assert restart.returncode == 0, restart.stdout + restart.stderr
    assert "resuming from checkpoint-2" in restart.stdout
    assert events(run)[-1]["status"] == "finished"
    assert [p.name for p in rundir.RunDir(run).complete_checkpoints()] == ["checkpoint-2", "checkpoint-4"]
