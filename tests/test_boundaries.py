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
        "cockpit.cli.main",
        "cockpit.cli.args",
        "cockpit.cli.plan_commands",
        "cockpit.live.headless",
        "cockpit.live.session",
        "cockpit.run.process",
        "cockpit.config.schema",
        "cockpit.config.load",
        "cockpit.live.state",
        "cockpit.protocol.wire",
        "cockpit.run.rundir",
        "cockpit.oom.messages",
        "cockpit.models.shipped",
        "cockpit.plan.catalog",
        "cockpit.models.memory",
        "cockpit.models.shape",
        "cockpit.doctor.engine",
        "cockpit.telemetry.sampler",
        "cockpit.telemetry.history",
        "cockpit.telemetry.host",
        "cockpit.telemetry.watchdog",
        "support.nvml_fake",
        "cockpit.live.watch",
        "cockpit.live.replay",
        "cockpit.telemetry.recorder",
        "cockpit.plan.fits",
        "cockpit.preflight.checks.base",
        "cockpit.preflight.runner",
        "cockpit.preflight.full",
        "cockpit.preflight.checks.gpu",
        "cockpit.preflight.checks.gpu_probe",
        "cockpit.telemetry.nvml_state",
        "cockpit.preflight.checks.perf",
        "cockpit.preflight.probe_client",
    ],
)
def test_core_imports_neither_torch_nor_textual(module):
    mods = imported(f"import {module}")
    assert not (mods & {"textual", *HEAVY_FOR_UI}), mods & {"textual", *HEAVY_FOR_UI}


def test_tui_never_imports_torch():
    mods = imported("import screens.run.app, screens.run.view, widgets")
    assert "textual" in mods
    assert not (mods & set(HEAVY_FOR_UI))


def test_headless_cli_paths_never_import_textual(tmp_path):
    code = f"""
import os
os.environ['COCKPIT_HOME'] = {str(tmp_path)!r}
from cockpit.cli.main import main
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
