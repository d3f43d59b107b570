"""The model card (README.md of an export), filled from the run: its config and its events.

Every figure comes from the run directory: config.yaml (base, data, method, hyperparameters)
and events.jsonl folded by `cockpit.run.state.RunState` (steps, losses, tokens, wall time,
cost, hardware, library versions), plus what the export itself measured. A figure the run
did not record is written as "not recorded", never guessed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cockpit import __version__, fmt, yaml_text
from cockpit.run import journal, rundir
from cockpit.run.state import RunState

NOT_RECORDED = "not recorded"


@dataclass
class RunFacts:
    """What a card says about the run, gathered once."""

    run_id: str
    config: dict[str, Any]
    state: RunState
    eval_loss: float | None = None
    eval_step: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def read_facts(run: rundir.RunDir) -> RunFacts:
    config = yaml_text.safe_load(run.config_path.read_text(encoding="utf-8")) or {}
    items = journal.read_all(run.events_path)
    state = RunState()
    eval_loss = eval_step = None
    for item in items:
        state.apply(item)
        if isinstance(item, dict) and item.get("type") == "eval":
            loss = item.get("eval_loss", item.get("loss"))
            if isinstance(loss, (int, float)):
                eval_loss, eval_step = float(loss), item.get("step")
    return RunFacts(run.run_id, config, state, eval_loss, eval_step)


def _get(d: dict[str, Any], dotted: str, default: Any = None) -> Any:
    for part in dotted.split("."):
        if not isinstance(d, dict) or part not in d:
            return default
        d = d[part]
    return d


def _or(value: Any, fmt: Callable[[Any], str] = str) -> str:
    return NOT_RECORDED if value is None else fmt(value)


def _duration(seconds: float | None) -> str:
    return f"{fmt.duration(seconds)} (h:mm:ss, all trainer attempts)" if seconds else NOT_RECORDED


def card_fields(facts: RunFacts, export: dict[str, Any]) -> dict[str, str]:
    """The card's facts as label -> text (also what the tests check)."""
    c, s = facts.config, facts.state
    train_loss = (s.outcome or {}).get("train_loss")
    cost = s.cost_so_far()
    return {
        "Base model": _get(c, "model.name", NOT_RECORDED),
        "Base revision": _get(c, "model.revision") or "main (not pinned)",
        "Data": _data_text(c, s),
        "Method": _method_text(c),
        "Hyperparameters": _hyperparameters_text(c, s),
        "Steps": f"{s.step}" + (f" of {s.total_steps}" if s.total_steps else "") + f" (run {s.status})",
        "Final train loss": _or(s.loss, lambda v: f"{v:.4f} (last logged)")
        + ("" if train_loss is None else f"; {train_loss:.4f} (mean over the run)"),
        "Final eval loss": _or(facts.eval_loss, lambda v: f"{v:.4f} (step {facts.eval_step})")
        if facts.eval_loss is not None
        else "no evaluation recorded",
        "Tokens trained on": _or(s.tokens_seen, lambda v: f"{v:,}"),
        "Wall time": _duration(s.billed_s()),
        "Cost": _or(cost, lambda v: f"{fmt.money(v)} at ${s.price_per_hour}/h")
        if cost is not None
        else "no price set (cost.price_per_hour)",
        "Hardware": _hardware_text(s),
        "Library versions": _versions_text(s, export),
        "Exported from": export.get("source_label", NOT_RECORDED),
        "Cockpit": f"lora-cockpit {__version__}, run {facts.run_id}",
    }


def _method_text(c: dict[str, Any]) -> str:
    """The method with its LoRA settings and, for QLoRA, the base's quantisation."""
    method = c.get("method", NOT_RECORDED)
    if method == "full":
        return "full fine-tune"
    lora = c.get("lora") or {}
    quant = c.get("quantization") or {}
    targets = lora.get("target_modules")
    targets = ", ".join(targets) if isinstance(targets, list) else targets
    text = (
        f"{method}: LoRA r={lora.get('r')}, alpha={lora.get('alpha')}, dropout={lora.get('dropout')}, "
        f"target modules {targets}"
    )
    if lora.get("modules_to_save"):
        text += f", trained fully: {', '.join(lora['modules_to_save'])}"
    if method == "qlora":
        text += (
            f"; base quantised to {quant.get('bits')}-bit {quant.get('quant_type')}"
            f"{' with double quantisation' if quant.get('double_quant') else ''}"
        )
    return text


def _hyperparameters_text(c: dict[str, Any], s: RunState) -> str:
    t = c.get("training") or {}
    batch = (t.get("micro_batch_size"), t.get("gradient_accumulation_steps"))
    return (
        f"learning rate {t.get('learning_rate')} ({t.get('lr_scheduler')}, warmup {t.get('warmup')}), "
        f"optimizer {t.get('optimizer')}, micro-batch {batch[0]} x accumulation {batch[1]}, "
        f"max length {t.get('max_length')} tokens, "
        + (f"max steps {t['max_steps']}" if t.get("max_steps") else f"epochs {t.get('epochs')}")
        + f", seed {t.get('seed')}, precision {s.precision or t.get('precision')}"
    )


def _data_text(c: dict[str, Any], s: RunState) -> str:
    """The dataset and split, and what the trainer counted in it."""
    data = s.data
    text = f"{_get(c, 'dataset.path')} (split {_get(c, 'dataset.split')})"
    if data:
        labels = (("samples", "samples"), ("tokens_total", "tokens"), ("format", "format"))
        parts = [
            f"{data[k]:,} {label}" if isinstance(data[k], int) else f"{label} {data[k]}"
            for k, label in labels
            if k in data
        ]
        if parts:
            text += ": " + ", ".join(parts)
    return text


def _hardware_text(s: RunState) -> str:
    device = s.device or {}
    gpus = (s.distributed or {}).get("world_size")
    hardware = device.get("name") or NOT_RECORDED
    if device.get("kind") == "cpu":
        hardware = f"CPU ({hardware})"
    if device.get("kind") == "cuda" and gpus and gpus > 1:
        hardware = f"{gpus} x {hardware}"
    if device.get("total_bytes"):
        hardware += f" ({fmt.size(device['total_bytes'])})"
    return hardware


def _versions_text(s: RunState, export: dict[str, Any]) -> str:
    versions = ", ".join(f"{k} {v}" for k, v in sorted((s.versions or {}).items()) if v) or NOT_RECORDED
    if export.get("export_versions"):
        versions += "; export: " + ", ".join(f"{k} {v}" for k, v in sorted(export["export_versions"].items()))
    return versions


def render(facts: RunFacts, export: dict[str, Any]) -> str:
    """README.md: Hugging Face front matter, what the files are, the facts, and the merge check."""
    fields = card_fields(facts, export)
    base = fields["Base model"]
    merged = bool(export.get("merged"))
    front = {
        "library_name": "transformers" if merged else "peft",
        "tags": ["lora-cockpit", facts.config.get("method", "lora")]
        + (["gguf"] if export.get("gguf") else []),
    }
    if "/" in str(base) and not str(base).startswith(("/", ".", "synthetic:")):
        front["base_model"] = base
    lines = ["---", yaml.safe_dump(front, sort_keys=False).strip(), "---", ""]
    title = export.get("title") or facts.run_id
    lines += [f"# {title}", ""]
    if merged:
        lines.append(
            f"{base} with the LoRA adapter of run `{facts.run_id}` merged into its weights "
            f"({export.get('dtype')})."
        )
    else:
        lines.append(f"A LoRA adapter for {base}, from run `{facts.run_id}`.")
    lines += ["", "## Training", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {str(v).replace('|', '/')} |" for k, v in fields.items()]
    lines += ["", "## Files", ""]
    for f in export.get("files") or []:
        lines.append(f"- `{f['name']}` ({fmt.size(f['bytes'])})")
    check = export.get("check")
    if check:
        from cockpit.results.merge_check import describe_event

        lines += ["", "## Merge check", "", describe_event(check) + "."]
        if export.get("quantised_check"):
            lines += ["", describe_event(export["quantised_check"]) + "."]
    if export.get("gguf"):
        g = export["gguf"]
        lines += [
            "",
            "## GGUF",
            "",
            f"`{g['file']}`: {g['type']}, architecture `{g['architecture']}`, {g['tensors']} tensors "
            f"({', '.join(f'{n} {k}' for k, n in sorted(g['types'].items()))}), with the tokenizer and "
            "chat template in its metadata. Ollama: `ollama create NAME -f Modelfile`.",
        ]
        if export.get("readback"):
            from cockpit.results.merge_check import describe_readback

            lines += ["", describe_readback(export["readback"]) + "."]
    if export.get("eos_tokens"):
        lines += [
            "",
            f"Generation stops at: {', '.join(f'`{t}`' for t in export['eos_tokens'])} "
            "(the chat template's end of turn; generation_config.json).",
            "",
        ]
    return "\n".join(lines).rstrip() + "\n"


def write_card(folder: Path, facts: RunFacts, export: dict[str, Any]) -> Path:
    path = folder / "README.md"
    path.write_text(render(facts, export), encoding="utf-8")
    (folder / "cockpit-export.json").write_text(json.dumps(export, indent=1, default=str), encoding="utf-8")
    return path
