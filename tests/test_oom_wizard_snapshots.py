"""Snapshots of the OOM wizard in its main states, opened by itself from a scripted run's `oom`
event: the article's 13B recipe on an emulated 24 GiB card (100x32 and 80x24), two remedies
picked together, a run that only a combination saves, and the host's OOM killer.

Deterministic: fixed terminal sizes, scripted events, the shipped shapes and catalog prices (no
user cards.yaml), a fixed clock. After `--snapshot-update`, read snapshot_report.html first.
"""

from __future__ import annotations

import copy
import time

import pytest
from test_oom_wizard import (
    ARTICLE_13B,
    ScriptedSession,
    make_app,
    make_run,
    oom_error,
    until_training,
    wizard_ready,
)


@pytest.fixture(autouse=True)
def no_user_cards(tmp_path, monkeypatch):
    monkeypatch.setenv("COCKPIT_CONFIG", str(tmp_path / "no-config"))


def wizard_app(tmp_path, settings=ARTICLE_13B, error=None):
    run = make_run(tmp_path, settings)
    events = [*until_training(settings), error or oom_error()]
    return make_app(ScriptedSession(run, events, alive=False))


async def analysed(pilot) -> None:
    deadline = time.monotonic() + 10
    while not wizard_ready(pilot.app):
        assert time.monotonic() < deadline, "the wizard never showed its analysis"
        await pilot.pause(0.02)
    await pilot.pause()


async def two_picked(pilot) -> None:
    await analysed(pilot)
    await pilot.press("space", "down", "down", "space")  # checkpointing + a smaller micro-batch
    await pilot.pause()


def seven_b_lora_on_12gib() -> dict:
    settings = copy.deepcopy(ARTICLE_13B)
    settings["model"]["name"] = "synthetic:llama-2-7b"
    settings["method"] = "lora"
    settings["lora"]["target_modules"] = "all-linear"
    settings["training"]["optimizer"] = "adamw_torch"
    settings["emulate_vram_gib"] = 12.0
    return settings


def test_article_recipe(snap_compare, tmp_path):
    assert snap_compare(wizard_app(tmp_path), terminal_size=(100, 32), run_before=analysed)


def test_article_recipe_80x24(snap_compare, tmp_path):
    assert snap_compare(wizard_app(tmp_path), terminal_size=(80, 24), run_before=analysed)


def test_two_remedies_picked(snap_compare, tmp_path):
    assert snap_compare(wizard_app(tmp_path), terminal_size=(100, 32), run_before=two_picked)


def test_only_a_combination_fits(snap_compare, tmp_path):
    # cuBLAS could not allocate its workspace: an OOM without the allocator's figures
    figures = {"kind": "cublas_alloc", "exception": "RuntimeError", "phase": "first_forward", "step": 1}
    app = wizard_app(tmp_path, seven_b_lora_on_12gib(), oom_error(figures))
    assert snap_compare(app, terminal_size=(100, 32), run_before=analysed)


def test_host_oom(snap_compare, tmp_path):
    settings = copy.deepcopy(ARTICLE_13B)
    settings["training"]["dataloader_num_workers"] = 4
    host = {
        "kind": "host",
        "host": True,
        "oom_kills_before": 0,
        "oom_kills_after": 1,
        "limit_bytes": 64 * 2**30,
        "peak_bytes": 64 * 2**30 - 2**20,
    }
    error = oom_error(host, step=0, phase="quantising")
    assert snap_compare(wizard_app(tmp_path, settings, error), terminal_size=(100, 32), run_before=analysed)
