"""The commands the product prints work as typed: `cockpit` only where PATH finds this install."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import ROOT

from cockpit.paths import cockpit_command

ENTRY_POINT = Path(sysconfig.get_path("scripts"), "cockpit")


@pytest.fixture
def bare(monkeypatch, tmp_path):
    """No $COCKPIT_COMMAND, a PATH with no cockpit on it, and the current directory `tmp_path`."""
    monkeypatch.delenv("COCKPIT_COMMAND", raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def works(command: str, cwd: Path) -> bool:
    """The command as a user would type it in a shell there: `--help` answers."""
    out = subprocess.run(f"{command} --help", shell=True, cwd=cwd, capture_output=True, text=True, timeout=60)
    return out.returncode == 0 and "usage: cockpit" in out.stdout


def test_an_override_is_used_as_it_is(monkeypatch):
    monkeypatch.setenv("COCKPIT_COMMAND", "uv run cockpit")
    assert cockpit_command() == "uv run cockpit"


def test_off_path_it_is_a_path_that_works(bare):
    command = cockpit_command()
    assert command != "cockpit" and works(command, bare)
    if ENTRY_POINT.is_file():  # an installed entry point, outside the current directory: its whole path
        assert command == str(ENTRY_POINT.absolute())


@pytest.mark.skipif(not ENTRY_POINT.is_file(), reason="no cockpit entry point installed")
def test_under_the_current_directory_it_is_relative(bare, monkeypatch):
    venv_root = ENTRY_POINT.parent.parent
    monkeypatch.chdir(venv_root.parent)
    command = cockpit_command()
    assert command == f"{venv_root.name}/bin/cockpit" and works(command, venv_root.parent)


@pytest.mark.skipif(not ENTRY_POINT.is_file(), reason="no cockpit entry point installed")
def test_on_path_through_a_link_it_is_the_bare_name(bare, monkeypatch):
    linked = bare / "bin"
    linked.mkdir()
    (linked / "cockpit").symlink_to(ENTRY_POINT)  # what install.sh does in ~/.local/bin
    monkeypatch.setenv("PATH", f"{linked}:/usr/bin:/bin")
    assert cockpit_command() == "cockpit"
    assert works("cockpit", bare)


def test_another_cockpit_on_path_is_not_taken_for_this_one(bare, monkeypatch):
    other = bare / "bin"
    other.mkdir()
    (other / "cockpit").write_text("#!/bin/sh\necho another cockpit\n")
    (other / "cockpit").chmod(0o755)
    monkeypatch.setenv("PATH", f"{other}:/usr/bin:/bin")
    assert cockpit_command() != "cockpit"


def test_without_an_entry_point_it_is_this_python_with_dash_m(bare, monkeypatch):
    monkeypatch.setattr(sysconfig, "get_path", lambda *a, **k: str(bare / "nowhere"))
    command = cockpit_command()
    assert shlex.split(command) == [sys.executable, "-m", "cockpit"]
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    assert works(command, bare)


def test_the_cli_prints_the_command_that_works(bare):
    """`cockpit init` from a shell where `cockpit` is not on PATH: the next step it prints runs."""
    env = {k: v for k, v in os.environ.items() if k != "COCKPIT_COMMAND"}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run(
        [sys.executable, "-m", "cockpit", "init", "my-run.yaml"],
        cwd=bare,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    printed = out.stdout.strip().split("then: ", 1)[1]
    command, rest = printed.rsplit(" train ", 1)
    assert rest == "my-run.yaml" and not command.startswith("cockpit") and works(command, bare)
