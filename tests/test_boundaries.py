"""Import boundaries, checked in fresh interpreters (harlequin's way).

- the UI process never imports torch;
- train_backend never imports textual, screens or widgets;
- --no-ui never imports textual.
The real processes of a run are checked too, in test_trainer_e2e.test_full_run_headless.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT

HEAVY_FOR_UI = ("torch", "transformers", "peft", "trl", "bitsandbytes", "datasets", "accelerate")


def imported(code: str) -> set[str]:
    probe = f"{code}\nimport sys, json\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    "module",
    [
        "cockpit",
        "cockpit.cli",
        "cockpit.cli_args",
        "cockpit.cli_plan",
        "cockpit.headless",
        "cockpit.session",
        "cockpit.supervisor",
        "cockpit.config",
        "cockpit.config_load",
        "cockpit.runstate",
        "cockpit.protocol",
        "cockpit.rundir",
        "cockpit.oom",
        "cockpit.shapes",
        "cockpit.catalog",
        "cockpit.estimate",
        "cockpit.modelshape",
        "cockpit.doctor",
        "cockpit.telemetry",
        "cockpit.telemetry_log",
        "cockpit.telemetry_host",
        "cockpit.watchdog",
        "cockpit.nvml_fake",
        "cockpit.watch",
        "cockpit.replay",
        "cockpit.recorder",
        "cockpit.fitting",
        "cockpit.checks",
        "cockpit.preflight",
        "cockpit.preflight_run",
        "cockpit.checks_gpu",
        "cockpit.checks_gpu_probe",
        "cockpit.nvml_state",
        "cockpit.checks_perf",
        "cockpit.probe_client",
    ],
)
def test_core_imports_neither_torch_nor_textual(module):
    mods = imported(f"import {module}")
    assert not (mods & {"textual", *HEAVY_FOR_UI}), mods & {"textual", *HEAVY_FOR_UI}


def test_tui_never_imports_torch():
    mods = imported("import screens.app, screens.run_view, widgets")
    assert "textual" in mods
    assert not (mods & set(HEAVY_FOR_UI))


def test_headless_cli_paths_never_import_textual(tmp_path):
    code = f"""
import os
os.environ['COCKPIT_HOME'] = {str(tmp_path)!r}
from cockpit.cli import main
main(['runs'])
main(['init', {str(tmp_path / "c.yaml")!r}])
main(['train', {str(tmp_path / "c.yaml")!r}, '--check', '--no-ui'])
main(['demo', '--check', '--no-ui'])
"""
    mods = imported(code)
    assert "textual" not in mods and "torch" not in mods


def test_backend_never_imports_textual():
    mods = imported(
        "import train_backend.trainer, train_backend.model, train_backend.data, "
        "train_backend.channel, train_backend.errors, train_backend.synthetic, train_backend.callbacks, "
        "train_backend.checkpoints"
    )
    assert not (mods & {"textual", "screens", "widgets"})


def test_backend_with_its_libraries_loaded_still_has_no_textual():
    code = "import train_backend.trainer as t, torch, transformers, peft, trl, datasets\nt.make_trainer_class"
    mods = imported(code)
    assert "trl" in mods and not (mods & {"textual", "screens", "widgets"})
