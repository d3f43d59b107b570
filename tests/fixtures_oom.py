"""The failed run the OOM tests share (tests/test_remedies.py, tests/test_oom_wizard*.py): the
article's 13B QLoRA recipe on an emulated 24 GiB card, a guanaco-like text dataset, the H200 it
ran on and torch's figures when the allocation failed.
"""

from __future__ import annotations

from cockpit.fmt import GIB

# the article's 13B QLoRA recipe without checkpointing (measured at 33 GiB through a plain HF
# Trainer script), as the product runs it, on an emulated 24 GiB card; dotted config keys
ARTICLE_13B = {
    "model.name": "synthetic:llama-2-13b",
    "method": "qlora",
    "lora.r": 64,
    "lora.target_modules": ["q_proj", "v_proj"],
    "training.max_length": 512,
    "training.micro_batch_size": 4,
    "training.gradient_accumulation_steps": 4,
    "training.gradient_checkpointing": False,
    "training.optimizer": "paged_adamw_32bit",
    "emulate_vram_gib": 24.0,
}
H200 = {"kind": "cuda", "name": "NVIDIA H200", "capability": "9.0", "total_bytes": 150_119_448_576}
# the trainer's `data` event: lengths before truncation
DATA = {
    "samples": 1000,
    "dropped": 0,
    "source_rows": 1000,
    "format": "text",
    "column": "text",
    "tokens_min": 40,
    "tokens_mean": 380.5,
    "tokens_p50": 300,
    "tokens_p95": 900,
    "tokens_p99": 1500,
    "tokens_max": 2600,
    "tokens_total": 330_000,
    "truncated": 210,
    "max_length": 512,
    "tokens_over": {"64": 990, "128": 930, "256": 610, "512": 210, "1024": 40, "2048": 3},
}
# torch's figures in the emulated 24 GiB card (the message's total is the whole H200's), where it
# struck, and the batch: the `oom` of the trainer's `error` event
OOM = {
    "kind": "allocator",
    "format": "new",
    "gpu": 0,
    "requested_bytes": 500 * 2**20,
    "total_bytes": int(139.81 * GIB),
    "free_bytes": int(115.2 * GIB),
    "process_bytes": int(23.62 * GIB),
    "allocated_bytes": int(22.41 * GIB),
    "reserved_bytes": int(22.72 * GIB),
    "reserved_unallocated_bytes": int(0.31 * GIB),
    "exception": "OutOfMemoryError",
    "injected": False,
    "phase": "backward",
    "step": 1,
    "seq_len": 512,
    "batch_rows": 4,
}


def oom_event(**oom) -> dict:
    """An `error` event's fields as the remedies read them, with `OOM` changed by `oom`."""
    return {"kind": "oom", "phase": "training", "step": 1, "oom": {**OOM, **oom}}


def nested(dotted: dict) -> dict:
    """{"training.max_length": 512} -> {"training": {"max_length": 512}}: a config file's shape."""
    out: dict = {}
    for key, value in dotted.items():
        *sections, name = key.split(".")
        node = out
        for section in sections:
            node = node.setdefault(section, {})
        node[name] = value
    return out
