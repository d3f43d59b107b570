"""A config whose YAML aliases expand to millions of values (a "billion laughs") is refused at load, in
bounded time and memory, with a short message; an error never quotes a value whole."""

from __future__ import annotations

import itertools
import time
import tracemalloc

import pytest

from cockpit.cli.main import main
from cockpit.config.load import MAX_QUOTED_CHARS, load_config
from cockpit.config.schema import ConfigError


def bomb(levels: int) -> str:
    names = "abcdefghi"[:levels]
    lines = [f'{names[0]}: &{names[0]} ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for prev, name in itertools.pairwise(names):
        lines.append(f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]")
    anchors = "\n".join(f"  - {line}" for line in lines)
    head = "model:\n  name: synthetic:tiny\nlora:\n  modules_to_save:\n"
    return f"{head}{anchors}\n  target_modules: *{names[-1]}\n"


@pytest.mark.parametrize("levels", [7, 9])
def test_a_yaml_bomb_is_refused_at_load_in_bounded_time_and_memory(levels, tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(bomb(levels))
    tracemalloc.start()
    started = time.perf_counter()
    with pytest.raises(ConfigError) as info:
        load_config(path)
    elapsed_s = time.perf_counter() - started
    _, peak_bytes = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert elapsed_s < 2.0 and peak_bytes < 20 * 2**20, (elapsed_s, peak_bytes)
    message = str(info.value)
    assert "more than 10,000 values once YAML aliases" in message and len(message) < 400


def test_cockpit_estimate_and_train_print_a_short_error_for_a_bomb(tmp_path, capsys):
    path = tmp_path / "bomb.yaml"
    path.write_text(bomb(9))
    started = time.perf_counter()
    assert main(["estimate", str(path)]) == 2
    assert main(["train", str(path), "--check"]) == 2
    assert time.perf_counter() - started < 5.0
    err = capsys.readouterr().err
    assert len(err) < 1000 and err.count("config error:") == 2


def test_a_bomb_in_a_set_override_is_refused_too():
    levels = ["&a [" + ", ".join(["x"] * 10) + "]"]
    for prev, name in itertools.pairwise("abcde"):
        levels.append(f"&{name} [" + ", ".join([f"*{prev}"] * 10) + "]")
    with pytest.raises(ConfigError, match="once YAML aliases"):
        load_config(None, [f"lora.modules_to_save=[{', '.join(levels)}]"])


def test_an_error_quotes_a_large_value_only_in_part(tmp_path):
    path = tmp_path / "big.yaml"
    names = ", ".join(f"module_{i}" for i in range(5000))
    path.write_text(f"model:\n  name: [{names}]\ndataset:\n  path: {'x' * 100_000}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert "model.name: expected a string, got ['module_0'," in str(info.value)
    assert len(str(info.value)) < MAX_QUOTED_CHARS + 100
    path.write_text(f"dataset:\n  path: ./{'x' * 100_000}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert "does not exist" in str(info.value) and len(str(info.value)) < MAX_QUOTED_CHARS + 200


LONG = "a" * 120_000


@pytest.mark.parametrize(
    "args",
    [
        ["train", "CONFIG", "--check", "--set", f"model.name={LONG}"],  # was shape.py's OSError, 121 KB
        ["train", "CONFIG", "--check", "--set", f"dataset.path={LONG}"],  # was "config OK", then a run
        ["train", "CONFIG", "--check", "--set", f"model.name={'a' * 300}"],  # past the hub's 96 a part
        ["train", "CONFIG", "--check", "--set", f"dataset.path={'a' * 300}"],
        ["estimate", "--model", LONG],
        ["estimate", "--model", "./" + "a" * 300],  # a name the OS cannot take
        ["estimate", "--model", "synthetic:tiny", "--context", LONG],
        ["attach", LONG, "--no-ui"],
    ],
)
def test_a_very_long_value_is_refused_with_a_bounded_message(args, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COCKPIT_HOME", str(tmp_path / "home"))
    config = tmp_path / "x.yaml"
    config.write_text("model:\n  name: synthetic:tiny\nmethod: lora\n")
    try:
        code = main([str(config) if a == "CONFIG" else a for a in args])
    except SystemExit as exc:  # argparse's refusal
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err[-600:]
    assert len(err) < 2 * MAX_QUOTED_CHARS + 600, err[:600]
    if args[0] == "train" and LONG in args[-1]:
        assert "(120,000 characters)" in err and "is too long" in err
    assert not (tmp_path / "home" / "runs").exists()  # no run directory


def test_the_quote_helper_bounds_every_value_and_the_trainer_bounds_its_error():
    from cockpit.fmt import quoted
    from cockpit.models.shape import ShapeError, load_shape
    from train_backend.errors import DataError, classify

    assert quoted("q_proj") == "'q_proj'"
    text = quoted(LONG)
    assert len(text) <= MAX_QUOTED_CHARS and text.startswith("'aaa") and text.endswith("(120,000 characters)")
    assert len(quoted(list(range(100_000)))) <= MAX_QUOTED_CHARS
    with pytest.raises(ShapeError):  # not OSError: File name too long
        load_shape("./" + "a" * 300)
    verdict = classify(DataError(f"could not load dataset {LONG}"), "loading_data")
    assert verdict.kind == "data" and len(verdict.message) < 2100 and "more in backend.log" in verdict.message
