"""A run that survives losing the box, end to end on the CPU: the real trainer copies its checkpoints
and record off the machine as it trains (output.sync), the machine is lost (its home deleted), and
`cockpit restart --from` on a clean home goes on from the last synced checkpoint: the steps, the
losses and the optimizer's state continue."""

from __future__ import annotations

import json
import os
import shutil
import signal

import pytest
from conftest import cockpit, cockpit_bg, events, only_run, wait_event, wait_run_dir, write_config

from cockpit.sync.manifest import MANIFEST_NAME, Manifest
from train_backend import test_aids

pytestmark = pytest.mark.slow
SECRET = "hf_SYNCE2ESECRETabcdefghijklmnop99"
LOSS_TOLERANCE = 1e-4  # relative; the CPU run resumed from the same state computes the same numbers


def losses(evs: list[dict]) -> dict[int, float]:
    return {e["step"]: e["loss"] for e in evs if e["type"] == "log" and e.get("loss") is not None}


def resumed_part(evs: list[dict]) -> list[dict]:
    hellos = [i for i, e in enumerate(evs) if e["type"] == "hello"]
    return evs[hellos[-1] :]


def lose_the_box(env: dict) -> None:
    """The machine is gone: its home, the run directory with it, and every process of the run."""
    shutil.rmtree(env["COCKPIT_HOME"])


def test_a_box_lost_mid_run_goes_on_from_its_folder_copy_on_a_new_one(tmp_path, env):
    backup = tmp_path / "nfs-backup"
    backup.mkdir()
    overrides = {"training.max_steps": 12, "output.save_steps": 4, "output.sync": str(backup)}
    config = write_config(tmp_path / "c.yaml", overrides)
    check = cockpit(["train", str(config), "--check"], env)
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"output.sync: each checkpoint and the record go to {backup} (exists, writable, " in check.stdout

    client = cockpit_bg(
        ["train", str(config), "--no-ui", "--log-every", "0"], {**env, **test_aids.environ(step_sleep_s=0.3)}
    )
    run = wait_run_dir(env)
    wait_event(run, lambda e: e["type"] == "sync" and e["status"] == "synced" and e["step"] == 8)
    wait_event(run, lambda e: e["type"] == "log" and e["step"] >= 9)
    os.killpg(json.loads((run / "trainer.json").read_text())["pgid"], signal.SIGKILL)
    assert client.wait(timeout=30) == 1
    original = losses(events(run))
    assert max(original) < 12 and not (run / "checkpoints" / "checkpoint-12").exists()
    lose_the_box(env)

    new_box = {**env, "COCKPIT_HOME": str(tmp_path / "new-box")}
    restart = cockpit(["restart", "--from", str(backup), "--no-ui", "--log-every", "0"], new_box)
    assert restart.returncode == 0, restart.stdout + restart.stderr
    assert f"restored run {run.name} from {backup}: checkpoint-8 (step 8)" in restart.stderr
    assert f"run {run.name} restarted from checkpoint-8" in restart.stderr
    rebuilt = only_run(new_box)
    assert rebuilt == (tmp_path / "new-box" / "runs" / run.name)
    evs = events(rebuilt)
    assert any(e["type"] == "sync" and e["status"] == "restored" for e in evs)
    after = resumed_part(evs)
    assert after[0]["resume_from"].endswith("checkpoint-8")
    assert [e["step"] for e in after if e["type"] == "log"] == list(range(9, 13))
    assert after[-1]["type"] == "done" and after[-1]["status"] == "finished" and after[-1]["step"] == 12
    resumed = losses(after)
    for step in range(9, max(original) + 1):  # the steps both boxes trained: the same numbers
        assert resumed[step] == pytest.approx(original[step], rel=LOSS_TOLERANCE), step
    assert "sync: this run directory was rebuilt from" in restart.stdout
    # --no-ui says each copy, and its summary what is on the target
    assert "sync: checkpoint-12 (step 12, " in restart.stdout
    assert f"sync: checkpoint-12 (step 12) on {backup}" in " ".join(restart.stdout.split())

    # the new box goes on copying to the same place: its checkpoints, then final/
    manifest = Manifest.from_json((backup / run.name / MANIFEST_NAME).read_text())
    assert manifest is not None and manifest.checkpoint == "checkpoint-12" and manifest.final
    assert (backup / run.name / "final" / "adapter_config.json").is_file()
    assert json.loads((backup / run.name / "events.jsonl").read_text().splitlines()[-1])["type"] == "done"
    listed = " ".join(cockpit(["runs"], new_box).stdout.split())  # its lines wrapped at 80 columns
    assert f"sync: checkpoint-12 (step 12) on {backup}" in listed and "final/ too" in listed


def test_a_failed_run_goes_on_from_its_hub_copy_with_its_optimizer_state(tmp_path, env):
    hub = {
        **env,
        "COCKPIT_TEST_HF_API": "fake_hub:FakeHfApi",
        "FAKE_HUB_DIR": str(tmp_path / "hub"),
        "HF_TOKEN": SECRET,
    }
    overrides = {"training.max_steps": 8, "output.save_steps": 4, "output.sync": "hf://alice/llama-backup"}
    config = write_config(tmp_path / "c.yaml", overrides)
    slow_link = {"FAKE_HUB_DELAY_S": "1.0", **test_aids.environ(fail_at_step=7, step_sleep_s=0.3)}
    first = cockpit(["train", str(config), "--no-ui", "--log-every", "0"], {**hub, **slow_link})
    assert first.returncode == 1, first.stdout + first.stderr
    run = only_run(hub)
    evs = events(run)
    assert evs[-1]["type"] == "error"  # the copies at the end come before the run's last event
    # the step loop went on while checkpoint-4 crossed the slow link
    saved = next(i for i, e in enumerate(evs) if e["type"] == "checkpoint" and e["step"] == 4)
    synced = next(i for i, e in enumerate(evs) if e["type"] == "sync" and e["status"] == "synced")
    assert evs[synced]["step"] == 4 and evs[synced]["duration_s"] >= 1.0
    assert any(e["type"] == "log" and e["step"] > 4 for e in evs[saved:synced])
    original = losses(evs)
    assert sorted(original) == list(range(1, 7))

    repo = tmp_path / "hub" / "alice" / "llama-backup"
    assert json.loads((repo / "repo.json").read_text())["private"] is True
    for path in [*(repo / "files").rglob("*"), *run.rglob("*")]:
        if path.is_file() and path.name != "control":
            assert SECRET.encode() not in path.read_bytes(), path
    record = (repo / "files" / run.name / "events.jsonl").read_text().splitlines()
    assert json.loads(record[-1])["type"] == "error"  # the record's last copy holds the ending
    lose_the_box(hub)

    new_box = {**hub, "COCKPIT_HOME": str(tmp_path / "new-box")}
    restart = cockpit(
        ["restart", "--from", "hf://alice/llama-backup", "--no-ui", "--log-every", "0"], new_box
    )
    assert restart.returncode == 0, restart.stdout + restart.stderr
    after = resumed_part(events(only_run(new_box)))
    assert after[0]["resume_from"].endswith("checkpoint-4")
    assert [e["step"] for e in after if e["type"] == "log"] == [5, 6, 7, 8]
    resumed = losses(after)
    # step 5's loss is the restored weights'; step 6's follows step 5's update, which a fresh
    # optimizer (no moments, its first step) would make otherwise: the same loss is its state restored
    assert resumed[5] == pytest.approx(original[5], rel=LOSS_TOLERANCE)
    assert resumed[6] == pytest.approx(original[6], rel=LOSS_TOLERANCE)
    files = {p.relative_to(repo / "files").as_posix() for p in (repo / "files").rglob("*") if p.is_file()}
    assert f"{run.name}/final/adapter_config.json" in files
    assert f"{run.name}/checkpoints/checkpoint-8/{MANIFEST_NAME}" not in files
    assert f"{run.name}/checkpoints/checkpoint-8/optimizer.pt" in files
    assert SECRET not in restart.stdout + restart.stderr
