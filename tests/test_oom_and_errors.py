"""OOM messages of both allocator formats, and the classification of failures."""

from __future__ import annotations

import errno

import pytest

from cockpit.config.schema import ConfigError
from cockpit.run.oom_messages import parse_oom_message
from train_backend.errors import DataError, ModelLoadError, classify

NEW = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "23.65 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 22.61 GiB memory in "
    "use. Of the allocated memory 20.1 GiB is allocated by PyTorch, and 2.0 GiB is reserved by PyTorch but "
    "unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
)
OLD = (
    "RuntimeError: CUDA out of memory. Tried to allocate 86.00 MiB (GPU 0; 23.69 GiB total capacity; "
    "21.90 GiB already allocated; 60.81 MiB free; 22.10 GiB reserved in total by PyTorch)"
)
GIB, MIB = 2**30, 2**20


def test_new_format():
    info = parse_oom_message(NEW)
    assert info.format == "new" and info.gpu == 0
    assert info.requested_bytes == 2 * GIB
    assert info.total_bytes == int(23.65 * GIB) and info.free_bytes == int(1.02 * GIB)
    assert info.process_bytes == int(22.61 * GIB)
    assert info.allocated_bytes == int(20.1 * GIB) and info.reserved_unallocated_bytes == 2 * GIB
    assert info.reserved_bytes == int(20.1 * GIB) + 2 * GIB


def test_old_format():
    info = parse_oom_message(OLD)
    assert info.format == "old"
    assert info.requested_bytes == 86 * MIB and info.free_bytes == int(60.81 * MIB)
    assert info.allocated_bytes == int(21.9 * GIB) and info.reserved_bytes == int(22.1 * GIB)
    assert info.reserved_unallocated_bytes == int(22.1 * GIB) - int(21.9 * GIB)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (
            "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate(handle)",
            "cublas_alloc",
        ),
        ("torch.AcceleratorError: CUDA error: out of memory", "accelerator"),
        ("bitsandbytes: Error: out of memory in cdequantize_blockwise", "bitsandbytes"),
    ],
)
def test_other_oom_kinds(text, kind):
    assert parse_oom_message(text).kind == kind


def test_not_an_oom():
    assert parse_oom_message("ValueError: bad shape") is None


@pytest.mark.parametrize(
    ("exc", "phase", "kind"),
    [
        (ConfigError("training.x: bad"), "starting", "config"),
        (DataError("no column"), "preparing_data", "data"),
        (ModelLoadError("no such repo"), "loading_model", "model_load"),
        (OSError("weights missing"), "loading_model", "model_load"),
        (RuntimeError(NEW), "training", "oom"),
        (RuntimeError("CUDA error: an illegal memory access was encountered"), "training", "gpu"),
        (RuntimeError("NVML_ERROR_GPU_IS_LOST"), "training", "gpu"),
        (OSError(errno.ENOSPC, "No space left on device"), "training", "disk"),
        (ValueError("something else"), "training", "other"),
    ],
)
def test_classification(exc, phase, kind, tmp_path):
    verdict = classify(exc, phase, str(tmp_path))
    assert verdict.kind == kind and verdict.hint
    if kind == "oom":
        assert verdict.oom["requested_bytes"] == 2 * GIB
    if kind == "disk":
        assert "GiB free" in verdict.message and "intact" in verdict.hint


def test_a_run_directory_deleted_mid_run_is_named(tmp_path):
    gone = tmp_path / "runs" / "20261201-000000-tiny"
    verdict = classify(
        FileNotFoundError(2, "No such file or directory", str(gone / "checkpoints")), "training", str(gone)
    )
    assert f"the run directory {gone} was deleted" in verdict.message
    assert "No such file or directory" in verdict.message
    assert "backend.log in the run directory" not in verdict.hint and "cockpit train" in verdict.hint
