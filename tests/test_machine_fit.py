"""`cockpit train --check` and `cockpit train` against this machine: every reason the config cannot
start here, at once, naming the user's file, and no run directory for a config that cannot start."""

from __future__ import annotations

import pytest
from conftest import write_config
from support.nvml_fake import FakeGpu, FakeNvml

from cockpit import paths
from cockpit.cli import main as cli
from cockpit.config.load import load_config
from cockpit.preflight import machine_fit
from cockpit.preflight import quick as preflight_start
from cockpit.run import process, rundir
from cockpit.telemetry.nvml_state import NvmlState

T4 = "Tesla T4"
H100 = "NVIDIA H100 80GB HBM3"


def cfg_with(tmp_path, overrides: dict):
    return load_config(write_config(tmp_path / "c.yaml", overrides))


def keys(found) -> list[str]:
    return [p.key for p in found]


NO_GPU = machine_fit.Machine((), "NVML did not start: NVML Shared Library Not Found")


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"method": "qlora"}, ["method"]),
        ({"training.optimizer": "paged_adamw_32bit"}, ["training.optimizer"]),
        ({"training.optimizer": "adamw_8bit"}, ["training.optimizer"]),
        ({"training.precision": "fp16"}, ["training.precision"]),
        (
            {"method": "qlora", "training.optimizer": "paged_adamw_8bit", "training.precision": "fp16"},
            ["method", "training.optimizer", "training.precision"],
        ),
        ({}, []),
        ({"training.precision": "bf16"}, []),  # the CPU runs bf16
    ],
)
def test_without_a_gpu(tmp_path, overrides, expected):
    assert keys(machine_fit.problems(cfg_with(tmp_path, overrides), NO_GPU)) == expected


def test_bf16_on_a_card_without_it_and_too_many_gpus(tmp_path, monkeypatch):
    monkeypatch.setattr(machine_fit, "bitsandbytes_installed", lambda: True)  # QLoRA's own test is below
    state = NvmlState(gpus=[{"name": T4, "cuda_capability": (7, 5)}])
    machine = machine_fit.machine_from_nvml(state)
    found = machine_fit.problems(cfg_with(tmp_path, {"training.precision": "bf16", "gpus": 2}), machine)
    assert keys(found) == ["training.precision", "gpus"]
    assert "compute capability 7.5" in found[0].message and "fp16 or auto" in found[0].message
    assert "Set gpus: 1" in found[1].message
    # the same card, fp16 or auto: fine; qlora on a GPU: fine
    ok = cfg_with(tmp_path, {"training.precision": "fp16", "method": "qlora"})
    assert machine_fit.problems(ok, machine) == []


def test_a_gpu_box_without_bitsandbytes_refuses_what_needs_it_before_the_start(tmp_path, monkeypatch):
    """bitsandbytes is the `gpu` extra: where it is missing, QLoRA and its optimizers are refused with
    the install line, not met as an import error once the model loads; the rest still starts."""
    monkeypatch.setattr(machine_fit, "bitsandbytes_installed", lambda: False)
    machine = machine_fit.machine_from_nvml(NvmlState(gpus=[{"name": H100, "cuda_capability": (9, 0)}]))
    found = machine_fit.problems(
        cfg_with(tmp_path, {"method": "qlora", "training.optimizer": "adamw_8bit"}), machine
    )
    assert keys(found) == ["method", "training.optimizer"]
    assert (
        "qlora needs bitsandbytes" in found[0].message
        and "pip install 'bitsandbytes>=0.45'" in found[0].message
    )
    assert "adamw_8bit comes from bitsandbytes" in found[1].message and "adamw_torch" in found[1].message
    plain = cfg_with(tmp_path, {"method": "lora", "training.optimizer": "adamw_torch"})
    assert machine_fit.problems(plain, machine) == []
    monkeypatch.setattr(machine_fit, "bitsandbytes_installed", lambda: True)
    assert machine_fit.problems(cfg_with(tmp_path, {"method": "qlora"}), machine) == []


def test_capability_from_the_catalog_when_nvml_does_not_say(tmp_path):
    machine = machine_fit.machine_from_nvml(NvmlState(gpus=[{"name": H100}]))
    assert machine.gpus == ((H100, (9, 0)),)
    assert machine_fit.problems(cfg_with(tmp_path, {"training.precision": "bf16"}), machine) == []


def test_cuda_visible_devices_is_what_the_trainer_sees(tmp_path):
    state = NvmlState(gpus=[{"name": H100}, {"name": H100}])
    assert len(machine_fit.machine_from_nvml(state, "1").gpus) == 1
    hidden = machine_fit.machine_from_nvml(state, "")
    assert hidden.gpus == () and "hides every GPU" in hidden.why_none
    found = machine_fit.problems(cfg_with(tmp_path, {"method": "qlora"}), hidden)
    assert keys(found) == ["method"]


def test_an_nvml_that_hangs_refuses_nothing(tmp_path):
    fake = FakeNvml([FakeGpu()], init_block_s=5.0)
    machine = machine_fit.read_machine(lambda: fake, wait_s=0.1)
    fake.unblock()
    assert machine_fit.unanswered(machine)
    assert machine_fit.problems(cfg_with(tmp_path, {"method": "qlora"}), machine) == []


class Launched(Exception):
    pass


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(preflight_start, "NVML_SOURCE", lambda: FakeNvml(init_error="driver_not_loaded"))

    def launch(run):
        raise Launched(run.run_id)

    monkeypatch.setattr(process, "launch", launch)


def test_check_reports_every_problem_naming_the_file(env, no_gpu, tmp_path, capsys):
    path = write_config(
        tmp_path / "my-run.yaml",
        {"method": "qlora", "training.optimizer": "paged_adamw_8bit", "training.precision": "fp16"},
    )
    assert cli.main(["train", str(path), "--check"]) == 2
    err = capsys.readouterr().err
    flat = " ".join(err.split())  # as said, before it is wrapped to the terminal
    assert flat.startswith(f"{path}: cannot start on this machine") and "3 problem(s)" in flat
    for key in ("method: qlora", "training.optimizer: paged_adamw_8bit", "training.precision: fp16"):
        assert f"  {key}" in err
    assert "config.yaml" not in err


def test_the_refusal_is_wrapped_at_words_to_the_terminal(env, no_gpu, tmp_path, capsys, monkeypatch):
    """Not one long line per problem that the terminal breaks at its edge (`vis`/`ible`)."""
    path = write_config(
        tmp_path / "my-run.yaml", {"method": "qlora", "training.optimizer": "paged_adamw_32bit"}
    )
    monkeypatch.chdir(path.parent)  # the name as the user gives it: `cockpit train my-run.yaml`
    for width in (80, 60):
        monkeypatch.setattr(cli, "output_width", lambda width=width: width)
        assert cli.main(["train", path.name, "--no-ui"]) == 2
        lines = capsys.readouterr().err.splitlines()
        assert len(lines) > 5 and all(len(line) <= width for line in lines), lines
        assert any(line.startswith("  method: qlora needs a CUDA GPU") for line in lines)
        # continuations indented under their problem; every word whole
        words = set(" ".join(lines).split())
        assert {"visible", "GPU", "optimizer"} <= words and not {"vis", "G", "PU"} & words
    assert list(rundir.all_runs()) == []


def test_a_config_that_cannot_start_makes_no_run_directory(env, no_gpu, tmp_path, capsys):
    path = write_config(tmp_path / "q.yaml", {"method": "qlora"})
    assert cli.main(["train", str(path), "--no-ui", "--skip-preflight"]) == 2
    assert "no run directory was made" in capsys.readouterr().err
    assert list(rundir.all_runs()) == [] and not any(paths.runs_root().glob("*"))


def test_a_config_that_can_start_says_so_and_its_run_names_the_file(env, no_gpu, tmp_path, capsys):
    path = write_config(tmp_path / "fine.yaml")
    assert cli.main(["train", str(path), "--check"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert said.startswith(f"{path}: config OK for this machine (no CUDA GPU")
    with pytest.raises(Launched) as started:
        cli.main(["train", str(path), "--no-ui", "--skip-preflight"])
    run = rundir.find(str(started.value))
    assert rundir.config_source(run.path) == str(path.resolve())
    assert load_config(run.config_path) == load_config(path)


def test_a_validation_error_names_the_file(env, tmp_path, capsys):
    path = write_config(tmp_path / "bad.yaml", {"training.micro_batch_size": 0})
    assert cli.main(["train", str(path), "--check"]) == 2
    assert capsys.readouterr().err.startswith(f"config error: {path}: training.micro_batch_size")


def test_the_trainer_s_config_hint_names_the_user_s_file(tmp_path):
    from cockpit.config.schema import ConfigError
    from train_backend.errors import classify

    (tmp_path / "config.yaml").write_text(f"{rundir.SOURCE_MARK}/home/me/run.yaml\nmethod: lora\n")
    assert "/home/me/run.yaml" in classify(ConfigError("x: bad"), "load", str(tmp_path)).hint
    (tmp_path / "config.yaml").write_text("method: lora\n")
    assert "config.yaml" not in classify(ConfigError("x: bad"), "load", str(tmp_path)).hint
