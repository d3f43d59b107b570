"""The built-in demo: no GPU, no network, under 2 minutes on 2 cores, and the loss falls."""

from __future__ import annotations

import os
import time

import pytest
from conftest import cockpit, events, only_run

from cockpit.models import shipped as shapes

pytestmark = pytest.mark.slow


def test_demo_no_ui_trains_and_the_loss_falls(env):
    started = time.monotonic()
    proc = cockpit(["demo", "--no-ui"], env, timeout=300)
    took_s = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout + proc.stderr
    evs = events(only_run(env))
    assert evs[-1]["type"] == "done" and evs[-1]["status"] == "finished"
    losses = [e["loss"] for e in evs if e["type"] == "log"]
    assert 1 - losses[-1] / losses[0] >= 0.30, (losses[0], losses[-1])
    # the README's "well under two minutes" is for the demo alone on 2 cores; beside other test
    # workers it shares them
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    assert took_s < 120 * workers, f"demo took {took_s:.0f} s beside {workers - 1} other test workers"
    print(f"demo: {took_s:.1f} s, loss {losses[0]:.3f} -> {losses[-1]:.3f}")


def test_shipped_shapes_match_the_real_parameter_counts():
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    for name in shapes.shape_names():
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**shapes.hf_config_dict(name)))
        assert sum(p.numel() for p in model.parameters()) == shapes.load_shape(name)["_params"], name
    required = {"llama-2-7b", "llama-2-13b", "mistral-7b", "llama-3.1-8b", "qwen2.5-7b", "tiny"}
    assert required <= set(shapes.shape_names())
