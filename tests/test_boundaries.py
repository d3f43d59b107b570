"""Import boundaries, checked in fresh interpreters (harlequin's way).

- the UI process never imports torch;
- train_backend never imports textual, screens or widgets;
- --no-ui never imports textual.
The real processes of a run are checked too, in test_trainer_e2e.test_full_run_headless.
"""

from __future__ import annotations

import json
import os
import pkgutil
import subprocess
import sys

import pytest
from conftest import ROOT

LINT_IMPORTS = (
    "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
)
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
    code = (
        "import train_backend.trainer, train_backend.callbacks, torch, transformers, peft, trl, datasets\n"
        "from train_backend.checkpoints import trainer_class\ntrainer_class()"
    )
    mods = imported(code)
    assert "trl" in mods and not (mods & {"textual", "screens", "widgets"})


def _cycles(graph) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return groups


def test_no_import_cycle_anywhere():
    import grimp

    graph = grimp.build_graph("cockpit", "screens", "widgets", "train_backend", cache_dir=None)
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    class Graph:
        modules = frozenset({"a", "b", "c"})

        def find_modules_directly_imported_by(self, m):
            return {"a": {"b"}, "b": {"a"}, "c": {"a"}}[m]

    assert _cycles(Graph()) == [["a", "b"]]


def test_the_import_contracts_hold():
    out = subprocess.run(
        [sys.executable, "-c", LINT_IMPORTS, "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and "0 broken" in out.stdout, out.stdout[-3000:] + out.stderr[-2000:]


def test_a_forbidden_import_breaks_the_contracts(tmp_path):
    """The contracts bite: a copy of the tree whose core imports textual fails lint-imports."""
    import shutil

    for name in ("cockpit", "screens", "widgets", "train_backend"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__", "data"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    fmt_py = tmp_path / "cockpit" / "fmt.py"
    fmt_py.write_text(fmt_py.read_text() + "\nimport textual  # a forbidden import\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", LINT_IMPORTS, "--no-cache"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    assert "cockpit.fmt -> textual" in out.stdout, out.stdout[-3000:]
    first = "the core imports neither textual nor torch (nor screens, widgets or the trainer)"
    assert f"{first}BROKEN" in out.stdout


def test_the_architecture_map_names_every_package():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    packages = sorted(
        p.relative_to(ROOT).as_posix()
        for top in ("cockpit", "screens")
        for p in (ROOT / top).iterdir()
        if p.is_dir() and (p / "__init__.py").exists()
    )
    assert len(packages) >= 14
    missing = [p for p in packages if f"`{p}/`" not in doc and f"`{p.split('/', 1)[1]}/`" not in doc]
    assert missing == [], f"docs/architecture.md does not name {missing}"
