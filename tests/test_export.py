"""`cockpit export`, end to end on the CPU: a real tiny run, the real export subprocess, the files read
back (safetensors through transformers, GGUF through gguf.GGUFReader and the export's own read-back
check, its tokenizer through transformers), the sizes said before it starts, the model card, and
every refusal (no final adapter, a missing checkpoint, too little disk, an architecture GGUF cannot
take, a GGUF that fails its read-back, a push without a token or refused)."""

from __future__ import annotations

import http.server
import json
import re
import shutil
import subprocess
import sys
import threading

import pytest

from cockpit.cli.main import main
from cockpit.results.merge_check import ROUND_TRIP_TOLERANCE
from tests.conftest import ROOT, cockpit, events, only_run, write_config

# one worker runs them all: the shared run and its export are built once
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("export-run")]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict:
    """One finished tiny run (LoRA, 4 steps, checkpoints at 2 and 4), shared by the tests that read it."""
    base = tmp_path_factory.mktemp("export-run")
    cache = tmp_path_factory.mktemp("export-cache")
    env = {
        **_base_env(),
        "COCKPIT_HOME": str(base / "home"),
        "COCKPIT_CACHE": str(cache),
        "HF_DATASETS_CACHE": str(cache / "datasets"),
    }
    cfg = write_config(base / "tiny.yaml", {"training.max_steps": 4, "output.save_steps": 2})
    proc = cockpit(["train", str(cfg), "--no-ui", "--skip-preflight"], env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    run = only_run(env)
    assert events(run)[-1]["type"] == "done"
    return {"env": env, "run": run, "base": base}


def _base_env() -> dict:
    import os

    env = {k: v for k, v in os.environ.items() if k != "COCKPIT_TEST_MODULES_DIR"}
    env.update(
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        PYTHONUNBUFFERED="1",
        PYTHONPATH=str(ROOT),
    )
    env.pop("HF_TOKEN", None)
    return env


@pytest.fixture(scope="module")
def exported(trained) -> dict:
    """The merged model + GGUF q8_0 of the shared run, through the CLI."""
    out = trained["base"] / "merged-q8"
    proc = cockpit(
        ["export", str(trained["run"]), "--merge", "--gguf", "q8_0", "--to", str(out)], trained["env"]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"out": out, "proc": proc, **trained}


def _readback(out) -> dict:
    """The export's read-back of its GGUF, as `export_done` reported it (kept in cockpit-export.json)."""
    return json.loads((out / "cockpit-export.json").read_text())["readback"]


def _python(code: str, env: dict, timeout: float = 240) -> dict:
    """Run torch-side checks in a child (this process never imports torch); it prints one JSON line."""
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_merged_export_has_shards_tokenizer_template_and_matching_eos(exported):
    out = exported["out"]
    names = {p.name for p in out.iterdir()}
    assert {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "generation_config.json",
        "README.md",
    } <= names
    assert "Modelfile" in names and any(n.endswith("-q8_0.gguf") for n in names)
    gen = json.loads((out / "generation_config.json").read_text())
    assert gen["eos_token_id"] == [2]  # </s>, where the shipped template ends an assistant turn
    config = json.loads((out / "config.json").read_text())
    assert config["dtype"] == "bfloat16" and "quantization_config" not in config
    assert "merge check: merged vs base + adapter (bf16, cpu)" in exported["proc"].stdout
    assert "passed" in exported["proc"].stdout
    # nothing half-written is left beside it, and the run itself is untouched
    assert not [p for p in out.parent.iterdir() if ".partial-" in p.name]
    assert (exported["run"] / "final" / "adapter_config.json").is_file()


def test_gguf_reads_back_with_gguf_reader(exported):
    from gguf import GGUFReader

    out = exported["out"]
    path = next(out.glob("*-q8_0.gguf"))
    reader = GGUFReader(str(path))
    layers, hidden, vocab, ffn = 4, 256, 1024, 688  # the shipped tiny shape
    names = {t.name: t for t in reader.tensors}
    per_layer = [
        "attn_norm",
        "ffn_norm",
        "attn_q",
        "attn_k",
        "attn_v",
        "attn_output",
        "ffn_gate",
        "ffn_up",
        "ffn_down",
    ]
    expected = {"token_embd.weight", "output_norm.weight", "output.weight"} | {
        f"blk.{i}.{n}.weight" for i in range(layers) for n in per_layer
    }
    assert set(names) == expected and len(reader.tensors) == 3 + 9 * layers
    # GGUF lists dimensions fastest first: (columns, rows)
    assert list(names["token_embd.weight"].shape) == [hidden, vocab]
    assert list(names["blk.0.attn_k.weight"].shape) == [hidden, 128]  # 2 kv heads x 64
    assert list(names["blk.0.ffn_down.weight"].shape) == [ffn, hidden]
    assert names["blk.0.attn_q.weight"].tensor_type.name == "Q8_0"
    assert names["blk.0.ffn_down.weight"].tensor_type.name == "F16"  # 688 is not a multiple of 32
    assert names["blk.0.attn_norm.weight"].tensor_type.name == "F32"

    def field(key):
        return reader.fields[key].contents()

    assert field("general.architecture") == "llama"
    assert field("llama.block_count") == layers and field("llama.embedding_length") == hidden
    assert field("llama.attention.head_count_kv") == 2 and field("general.file_type") == 7
    assert field("tokenizer.ggml.model") == "gpt2" and len(field("tokenizer.ggml.tokens")) == vocab
    assert field("tokenizer.ggml.eos_token_id") == 2
    assert "[INST]" in field("tokenizer.chat_template")
    modelfile = (out / "Modelfile").read_text()
    assert f"FROM ./{path.name}" in modelfile and 'PARAMETER stop "</s>"' in modelfile
    assert "{{ .Prompt }} [/INST]" in modelfile and "{{ .System }}" in modelfile


def test_the_q8_0_gguf_is_read_back_within_its_tolerance_and_its_tokenizer_gives_the_same_ids(
    exported, tmp_path
):
    """The export read its GGUF back into the merged model: its next-token logits on the merge
    check's 3 prompts within q8_0's tolerance, said on stdout; the tokenizer read by transformers
    from the GGUF alone gives the merged folder's ids and chat template."""
    read = _readback(exported["out"])
    print(f"q8_0 read back: gaps {read['gaps']}")
    assert read["file_type"] == "q8_0" and read["tolerance"] == ROUND_TRIP_TOLERANCE["q8_0"]
    assert read["passed"] and read["inputs"] == 3 and read["tensors"] == 39, read
    assert 0 < read["gap"] <= read["tolerance"] and read["top1_same"] == 3, read
    said = " ".join(exported["proc"].stdout.split())
    # every weight within its type's rounding (norms F32, the rest Q8_0), the worst named
    assert read["logits_passed"] and read["weights_type"] in ("Q8_0", "F16", "F32"), read
    assert 0 < read["weights_error"] <= read["weights_tolerance"] <= 0.03, read
    assert f"GGUF check: {read['file']} (q8_0) read back: weights within their rounding, at worst" in said
    assert f"next-token max |Δ| {read['gap']:.3g}" in said
    assert "tolerance 0.1), same top token on 3 of 3" in said and ": passed" in said
    result = _python(_TOKENIZER.format(out=str(exported["out"]), alone=str(tmp_path)), exported["env"])
    assert result["same_ids"] and result["template_same"], result


def test_a_q4_0_gguf_is_read_back_within_its_tolerance_and_its_size_was_said_before(trained, tmp_path):
    """q4_0 through the gguf package's quantizer: the layers 4-bit, the embeddings and output q8_0;
    its size said before the export started (from the shape: parameters x bits, plus metadata) within
    1% of the file; read back by the export, its logits within q4_0's tolerance."""
    from gguf import GGUFReader

    out = tmp_path / "merged-q4"
    proc = cockpit(
        ["export", str(trained["run"]), "--merge", "--gguf", "q4_0", "--to", str(out)], trained["env"]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    path = next(out.glob("*-q4_0.gguf"))
    reader = GGUFReader(str(path))
    kinds = {t.name: t.tensor_type.name for t in reader.tensors}
    assert kinds["blk.0.attn_q.weight"] == "Q4_0" and kinds["token_embd.weight"] == "Q8_0"
    assert reader.fields["general.file_type"].contents() == 2  # LLAMA_FTYPE_MOSTLY_Q4_0
    before = proc.stderr[: proc.stderr.index("  load ")]  # said before the first stage
    assert "  RAM: ~" in before and "merged safetensors (bf16): ~6.5 MiB (3.43M params x 2 B)" in before
    predicted = re.search(
        r"GGUF q4_0: ~([\d.]+) MiB \(2.20M layer weights x 4.5 bits \+ 524,288 embeddings", before
    )
    assert predicted, before
    assert abs(float(predicted.group(1)) * 2**20 / path.stat().st_size - 1) < 0.01
    read = _readback(out)
    print(f"q4_0 read back: gaps {read['gaps']}, {path.stat().st_size} bytes")
    assert read["file_type"] == "q4_0" and read["passed"] and read["gap"] <= ROUND_TRIP_TOLERANCE["q4_0"], (
        read
    )
    assert (out / "Modelfile").is_file()


def test_a_damaged_gguf_fails_its_read_back_and_is_kept_under_a_name_that_says_so(trained, tmp_path):
    """The output layer zeroed in the written file (the test aid corrupt_gguf_tensor): the read-back
    finds every next token's logits changed (gap 1 of the largest); the export fails with what to do,
    keeps the folder, the file renamed NAME.failed-check.gguf and no Modelfile."""
    from train_backend import test_aids

    out = tmp_path / "damaged"
    env = {**trained["env"], **test_aids.environ(corrupt_gguf_tensor="output.weight")}
    proc = cockpit(["export", str(trained["run"]), "--gguf", "q8_0", "--to", str(out)], env)
    assert proc.returncode == 1, proc.stderr[-3000:]
    said = " ".join(proc.stderr.split())
    kept = next(out.glob("*.gguf"))
    assert kept.name.endswith("-q8_0.failed-check.gguf") and not (out / "Modelfile").exists()
    assert (
        "the GGUF failed its read-back check: " in said and "tolerance 0.1), same top token on 0 of 3" in said
    )
    assert f"The export is kept in {out}: the merged safetensors passed the merge check" in said
    assert f"the GGUF is kept as {kept.name}, with no Modelfile" in said
    assert "Export again (" in said and "choose a type with more bits (--gguf f16)" in said
    read = _readback(out)
    assert not read["passed"] and read["gap"] > 0.9 and read["kept_as"] == kept.name, read
    assert read["weights_tensor"] == "output.weight" and read["weights_error"] == pytest.approx(1.0), read
    assert "weights NOT within their rounding, at worst 1 of their RMS (output.weight" in said
    assert (out / "model.safetensors").is_file()


_READ_BACK = """
import json, shutil, torch
from pathlib import Path
from transformers import AutoModelForCausalLM
from train_backend.export import readback
out, work = Path({out!r}), Path({work!r})
inputs = [torch.tensor([[1, 5, 9, 13, 17, 21]]), torch.tensor([[1, 2, 3]])]
def logits(m):
    with torch.no_grad():
        return [m(input_ids=ids).logits.float() for ids in inputs]
found = {{}}
for case, tolerance in (("strict_logits", 0.0), ("changed_weights", 10.0)):
    path = work / case / next(out.glob("*-q8_0.gguf")).name
    path.parent.mkdir(parents=True)
    shutil.copy(next(out.glob("*-q8_0.gguf")), path)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.bfloat16)
    if case == "changed_weights":  # the merged weights the file is held to are not the file's any more
        with torch.no_grad():
            model.model.layers[1].mlp.down_proj.weight.mul_(2.0)
    checked = readback.read_back(path, "q8_0", model, logits, logits(model), tolerance)
    found[case] = {{**checked.to_event(), "files": sorted(p.name for p in path.parent.iterdir())}}
print(json.dumps(found))
"""


def test_the_read_back_passes_on_the_weights_and_says_logits_over_tolerance_as_a_warning(exported, tmp_path):
    """The weights decide: logits held to a tolerance of 0 (as a 4-bit random-weight 7B moves them past
    q4_0's) with every tensor within its type's rounding pass, the file kept under its name, the gap
    said as a warning; one tensor that is not what the file holds (the merged weight doubled) fails and
    is named, whatever the logits' tolerance."""
    from cockpit.results.merge_check import describe_readback

    found = _python(_READ_BACK.format(out=str(exported["out"]), work=str(tmp_path)), exported["env"])
    strict = found["strict_logits"]
    assert strict["passed"] and not strict["logits_passed"] and strict["kept_as"] is None, strict
    assert strict["weights_error"] <= strict["weights_tolerance"] and strict["files"] == [strict["file"]]
    assert set(strict["weights_by_type"]) == {"Q8_0", "F16", "F32"}, strict  # the tiny model's types
    assert strict["weights_by_type"][strict["weights_type"]] == pytest.approx(strict["weights_error"]), strict
    line = describe_readback(strict)
    assert ": passed (the logits moved more than q8_0's tolerance" in line, line
    changed = found["changed_weights"]
    assert not changed["passed"] and changed["logits_passed"], changed
    assert changed["weights_tensor"] == "blk.1.ffn_down.weight", changed  # F16 here: rows not of 32
    assert changed["weights_error"] == pytest.approx(0.5, abs=0.02)  # |w - 2w| / |2w|
    assert changed["files"] == [changed["kept_as"]] and changed["kept_as"].endswith(".failed-check.gguf")
    assert "weights NOT within their rounding, at worst 0.5" in describe_readback(changed)


def test_a_k_quant_is_made_by_llama_quantize_from_the_f16_file(trained, tmp_path):
    """q4_k_m with a fake llama-quantize on PATH (tests/test_kquant.py): the f16 GGUF is written,
    handed to it, removed; the Modelfile points at the K-quant; the tool and its version are said."""
    from test_kquant import FAKE

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "llama-quantize"
    tool.write_text(FAKE.format(fail=""))
    tool.chmod(0o755)
    env = {**trained["env"], "PATH": f"{bin_dir}:{trained['env']['PATH']}"}
    out = tmp_path / "merged-q4km"
    proc = cockpit(["export", str(trained["run"]), "--gguf", "q4_k_m", "--to", str(out)], env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = " ".join((proc.stdout + proc.stderr).split())
    assert f"q4_k_m: the f16 GGUF is quantised by {tool}" in said
    assert f"q4_k_m: quantised by {tool} (version: 4242 (f00dcafe)):" in said
    ggufs = sorted(p.name for p in out.glob("*.gguf"))
    assert len(ggufs) == 1 and ggufs[0].endswith("-q4_k_m.gguf"), ggufs
    argv = (bin_dir / "argv.txt").read_text().split()
    assert argv[0].endswith("-f16.gguf") and argv[1].endswith("-q4_k_m.gguf") and argv[2] == "Q4_K_M"
    assert f"FROM ./{ggufs[0]}" in (out / "Modelfile").read_text()


_TOKENIZER = """
import json, shutil
from pathlib import Path
from transformers import AutoTokenizer
out, alone = Path({out!r}), Path({alone!r})
gguf = next(out.glob("*.gguf"))
shutil.copy(gguf, alone / gguf.name)  # alone: the tokenizer must come from the GGUF, not tokenizer.json
tok = AutoTokenizer.from_pretrained(out)
back_tok = AutoTokenizer.from_pretrained(alone, gguf_file=gguf.name)
text = tok.apply_chat_template([{{"role": "user", "content": "What is the capital of France?"}}],
                               tokenize=False, add_generation_prompt=True)
ids = tok(text, add_special_tokens=False)["input_ids"]
print(json.dumps({{"same_ids": ids == back_tok(text, add_special_tokens=False)["input_ids"],
                  "template_same": back_tok.chat_template == tok.chat_template}}))
"""


def test_model_card_is_filled_from_the_run(exported):
    card = (exported["out"] / "README.md").read_text()
    for expected in (
        "| Base model | synthetic:tiny |",
        "| Base revision | main (not pinned) |",
        "| Data | demo (split train): ",
        "lora: LoRA r=8, alpha=16",
        "learning rate 0.001",
        "| Steps | 4 of 4 (run finished) |",
        "| Final train loss | ",
        "| Final eval loss | no evaluation recorded |",
        "| Tokens trained on | ",
        "| Cost | $0.0",
        "at $2.0/h",
        "| Library versions | ",
        "transformers ",
        "| Cockpit | lora-cockpit 0.1.0, run ",
        "## Merge check",
        "## GGUF",
    ):
        assert expected in card, (expected, card)
    assert re.search(r"\| Wall time \| \d+:\d\d:\d\d \(h:mm:ss", card), card
    assert "not recorded" not in card, card


def test_adapter_only_export_and_an_explicit_checkpoint(trained, capsys):
    out = trained["base"] / "adapter-2"
    code = main(["export", str(trained["run"]), "--checkpoint", "2", "--to", str(out)])
    assert code == 0, capsys.readouterr().err
    names = {p.name for p in out.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "README.md", "tokenizer.json"} <= names
    assert not any(n.startswith(("optimizer", "rng_state")) for n in names)
    assert "| Exported from | checkpoint-2 |" in (out / "README.md").read_text()


def test_a_checkpoint_that_does_not_exist_is_refused_with_the_ones_that_do(trained, capsys):
    assert main(["export", str(trained["run"]), "--checkpoint", "7"]) == 1
    err = capsys.readouterr().err
    assert "has no checkpoint-7; complete checkpoints: checkpoint-2, checkpoint-4 and final/" in err


def test_a_run_without_final_adapter_exports_its_last_checkpoint(trained, tmp_path, capsys):
    run = tmp_path / "stopped-run"
    shutil.copytree(trained["run"], run, ignore=shutil.ignore_patterns("control", "final", "exports"))
    out = tmp_path / "out"
    assert main(["export", str(run), "--to", str(out)]) == 0, capsys.readouterr().err
    err = capsys.readouterr().err
    assert (
        "has no final adapter (it did not finish); exporting its last complete checkpoint, checkpoint-4"
        in err
    )
    assert (out / "adapter_config.json").is_file()


def test_too_little_disk_is_refused_before_anything_is_written(trained, tmp_path, monkeypatch, capsys):
    from cockpit.results import export_needs as needs

    monkeypatch.setattr(needs, "free_disk_bytes", lambda path: 1_000_000)
    out = tmp_path / "never"
    assert main(["export", str(trained["run"]), "--merge", "--gguf", "f16", "--to", str(out)]) == 1
    err = capsys.readouterr().err
    assert (
        "not enough disk at" in err and "is free" in err and "merged safetensors" in err and "GGUF f16" in err
    )
    assert "976.6 KiB is free" in err
    assert not out.exists() and not list(tmp_path.glob(".never.partial-*"))


def test_too_little_ram_is_refused_with_the_numbers(trained, tmp_path, monkeypatch, capsys):
    from cockpit.results import export_needs as needs

    monkeypatch.setattr(needs, "available_ram_bytes", lambda: 100 * 2**20)
    assert main(["export", str(trained["run"]), "--merge", "--to", str(tmp_path / "x")]) == 1
    err = capsys.readouterr().err
    assert "not enough RAM: the export needs ~" in err and "params x 2 B (bf16)" in err
    assert "100.0 MiB is available" in err


def test_an_architecture_gguf_cannot_take_is_refused(trained, tmp_path, capsys):
    """A run on a GPT-2-architecture base: the merge would work, the GGUF converter refuses it up front."""
    base = tmp_path / "gpt2-base"
    _python(_TINY_GPT2.format(out=str(base)), trained["env"])
    run = tmp_path / "gpt2-run"
    shutil.copytree(trained["run"], run, ignore=shutil.ignore_patterns("control", "exports"))
    config = (run / "config.yaml").read_text().replace("name: synthetic:tiny", f"name: {base}")
    (run / "config.yaml").write_text(config)
    out = tmp_path / "out"
    assert main(["export", str(run), "--gguf", "q8_0", "--to", str(out)]) == 1
    err = capsys.readouterr().err
    assert "architecture 'gpt2' cannot be converted here; this converter writes llama, mistral, qwen2" in err
    assert not out.exists()


_TINY_GPT2 = """
from transformers import GPT2Config, GPT2LMHeadModel
GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=1024)).save_pretrained({out!r})
print("{{}}")
"""


def test_push_without_a_token_says_so_and_keeps_the_export(exported, monkeypatch, capsys):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    out = exported["base"] / "push-no-token"
    assert main(["export", str(exported["run"]), "--to", str(out), "--push-to-hub", "me/tiny"]) == 1
    err = capsys.readouterr().err
    assert "not pushed to me/tiny: HF_TOKEN is not set" in err and f"The export is kept in {out}" in err
    assert (out / "adapter_config.json").is_file()


class _Refuse(http.server.BaseHTTPRequestHandler):
    def _deny(self):
        body = b'{"error": "Invalid credentials in Authorization header"}'
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_HEAD = _deny

    def log_message(self, *args):
        pass


def test_a_refused_push_says_why_and_keeps_the_export(exported, monkeypatch, capsys):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refuse)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        from cockpit.results.push import push

        monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token_123")
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
        result = push(exported["out"], "me/tiny")
    finally:
        server.shutdown()
    assert not result.ok
    assert (
        f"at http://127.0.0.1:{server.server_port} refused: HTTP 401 (the token is invalid" in result.message
    )
    assert "hf_not_a_real_token" not in result.message
    assert (exported["out"] / "model.safetensors").is_file()


def test_an_existing_target_is_not_overwritten(exported, capsys):
    assert main(["export", str(exported["run"]), "--to", str(exported["out"])]) == 1
    assert "already exists and is not empty" in capsys.readouterr().err
    assert (exported["out"] / "model.safetensors").is_file()


def test_the_export_bench_smoke_mode_reads_the_gguf_back(trained, tmp_path):
    """bench/export_merge.py (the H200 measurement) on the shared CPU run: check, timings, readback."""
    out = tmp_path / "bench"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "export_merge.py"), "--smoke", "--run", str(trained["run"]),
         "--out", str(out)],
        env=trained["env"], cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "export_merge.json").read_text())
    assert result["export"]["check"]["passed"]
    assert set(result["export"]["timings_s"]) == {
        "load", "reference", "merge", "check", "write", "convert", "readback"
    }  # fmt: skip
    assert result["export"]["peak_rss_bytes"] > 100 * 2**20
    back = result["readback"]
    assert (
        back["tensor_count"] == 39
        and back["blocks"] == 4
        and back["types"] == {"F32": 9, "Q8_0": 26, "F16": 4}
    )
    assert back["metadata"]["general.architecture"] == "llama"
    assert back["metadata"]["tokenizer.ggml.tokens"] == "[1024 items]"
