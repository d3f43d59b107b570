"""The suite does not depend on the caller's shell: tests pass with hub and colour variables set."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import CALLER_ENV, ROOT

# tests that read these variables (the hub, colours, the cockpit's own folders)
PROBES = [
    "tests/test_preflight_start.py::test_the_demo_is_checked_locally_in_well_under_a_second",
    "tests/test_headless.py",
    "tests/test_preflight_network.py",
]


def test_the_tests_pass_with_the_callers_hub_and_colour_variables_set(tmp_path):
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_ENDPOINT": "http://127.0.0.1:9",
        "NO_COLOR": "1",
        "FORCE_COLOR": "1",
        "COLUMNS": "61",
        "COCKPIT_HOME": str(tmp_path / "elsewhere"),
    }
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", *PROBES],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stdout[-4000:]
    assert not (tmp_path / "elsewhere").exists()  # no test wrote into the caller's COCKPIT_HOME


def test_the_conftest_clears_every_listed_variable():
    assert not any(name in os.environ for name in CALLER_ENV)
