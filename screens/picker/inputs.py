"""The picker's form, without a terminal: field texts -> a checked config, workload and card table,
or a message per field; and the training config written for the chosen card.

Plain Python (no textual), so the rules are tested directly and the screen only draws. Each
workload field stands for one config key and is checked by the config's own validator, so a
field says what `cockpit train` would say about the same value.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any

import yaml

from cockpit import fmt
from cockpit.config import load as config_load
from cockpit.config import schema as config_mod
from cockpit.config.model_fit import context_warning
from cockpit.fmt import GIB
from cockpit.gpus.catalog import Catalog
from cockpit.models import shape as modelshape
from cockpit.models import shipped as shapes
from cockpit.models.memory import EstimateError, estimate_memory, workload_from_config
from cockpit.plan.cards import CardRow
from cockpit.plan.cards_inputs import CardsError, parse_dataset
from cockpit.plan.multi_rows import row_workload
from cockpit.plan.table import CardTable, card_table

# field id -> the config key it sets
FIELD_KEYS = {
    "model": "model.name",
    "method": "method",
    "seq": "training.max_length",
    "batch": "training.micro_batch_size",
    "ckpt": "training.gradient_checkpointing",
    "r": "lora.r",
    "targets": "lora.target_modules",
    "epochs": "training.epochs",
}
# auto keys the memory and speed estimates depend on, not in the form
ESTIMATED_AUTO_KEYS = ("training.gradient_accumulation_steps",)
FORM = "form"  # the key of a message about the fields together
# EstimateError messages start with what they are about
ESTIMATE_FIELDS = (
    ("sequence length", "seq"),
    ("micro-batch", "batch"),
    ("LoRA rank", "r"),
    ("LoRA targets", "targets"),
    ("method", "method"),
)

ShapeLoader = Callable[[str, str], modelshape.ModelShape]


def initial_fields(
    cfg: config_mod.TrainConfig, dataset: str = "", epochs: float | None = None, budget: float | None = None
) -> dict[str, str | bool]:
    """The form filled from a config (and the command line's size and budget; without one, the
    config's cost.max_usd)."""
    budget = cfg.cost.max_usd if budget is None else budget
    targets = cfg.lora.target_modules
    return {
        "model": cfg.model.name,
        "method": cfg.method,
        "seq": str(cfg.training.max_length),
        "batch": str(cfg.training.micro_batch_size),
        "ckpt": cfg.training.gradient_checkpointing,
        "r": str(cfg.lora.r),
        "targets": targets if isinstance(targets, str) else ", ".join(targets),
        "dataset": dataset,
        "epochs": f"{cfg.training.epochs if epochs is None else epochs:g}",
        "budget": "" if budget is None else f"{budget:g}",
    }


@dataclass(frozen=True)
class Base:
    """The config the form starts from: as its YAML reads back (auto keys left to `speed: auto`
    stay left out), and built."""

    raw: dict
    cfg: config_mod.TrainConfig

    @classmethod
    def of(cls, cfg: config_mod.TrainConfig) -> Base:
        raw = yaml.safe_load(config_mod.dump_config(cfg))
        return cls(raw, config_load.config_from_dict(copy.deepcopy(raw)))


@functools.lru_cache(maxsize=1)
def shipped_shapes() -> tuple[str, ...]:
    return tuple(shapes.shape_names())


def needs_hub(model: str) -> bool:
    """Whether the model field names a hub repository (its config.json is fetched, not read)."""
    name = model.strip()
    if shapes.is_synthetic(name) or name in shipped_shapes() or config_load.looks_like_path(name):
        return False
    return bool(re.fullmatch(r"[\w.-]+/[\w.-]+", name))


def _field_value(name: str, value: str | bool) -> Any:
    if isinstance(value, bool):
        return value
    text = value.strip()
    if name == "model" and text in shipped_shapes():
        return f"{shapes.SYNTHETIC_PREFIX}{text}"  # a bare shape name is the synthetic model
    if name == "targets" and text != "all-linear":
        return [t for t in re.split(r"[\s,]+", text) if t] or text
    if name == "method":
        return text.lower()
    return text


def _set(raw: dict, dotted: str, value: Any) -> None:
    node = raw
    *parents, last = dotted.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value


@dataclass
class Evaluation:
    """What the form gives: a message per bad field, or the table (and the config behind it)."""

    errors: dict[str, str] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)  # not errors: e.g. a hub id not fetched yet
    table: CardTable | None = None
    cfg: config_mod.TrainConfig | None = None
    settings: dict[str, Any] = field(default_factory=dict)  # config key -> value, what the file sets


def evaluate(
    fields: dict[str, str | bool],
    base: Base,
    catalog: Catalog,
    today: date,
    shape_for: Callable[[str, str], modelshape.ModelShape | None],
    trainer: str = "trl",
    gpu_counts: tuple[int, ...] = (1,),
) -> Evaluation:
    """Check every field; with none wrong, the card table. `shape_for` returns None for a hub
    model whose config.json has not been fetched yet (the screen fetches it in a worker)."""
    out = Evaluation()
    values = {name: _field_value(name, fields[name]) for name in FIELD_KEYS}
    budget = _budget(fields["budget"], out)
    try:
        cfg = _config(base, {FIELD_KEYS[name]: value for name, value in values.items()})
    except config_mod.ConfigError as exc:
        # which field is wrong: each checked alone on the base config (only when one is)
        for name, value in values.items():
            try:
                _config(base, {FIELD_KEYS[name]: value})
            except config_mod.ConfigError as alone:
                out.errors[name] = f"{FIELD_KEYS[name]}: required" if value == "" else str(alone)
        if not out.errors:
            out.errors[FORM] = str(exc)
    if out.errors:
        return out
    # every setting the estimate rests on is written, the auto keys too (speed: auto then keeps
    # them as written), so the run is the one the table estimated
    settings: dict[str, Any] = {key: _get(cfg, key) for key in (*FIELD_KEYS.values(), *ESTIMATED_AUTO_KEYS)}
    out.cfg, out.settings = cfg, settings
    try:
        shape = shape_for(cfg.model.name, cfg.model.revision or "main")
    except modelshape.ShapeError as exc:
        out.errors["model"] = str(exc)
        return out
    if shape is None:
        out.notes["model"] = f"{cfg.model.name}: press Enter here to fetch its config.json from the hub"
        return out
    warning = context_warning(shape, cfg.training.max_length)
    if warning:
        out.notes["seq"] = warning
    try:
        size = parse_dataset(str(fields["dataset"]), cfg.training.epochs, cfg.training.max_steps)
        workload = workload_from_config(cfg, shape, trainer)
        out.table = card_table(workload, catalog, size, budget, today, gpu_counts)
    except CardsError as exc:
        out.errors[exc.field] = str(exc)
    except EstimateError as exc:
        text = str(exc)
        name = next((f for start, f in ESTIMATE_FIELDS if text.startswith(start)), FORM)
        out.errors[name] = text
    return out


def _config(base: Base, values: dict[str, Any]) -> config_mod.TrainConfig:
    raw = copy.deepcopy(base.raw)
    for key, value in values.items():
        if value == "":
            raise config_mod.ConfigError(f"{key}: required")
        _set(raw, key, value)
    return config_load.config_from_dict(raw)


def _get(cfg: config_mod.TrainConfig, key: str) -> Any:
    section, _, attr = key.rpartition(".")
    return getattr(getattr(cfg, section), attr) if section else getattr(cfg, attr)


def _budget(text: str | bool, out: Evaluation) -> float | None:
    text = str(text).strip().lstrip("$").strip()
    if not text:
        return None
    try:
        return float(text.replace(",", ""))
    except ValueError:
        out.errors["budget"] = f"budget {text!r}: expected US dollars, e.g. 20 or 7.50 (empty: no budget)"
        return None


# ---------------------------------------------------------------- the file for the chosen card


def default_path(model: str, card_id: str, folder: Path) -> Path:
    """`./cockpit-<model>-<card>.yaml`: the model's last name part, file-name safe."""
    name = re.split(r"[:/\\]", model.rstrip("/"))[-1] or "model"
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "model"
    return folder / f"cockpit-{name}-{card_id}.yaml"


def chosen_config(
    base: Base, settings: dict[str, Any], row: CardRow, budget_usd: float | None = None
) -> config_mod.TrainConfig:
    """The config for `row`'s card: the form's settings, the change the row shows (if it needs
    one to fit), the card's price for the cost meter, and the budget as cost.max_usd (the run
    saves a checkpoint and stops when it has cost that much)."""
    raw = copy.deepcopy(base.raw)
    values = dict(settings)
    if row.shown_workload_is_changed:
        values.update(row.fit.change.config)
    if row.gpus > 1:  # the strategy the row's figures are for, not left to auto
        values.update({"gpus": row.gpus, "distributed.strategy": row.sharding})
    values["cost.price_per_hour"] = row.usd_per_hour  # the instance: every GPU of it
    if budget_usd is not None:
        values["cost.max_usd"] = budget_usd
    for key, value in values.items():
        _set(raw, key, value)
    return config_load.config_from_dict(raw)


def config_text(cfg: config_mod.TrainConfig, table: CardTable, row: CardRow, now: datetime) -> str:
    """The YAML to write: a header with the prediction it was chosen on, then the config."""
    figures = row.shown
    estimate = estimate_memory(row_workload(table.workload, row))
    peak = estimate.high_bytes  # the band's top, where the estimate has one: what the verdict counts
    free = row.card.vram_gib * GIB - peak
    change = f", with {row.fit.change.description}" if row.shown_workload_is_changed else ""
    per = "" if row.gpus == 1 else " per GPU"
    top = " at the band's top" if estimate.unsure else ""
    each = "" if row.gpus == 1 else f" each, ${row.usd_per_hour:.2f}/hour for {row.gpus}"
    lines = [
        f"# written by cockpit pick on {now:%Y-%m-%d %H:%M} for {row.name} "
        f"({row.card.vram_gib:g} GiB), ${row.card.price_per_hour:.2f}/hour{each} ({row.price_label})",
        f"# estimates: peak {estimate.band_text()}{per} ({free / GIB:+.1f} GiB free{top}){change}; "
        f"{fmt.rate(figures.speed.tokens_per_s)} tokens/s"
        + ("" if row.gpus == 1 else f" on {row.gpus} GPUs (a model, not calibrated on a multi-GPU run)"),
    ]
    if figures.time_s is not None:
        lines.append(
            f"# run: {table.size.describe(table.workload)}: {fmt.duration(figures.time_s)}, "
            f"{fmt.money(figures.cost_usd)}"
        )
    if cfg.cost.max_usd is not None:
        lines.append(
            f"# budget {fmt.money(cfg.cost.max_usd)} (cost.max_usd): the run saves a checkpoint and stops "
            "when it has cost that much"
        )
    lines += [
        "# micro-batch, accumulation and checkpointing are set as the estimate assumed them, so",
        "# speed: auto keeps them (it still chooses packing, attention kernel and loader workers);",
        "# delete them to let speed: auto choose for the card (it may run faster than estimated).",
        "# Set dataset.path to your data, then start it: cockpit train THIS_FILE",
        "",
    ]
    return "\n".join(lines) + config_mod.dump_config(cfg)
