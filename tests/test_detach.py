"""What a detach says (the TUI's `d`, --no-ui's Ctrl-C): whether training goes on or the run stays
paused, and the commands for next, each whole on a line of the terminal's width."""

from __future__ import annotations

import io
import os
import signal
from types import SimpleNamespace

import pytest

from cockpit.cli import main as cli
from cockpit.live import headless
from cockpit.live.headless import detached_text, follow
from cockpit.live.session import RunSession
from cockpit.protocol.wire import encode
from cockpit.run.exit_codes import EXIT_DETACHED
from cockpit.run.rundir import RunDir

RUN_ID = "20261203-090911-tiny"


def live_run(tmp_path, paused: bool) -> RunDir:
    path = tmp_path / RUN_ID
    path.mkdir(parents=True)
    events = [
        encode("hello", 100.0, pid=4242, price_per_hour=0.59),
        encode("log", 110.0, step=21, total_steps=150, loss=6.841),
    ]
    if paused:
        events.append(encode("paused", 111.0, step=21))
    (path / "events.jsonl").write_bytes(b"".join(events))
    return RunDir(path)


class Trainer:
    """A trainer process that keeps running."""

    pid = 4242

    def poll(self):
        return None


class Watch:
    """No GPUs and no host to sample."""

    trainer_pid = None

    def __init__(self, *args, **kwargs):
        pass

    def update(self, state):
        return None, []

    def start(self):
        return self

    def stop(self):
        pass


def test_the_tui_s_detach_of_a_paused_run_says_it_stays_paused(tmp_path, monkeypatch, capsys):
    """`d` on a paused run: the TUI exits with EXIT_DETACHED, and the line after it says how to resume."""
    import cockpit.live.watch
    import screens.run.app

    class App:  # the run screen: reads the journal, then the user presses `d`
        relaunched = None

        def __init__(self, session, **kwargs):
            self.session = session

        def run(self):
            self.session.poll()
            return EXIT_DETACHED

    monkeypatch.setattr(screens.run.app, "CockpitApp", App)
    monkeypatch.setattr(cockpit.live.watch, "LiveWatch", Watch)
    monkeypatch.setattr(cli, "_headless", lambda args: False)
    args = SimpleNamespace(no_ui=False)

    for paused in (True, False):
        run = live_run(tmp_path / str(paused), paused)
        assert cli._show(run, Trainer(), args) == EXIT_DETACHED
        said = " ".join(capsys.readouterr().out.split())
        if paused:
            assert said.startswith("detached; the run stays paused. Resume: cockpit resume " + RUN_ID)
            assert "training goes on" not in said
        else:
            assert said.startswith("detached; training goes on. Watch: cockpit attach " + RUN_ID)
            assert "resume" not in said


def test_ctrl_c_on_a_paused_run_without_a_screen_says_it_stays_paused(tmp_path, monkeypatch):
    monkeypatch.setattr(headless, "LiveWatch", Watch)
    session = RunSession(live_run(tmp_path, paused=True), proc=Trainer())
    polled = session.poll

    def poll_then_interrupt():
        items = polled()
        if session.state.status == "paused":
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while it holds
        return items

    session.poll = poll_then_interrupt
    out = io.StringIO()
    assert follow(session, out=out, force_terminal=False) == EXIT_DETACHED
    said = out.getvalue()
    assert f"the run stays paused. Resume: cockpit resume {RUN_ID}" in " ".join(said.split())
    assert "training goes on" not in said


@pytest.mark.parametrize("paused", [True, False])
def test_the_detach_line_wraps_at_words_and_keeps_each_command_whole(paused):
    for width in (80, 100, 60):
        lines = detached_text(RUN_ID, paused, width).splitlines()
        assert all(len(line) <= width for line in lines), lines
        for command in ("attach", "stop") + (("resume",) if paused else ()):
            assert sum(f"cockpit {command} {RUN_ID}" in line for line in lines) == 1, (width, lines)
    # a line the terminal would otherwise break inside a word (`Stop: c` / `ockpit stop`)
    assert detached_text(RUN_ID, False, 80).splitlines() == [
        f"detached; training goes on. Watch: cockpit attach {RUN_ID}",
        f"  Stop: cockpit stop {RUN_ID}",
    ]
    assert len(detached_text(RUN_ID, False, 200).splitlines()) == 1


def test_the_start_line_wraps_at_words_and_keeps_the_run_directory_whole(tmp_path, monkeypatch, capsys):
    """Walkthrough: `run ID started (trainer pid N); directory /tmp/wh4/runs/20` / `261203-...`,
    broken by the terminal at column 80, above detach lines wrapped at words."""
    runs = tmp_path / "wh4" / "runs"
    monkeypatch.setenv("COCKPIT_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(cli.process, "launch", lambda run: Trainer())
    monkeypatch.setattr(cli, "_show", lambda run, proc, args, **kw: 0)
    assert cli.main(["demo", "--no-ui", "--skip-preflight", "--set", f"output.dir={runs}"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    at = next(i for i, line in enumerate(lines) if "started (trainer pid 4242)" in line)
    (path,) = [p for p in runs.iterdir()]
    assert lines[at + 1].strip() == str(path), lines  # the path whole, on its own line
    assert all(len(line) <= 80 or line.strip() == str(path) for line in lines), lines
