"""An export asked for with the run (`cockpit train --export`, export.at_end) runs when the run ends and
before cost.on_end, once; a failing export is said and on_end still runs. The real trainer on the CPU
(tiny model), one run shared; the failing export is the same run's end run again by an end runner
on a copy whose config points the export at a folder that is not empty."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
import yaml
from conftest import cockpit, events, only_run, wait_for, write_config
from test_finish_cost_e2e import make_env

from cockpit.money import end_runner
from cockpit.run.rundir import RunDir

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("export-at-end")]  # one shared run, one worker
# what the end command sees: every file under exports/, and how many times it ran
ON_END = "find exports -type f | sort > seen_exports.txt; echo ran >> count.txt"


@pytest.fixture(scope="module")
def exported_at_end(tmp_path_factory, cache_dir):
    root = tmp_path_factory.mktemp("at_end")
    env = make_env(root, cache_dir)
    config = write_config(root / "recipe.yaml", {"training.max_steps": 4, "output.save_steps": 4})
    argv = ["train", str(config), "--no-ui", "--skip-preflight", "--export", "merged", "--then", ON_END]
    proc = cockpit(argv, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = only_run(env)
    wait_for(lambda: (run / "count.txt").exists(), 120, what="the end command after the export")
    assert "when the run ends: export the merged model (bf16), then cost.on_end" in proc.stderr
    return env, run


def test_the_export_is_written_before_on_end_runs_once(exported_at_end):
    _env, run = exported_at_end
    out = "exports/final-merged-bf16"
    seen = (run / "seen_exports.txt").read_text().split()
    assert f"{out}/model.safetensors" in seen and f"{out}/config.json" in seen and f"{out}/README.md" in seen
    assert not any(".partial-" in name for name in seen)  # complete: renamed into place before on_end
    wait_for(
        lambda: [e["state"] for e in events(run) if e["type"] == "end_command"] == ["started", "finished"], 10
    )
    assert (run / "count.txt").read_text() == "ran\n"
    log = (run / "backend.log").read_text()
    assert (
        log.index("before on_end: export:")
        < log.index("before on_end: export done in")
        < log.index("on_end: the run finished; running: find exports")
    )
    assert "merge check:" in log  # the export's own report, in the run's log
    pid = yaml.safe_load((run / "trainer.json").read_text())["pid"]
    assert end_runner.run_end(RunDir(run), pid) == 0  # a second runner for this ending: nothing again
    assert (run / "count.txt").read_text() == "ran\n"


def test_a_failing_export_is_said_and_on_end_still_runs(exported_at_end, tmp_path):
    env, run = exported_at_end
    copy = tmp_path / run.name
    shutil.copytree(
        run, copy, ignore=shutil.ignore_patterns("exports", "on_end", "control", "count.txt", "seen_*")
    )
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine\n")
    cfg = yaml.safe_load((copy / "config.yaml").read_text())
    cfg["export"]["to"] = str(tmp_path / "taken")
    (copy / "config.yaml").write_text(yaml.safe_dump(cfg))
    dead_pid = 2**22 + 17  # above the default pid_max: no process has it
    with open(copy / "backend.log", "ab") as log:  # as end_launch starts it: its output on backend.log
        runner = subprocess.run(
            [sys.executable, "-m", "cockpit.money.end_runner", str(copy), str(dead_pid)],
            stdout=log,
            stderr=log,
            cwd=copy,
            env=env,
            timeout=120,
        )
    assert runner.returncode == 0  # on_end itself succeeded
    assert (copy / "count.txt").read_text() == "ran\n"
    assert (tmp_path / "taken" / "keep.txt").read_text() == "mine\n"  # the export wrote nothing there
    warning = [e for e in events(copy) if e["type"] == "warning"][-1]
    assert warning["message"].startswith("the export asked for with the run failed (exit 1)")
    log = (copy / "backend.log").read_text()
    assert "already exists and is not empty" in log
    assert "before on_end: export FAILED (exit 1)" in log and "on_end runs all the same" in log
    assert log.rindex("before on_end: export FAILED") < log.rindex("on_end: the run finished; running:")
