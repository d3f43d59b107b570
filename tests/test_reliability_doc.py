"""docs/reliability.md names only tests that exist: each `test_file::name` is a test of that file."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_test_the_reliability_doc_names_exists():
    text = (ROOT / "docs" / "reliability.md").read_text()
    current = None
    named = 0
    for file, name in re.findall(r"(?:(test_\w+)::|, ::)([\w*]+)", text):
        # "test_x::a, ::b" names two tests of test_x
        current = file or current
        source = (ROOT / "tests" / f"{current}.py").read_text()
        if name != "*":
            assert re.search(rf"def test_{re.escape(name)}\(", source), f"{current}::{name}"
        named += 1
    assert named > 60
