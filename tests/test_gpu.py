"""GPU paths of the spine, run for real on a CUDA machine (skipped elsewhere).

On the GPU machine: `python -m pytest tests/test_gpu.py tests/test_trainer_e2e.py`
(the end-to-end tests then run the tiny model on the GPU).
"""

from __future__ import annotations

import json

import pytest
from conftest import cockpit, events, has_cuda, only_run, write_config  # noqa: F401 - has_cuda: skipif

pytestmark = [pytest.mark.slow, pytest.mark.skipif("not has_cuda()", reason="needs a CUDA GPU")]


def test_qlora_on_the_gpu(tmp_path, env):
    config = write_config(
        tmp_path / "c.yaml",
        {
            "method": "qlora",
            "training.optimizer": "paged_adamw_32bit",
            "training.gradient_checkpointing": True,
            "training.max_steps": 6,
            "output.save_steps": 3,
        },
    )
    proc = cockpit(["train", str(config), "--no-ui", "--log-every", "0"], env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    evs = events(only_run(env))
    hello = next(e for e in evs if e["type"] == "hello")
    assert hello["device"]["kind"] == "cuda" and hello["precision"] in ("bf16", "fp16")
    begin = next(e for e in evs if e["type"] == "phase" and e["phase"] == "quantising")
    assert begin
    log = [e for e in evs if e["type"] == "log"][-1]
    assert log["mem_peak_bytes"] > 0 and log["mem_reserved_bytes"] >= log["mem_allocated_bytes"]
    assert evs[-1]["type"] == "done" and evs[-1]["status"] == "finished"
    assert (only_run(env) / "final" / "adapter_config.json").is_file()


def test_a_real_cuda_oom_is_one_classified_error_event(tmp_path, env):
    # LoRA on a 16-bit 7B shape, 64 x 512 tokens per micro-batch, no checkpointing: ~190 GiB of activations
    data = tmp_path / "tokens.jsonl"
    data.write_text(
        "".join(
            json.dumps({"input_ids": [5 + (i * 7 + j) % 31000 for j in range(512)]}) + "\n"
            for i in range(128)
        )
    )
    config = write_config(
        tmp_path / "c.yaml",
        {
            "model.name": "synthetic:llama-2-7b",
            "dataset.path": str(data),
            "dataset.format": "tokens",
            "method": "lora",
            "lora.target_modules": ["q_proj", "v_proj"],
            "training.max_length": 512,
            "training.micro_batch_size": 64,
            "training.max_steps": 2,
            "training.gradient_checkpointing": False,
            "training.optimizer": "adamw_torch",
            "speed.mode": "off",  # as written: speed: auto would fit the micro-batch to the card
        },
    )
    proc = cockpit(["train", str(config), "--no-ui"], env, timeout=900)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    error = events(only_run(env))[-1]
    assert error["type"] == "error" and error["kind"] == "oom", error
    oom = error["oom"]
    assert oom["kind"] == "allocator" and oom["format"] == "new"
    assert oom["requested_bytes"] > 0 and oom["total_bytes"] > 100 * 2**30
    assert oom["allocated_bytes"] > 0
    assert error["phase"] in ("training", "first_forward", "forward", "backward", "optimizer_step"), error
    print(json.dumps({"message": error["message"], "oom": oom}))
