"""The export job: load the base in 16-bit, merge the adapter, check the logits, write, convert.

Everything is written into the staging folder the client named; the client renames it into
place only when this job said `export_done`, so a failed export leaves nothing half written.
Each stage reports `export_progress`; the merge check is an `export_check`, the GGUF read back an
`export_readback` (readback.py); any failure is one `error` event (kind `export`, `unsupported` or
`check_failed`). A GGUF that fails its read-back is kept, renamed, and said in `export_done`.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cockpit.config.load import load_config
from cockpit.config.schema import TrainConfig
from cockpit.results import merge_check
from train_backend import model as model_mod
from train_backend import test_aids
from train_backend.channel import Emitter
from train_backend.export import kquant, readback, to_gguf, tokens

CHECK_PROMPTS = (
    "What is the capital of France?",
    "Write one sentence about rivers.",
    "How much is 12 times 3?",
)
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
MAX_SHARD = "2GB"
# what a checkpoint holds for resuming, not for using the adapter
TRAINER_STATE = ("optimizer", "scheduler", "rng_state", "trainer_state")
NOT_COPIED = ("training_args.bin", "cockpit-complete.json", "README.md")


class Refused(RuntimeError):
    def __init__(self, kind: str, message: str, hint: str = ""):
        super().__init__(message)
        self.kind, self.hint = kind, hint


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


class Stages:
    """export_progress events, with each stage's time and the process's peak RSS at its end."""

    def __init__(self, emitter: Emitter):
        self.emitter = emitter
        self.timings: dict[str, float] = {}
        self.peaks: dict[str, int] = {}
        self._stage: str | None = None
        self._started = 0.0

    def begin(self, stage: str, total: int = 1, unit: str = "step", message: str = "") -> None:
        self._stage, self._started = stage, time.time()
        self.emitter.emit("export_progress", stage=stage, done=0, total=total, unit=unit, message=message)

    def step(self, done: int, total: int, unit: str) -> None:
        self.emitter.emit(
            "export_progress",
            stage=self._stage,
            done=done,
            total=total,
            unit=unit,
            elapsed_s=round(time.time() - self._started, 2),
        )

    def end(self, message: str = "") -> None:
        elapsed = round(time.time() - self._started, 3)
        self.timings[self._stage] = elapsed
        self.peaks[self._stage] = peak_rss_bytes()
        self.emitter.emit(
            "export_progress",
            stage=self._stage,
            done=1,
            total=1,
            unit="stage",
            elapsed_s=elapsed,
            finished=True,
            message=message,
            peak_rss_bytes=self.peaks[self._stage],
        )


def run_export(request: dict, emitter: Emitter) -> int:
    stages = Stages(emitter)
    try:
        return _run(request, emitter, stages)
    except Refused as exc:
        emitter.emit("error", kind=exc.kind, message=str(exc), hint=exc.hint, phase="export")
        return 3
    except to_gguf.CannotConvert as exc:
        emitter.emit("error", kind="unsupported", message=str(exc), hint="", phase="export")
        return 3
    except BaseException as exc:
        if isinstance(exc, SystemExit):
            raise
        from train_backend.errors import format_traceback

        message = f"{type(exc).__name__}: {exc}".split("\n")[0][:600]
        emitter.emit(
            "error", kind="export", message=message, hint="", phase="export", traceback=format_traceback(exc)
        )
        print(format_traceback(exc))
        return 1


@dataclass
class Job:
    """What the client asked for (the request), and what the load found."""

    request: dict
    source: Path  # the checkpoint or final/ folder: an adapter, or a whole model (method: full)
    out: Path
    dtype_name: str
    gguf_type: str | None
    merge: bool
    cfg: TrainConfig
    is_adapter: bool
    device: model_mod.Device
    dtype: Any = None  # the torch dtype of dtype_name
    # the load's
    config: Any = None  # the model's transformers config
    tokenizer: Any = None
    tokenizer_dir: Path | None = None
    base_path: str = ""


def _run(request: dict, emitter: Emitter, stages: Stages) -> int:
    """The export, stage by stage: load, merge and check (an adapter), write, convert (GGUF)."""
    import torch

    job = _job(request)
    if job.is_adapter and not (job.merge or job.gguf_type):
        return _adapter_only(job.source, job.out, job.dtype_name, job.device, stages, emitter)
    model = _load(job, stages)
    check = None
    if job.is_adapter:
        model, check = _merge(job, model, stages, emitter)
    elif job.merge:
        emitter.emit(
            "warning", message=f"{job.source.name} is a whole model (method: full): nothing to merge", hint=""
        )
    special = tokens.special_tokens(job.tokenizer)
    _write(job, model, special, stages)
    gguf_result, kquant, read = None, None, None
    if job.gguf_type:
        gguf_result, kquant = _convert(job, model, special, stages)
        read = _read_back(job, model, kquant, gguf_result, stages, emitter)
        if read.get("passed") is not False:  # a file that failed its check is offered to nobody
            name = read["file"]
            (job.out / "Modelfile").write_text(tokens.modelfile(name, job.tokenizer, special["eos_tokens"]))
    files = sorted(p.name for p in job.out.iterdir() if p.is_file())
    emitter.emit(
        "export_done",
        out_dir=str(job.out),
        files=[{"name": f, "bytes": (job.out / f).stat().st_size} for f in files],
        merged=bool(job.is_adapter and (job.merge or job.gguf_type)),
        dtype=job.dtype_name,
        device=job.device.to_dict(),
        params=sum(p.numel() for p in model.parameters()),
        model_type=job.config.model_type,
        eos_tokens=special["eos_tokens"],
        check=check.to_event() if check else None,
        gguf=None if gguf_result is None else gguf_result.to_event(),
        kquant=kquant,
        readback=read,
        export_versions=_versions(),
        timings_s=stages.timings,
        peak_rss_bytes=peak_rss_bytes(),
        stage_peak_rss_bytes=stages.peaks,
        peak_gpu_bytes=torch.cuda.max_memory_allocated() if job.device.kind == "cuda" else None,
    )
    return 0


def _job(request: dict) -> Job:
    import torch

    run_dir, source = Path(request["run_dir"]), Path(request["source"])
    job = Job(
        request=request,
        source=source,
        out=Path(request["out_dir"]),
        dtype_name=request["dtype"],
        gguf_type=request.get("gguf"),
        merge=bool(request.get("merge")),
        cfg=load_config(run_dir / "config.yaml"),
        is_adapter=(source / "adapter_config.json").is_file(),
        device=model_mod.detect_device(),
    )
    job.dtype = getattr(torch, DTYPES[job.dtype_name])
    return job


def _load(job: Job, stages: Stages):
    """The base in the export's dtype (a full fine-tune's checkpoint is the model), its tokenizer;
    a GGUF export the converter cannot write is refused before the expensive part."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    cfg, source, device = job.cfg, job.source, job.device
    dtype_note = " (fp16 on the CPU: slow)" if job.dtype_name == "fp16" and device.kind == "cpu" else ""
    stages.begin("load", message=f"base {cfg.model.name} in {job.dtype_name} on {device.kind}{dtype_note}")
    if job.is_adapter:
        precision = job.request.get("train_precision") or "fp32"
        job.base_path = model_mod.resolve_model_path(cfg, precision, device)
    else:
        job.base_path = str(source)  # a full fine-tune: the checkpoint is the model
    revision = cfg.model.revision if job.is_adapter else None
    job.config = AutoConfig.from_pretrained(job.base_path, revision=revision)
    job.tokenizer_dir = source if (source / "tokenizer.json").is_file() else Path(job.base_path)
    job.tokenizer = AutoTokenizer.from_pretrained(str(job.tokenizer_dir))
    if job.gguf_type:
        to_gguf.gguf_architecture(job.config.model_type)
        to_gguf.rope_settings(job.config.to_dict())
        to_gguf.tokenizer_vocab(job.tokenizer_dir, job.config.vocab_size, job.tokenizer.unk_token_id)
    kwargs = {"dtype": job.dtype}
    if device.kind == "cuda":
        kwargs["device_map"] = {"": torch.cuda.current_device()}
        torch.cuda.reset_peak_memory_stats()
    model = AutoModelForCausalLM.from_pretrained(job.base_path, revision=revision, **kwargs)
    model.eval()
    stages.end()
    return model


def _merge(job: Job, model, stages: Stages, emitter: Emitter):
    """(merged model, its check): base + adapter, merged layer by layer, held to the logits of the
    unmerged pair; a merge that does not match is refused."""
    import torch
    from peft import PeftModel
    from peft.tuners.lora import LoraLayer

    model = PeftModel.from_pretrained(model, str(job.source))
    model.eval()
    inputs = _check_inputs(job.tokenizer, model.device)
    stages.begin("reference", total=len(inputs), unit="input", message="logits of base + adapter, unmerged")
    reference = _logits(model, inputs)
    with model.disable_adapter():  # the adapter's own effect, for the verdict
        base_logits = _logits(model, inputs)
    stages.end()
    layers = [m for m in model.modules() if isinstance(m, LoraLayer)]
    stages.begin("merge", total=len(layers), unit="layer")
    with torch.no_grad():
        for done, layer in enumerate(layers, start=1):
            layer.merge()
            if done % max(1, len(layers) // 20) == 0 or done == len(layers):
                stages.step(done, len(layers), "layer")
        model = model.merge_and_unload()  # already merged: this unwraps the LoRA layers
    stages.end()
    stages.begin("check", total=len(inputs), unit="input", message="logits of the merged model")
    merged_logits = _logits(model, inputs)
    check = _compare(reference, merged_logits, base_logits, job.dtype_name, job.device.kind)
    stages.end()
    emitter.emit("export_check", **check.to_event())
    if not check.passed:
        raise Refused(
            "check_failed",
            f"the merged model does not match base + adapter: {check.describe()}. Nothing was written.",
            "The adapter may not belong to this base (model.name / revision changed since training?).",
        )
    if job.cfg.method == "qlora" and job.device.kind == "cuda":
        quantised = _quantised_gap(
            job.cfg, job.base_path, job.source, job.request, job.device, inputs, merged_logits
        )
        if quantised is not None:
            emitter.emit("export_check", **quantised.to_event(), gating=False)
    return model, check


def _write(job: Job, model, special: dict, stages: Stages) -> None:
    """safetensors shards and the tokenizer, with a generation config that stops at the EOS tokens."""
    from transformers import GenerationConfig

    job.out.mkdir(parents=True, exist_ok=True)
    stages.begin("write", message=f"safetensors shards of at most {MAX_SHARD}")
    model.generation_config = GenerationConfig(
        bos_token_id=special["bos"], eos_token_id=special["eos_ids"], pad_token_id=special["pad"]
    )
    model.save_pretrained(str(job.out), max_shard_size=MAX_SHARD)
    job.tokenizer.save_pretrained(str(job.out))
    stages.end()


def _convert(job: Job, model, special: dict, stages: Stages) -> tuple[to_gguf.GgufResult, dict | None]:
    """The GGUF file of the merged weights; a K-quant (kquant.py) is made from the f16 file by
    llama.cpp's llama-quantize, or its command said."""
    import torch

    state = model.state_dict()
    shapes = {name: tuple(t.shape) for name, t in state.items()}
    name = job.request.get("name") or "model"
    is_k = job.gguf_type in kquant.K_TYPES
    out_type = "f16" if is_k else job.gguf_type
    gguf_file = job.out / f"{name}-{out_type}.gguf"
    stages.begin("convert", total=len(shapes), unit="tensor", message=gguf_file.name)
    result = to_gguf.write_gguf(
        gguf_file,
        job.config.to_dict(),
        lambda hf_name: state[hf_name].detach().to("cpu", torch.float32).numpy(),
        shapes,
        job.tokenizer_dir,
        special,
        out_type,
        name,
        progress=lambda done, total: (
            stages.step(done, total, "tensor") if done % max(1, total // 20) == 0 or done == total else None
        ),
    )
    stages.end()
    made = None
    if is_k:
        stages.begin("quantize", message=f"{job.gguf_type} by {kquant.TOOL}")
        made = kquant.k_quantize(gguf_file, job.gguf_type)
        stages.end()
    return result, made


def _read_back(job: Job, model, made: dict | None, result: to_gguf.GgufResult, stages: Stages, emitter):
    """The GGUF file read back into the merged model (readback.py), its next-token logits against
    the merged model's: an `export_readback` event, whose fields this returns. `--skip-readback`
    (the request's `readback: false`) says it was skipped."""
    path = job.out / (made["file"] if made else Path(result.path).name)
    file_type = made["type"] if made and made.get("done") else result.out_type
    if job.request.get("readback") is False:
        event: dict = {
            "file": path.name,
            "file_type": file_type,
            "skipped": True,
            "reason": "--skip-readback",
        }
        emitter.emit("export_readback", **event)
        return event
    aids = test_aids.parse(os.environ.get(test_aids.ENV))
    if aids.corrupt_gguf_tensor:
        readback.corrupt(path, aids.corrupt_gguf_tensor)
    tolerance = merge_check.ROUND_TRIP_TOLERANCE[file_type]
    inputs = _check_inputs(job.tokenizer, model.device)
    stages.begin("readback", unit="tensor", message=f"{path.name} into the merged model, against its logits")
    reference = _logits(model, inputs)  # before the file's weights replace the merged ones
    checked = readback.read_back(
        path,
        file_type,
        model,
        lambda m: _logits(m, inputs),
        reference,
        tolerance,
        progress=lambda done, total: (
            stages.step(done, total, "tensor") if done % max(1, total // 20) == 0 or done == total else None
        ),
    )
    stages.end()
    emitter.emit("export_readback", **checked.to_event())
    return checked.to_event()


def _adapter_only(source: Path, out: Path, dtype_name: str, device, stages: Stages, emitter: Emitter) -> int:
    """The adapter as trained, with its tokenizer: no base is loaded, nothing is merged."""
    import shutil

    out.mkdir(parents=True, exist_ok=True)
    stages.begin("write", message="the adapter and its tokenizer")
    for item in source.iterdir():
        if item.is_file() and not item.name.startswith(TRAINER_STATE) and item.name not in NOT_COPIED:
            shutil.copy2(item, out / item.name)
    stages.end()
    files = sorted(p.name for p in out.iterdir() if p.is_file())
    emitter.emit(
        "export_done",
        out_dir=str(out),
        files=[{"name": f, "bytes": (out / f).stat().st_size} for f in files],
        merged=False,
        dtype=None,
        device=device.to_dict(),
        check=None,
        gguf=None,
        export_versions=_versions(),
        timings_s=stages.timings,
        peak_rss_bytes=peak_rss_bytes(),
        stage_peak_rss_bytes=stages.peaks,
    )
    return 0


def _quantised_gap(cfg, base_path, source, request, device, inputs, merged_logits):
    """QLoRA: the merged 16-bit model against what the run trained, the 4-bit base + adapter. They
    differ by the base's quantisation error, so this is reported, not gated on (tolerance: the
    q8_0 round trip's, as a yardstick); a failure to measure it only warns."""
    import torch
    from peft import PeftModel

    try:
        precision = request.get("train_precision") or "bf16"
        quantised = model_mod.load_model(cfg, base_path, precision, device)
        quantised = PeftModel.from_pretrained(quantised, str(source))
        quantised.eval()
        reference = _logits(quantised, inputs)
        del quantised
        torch.cuda.empty_cache()
    except Exception as exc:
        print(f"[cockpit] 4-bit comparison skipped: {type(exc).__name__}: {exc}")
        return None
    bits = cfg.quantization.bits
    return merge_check.verdict(
        f"merged ({request['dtype']}) vs the {bits}-bit base + adapter the run trained (information)",
        merge_check.ROUND_TRIP_TOLERANCE["q8_0"],
        **_figures(reference, merged_logits),
    )


def _versions() -> dict:
    import importlib.metadata as md

    out = {}
    for name in ("torch", "transformers", "peft", "gguf", "safetensors"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            pass
    return out


def _check_inputs(tokenizer, device) -> list:
    """A few prompts, through the chat template when there is one (the way the model will be used)."""
    import torch

    encoded = []
    for prompt in CHECK_PROMPTS:
        rendered = tokens.render(tokenizer, [{"role": "user", "content": prompt}], generation_prompt=True)
        text = rendered if rendered is not None else prompt
        # a rendered template already holds its special tokens
        ids = tokenizer(text, add_special_tokens=rendered is None, return_tensors="pt")["input_ids"]
        encoded.append(ids[:, :64].to(device) if ids.shape[1] else torch.tensor([[0]], device=device))
    return encoded


def _logits(model, inputs: list) -> list:
    import torch

    with torch.no_grad():
        return [model(input_ids=ids).logits.float().cpu() for ids in inputs]


def _figures(reference: list, candidate: list) -> dict:
    """RMS and largest differences over every position and vocabulary entry, and top-1 agreement."""
    squares = sum(float(((a - b) ** 2).sum()) for a, b in zip(reference, candidate))
    ref_squares = sum(float((a**2).sum()) for a in reference)
    count = sum(a.numel() for a in reference)
    positions = sum(a.shape[1] for a in reference)
    same = sum(int((a.argmax(-1) == b.argmax(-1)).sum()) for a, b in zip(reference, candidate))
    return {
        "inputs": len(reference),
        "positions": positions,
        "rms_diff": (squares / count) ** 0.5,
        "ref_rms": (ref_squares / count) ** 0.5,
        "max_abs_diff": max(float((a - b).abs().max()) for a, b in zip(reference, candidate)),
        "ref_max_abs": max(float(a.abs().max()) for a in reference),
        "top1_agree": same / positions,
    }


def _compare(
    reference: list, candidate: list, base: list, dtype_name: str, device_kind: str
) -> merge_check.LogitsCheck:
    effect = _figures(reference, base)["rms_diff"]
    return merge_check.verdict(
        f"merged vs base + adapter ({dtype_name}, {device_kind})",
        merge_check.RELATIVE_TOLERANCE[dtype_name],
        adapter_effect_rms=effect,
        **_figures(reference, candidate),
    )
