"""The command line refuses bad input with a message that names it, before anything starts."""

from __future__ import annotations

import pytest
from conftest import unwritable_dir

from cockpit.cli.main import main


@pytest.mark.parametrize(("value", "expected"), [("0", "give a size above 0"), ("1.2.3", "e.g. 24GiB")])
def test_emulate_vram_refuses_a_size_that_is_no_card(value, expected, capsys):
    with pytest.raises(SystemExit) as info:
        main(["demo", "--emulate-vram", value, "--check"])
    assert info.value.code == 2 and expected in capsys.readouterr().err


def test_emulate_vram_goes_through_the_configs_range_check(capsys):
    assert main(["demo", "--emulate-vram", "99999", "--check"]) == 2
    assert "emulate_vram_gib: 99999.0 (float) is out of range; it must be <= 4096" in capsys.readouterr().err
    assert main(["demo", "--emulate-vram", "24GiB", "--check"]) == 0


@pytest.mark.parametrize("value", ["-5", "0"])
def test_estimate_vram_must_be_a_card_size(value, capsys):
    with pytest.raises(SystemExit) as info:
        main(["estimate", "--model", "synthetic:tiny", "--vram", value])
    assert info.value.code == 2 and "--vram" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["a file", "under /proc"])
def test_an_output_dir_that_cannot_be_made_is_said_without_a_traceback(kind, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COCKPIT_HOME", str(tmp_path / "home"))
    target = tmp_path / "a-file"
    target.write_text("")
    if kind == "under /proc":
        target = "/proc/no-such-dir"
    args = ["demo", "--no-ui", "--skip-preflight", "--set", f"output.dir={target}"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"cannot create the run directory under {target}" in err and "Set output.dir" in err


def test_restart_names_the_run_config_it_refuses(tmp_path, monkeypatch, capsys):
    from cockpit.run import rundir

    monkeypatch.setenv("COCKPIT_HOME", str(tmp_path))
    run = rundir.create(None, "synthetic:tiny", "training:\n  lerning_rate: 0.1\n")
    assert main(["restart", run.run_id, "--no-ui"]) == 2
    err = capsys.readouterr().err
    assert f"config error: {run.config_path}: unknown key 'training.lerning_rate'" in err


@pytest.mark.parametrize(
    "args",
    [
        ["stop", "--timeout", "-1"],
        ["stop", "--term-timeout", "nan"],
        ["attach", "--no-ui", "--log-every", "-5"],
        ["replay", "--log-every", "abc"],
    ],
)
def test_durations_must_be_seconds_zero_or_more(args, capsys):
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 2 and "give seconds, 0 or more" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["replay", "attach"])
def test_output_that_is_not_a_terminal_gets_plain_lines_not_a_screen(command, tmp_path, monkeypatch, capsys):
    import shutil

    from conftest import FIXTURES

    monkeypatch.setenv("COCKPIT_HOME", str(tmp_path))
    run = tmp_path / "runs" / "20261130-120000-tiny"
    run.mkdir(parents=True)
    shutil.copy(FIXTURES / "demo_run_events.jsonl", run / "events.jsonl")
    args = [command, run.name] + (["--speed", "0"] if command == "replay" else [])
    assert main(args) == 0  # stdout is captured here: no terminal
    out = capsys.readouterr().out
    assert "done: finished at step 88" in out and "\x1b[" not in out


@pytest.mark.parametrize("value", ["0", "-5", "4k", "2000000"])
def test_inference_context_must_be_tokens(value, capsys):
    with pytest.raises(SystemExit) as info:
        main(["estimate", "--model", "synthetic:tiny", "--inference", "--context", value])
    assert info.value.code == 2 and "give tokens of context from 1 to 1048576" in capsys.readouterr().err


def test_a_read_only_home_is_exit_2_names_it_and_leaves_no_half_made_run(tmp_path, monkeypatch, capsys):
    import types

    from cockpit.cli import main as cli
    from cockpit.run import process, rundir

    home = unwritable_dir(tmp_path)
    monkeypatch.setenv("COCKPIT_HOME", str(home))
    assert main(["demo", "--no-ui", "--skip-preflight"]) == 2  # was 1
    err = capsys.readouterr().err
    assert f"cannot create the run directory under {home / 'runs'}" in err and "Traceback" not in err
    out = tmp_path / "out"  # a writable output.dir: the run starts, and `runs` missing it is said
    monkeypatch.setattr(process, "launch", lambda run: types.SimpleNamespace(pid=12345))
    monkeypatch.setattr(cli, "_show", lambda *a, **k: 0)
    assert main(["demo", "--no-ui", "--skip-preflight", "--set", f"output.dir={out}"]) == 0
    err = capsys.readouterr().err.replace("\n  ", " ")  # unwrapped
    assert "cannot create" not in err and "`cockpit runs` will not list this run" in err
    (made,) = out.iterdir()
    assert (made / "config.yaml").is_file() and f"cockpit attach {made}" in err
    monkeypatch.setattr(rundir.os, "mkfifo", lambda *a: (_ for _ in ()).throw(OSError(28, "No space")))
    with pytest.raises(OSError):
        rundir.create(out, "synthetic:tiny", "")
    assert list(out.iterdir()) == [made]  # the half-made one was removed


def test_init_in_a_read_only_folder_is_said_without_a_traceback(tmp_path, capsys):
    target = unwritable_dir(tmp_path) / "my.yaml"
    assert main(["init", str(target)]) == 2
    err = capsys.readouterr().err
    assert f"could not write '{target}'" in err and "a folder you can write to" in err


@pytest.mark.parametrize("command", ["attach", "replay"])
def test_standard_input_that_is_not_a_terminal_gets_plain_lines_not_a_screen(command, tmp_path):
    """`cockpit demo </dev/null` on a pty: the screen never got its `q` and never exited, at 36% of a
    core. The output is a terminal, the input is not: plain lines, said, and the command ends."""
    import os
    import pty
    import shutil
    import subprocess
    import sys
    import threading

    from conftest import FIXTURES, ROOT

    run = tmp_path / "home" / "runs" / "20261130-120000-tiny"
    run.mkdir(parents=True)
    shutil.copy(FIXTURES / "demo_run_events.jsonl", run / "events.jsonl")
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(COCKPIT_HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT), TERM="xterm-256color")
    master, slave = pty.openpty()
    args = [command, run.name] + (["--speed", "0"] if command == "replay" else [])
    client = subprocess.Popen(
        [sys.executable, "-m", "cockpit", *args],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        env=env,
        cwd=ROOT,
        start_new_session=True,
    )
    os.close(slave)
    seen = bytearray()

    def drain() -> None:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                return
            if not chunk:
                return
            seen.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        code = client.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(client.pid, 9)
        client.wait()
        pytest.fail(f"still running 60 s on, its input at /dev/null: {bytes(seen[-300:])!r}")
    finally:
        reader.join(5)
        os.close(master)
    text = seen.decode(errors="replace").replace("\r\n", "\n").replace("\n  ", " ")
    assert code == 0, text[-600:]
    assert "standard input is not a terminal" in text and "as with --no-ui" in text
    assert "done: finished at step 88" in text and "\x1b[?1049h" not in text  # no alternate screen
