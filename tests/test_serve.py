"""`cockpit serve`: the run view in a browser through textual-serve, behind a token, on 127.0.0.1,
read-only unless --control. The server is driven in this process with aiohttp's test client; the
read-only view with pilot. tests/test_serve_browser.py drives the whole of it from a headless
Chromium (a bench: it needs chromium and trains a real run)."""

from __future__ import annotations

import importlib.util
import os
import shlex
import socket
import sys

import pytest
from conftest import cockpit
from support.pilot import (
    LAST_TS,
    ScriptedSession,
    events_until_step,
    make_app,
    running,
    screen_text,
    scripted,
    shown,
)

from cockpit.cli import main as cli_main
from cockpit.cli import serve_commands
from cockpit.cli.args import build_parser
from screens.run.app import CockpitApp

TOKEN = "s3cret-token-of-this-test"
PORT = 8123  # only the cookie's name: the test client listens where it likes
NEEDS_SERVE = pytest.mark.skipif(
    importlib.util.find_spec("textual_serve") is None,
    reason="textual-serve is not installed (the serve extra; the test extra has it)",
)


# ---------------------------------------------------------------- the token


@NEEDS_SERVE
async def test_every_request_needs_the_token_in_the_url_or_its_cookie(tmp_path):
    from aiohttp.test_utils import TestClient, TestServer

    from cockpit.live.web import TokenServer, cookie_name

    server = TokenServer("true", "127.0.0.1", PORT, TOKEN, title="lora-cockpit test")
    async with TestClient(TestServer(await server.make_web_app())) as client:
        for path in (
            "/",
            "/?token=wrong",
            f"/?token={TOKEN}x",
            "/static/js/textual.js",
            "/ws",
            "/download/k",
        ):
            response = await client.get(path)
            assert response.status == 403, path
            assert "needs the token of its URL" in await response.text()
        client.session.cookie_jar.update_cookies({cookie_name(PORT): "wrong"})
        assert (await client.get("/static/js/textual.js")).status == 403

        page = await client.get(f"/?token={TOKEN}")
        assert page.status == 200
        # the page's websocket goes to the address the browser used (through ssh -L: its own port)
        assert f'data-session-websocket-url="ws://127.0.0.1:{client.port}/ws"' in await page.text()
        cookie = page.cookies[cookie_name(PORT)]
        assert cookie.value == TOKEN and cookie["httponly"] and cookie["samesite"] == "Strict"
        # the page's files and its websocket come with the cookie alone
        assert (await client.get("/static/js/textual.js")).status == 200


def test_serve_listens_on_127_0_0_1_read_only_by_default():
    args = build_parser().parse_args(["serve", "my-run"])
    assert (args.run, args.host, args.port, args.control) == ("my-run", "127.0.0.1", 8000, False)
    assert build_parser().parse_args(["serve", "--control"]).control is True
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--port", "70000"])


@NEEDS_SERVE
def test_each_browser_gets_a_read_only_attach_unless_control(tmp_path):
    from cockpit.live.web import attach_command

    run = tmp_path / "runs" / "20261207-101010-tiny"
    words = shlex.split(attach_command(run, control=False))
    assert words == [sys.executable, "-m", "cockpit", "attach", str(run), "--read-only"]
    assert shlex.split(attach_command(run, control=True)) == words[:-1]


def test_the_start_says_the_ssh_tunnel_and_the_url_with_its_token(monkeypatch):
    monkeypatch.setenv("SSH_CONNECTION", "203.0.113.7 51000 198.51.100.4 2222")
    monkeypatch.setenv("USER", "ana")
    lines = serve_commands.start_lines("20261207-101010-tiny", "127.0.0.1", 8000, TOKEN, control=False)
    assert "  ssh -N -L 8000:127.0.0.1:8000 -p 2222 ana@198.51.100.4" in lines
    assert f"  http://127.0.0.1:8000/?token={TOKEN}" in lines
    assert "read-only" in lines[0] and "--control" in lines[0]
    monkeypatch.setenv("SSH_CONNECTION", "203.0.113.7 51000 198.51.100.4 22")
    assert serve_commands.tunnel_line(8001) == "ssh -N -L 8001:127.0.0.1:8001 ana@198.51.100.4"

    open_lines = serve_commands.start_lines("r", "0.0.0.0", 8000, TOKEN, control=True)
    assert not any("ssh -N -L" in line for line in open_lines)
    assert any(line.startswith("warning: 0.0.0.0 is not a loopback address") for line in open_lines)


def test_a_missing_textual_serve_says_what_to_install(monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "textual_serve" else real(name, *a)
    )
    assert cli_main.main(["serve"]) == 2
    err = capsys.readouterr().err
    assert "cockpit serve needs textual-serve, which is not installed" in err
    assert f"{sys.executable} -m pip install 'lora-cockpit[serve]'" in err.replace("\n", " ")


@NEEDS_SERVE
def test_a_port_already_taken_is_said_with_another_to_try(tmp_path, env):
    run = tmp_path / "home" / "runs" / "20261207-101010-tiny"
    run.mkdir(parents=True)
    (run / "events.jsonl").write_text("")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = cockpit(["serve", "--port", str(port)], env, timeout=60)
    assert done.returncode == 1, done.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert f"cockpit serve 20261207-101010-tiny --port {port + 1}" in done.stderr


def test_served_to_a_browser_the_attach_draws_its_screen_into_the_pipe(monkeypatch):
    """textual-serve's command writes to a pipe: the screen, not --no-ui's lines."""
    args = build_parser().parse_args(["attach", "--read-only"])
    monkeypatch.setenv("TEXTUAL_DRIVER", "textual.drivers.web_driver:WebDriver")
    assert cli_main._headless(args) is False
    monkeypatch.delenv("TEXTUAL_DRIVER")
    if not os.isatty(1):
        assert cli_main._headless(args) is True


# ---------------------------------------------------------------- read-only


async def test_a_read_only_view_refuses_the_keys_that_command_the_run(tmp_path):
    session = scripted(tmp_path, events_until_step(30))
    app = CockpitApp(session, poll_interval_s=0.02, clock=lambda: LAST_TS + 5.0, read_only=True)
    async with running(app) as pilot:
        await shown(pilot, app)
        text = screen_text(app)
        assert "(read-only)" in text and "p Pause" not in text and "s Save" not in text
        for key in ("p", "s", "x"):
            await pilot.press(key)
        await pilot.pause()
        assert session.sent == [] and not app.run_view.stopping
        text = screen_text(app)
        assert "read-only view: 'pause' refused" in text
        assert "read-only view: 'stop' refused" in text


async def test_with_control_the_same_key_pauses_the_run(tmp_path):
    session = scripted(tmp_path, events_until_step(30))
    app = make_app(session)
    assert app.read_only is False
    async with running(app) as pilot:
        await shown(pilot, app)
        await pilot.press("p")
        await pilot.pause()
        assert session.sent == ["pause"]
        assert "read-only" not in screen_text(app)


async def test_a_read_only_view_shows_the_oom_wizard_but_relaunches_nothing(tmp_path, monkeypatch):
    from test_oom_wizard import T0, make_run, oom_error, until_training, wait_for, wizard_ready

    from cockpit.oom import relaunch
    from screens.confirm import Confirm
    from screens.oom.wizard import OomWizard

    launched: list = []
    monkeypatch.setattr(relaunch.process, "launch", lambda run: launched.append(run))
    session = ScriptedSession(make_run(tmp_path), [*until_training(), oom_error()], alive=False)
    app = CockpitApp(session, poll_interval_s=0.02, clock=lambda: T0 + 70.0, read_only=True)
    async with app.run_test(size=(100, 32), notifications=True) as pilot:
        await wait_for(pilot, lambda: wizard_ready(app))  # it opens by itself: its figures are for reading
        await pilot.press("r")
        await pilot.pause()
        assert isinstance(app.screen, OomWizard) and not isinstance(app.screen, Confirm)
        assert "read-only view: 'relaunch' refused" in screen_text(app)
    assert launched == [] and app.relaunched is None
