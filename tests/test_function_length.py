"""A function reads on a screen or two: none in the shipped packages runs past MAX_LINES."""

from __future__ import annotations

import ast

from conftest import ROOT

MAX_LINES = 100
PACKAGES = ("cockpit", "train_backend", "screens", "widgets")


def function_lengths() -> dict[str, int]:
    lengths = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    where = f"{path.relative_to(ROOT)}:{node.lineno}:{node.name}"
                    lengths[where] = node.end_lineno - node.lineno + 1
    return lengths


def test_no_function_is_longer_than_the_limit():
    lengths = function_lengths()
    assert len(lengths) > 1000  # the walk found the code
    too_long = {where: n for where, n in lengths.items() if n > MAX_LINES}
    assert too_long == {}
