"""Import boundaries, checked in fresh interpreters (harlequin's way).

- the UI process never imports torch;
- train_backend never imports textual, screens or widgets;
- --no-ui never imports textual.
The real processes of a run are checked too, in test_trainer_e2e.test_full_run_headless.
"""

from __future__ import annotations

import json
import pkgutil
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


def core_modules() -> list[str]:
    """Every module of the cockpit package, walked (not listed by hand), so a new one is checked too."""
    import cockpit

    walked = pkgutil.walk_packages(cockpit.__path__, prefix="cockpit.")
    # __main__ runs the command line when imported: its one import is cockpit.cli.main
    return ["cockpit", *sorted(info.name for info in walked if not info.name.endswith("__main__"))]


def test_the_walk_finds_every_module_file():
    files = {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in (ROOT / "cockpit").rglob("*.py")
    }
    assert files - {"cockpit.__main__"} == set(core_modules())


def test_every_core_module_imports_neither_torch_nor_textual():
    """One fresh interpreter imports every module of cockpit; none may pull in the heavy ones."""
    modules = core_modules()
    assert len(modules) > 60
    mods = imported("\n".join(f"import {m}" for m in modules))
    assert not (mods & {"textual", *HEAVY_FOR_UI}), mods & {"textual", *HEAVY_FOR_UI}


@pytest.mark.parametrize("module", ["cockpit.cli.main", "cockpit.live.headless", "cockpit.run.process"])
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
