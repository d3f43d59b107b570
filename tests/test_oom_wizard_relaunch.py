"""The OOM path end to end on the CPU: the real trainer raises a real torch.OutOfMemoryError
(the test aid fail_kind: oom) on an emulated card just big enough for the memory model's estimate of
the run, `--on-oom auto` picks a remedy that keeps the results, records it in the run's history
and relaunches a new trainer, which resumes from the last checkpoint: the step count goes on."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import yaml
from conftest import cockpit, events, only_run, write_config

from cockpit.config.load import load_config
from cockpit.fmt import GIB
from cockpit.models.memory import estimate_memory, workload_from_config
from cockpit.models.shape import load_shape
from train_backend import test_aids

# the injected message holds 95.6% of the card in use and asks for 8.5% more (a real message's
# proportions): an emulated card of peak / 1.04 makes what it shows match the memory model
INJECTED_DEMAND_SHARE = (22.61 + 2.00) / 23.65


def long_texts(path, count=24, words=80) -> None:
    rng = random.Random(0)
    vocab = [f"w{i}" for i in range(400)]
    lines = [json.dumps({"text": " ".join(rng.choice(vocab) for _ in range(words))}) for _ in range(count)]
    path.write_text("\n".join(lines) + "\n")


def test_oom_then_auto_relaunch_resumes_and_finishes(tmp_path, env):
    data = tmp_path / "long.jsonl"
    long_texts(data)
    overrides = {
        "dataset.path": str(data),
        "training.max_length": 192,
        "training.micro_batch_size": 8,
        "training.max_steps": 4,
        "output.save_steps": 1,
    }
    config = write_config(tmp_path / "c.yaml", overrides)
    # fp32: what the trainer chooses on the CPU, and what the wizard then estimates with
    workload = replace(
        workload_from_config(load_config(config), load_shape("synthetic:tiny")), precision="fp32"
    )
    emulated_gib = round(estimate_memory(workload).peak_bytes / INJECTED_DEMAND_SHARE / GIB, 3)

    env = {**env, "CUDA_VISIBLE_DEVICES": ""}  # the CPU path, also on a machine with a GPU
    # the relaunched trainer inherits the aid too: it fires in the run's first trainer only
    env.update(test_aids.environ(fail_at_step=3, fail_kind="oom"))
    args = ["train", str(config), "--no-ui", "--on-oom", "auto", "--emulate-vram", f"{emulated_gib}GiB"]
    proc = cockpit(args, env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "remedies, best first" in proc.stdout and "[auto]" in proc.stdout
    run = only_run(env)
    evs = events(run)
    errors = [e for e in evs if e["type"] == "error"]
    assert len(errors) == 1 and errors[0]["kind"] == "oom" and errors[0]["step"] == 3
    assert errors[0]["oom"]["phase"] == "forward" and errors[0]["oom"]["injected"] is True

    change = next(e for e in evs if e["type"] == "config_change")
    assert change["reason"] == "oom" and change["verdict"] == "fits"
    assert set(change["remedy"]) <= {"gradient_checkpointing", "micro_batch", "expandable_segments"}
    assert change["predicted_peak_bytes"] <= 0.95 * change["card_bytes"]
    assert change["previous"] == "history/config-1.yaml"
    old = yaml.safe_load((run / "history" / "config-1.yaml").read_text())
    new = yaml.safe_load((run / "config.yaml").read_text())
    assert old["debug"] == new["debug"] == {"profile_steps": 0, "profile_from_step": 4}  # no test aid
    assert new["emulate_vram_gib"] == emulated_gib
    for dotted, value in change["changes"].items():
        section, _, key = dotted.partition(".")
        assert (new[section][key] if key else new[section]) == value

    # the relaunch is a new trainer that resumed from checkpoint-2: steps 3 and 4, then done; the aid
    # was in its environment too, and did not fire again (the run's first trainer only)
    hellos = [e for e in evs if e["type"] == "hello"]
    assert len(hellos) == 2 and hellos[1]["resume_from"].endswith("checkpoint-2")
    second = evs[evs.index(hellos[1]) :]
    assert [e["step"] for e in second if e["type"] == "log"] == [3, 4]
    assert evs[-1]["type"] == "done" and evs[-1]["status"] == "finished" and evs[-1]["step"] == 4
    # headless shows the relaunched trainer's lines, not the first attempt's again
    assert proc.stdout.count("trainer pid") == 2 and proc.stdout.count("ERROR (oom)") == 1
