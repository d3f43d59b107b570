"""`init_from` resolved before anything starts (cockpit.results.init_from): an adapter folder, a run's
final adapter, RUN:N; refused with the key and the fix: an unknown run, a suffix that is not best,
final or a step, a run of another model, a run with nothing to start from."""

from __future__ import annotations

import json

import pytest

from cockpit.config.schema import ConfigError
from cockpit.results.init_from import resolve

RUN_ID = "20261207-010203-tiny"


def adapter(folder, base: str = "synthetic:tiny"):
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": base}))
    (folder / "adapter_model.safetensors").write_bytes(b"")
    return folder


@pytest.fixture
def run(tmp_path, monkeypatch):
    """An ended SFT run of synthetic:tiny with a final adapter, in a private COCKPIT_HOME."""
    monkeypatch.setenv("COCKPIT_HOME", str(tmp_path / "home"))
    path = tmp_path / "home" / "runs" / RUN_ID
    path.mkdir(parents=True)
    (path / "config.yaml").write_text("model:\n  name: synthetic:tiny\nmethod: lora\n")
    done = {"v": 1, "type": "done", "ts": 1.0, "status": "finished", "step": 2, "total_steps": 2}
    (path / "events.jsonl").write_text(json.dumps(done) + "\n")
    adapter(path / "final")
    return path


def test_a_run_id_gives_its_final_adapter(run):
    found = resolve(RUN_ID, "synthetic:tiny")
    assert found.path == run / "final" and found.what == f"run {RUN_ID} final"
    assert found.base_model == "synthetic:tiny"
    assert resolve(f"{RUN_ID}:final", "synthetic:tiny").path == run / "final"


def test_an_adapter_folder_is_taken_as_it_is(tmp_path):
    folder = adapter(tmp_path / "my-adapter", base="some/model")
    found = resolve(str(folder), "another/model")  # a folder's base is said, not checked here
    assert found.path == folder.resolve() and found.base_model == "some/model"


def test_refusals_name_the_key_and_the_fix(run):
    with pytest.raises(ConfigError, match=r"init_from: .*no complete checkpoint-7"):
        resolve(f"{RUN_ID}:7", "synthetic:tiny")
    with pytest.raises(ConfigError, match="after the ':' give best, final or a step number"):
        resolve(f"{RUN_ID}:latest", "synthetic:tiny")
    with pytest.raises(ConfigError, match="an adapter fits only the model it was trained on"):
        resolve(RUN_ID, "synthetic:llama-2-7b")
    with pytest.raises(ConfigError, match="give a run id, RUN:best, RUN:N or an adapter folder"):
        resolve("no-such-run", "synthetic:tiny")
    with pytest.raises(ConfigError, match="no checkpoint with an eval loss"):
        resolve(f"{RUN_ID}:best", "synthetic:tiny")
