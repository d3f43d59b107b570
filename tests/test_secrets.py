"""Secrets in the environment never reach what the client prints or a config it saves; short ones
are scrubbed where they stand alone; the values too short to be secrets are said and left."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.cli.main import main
from cockpit.config.load import load_config
from cockpit.config.schema import ConfigError
from cockpit.config.secrets import scrub, secret_values

SECRET = "hf_secretTOKEN123"


def test_every_message_the_client_prints_is_scrubbed(env, monkeypatch, capsys):
    monkeypatch.setenv("HF_TOKEN", SECRET)
    run = Path(env["COCKPIT_HOME"]) / "runs" / "20261201-000000-tiny"
    run.mkdir(parents=True)
    (run / "events.jsonl").write_text("")
    assert main(["attach", f"run-{SECRET}"]) == 2  # RunNotFound quotes what was asked for
    out = capsys.readouterr()
    assert "no run matches 'run-***'" in out.err and SECRET not in out.err + out.out
    with pytest.raises(SystemExit):
        main(["stop", "--timeout", SECRET])  # argparse's own error, printed before any command runs
    err = capsys.readouterr().err
    assert SECRET not in err and "***" in err


def test_a_config_value_holding_a_secret_is_refused_without_quoting_it(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", SECRET)
    for override in (f"model.revision={SECRET}", f"dataset.path=./data-{SECRET}.jsonl"):
        with pytest.raises(ConfigError) as info:
            load_config(None, [override])
        message = str(info.value)
        assert "holds the value of the environment variable HF_TOKEN" in message and SECRET not in message
    monkeypatch.delenv("HF_TOKEN")
    assert load_config(None, [f"model.revision={SECRET}"]).model.revision == SECRET


def test_the_refusal_reaches_the_command_line_as_a_config_error(env, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("WANDB_API_KEY", "k3y9")
    assert main(["demo", "--check", "--set", "model.revision=k3y9"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("config error: ")  # naming the file: the demo's config
    assert "model.revision: holds the value of the environment variable WANDB_API_KEY" in err
    assert "k3y9" not in err


def test_short_secrets_are_scrubbed_where_they_stand_alone():
    secrets = secret_values({"HF_TOKEN": "ab12", "MY_PASSWORD": "hunter2"})
    assert secrets == ["hunter2", "ab12"]
    assert scrub("token ab12, pass=hunter2.", secrets) == "token ***, pass=***."
    assert scrub("xab12 ab123 hunter22", secrets) == "xab12 ab123 hunter22"  # inside longer words: left
    assert scrub("key hf_longsecretvalue9", secret_values({"HF_TOKEN": "longsecretvalue9"})) == "key hf_***"


def test_values_that_are_no_secret_are_not_scrubbed():
    environ = {"HF_TOKEN": "abc", "TOKENIZERS_PARALLELISM": "false", "USE_API_KEY": "true", "X_TOKEN": "1"}
    assert secret_values(environ) == []
