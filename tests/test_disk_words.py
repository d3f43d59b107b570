"""A full disk is named for what ran out (bytes or inodes) and where; the reserve scales with the
checkpoint; a full model cache while a synthetic model is built is a `disk` error, not `model_load`."""

from __future__ import annotations

import errno
import os
import sys
from collections import namedtuple

from conftest import unwritable_dir

from cockpit.run import disk_guard as cs
from train_backend import model as model_mod
from train_backend.errors import classify

MIB = 2**20
Statvfs = namedtuple("Statvfs", "f_bavail f_frsize f_files f_favail")


def test_an_inode_exhausted_disk_says_inodes(tmp_path, monkeypatch):
    monkeypatch.setattr(cs.os, "statvfs", lambda _p: Statvfs(74650, 4096, 65536, 0))
    verdict = classify(OSError(errno.ENOSPC, "No space left on device"), "training", str(tmp_path))
    assert verdict.kind == "disk"
    assert "no free inodes (all 65,536 files in use; `df -i" in verdict.message
    assert "though 291.6 MiB is free" in verdict.message
    monkeypatch.setattr(cs.os, "statvfs", lambda _p: Statvfs(74650, 4096, 65536, 10))
    assert "291.6 MiB free now on" in cs.free_text(tmp_path)


def test_the_reserve_scales_with_the_checkpoint(tmp_path):
    small = cs.check_space(
        4, cs.CheckpointSize(3_000_000, "checkpoint-2 measured 2.9 MiB"), 40 * MIB, tmp_path
    )
    assert small.fits and small.reserve_bytes == cs.MIN_RESERVE_BYTES
    assert small.message().endswith("+ 10% + 16.0 MiB reserve")
    big = cs.check_space(4, cs.CheckpointSize(10 * 2**30, "x"), 0, tmp_path)
    assert big.reserve_bytes == cs.SPACE_RESERVE_BYTES
    mid = cs.check_space(4, cs.CheckpointSize(200 * MIB, "x"), 0, tmp_path)
    assert mid.reserve_bytes == 100 * MIB


def test_a_full_cache_while_building_a_synthetic_model_is_a_disk_error(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    monkeypatch.setenv("COCKPIT_CACHE", str(cache))
    said = "SafetensorError: Error while serializing: I/O error: No space left on device (os error 28)"
    child = f"import sys; print({said!r}, file=sys.stderr); sys.exit(1)"
    monkeypatch.setattr(model_mod, "synthetic_build_command", lambda *a: [sys.executable, "-c", child])
    try:
        model_mod.ensure_synthetic("tiny", "fp32", "cpu")
    except OSError as exc:
        verdict = classify(exc, "loading_model", str(run_dir))
    else:
        raise AssertionError("the build did not fail")
    assert verdict.kind == "disk" and verdict.exit_code == 6
    assert verdict.message.startswith("disk full (or over quota) while loading model, ")
    assert (
        f"free now on {cache / 'synthetic'}" in verdict.message
        and "No space left on device" in verdict.message
    )
    assert "COCKPIT_CACHE" in verdict.hint and "model.name" not in verdict.hint
    assert not any(p.name.startswith(".tiny") for p in (cache / "synthetic").iterdir())
    assert os.path.isdir(run_dir)


def test_a_read_only_model_cache_is_a_disk_error_naming_the_cache(tmp_path, monkeypatch):
    """Was `model_load` with a fix about model.name: the cache is what to change."""
    cache = unwritable_dir(tmp_path)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    monkeypatch.setenv("COCKPIT_CACHE", str(cache))
    try:
        model_mod.ensure_synthetic("tiny", "fp32", "cpu")
    except OSError as exc:
        verdict = classify(exc, "loading_model", str(run_dir))
    else:
        raise AssertionError("the cache took the model")
    assert verdict.kind == "disk" and verdict.message.startswith("the model cache ")
    assert "cannot be written or read" in verdict.message
    assert "Set COCKPIT_CACHE (synthetic: models) to a folder you can write to" in verdict.hint
    assert "model.name" not in verdict.hint and "cockpit restart run" in verdict.hint
