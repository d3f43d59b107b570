"""The README tells the truth: its config reference is complete and CI runs its test command."""

from __future__ import annotations

import re

from conftest import ROOT

from cockpit.config import schema as config

README = (ROOT / "README.md").read_text()


def test_config_reference_lists_every_key_with_its_default_and_meaning():
    for key, default, doc in config.reference_rows():
        assert f"| `{key}` | `{default}` | {doc} |" in README, key  # the text `cockpit init` writes


def test_ci_runs_exactly_the_readme_test_command():
    block = re.search(r"## Two commands.*?```bash\n(.*?)```", README, re.S).group(1).strip().splitlines()
    assert len(block) == 2
    setup, tests = block
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert tests in ci
    assert "cockpit demo" in setup
