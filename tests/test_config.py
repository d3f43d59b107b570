"""Config validation: every error names the key and the fix."""

from __future__ import annotations

import stat

import pytest
import yaml

from cockpit.config import load as config_load
from cockpit.config import schema as config
from cockpit.config.load import load_config
from cockpit.config.schema import ConfigError
from train_backend import test_aids


def err(overrides: list[str] | None = None, text: str | None = None, tmp_path=None) -> str:
    path = None
    if text is not None:
        path = tmp_path / "c.yaml"
        path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path, overrides or [])
    return str(info.value)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            ["training.lerning_rate=1e-4"],
            "unknown key 'training.lerning_rate'. Did you mean 'training.learning_rate'?",
        ),
        (["max_steps=3"], "Did you mean 'training.max_steps'?"),
        (
            ["training.micro_batch_size=0"],
            "training.micro_batch_size: 0 (int) is out of range; it must be >= 1",
        ),
        (
            ["training.learning_rate=-1"],
            "training.learning_rate: -1.0 (float) is out of range; it must be > 0",
        ),
        (["lora.dropout=1.5"], "lora.dropout: 1.5 (float) is out of range; it must be <= 1"),
        (["method=qlroa"], "method: 'qlroa' (str) is not one of qlora, lora, full. Did you mean 'qlora'?"),
        (["training.optimizer=adamw"], "training.optimizer: 'adamw' (str) is not one of"),
        (["training.epochs=abc"], "training.epochs: expected a number, got 'abc' (str)"),
        (
            ["training.gradient_checkpointing=maybe"],
            "training.gradient_checkpointing: expected true or false",
        ),
        (["lora.target_modules=q_proj"], "lora.target_modules: 'q_proj'; give a list of module names"),
        (["lora.target_modules=[]"], "lora.target_modules: the list is empty"),
        (["model.name=/no/such/model"], "model.name: local path '/no/such/model' does not exist"),
        (
            ["model.name=synthetic:gpt-9"],
            "model.name: unknown synthetic architecture 'gpt-9'; shipped shapes are:",
        ),
        (["model.name=not a model!"], "is neither a local path, a hub id (org/name) nor synthetic:<arch>"),
        (["dataset.path=./missing.jsonl"], "dataset.path: './missing.jsonl' does not exist"),
        (["hf_token=abcdefgh"], "secrets do not belong in the config"),
        (["model.token=abcdefgh"], "Set the HF_TOKEN environment variable instead"),
        (["quantization.bits=3"], "quantization.bits: 3 (int) is not one of 4, 8"),
        (["training.max_length=null"], "training.max_length: a value is required"),
        (["training"], "--set 'training': expected key=value"),
        # test aids are no config keys (train_backend.test_aids; its checks: test_a_fault_after_...)
        (["debug.fail_at_step=5"], "unknown key 'debug.fail_at_step'"),
        (["training=3"], "training: expected a section (key: value lines), got 3 (int)"),
        (["training.epochs=.inf"], "training.epochs: inf is not a finite number"),
        (["training.learning_rate=nan"], "training.learning_rate: nan is not a finite number"),
        (["cost.price_per_hour=.nan"], "cost.price_per_hour: nan is not a finite number"),
    ],
)
def test_each_bad_value_names_key_and_fix(overrides, expected):
    assert expected in err(overrides)


def test_a_fault_after_the_last_step_is_refused_where_the_aid_is_read():
    cfg = load_config(None, ["training.max_steps=2"])
    with pytest.raises(ConfigError) as caught:
        test_aids.read({test_aids.ENV: '{"fail_at_step": 5}'}, cfg, first_attempt=True)
    assert "COCKPIT_TEST_AIDS: fail_at_step 5 is after training.max_steps (2)" in str(caught.value)


def test_model_dir_without_config_json(tmp_path):
    (tmp_path / "weights").mkdir()
    message = err([f"model.name={tmp_path / 'weights'}"])
    assert "has no config.json" in message and "save_pretrained" in message


def test_model_path_that_is_a_file(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"")
    message = err([f"model.name={tmp_path / 'model.safetensors'}"])
    assert "is a file; point it at the folder that holds config.json" in message


def test_missing_config_file_points_at_init(tmp_path):
    with pytest.raises(ConfigError, match="cockpit init"):
        load_config(tmp_path / "nope.yaml")


def test_a_key_given_twice_is_refused(tmp_path):
    message = err(text="training:\n  max_steps: 5\nmethod: lora\ntraining:\n  epochs: 2\n", tmp_path=tmp_path)
    assert "key 'training' appears twice in one section" in message and "line 4" in message
    message = err(text="training:\n  max_steps: 5\n  max_steps: 50\n", tmp_path=tmp_path)
    assert "key 'max_steps' appears twice" in message


def test_a_config_that_is_a_directory_or_not_text(tmp_path):
    with pytest.raises(ConfigError, match="is a directory; give the config's YAML file"):
        load_config(tmp_path)
    path = tmp_path / "c.yaml"
    path.write_bytes(b"\xff\xfe\x00m\x00o")
    with pytest.raises(ConfigError, match="not a text file in UTF-8"):
        load_config(path)


def test_a_symlink_loop_or_a_fifo_as_the_config_is_named_and_init_refuses_it(tmp_path, capsys):
    """Was `not found` for both; `cockpit init` on them: a traceback (the loop), a hang (the FIFO)."""
    import os
    import subprocess
    import sys

    from cockpit.cli.main import main

    loop, fifo = tmp_path / "loop.yaml", tmp_path / "fifo.yaml"
    loop.symlink_to(loop.name)
    os.mkfifo(fifo)
    for path, what in [(loop, "a loop of symbolic links"), (fifo, "a FIFO")]:
        with pytest.raises(ConfigError, match=f"{path}' is {what}"):
            load_config(path)
        assert main(["train", str(path), "--check"]) == 2
        assert f"is {what}" in capsys.readouterr().err
        init = subprocess.run(  # a child: the hang would not end
            [sys.executable, "-m", "cockpit", "init", str(path), "--force"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert init.returncode == 2 and "Traceback" not in init.stderr
        assert (
            f"is {what}" in init.stderr
            and "cockpit init writes a regular file, even with --force" in init.stderr
        )
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and os.readlink(loop) == loop.name  # left as they were


def test_invalid_yaml_and_wrong_top_level(tmp_path):
    assert "not valid YAML" in err(text="model: [unclosed", tmp_path=tmp_path)
    assert "expected a mapping of sections" in err(text="- a\n- b\n", tmp_path=tmp_path)


def test_valid_overrides_are_typed():
    cfg = load_config(
        None,
        [
            "training.max_steps=50",
            "training.learning_rate=2e-4",
            "lora.target_modules=all-linear",
            "cost.price_per_hour=0.59",
            "model.name=synthetic:llama-2-7b",
        ],
    )
    assert cfg.training.max_steps == 50
    assert cfg.training.learning_rate == pytest.approx(2e-4)
    assert cfg.lora.target_modules == "all-linear"
    assert cfg.cost.price_per_hour == pytest.approx(0.59)


def test_hub_id_is_accepted_without_network():
    assert load_config(None, ["model.name=NousResearch/Llama-2-7b-chat-hf"]).model.name.startswith("Nous")


def test_template_parses_to_the_defaults(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(config.template())
    assert load_config(path) == config.TrainConfig()
    # every key is documented in the template
    for key in config.all_keys():
        assert f"{key.rsplit('.', 1)[-1]}:" in config.template()


def test_dumped_config_round_trips():
    cfg = load_config(None, ["training.max_steps=7", "method=lora"])
    assert config_load.config_from_dict(yaml.safe_load(config.dump_config(cfg))) == cfg


def test_trust_remote_code_is_off_by_default():
    assert config.TrainConfig().model.trust_remote_code is False


def test_init_command_writes_template_and_refuses_overwrite(tmp_path, capsys):
    from cockpit.cli.main import main

    target = tmp_path / "my.yaml"
    assert main(["init", str(target)]) == 0
    assert load_config(target) == config.TrainConfig()
    assert main(["init", str(target)]) == 2
    assert "exists" in capsys.readouterr().err


def test_train_check_reports_config_error(tmp_path, capsys):
    from cockpit.cli.main import main

    path = tmp_path / "bad.yaml"
    path.write_text("training:\n  batch_size: 4\n")
    assert main(["train", str(path), "--check"]) == 2
    out = capsys.readouterr().err
    assert "unknown key 'training.batch_size'" in out and "micro_batch_size" in out


def test_an_error_in_a_set_value_names_set_not_the_file(tmp_path, capsys):
    """The file does not hold the bad value: the message must not send the user there."""
    from cockpit.cli.main import main

    path = tmp_path / "x.yaml"
    path.write_text("training:\n  max_steps: 5\n")
    for item, said in [
        ("dataset.max_samples=0", "config error: --set dataset.max_samples: 0 (int) is out of range"),
        ("dataset.max_sample=3", "config error: --set dataset.max_sample: unknown key 'dataset.max_sample'"),
        ("model.name=./nowhere", "config error: --set model.name: local path './nowhere' does not exist"),
    ]:
        assert main(["train", str(path), "--check", "--set", item]) == 2
        err = capsys.readouterr().err
        assert err.startswith(said) and str(path) not in err, err
    path.write_text("dataset:\n  max_samples: 0\n")  # the file's own mistake still names the file
    assert main(["train", str(path), "--check", "--set", "training.max_steps=3"]) == 2
    assert capsys.readouterr().err.startswith(f"config error: {path}: dataset.max_samples: 0")


def test_relative_paths_become_absolute_for_the_trainer(tmp_path, monkeypatch):
    (tmp_path / "data.jsonl").write_text('{"text": "a"}\n')
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    cfg = load_config(None, ["dataset.path=./data.jsonl", "model.name=./model", "output.dir=runs"])
    config_load.with_absolute_paths(cfg)
    assert cfg.dataset.path == str(tmp_path / "data.jsonl")
    assert cfg.model.name == str(tmp_path / "model")
    assert cfg.output.dir == str(tmp_path / "runs")
    hub = config_load.with_absolute_paths(load_config(None, ["model.name=org/name", "dataset.path=org/data"]))
    assert hub.model.name == "org/name" and hub.dataset.path == "org/data"
