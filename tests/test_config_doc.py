"""docs/config.md tells the truth: its reference is generated from the schema and lists every key."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT

from cockpit.config import schema as config

DOC = (ROOT / "docs" / "config.md").read_text()


def test_config_reference_lists_every_key_with_its_default_and_meaning():
    for key, default, doc in config.reference_rows():
        assert f"| `{key}` | `{default}` | {doc} |" in DOC, key  # the text `cockpit init` writes


def test_the_generated_docs_are_up_to_date():
    """docs/config.md's table and docs/protocol.md's, as `make docs` writes them."""
    out = subprocess.run(
        [sys.executable, "scripts/gen_docs.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, f"{out.stdout}{out.stderr}run: make docs"
    table = DOC.split("<!-- config:begin -->\n", 1)[1].split("<!-- config:end -->", 1)[0]
    assert table == config.reference_table() and table.count("\n") == len(config.reference_rows()) + 2
