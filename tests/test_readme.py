"""The README is for a newcomer's first hour and tells the truth: CI runs its two commands, its
capture is the run view as its snapshot test draws it, and every command it lists exists."""

from __future__ import annotations

import importlib.util
import re

from conftest import ROOT

README = (ROOT / "README.md").read_text()


def test_the_readme_is_short():
    assert len(README.splitlines()) <= 200


def test_ci_runs_exactly_the_readme_test_command():
    block = re.search(r"## Two commands.*?```bash\n(.*?)```", README, re.S).group(1).strip().splitlines()
    assert len(block) == 2
    setup, tests = block
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert tests in ci
    assert "cockpit demo" in setup
    install = setup.split(" && ")[0]
    assert install == "./install.sh" and install in ci  # CI sets up as the README does


def screen_text(svg_path) -> str:
    spec = importlib.util.spec_from_file_location("screen_text", ROOT / "scripts" / "screen_text.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.screen_text(svg_path.read_text())


def test_the_capture_is_the_run_view_as_its_snapshot_draws_it():
    svg, capture = re.search(r"<!-- capture: (\S+) -->\n```text\n(.*?)\n```", README, re.S).groups()
    expected = screen_text(ROOT / svg)
    assert capture == expected, f"run: python scripts/screen_text.py {svg}, and paste it into the README"
    lines = capture.splitlines()
    assert len(lines) == 24 and max(len(line) for line in lines) <= 80
    assert "REPLAY" in lines[1] and "finished at step 88" in lines[0]


def test_every_command_the_readme_lists_is_one_the_cli_has():
    from cockpit.cli.args import build_parser

    parser = build_parser()
    (commands,) = [a for a in parser._actions if a.dest == "command"]
    block = re.search(r"## Every command, one line each\n\n```bash\n(.*?)```", README, re.S).group(1)
    listed = set()
    for line in block.splitlines():
        assert line.startswith("cockpit "), line
        listed |= set(line.split()[1].split("|"))
    assert listed <= set(commands.choices), listed - set(commands.choices)
    assert set(commands.choices) <= listed, set(commands.choices) - listed  # none left out either
