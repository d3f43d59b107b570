"""Every file of this repository that the docs name exists, so a pointer does not outlive a move."""

from __future__ import annotations

import re

from conftest import ROOT

# the repository's own folders; a path under anything else (trl/trainer/utils.py, unsloth/...) is
# another project's
TOP = ("cockpit", "screens", "widgets", "train_backend", "tests", "bench", "docs", "scripts", ".ci")
ROOMS = sorted(p.name for p in (ROOT / "cockpit").iterdir() if (p / "__init__.py").exists())
PATH = re.compile(
    r"(?<![\w./-])((?:[\w.-]+/)+[\w.*-]+\.(?:py|md|tcss|jsonl|json|toml|yaml|txt|sh|log|svg))(?![\w])"
)


def docs() -> list:
    return [
        p
        for p in (ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md")))
        if p.exists()
    ]


def named_paths(doc) -> list[str]:
    """The repository paths a doc names; docs/architecture.md names the core's files from their room
    (`run/state.py` is cockpit/run/state.py)."""
    out = []
    for path in PATH.findall(doc.read_text()):
        first = path.split("/", 1)[0]
        if first in TOP:
            out.append(path)
        elif first in ROOMS and doc.name == "architecture.md":
            out.append(f"cockpit/{path}")
    return out


def exists(path: str) -> bool:
    where = ROOT / path
    return any(where.parent.glob(where.name)) if "*" in path else where.exists()


def test_every_path_the_docs_name_exists():
    missing = [f"{doc.relative_to(ROOT)}: {path}" for doc in docs() for path in named_paths(doc)]
    missing = [m for m in missing if not exists(m.split(": ", 1)[1])]
    assert not missing, "\n".join(missing)


def test_the_check_reads_paths_as_written():
    """The pattern finds a path in backquotes and in prose, and the check would fail a gone one."""
    arch = ROOT / "docs" / "architecture.md"
    assert "cockpit/run/state.py" in named_paths(arch)
    assert PATH.findall("see `cockpit/live/state.py`, then tests/fixtures/demo_run_events.jsonl.") == [
        "cockpit/live/state.py",
        "tests/fixtures/demo_run_events.jsonl",
    ]
    assert not exists("cockpit/live/state.py") and exists("bench/results/*ui-overhead-cpu-*.json")
