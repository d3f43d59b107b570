"""A real run (tiny model, CPU) with eval.early_stop_patience: each new best eval is saved as a
checkpoint and kept, the run stops after `patience` evals without a gain, final/ holds the best
checkpoint's weights, and the done event and the summary say where it stopped and the cost not spent.

The eval losses are given (test aid `eval_losses`): the tiny model's own are not a script."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import cockpit, events, only_run, write_config
from safetensors.numpy import load_file
from test_finish_cost_e2e import make_env

from train_backend import test_aids

pytestmark = pytest.mark.slow

ADAPTER = "adapter_model.safetensors"


def test_the_run_stops_after_its_patience_and_final_holds_the_best_checkpoint(tmp_path, cache_dir):
    env = {**make_env(tmp_path, cache_dir), **test_aids.environ(eval_losses="3.0,2.5,2.0,2.1,2.05")}
    overrides = {
        "training.max_steps": 6,
        "output.save_steps": 100,  # the only checkpoints are the bests
        "dataset.eval_fraction": 0.1,
        "eval.steps": 1,
        "eval.max_samples": 4,
        "eval.early_stop_patience": 2,
    }
    proc = cockpit(["train", str(write_config(tmp_path / "r.yaml", overrides)), "--no-ui"], env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = only_run(env)
    evals = [
        (e["step"], e["eval_loss"], e.get("evals_without_gain")) for e in events(run) if e["type"] == "eval"
    ]
    assert evals == [(0, 3.0, 0), (1, 2.5, 0), (2, 2.0, 0), (3, 2.1, 1), (4, 2.05, 2)]
    done = [e for e in events(run) if e["type"] == "done"][-1]
    assert (done["status"], done["reason"], done["step"], done["total_steps"]) == (
        "finished",
        "early_stop",
        4,
        6,
    )
    assert done["not_spent_usd"] > 0 and done["not_spent_s"] > 0
    assert done["message"].startswith("stopped early at 4 of 6 steps: ~$")
    assert done["message"].endswith("; final/ holds checkpoint-2's weights (eval loss 2.0000)")
    ckpts = run / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir() if p.name.startswith("checkpoint-")) == [
        "checkpoint-1",
        "checkpoint-2",
    ]
    final, best, first = (
        load_file(p / ADAPTER) for p in (run / "final", ckpts / "checkpoint-2", ckpts / "checkpoint-1")
    )
    assert final.keys() == best.keys()
    assert all(np.array_equal(final[k], best[k]) for k in final)
    assert not all(np.array_equal(final[k], first[k]) for k in final)  # the check can tell them apart
    said = " ".join((proc.stdout + proc.stderr).split())
    assert "finished early (eval.early_stop_patience): step 4/6" in said
    assert "no gain 1 of 2 before early stop" in said and "early stop: 2 evals without gain" in said
