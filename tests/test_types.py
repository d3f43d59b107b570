"""The core type-checks under `mypy --strict` ([tool.mypy] in pyproject.toml: files = cockpit).

`python -m mypy` runs as a user would run it, from the repository root, with the project's own
config; the test is skipped where mypy is not installed (it comes with the `test` extra).
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import ROOT

pytest.importorskip("mypy")

# Files whose bodies are not yet held to strict (path prefixes). Empty: every file of cockpit/ is,
# and the test asks for a clean exit of the whole run. A file may come back here only for a while,
# while it is being split or reworked elsewhere.
NOT_YET_STRICT: tuple[str, ...] = ()
ERROR = re.compile(r"^(?P<path>[^\s:]+\.py):\d+:(?:\d+:)? error: ", re.M)


@pytest.mark.timeout(900)
def test_the_core_is_mypy_strict_clean():
    out = subprocess.run(
        [sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=870
    )
    report = out.stdout + out.stderr
    assert out.returncode in (0, 1), report  # 2: mypy itself failed (config, crash)
    held = [
        line
        for line in report.splitlines()
        if (m := ERROR.match(line)) and not m["path"].startswith(NOT_YET_STRICT)
    ]
    assert held == [], "mypy --strict (run: python -m mypy):\n" + "\n".join(held)
    if not NOT_YET_STRICT:
        assert out.returncode == 0, report


def test_the_files_not_yet_strict_still_exist():
    """A file split away or renamed leaves this list: what replaces it is checked strictly."""
    gone = [p for p in NOT_YET_STRICT if not (ROOT / p).exists()]
    assert gone == [], f"remove from NOT_YET_STRICT: {gone}"
