"""The config against its model before a run directory is made: LoRA targets the model lacks are
refused with the valid names, a max_length past the model's context is said; a config the trainer
refuses exits 2 like one the CLI refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.cli.main import main
from cockpit.config.load import config_from_dotted
from cockpit.config.model_fit import check_against_model
from cockpit.config.schema import ConfigError
from cockpit.run.exit_codes import exit_code
from cockpit.run.state import RunState
from tests.conftest import cockpit, has_cuda, write_config


def tiny(**dotted):
    return config_from_dotted({"model.name": "synthetic:tiny", "method": "lora", **dotted})


def test_a_misspelled_target_is_refused_with_the_models_layer_names():
    with pytest.raises(ConfigError) as info:
        check_against_model(tiny(**{"lora.target_modules": ["q_projj", "v_proj"]}))
    message = str(info.value)
    assert message.startswith("lora.target_modules: q_projj is not a module of synthetic:tiny")
    assert "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, lm_head, embed_tokens" in message
    assert "Did you mean q_proj?" in message


@pytest.mark.parametrize(
    "targets", [["q_proj", "v_proj"], ["self_attn.q_proj", "mlp.down_proj"], ["lm_head"], "all-linear"]
)
def test_targets_the_model_has_pass(targets):
    assert check_against_model(tiny(**{"lora.target_modules": targets})) == []


def test_a_full_fine_tune_has_no_targets_to_check():
    assert check_against_model(tiny(method="full", **{"lora.target_modules": ["nope"]})) == []


def test_max_length_past_the_context_is_a_warning_with_the_limit():
    (warning,) = check_against_model(tiny(**{"training.max_length": 1048576}))
    assert "training.max_length: 1048576 is longer than synthetic:tiny's context" in warning
    assert "max_position_embeddings 1024" in warning and "to 1024 or less" in warning
    assert check_against_model(tiny(**{"training.max_length": 1024})) == []


def test_a_model_whose_shape_cannot_be_read_is_left_to_the_trainer(tmp_path):
    folder = tmp_path / "gpt2"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "gpt2", "n_positions": 1024}')
    cfg = config_from_dotted({"model.name": str(folder), "lora.target_modules": ["c_attn"]})
    assert check_against_model(cfg) == []


def test_train_refuses_the_typo_before_a_run_directory_is_made(tmp_path, env, capsys):
    path = write_config(tmp_path / "typo.yaml", {"lora.target_modules": ["q_projj"]})
    assert main(["train", str(path), "--no-ui", "--skip-preflight"]) == 2
    assert "config error: lora.target_modules: q_projj is not a module" in capsys.readouterr().err
    assert not (Path(env["COCKPIT_HOME"]) / "runs").exists()


def test_train_check_and_estimate_warn_of_max_length_past_the_context(tmp_path, env, capsys):
    path = write_config(tmp_path / "long.yaml", {"training.max_length": 1048576})
    assert main(["train", str(path), "--check"]) == 0
    assert "config warning: training.max_length: 1048576 is longer" in capsys.readouterr().err
    main(["estimate", "--model", "synthetic:llama-2-7b", "--set", "training.max_length=100000"])
    assert "max_position_embeddings 4096" in capsys.readouterr().err


def test_the_picker_notes_max_length_past_the_context():
    from datetime import date

    from cockpit.gpus.catalog import load_catalog
    from cockpit.models.shape import load_shape
    from screens.picker.inputs import Base, evaluate, initial_fields

    base = Base.of(tiny())
    fields = initial_fields(base.cfg)
    fields["model"], fields["seq"] = "synthetic:llama-2-7b", "100000"
    ev = evaluate(fields, base, load_catalog(), date(2026, 12, 1), lambda name, rev: load_shape(name, rev))
    assert "max_position_embeddings 4096" in ev.notes["seq"]


def test_a_config_error_from_the_trainer_exits_2():
    state = RunState()
    state.apply({"v": 1, "type": "error", "ts": 1.0, "kind": "config", "message": "m", "hint": "h"})
    assert exit_code(state) == 2
    state.apply({"v": 1, "type": "hello", "ts": 2.0})
    state.apply({"v": 1, "type": "error", "ts": 3.0, "kind": "data", "message": "m", "hint": "h"})
    assert exit_code(state) == 1


def test_peft_finding_no_target_is_a_config_error():
    from train_backend.errors import classify

    class NoMatchingPeftModuleError(ValueError):
        pass

    text = "Target modules {'q_projj'} not found in the base model. Please check the target modules."
    verdict = classify(NoMatchingPeftModuleError(text), "loading_model")
    assert verdict.kind == "config" and verdict.exit_code == 2
    assert verdict.message.startswith("lora.target_modules: no module of the model matches")


@pytest.mark.slow
@pytest.mark.skipif(has_cuda(), reason="qlora runs on a GPU")
def test_qlora_on_the_cpu_exits_2_before_a_run_exists(tmp_path, env):
    path = write_config(tmp_path / "qlora.yaml", {"method": "qlora"})
    out = cockpit(["train", str(path), "--no-ui", "--skip-preflight"], env)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "method: qlora needs a CUDA GPU" in out.stderr and "no run directory was made" in out.stderr
