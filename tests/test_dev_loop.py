"""The dev loop's checks hold on the tree: ruff's lint and format (the import contracts are
tests/test_boundaries.py's), and `make test` is the README's test command."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_ruff_check_is_clean():
    out = run(sys.executable, "-m", "ruff", "check", "--no-cache", ".")
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr + "\nfix: make format, then make lint"


def test_ruff_format_check_is_clean():
    out = run(sys.executable, "-m", "ruff", "format", "--check", "--no-cache", ".")
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr + "\nfix: make format"


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_make_test_is_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"## Two commands.*?```bash\n(.*?)```", readme, re.S).group(1)
    readme_test = block.strip().splitlines()[-1]
    assert run("make", "-n", "test").stdout.strip() == readme_test


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_make_check_runs_every_check_and_each_target_says_what_it_does():
    makefile = (ROOT / "Makefile").read_text()
    targets = dict(re.findall(r"(?m)^([a-z-]+):.*?## (.+)$", makefile))
    phony = set(re.search(r"(?m)^\.PHONY: (.+)$", makefile).group(1).split())
    assert phony == set(targets), phony ^ set(targets)  # every target documented, none left out
    check = re.search(r"(?m)^check: ([^#]+)##", makefile).group(1).split()
    assert check == ["lint", "format-check", "types", "contracts", "test", "bench-smoke"]
    listed = run("make").stdout
    assert all(f"make {target}" in listed for target in targets)
