"""The checkpoint space guard's arithmetic, and full-disk write failures classified as `disk`."""

from __future__ import annotations

import errno
import math
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from cockpit.models.memory import OPTIMIZER_STATE_BYTES
from cockpit.run import disk_guard as cs
from train_backend.errors import CheckpointWontFit, classify

GIB, MIB = 2**30, 2**20
# what torch 2.13 and safetensors 0.8 raised writing into a full 1 MiB tmpfs
TORCH_ZIP = "[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534"
SAFETENSORS = "Error while serializing: I/O error: No space left on device (os error 28)"


def test_full_fine_tune_estimate_counts_weights_copies_and_adamw_states():
    params = 7_000_000_000
    size = cs.estimate_checkpoint_bytes(
        trainable_params=params,
        trainable_bytes=4 * params,  # fp32 master weights
        saved_weight_bytes=4 * params,
        optimizer="adamw_torch",
        weight_copies=2,
    )
    assert size.bytes == 2 * 4 * params + 2 * 4 * params  # two model files + two fp32 states
    assert "x 2 copies" in size.basis and "adamw_torch" in size.basis


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZER_STATE_BYTES))
def test_estimate_takes_bytes_per_state_from_the_memory_models_table(optimizer):
    trainable, adapter_bytes = 1_000_000, 2_000_000  # a bf16 adapter
    size = cs.estimate_checkpoint_bytes(
        trainable_params=trainable,
        trainable_bytes=adapter_bytes,
        saved_weight_bytes=adapter_bytes,
        optimizer=optimizer,
    )
    per_param = OPTIMIZER_STATE_BYTES[optimizer]
    states = 2 * adapter_bytes if per_param is None else per_param * trainable
    assert size.bytes == adapter_bytes + states


def test_estimate_refuses_an_unknown_optimizer():
    with pytest.raises(ValueError, match="lion"):
        cs.estimate_checkpoint_bytes(
            trainable_params=1, trainable_bytes=4, saved_weight_bytes=4, optimizer="lion"
        )


def test_needed_is_size_plus_margin_plus_reserve_and_free_equal_to_it_fits(tmp_path):
    size = cs.CheckpointSize(10 * GIB, "checkpoint-2 measured 10.0 GiB")
    needed = math.ceil(10 * GIB * (1 + cs.SPACE_MARGIN)) + cs.SPACE_RESERVE_BYTES
    assert cs.check_space(4, size, needed, tmp_path).fits
    assert not cs.check_space(4, size, needed - 1, tmp_path).fits
    short = cs.check_space(4, size, needed - GIB, tmp_path)
    assert short.needed_bytes == needed
    assert short.message() == (
        f"checkpoint-4 not started: it needs about 11.2 GiB and 10.2 GiB is free (1.00 GiB short) on "
        f"{tmp_path}; expected size: checkpoint-2 measured 10.0 GiB, + 10% + 256.0 MiB reserve"
    )


def test_a_measured_checkpoint_counts_every_file_below_it(tmp_path):
    folder = tmp_path / "checkpoint-6"
    (folder / "sub").mkdir(parents=True)
    (folder / "optimizer.pt").write_bytes(b"x" * 3000)
    (folder / "sub" / "a.bin").write_bytes(b"y" * 500)
    size = cs.measured_checkpoint(folder)
    assert size.bytes == 3500 and size.basis == "checkpoint-6 measured 3.4 KiB"


def test_free_bytes_is_what_an_unprivileged_writer_may_use(tmp_path):
    # other tests write beside this one: the figure is taken between two reads of f_bavail, which
    # it must lie between (f_bfree, what root may use, is far above both on a disk with a reserve)
    before = os.statvfs(tmp_path)
    free = cs.free_bytes(tmp_path)
    after = os.statvfs(tmp_path)
    low, high = sorted((before.f_bavail * before.f_frsize, after.f_bavail * after.f_frsize))
    assert low <= free <= high


def test_hint_names_the_fixes_and_only_the_ones_that_apply():
    full = cs.disk_full_hint(method="full", checkpoints_kept=3, run_id="20261130-0101-tiny")
    for fix in (
        "Free space",
        "checkpoints_kept: 1 (now 3;",
        "output.dir",
        "cockpit restart 20261130-0101-tiny`",
    ):
        assert fix in full
    assert "LoRA/QLoRA checkpoint holds only the adapter" in full
    lora = cs.disk_full_hint(method="lora", checkpoints_kept=1)
    assert "LoRA/QLoRA" not in lora and "checkpoints_kept" not in lora and "output.dir" in lora
    resumes = cs.disk_full_hint(method="lora", run_id="r1", checkpoints=["checkpoint-2", "checkpoint-4"])
    assert "`cockpit restart r1`: it resumes from checkpoint-4, intact." in resumes
    assert "starts again from step 0 (no checkpoint was complete yet)" in cs.disk_full_hint(checkpoints=[])


@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError(TORCH_ZIP),
        RuntimeError(
            "[enforce fail at inline_container.cc:778] . PytorchStreamWriter failed writing file data/3: "
            "file write failed"
        ),
        type("SafetensorError", (Exception,), {})(SAFETENSORS),
        OSError(errno.ENOSPC, "No space left on device"),
        OSError(errno.EDQUOT, "Disk quota exceeded"),
    ],
    ids=["torch_zip", "torch_stream", "safetensors", "enospc", "edquot"],
)
def test_refused_writes_are_disk_full_with_the_free_space_now(exc, tmp_path):
    (tmp_path / "config.yaml").write_text("method: full\noutput:\n  checkpoints_kept: 2\n")
    (tmp_path / "checkpoints" / "checkpoint-3").mkdir(parents=True)
    (tmp_path / "checkpoints" / "checkpoint-3" / "cockpit-complete.json").write_text("{}")
    verdict = classify(exc, "training", str(tmp_path))
    assert verdict.kind == "disk" and verdict.exit_code == 6
    # the free space is measured at classification (other writers share this disk: not compared exactly)
    free = r"[\d.]+ (bytes|KiB|MiB|GiB) free now on "
    lead = rf"disk full \(or over quota\) while training, {free}{re.escape(str(tmp_path))}: "
    assert re.match(lead, verdict.message), verdict.message
    assert str(exc) in verdict.message and "half-written checkpoint" in verdict.hint
    assert "output.checkpoints_kept: 1 (now 2;" in verdict.hint and "only the adapter" in verdict.hint
    assert f"cockpit restart {tmp_path.name}`: it resumes from checkpoint-3" in verdict.hint


def test_the_os_error_behind_torchs_zip_error_is_found_in_the_chain(tmp_path):
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as inner:
            raise RuntimeError("saving failed") from inner
    except RuntimeError as outer:
        verdict = classify(outer, "training", str(tmp_path))
    assert verdict.kind == "disk" and "No space left on device" in verdict.message


def test_other_write_errors_are_not_disk_full(tmp_path):
    assert (
        classify(RuntimeError("unexpected position in the dataset"), "training", str(tmp_path)).kind
        == "other"
    )
    assert classify(OSError(errno.EACCES, "Permission denied"), "training", str(tmp_path)).kind == "other"


def test_the_guards_refusal_keeps_its_own_message_and_hint(tmp_path):
    check = cs.check_space(8, cs.CheckpointSize(GIB, "checkpoint-4 measured 1.00 GiB"), MIB, tmp_path)
    verdict = classify(CheckpointWontFit(check, "Nothing of checkpoint-8 was written."), "training")
    assert verdict.kind == "disk" and verdict.message == check.message()
    assert verdict.hint == "Nothing of checkpoint-8 was written."


@pytest.mark.skipif(
    not (Path("/dev/full").exists() and stat.S_ISCHR(os.stat("/dev/full").st_mode)),
    reason="needs /dev/full (a device whose every write fails with ENOSPC)",
)
def test_torch_save_into_a_full_device_is_classified_disk(tmp_path):
    """The real zip writer's failure, not a copy of its text (torch in a child: tests stay torch-free)."""
    code = (
        "import torch\n"
        "from train_backend.errors import classify\n"
        "try:\n"
        "    torch.save({'w': torch.zeros(4096)}, '/dev/full')\n"
        "except Exception as exc:\n"
        f"    v = classify(exc, 'training', {str(tmp_path)!r}); print(v.kind); print(v.message)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    kind, message = out.stdout.splitlines()[:2]
    assert kind == "disk", out.stdout + out.stderr
    assert "inline_container.cc" in message or "No space left" in message
