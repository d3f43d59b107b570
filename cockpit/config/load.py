"""Reading a training config: YAML and `--set key=value` overrides into a validated `TrainConfig`.

Errors (`ConfigError`) name the key, say what was expected and how to fix it.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Hashable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, Union, get_args, get_origin

import yaml

from cockpit import paths, yaml_text
from cockpit.config import preference, sync_spec
from cockpit.config import sources as dataset_sources
from cockpit.config.schema import (
    REPORTER_PACKAGES,
    REPORTERS,
    SECRET_KEY_PATTERN,
    SPEED_AUTO_KEYS,
    ConfigError,
    TrainConfig,
    all_keys,
    is_section,
    type_hints,
)
from cockpit.config.secrets import secret_in_values
from cockpit.fmt import MAX_QUOTED_CHARS as MAX_QUOTED_CHARS  # what the tests bound an error by
from cockpit.fmt import quoted
from cockpit.models import shipped as shapes
from cockpit.paths import cockpit_command

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_Section = TypeVar("_Section", bound="DataclassInstance")  # TrainConfig or one of its sections


def load_config(
    path: str | os.PathLike[str] | None, overrides: list[str] | None = None, sets: list[str] | None = None
) -> TrainConfig:
    """Read YAML, apply `key=value` overrides, validate. Raises ConfigError; one about a key that one of
    `sets` (the user's `--set` items among the overrides; by default all of them) gave names `--set`."""
    raw: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if path.is_dir():
            raise ConfigError(
                f"{_quote(str(path))} is a directory; give the config's YAML file "
                f"({cockpit_command()} init writes one)"
            )
        odd = paths.not_a_regular_file(path)
        if odd is not None:
            raise ConfigError(
                f"config file {_quote(str(path))} is {odd}, not a file to read; give the config's YAML "
                f"file (cockpit init FILE writes one)"
            )
        if not path.is_file():
            raise ConfigError(
                f"config file {_quote(str(path))} not found. Write one with: {cockpit_command()} init {path}"
            )
        try:
            loaded = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"{path}: not a text file in UTF-8 (byte {exc.start} is not valid); write the config as "
                "plain YAML text"
            ) from None
        except OSError as exc:
            raise ConfigError(f"{path}: cannot be read ({exc.strerror or exc})") from None
        _check_size(loaded, str(path))
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: expected a mapping of sections (model:, dataset:, ...) at the top")
        raw = loaded
    for item in overrides or []:
        apply_override(raw, item)
    try:
        return config_from_dict(raw)
    except ConfigError as exc:
        raise _blame_override(exc, (overrides or []) if sets is None else sets) from None


def _blame_override(exc: ConfigError, overrides: list[str]) -> ConfigError:
    """An error about a key that a `--set` gave names `--set`, not the file (which may not even hold
    the key); other errors as they are."""
    text = str(exc)
    for item in reversed(overrides):  # the last --set of a key is the one that counts
        key = item.partition("=")[0].strip()
        if text.startswith(f"{key}:") or text.startswith(f"unknown key {_quote(key)}"):
            return ConfigError(f"--set {text}" if text.startswith(key) else f"--set {key}: {text}")
    return exc


class _UniqueKeyLoader(yaml_text.SafeLoader):
    """safe_load that refuses a key given twice in one section (YAML alone keeps the last, silently).
    Parsed by libyaml where PyYAML has it: `cockpit train` reads the config five times before the
    TUI's first screen, ~4 ms of CPU each in pure Python, ~1.5 ms with libyaml."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: set[str] = set()
        for key_node, _value in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, str):
                continue
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"key {_quote(key)} appears twice in one section; only the last would count: keep one",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


# a real config has a few hundred values; YAML aliases can make billions out of a few lines (a "billion
# laughs"), which are cheap to load as shared references but not to walk, print or save
MAX_CONFIG_VALUES = 10_000
# the longest string a key takes: a path (PATH_MAX), a hub id, a shell command; a longer one is a paste gone
# wrong, refused before it reaches the file system, a run directory or a message
MAX_VALUE_CHARS = 4096
HUB_NAME_CHARS = 96  # the hub's limit on each part of org/name


def _check_size(loaded: Any, where: str) -> None:
    """Refuse a document whose values, with every alias expanded, pass MAX_CONFIG_VALUES; the walk
    stops there, so its cost is bounded whatever the aliases would expand to."""
    count = 0
    stack = [loaded]
    while stack:
        node = stack.pop()
        count += 1
        if count > MAX_CONFIG_VALUES:
            raise ConfigError(
                f"{where}: more than {MAX_CONFIG_VALUES:,} values once YAML aliases (*name) are expanded; a "
                "training config has a few hundred. Write the values out instead of nesting aliases."
            )
        if isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend(node)


def apply_override(raw: dict[str, Any], item: str) -> None:
    """`training.max_steps=50` -> raw["training"]["max_steps"] = 50 (value parsed as YAML)."""
    key, sep, text = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {_quote(item)}: expected key=value, e.g. --set training.max_steps=50")
    try:
        value = yaml_text.safe_load(text) if text.strip() else None
    except yaml.YAMLError:
        value = text
    _check_size(value, f"--set {key.strip()}")
    node = raw
    parts = key.strip().split(".")
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"--set {_quote(key)}: {_quote(part)} is a value, not a section")
        node = child
    node[parts[-1]] = value


def set_override(overrides: list[str], key: str, text: str) -> None:
    """Append `key=text` so that `text` is read back as that very string (quoted YAML), whatever it
    holds (`sudo shutdown -h now`, a colon, a quote, `yes`)."""
    overrides.append(f"{key}={yaml.safe_dump(text, default_style=chr(34), width=1 << 20).strip()}")


def config_from_dotted(values: dict[str, Any]) -> TrainConfig:
    """{"training.max_length": 512, "method": "lora", ...} -> a validated config."""
    raw: dict[str, Any] = {}
    for dotted, value in values.items():
        node = raw
        *parents, last = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return config_from_dict(raw)


# the speed keys whose words YAML reads as booleans when bare (`off`, `on`), and the words they were
SPEED_BARE_WORDS: dict[str, dict[bool, str]] = {
    "mode": {False: "off"},
    "fused_kernels": {False: "off", True: "on"},
    "mlp_block": {False: "off"},
}


def config_from_dict(raw: dict[str, Any]) -> TrainConfig:
    found = secret_in_values(raw)
    if found is not None:
        key, variable = found
        raise ConfigError(
            f"{key}: holds the value of the environment variable {variable}, a secret; the config is saved "
            f"in the run directory (config.yaml). Remove it from the config: the trainer reads {variable} "
            "from the environment."
        )
    speed = raw.get("speed")
    if isinstance(speed, dict):  # YAML reads a bare `off` as false, `on` as true
        raw = {
            **raw,
            "speed": {
                k: SPEED_BARE_WORDS.get(k, {}).get(v, v) if isinstance(v, bool) else v
                for k, v in speed.items()
            },
        }
    raw = dataset_sources.short_form(raw)
    if isinstance(raw.get("notify"), list):  # `notify: [URL, ...]`
        raw = {**raw, "notify": {"urls": raw["notify"]}}
    cfg = _build(TrainConfig, raw, "")
    _check_combinations(cfg)
    dataset_sources.check(cfg, raw)
    _pin_explicit_speed_keys(cfg, raw)
    return cfg


def _pin_explicit_speed_keys(cfg: TrainConfig, raw: dict[str, Any]) -> None:
    """An auto key the config sets is the user's choice: `speed: auto` keeps it (speed.keep)."""
    unknown = [k for k in cfg.speed.keep or [] if k not in SPEED_AUTO_KEYS]
    if unknown:
        raise ConfigError(
            f"speed.keep: {', '.join(map(repr, unknown))} is not a key speed: auto chooses; "
            f"those are: {', '.join(SPEED_AUTO_KEYS)}"
        )
    present = set()
    for key in SPEED_AUTO_KEYS:
        section, name = key.split(".")
        if isinstance(raw.get(section), dict) and name in raw[section]:
            present.add(key)
    cfg.speed.keep = sorted(set(cfg.speed.keep or []) | present) or None


def section_from_dict(cls: type[_Section], raw: Any, prefix: str) -> _Section:
    """A config-like dataclass (fields made as the config's are, with their doc and limits) from a
    mapping, each value checked as a config key is; `prefix` starts each key in an error."""
    return _build(cls, raw, prefix)


def _build(cls: type[_Section], raw: Any, prefix: str) -> _Section:
    where = prefix.rstrip(".") or "the config"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a section (key: value lines), got {_show(raw)}")
    hints = type_hints(cls)
    known = {f.name: f for f in fields(cls)}
    for key in raw:
        if key not in known:
            full = f"{prefix}{key}"
            if SECRET_KEY_PATTERN.search(str(key)):
                raise ConfigError(
                    f"{full}: secrets do not belong in the config (it is saved in the run directory). "
                    "Set the HF_TOKEN environment variable instead."
                )
            raise ConfigError(_unknown_key_message(full, [f"{prefix}{k}" for k in known], str(key)))
    values = {}
    for name, f in known.items():
        full = f"{prefix}{name}"
        hint = hints[name]
        if is_section(hint):
            values[name] = _build(hint, raw.get(name, {}) if raw.get(name) is not None else {}, f"{full}.")
            continue
        element = dataset_sources.section_list_element(hint)
        if element is not None and raw.get(name) is not None:
            values[name] = dataset_sources.build_list(element, raw[name], full, _build)
            continue
        if name not in raw:
            continue
        values[name] = _check_value(full, raw[name], hint, f.metadata)
    return cls(**values)


def _unknown_key_message(full: str, candidates: list[str], key: str) -> str:
    close = difflib.get_close_matches(full, candidates, n=1, cutoff=0.6)
    if not close:
        # the key may be right but in the wrong section
        everywhere = [k for k in all_keys() if k.rsplit(".", 1)[-1] == key]
        close = everywhere[:1]
    hint = f" Did you mean {close[0]!r}?" if close else ""
    valid = ", ".join(c.rsplit(".", 1)[-1] for c in candidates)
    return f"unknown key {_quote(full)}.{hint} Valid keys here: {valid}."


def _check_value(key: str, value: Any, hint: Any, meta: Mapping[str, Any]) -> Any:
    allowed = _allowed_types(hint)
    if value is None:
        if type(None) in allowed:
            return None
        raise ConfigError(
            f"{key}: a value is required ({_type_words(allowed)}); remove the key for the default"
        )
    value = _coerce(key, value, allowed)
    if isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
        is_path = value.startswith(("/", "./", "../", "~"))
        what = "does not exist: no path" if is_path else "is too long: no value"
        raise ConfigError(
            f"{key}: {_quote(value)} {what} here is longer than {MAX_VALUE_CHARS:,} characters (the longest "
            "path the OS takes); check what was pasted or substituted there"
        )
    if isinstance(value, float) and not math.isfinite(value):  # YAML's .nan/.inf, or --set x=nan
        raise ConfigError(f"{key}: {value} is not a finite number; give a number like 1 or 2e-4")
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
        hint_text = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"{key}: {_show(value)} is not one of {', '.join(map(str, choices))}.{hint_text}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        low, high = meta.get("min"), meta.get("max")
        if low is not None and (value < low or (meta.get("exclusive_min") and value == low)):
            bound = f"> {low}" if meta.get("exclusive_min") else f">= {low}"
            raise ConfigError(f"{key}: {_show(value)} is out of range; it must be {bound}")
        if high is not None and value > high:
            raise ConfigError(f"{key}: {_show(value)} is out of range; it must be <= {high}")
    return value


def _allowed_types(hint: Any) -> tuple[Any, ...]:
    if get_origin(hint) is Union or type(hint).__name__ == "UnionType":
        return get_args(hint)
    return (hint,)


def _coerce(key: str, value: Any, allowed: tuple[Any, ...]) -> Any:
    for t in allowed:
        if t is bool and isinstance(value, bool):
            return value
        if t is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if t is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if t is str and isinstance(value, str):
            return value
        if get_origin(t) is list and isinstance(value, list) and all(isinstance(v, str) for v in value):
            if not value:
                if key == "eval.prompts":
                    raise ConfigError(f"{key}: the list is empty; give at least one prompt, or leave it out")
                raise ConfigError(f"{key}: the list is empty; name at least one module or use 'all-linear'")
            return list(value)
    # YAML reads 2e-4 as a string (no dot in the mantissa): accept numbers written that way
    if isinstance(value, str) and (float in allowed or int in allowed):
        try:
            number = float(value)
        except ValueError:
            pass
        else:
            if float in allowed:
                return number
            if number.is_integer():
                return int(number)
    raise ConfigError(f"{key}: expected {_type_words(allowed)}, got {_show(value)}")


def _type_words(allowed: tuple[Any, ...]) -> str:
    words = {bool: "true or false", int: "a whole number", float: "a number", str: "a string"}
    out = []
    for t in allowed:
        if t is type(None):
            continue
        out.append(words.get(t, "a list of strings" if get_origin(t) is list else str(t)))
    return " or ".join(out)


_quote = quoted  # the value as an error quotes it: bounded, however large the value


def _show(value: Any) -> str:
    return f"{_quote(value)} ({type(value).__name__})"


def _check_combinations(cfg: TrainConfig) -> None:
    name = cfg.model.name
    if shapes.is_synthetic(name):
        arch = shapes.synthetic_arch(name)
        if arch not in shapes.shape_names():
            raise ConfigError(
                f"model.name: unknown synthetic architecture {_quote(arch)}; shipped shapes are: "
                f"{', '.join(shapes.shape_names())}"
            )
    elif looks_like_path(name):
        path = Path(name).expanduser()
        if not _exists(name):
            raise ConfigError(
                f"model.name: local path {_quote(name)} does not exist. Give an existing directory with "
                "config.json and weights, a hub id like 'org/name', or synthetic:<arch>."
            )
        if not path.is_dir():
            raise ConfigError(
                f"model.name: {_quote(name)} is a file; point it at the folder that holds config.json and "
                "the weights (the one save_pretrained wrote)."
            )
        if not (path / "config.json").is_file():
            raise ConfigError(
                f"model.name: {_quote(name)} has no config.json; point it at the folder that holds "
                "config.json and the weights (the one save_pretrained wrote)."
            )
    elif not is_hub_id(name):
        raise ConfigError(
            f"model.name: {_quote(name)} is neither a local path, a hub id (org/name) nor synthetic:<arch> "
            f"(a hub id has word characters, dots and dashes, at most {HUB_NAME_CHARS} on each side of the /)"
        )

    ds = cfg.dataset.path
    if cfg.dataset.sources is None:
        dataset_sources.check_path("dataset.path", ds)
    if cfg.dataset.sources is None and ds != "demo" and not looks_like_path(ds) and not is_hub_id(ds):
        raise ConfigError(
            f"dataset.path: {_quote(ds)} is neither an existing file or folder nor a hub id (org/name: word "
            f"characters, dots and dashes, at most {HUB_NAME_CHARS} on each side of the /). Give a "
            ".json/.jsonl/.csv/.parquet file, a folder written by datasets' save_to_disk, a hub id, or "
            "'demo'."
        )
    _check_train_on(cfg)
    targets = cfg.lora.target_modules
    if isinstance(targets, str) and targets != "all-linear":
        raise ConfigError(
            f"lora.target_modules: {_quote(targets)}; give a list of module names (e.g. [q_proj, v_proj]) "
            "or the string 'all-linear'"
        )
    _check_distributed(cfg)
    _check_cost(cfg)
    _check_report_to(cfg)
    _check_eval(cfg)
    preference.check(cfg)
    if cfg.output.sync is not None:
        sync_spec.parse(cfg.output.sync)  # the format; the folder and the token: cockpit.sync.check


def _check_train_on(cfg: TrainConfig) -> None:
    if cfg.dataset.train_on == "answers" and cfg.dataset.format in ("text", "tokens"):
        raise ConfigError(
            f"dataset.train_on: answers, but dataset.format is {cfg.dataset.format}, whose rows have no "
            "answers to tell from prompts. Set dataset.train_on: all (every token trains), or give chat "
            "rows (format: messages) or prompt/completion rows (format: prompt_completion)."
        )


def _check_eval(cfg: TrainConfig) -> None:
    ds, ev = cfg.dataset, cfg.eval
    if ds.eval_split is not None and ds.eval_fraction is not None:
        raise ConfigError(
            f"dataset.eval_split ({_quote(ds.eval_split)}) and dataset.eval_fraction ({ds.eval_fraction}) "
            "are both set; the eval data comes from one of them: keep one"
        )
    if ds.eval_split is not None:
        if not ds.eval_split.strip():
            raise ConfigError("dataset.eval_split: empty; give a split name (e.g. validation) or a file path")
        if looks_like_path(ds.eval_split) or Path(ds.eval_split).suffix.lower() in (
            ".json",
            ".jsonl",
            ".csv",
        ):
            path = Path(ds.eval_split).expanduser()
            if not path.exists():
                raise ConfigError(
                    f"dataset.eval_split: {_quote(ds.eval_split)} does not exist. Give a split of the "
                    "dataset (e.g. validation), an existing .json/.jsonl/.csv/.parquet file, or use "
                    "dataset.eval_fraction: 0.05 to hold out part of the training data."
                )
        if ds.eval_split == ds.split and not looks_like_path(ds.eval_split):
            raise ConfigError(
                f"dataset.eval_split: {_quote(ds.eval_split)} is the split trained on (dataset.split); "
                "eval data must be held out: name another split, or use dataset.eval_fraction"
            )
    has_eval = ds.eval_split is not None or ds.eval_fraction is not None
    if not has_eval and ev.steps is not None:
        raise ConfigError(
            f"eval.steps: {ev.steps}, but there is no eval data; set dataset.eval_fraction (e.g. 0.05) or "
            "dataset.eval_split"
        )
    if not has_eval and ev.early_stop_patience is not None:
        raise ConfigError(
            f"eval.early_stop_patience: {ev.early_stop_patience}, but there is no eval loss to watch; set "
            "dataset.eval_fraction (e.g. 0.05) or dataset.eval_split"
        )
    if not has_eval and isinstance(ev.prompts, int):
        raise ConfigError(
            f"eval.prompts: {ev.prompts} takes that many prompts from the eval split, and there is none; set "
            "dataset.eval_fraction (e.g. 0.05) or dataset.eval_split, or give the prompts as strings"
        )
    if isinstance(ev.prompts, list) and any(not p.strip() for p in ev.prompts):
        raise ConfigError("eval.prompts: one of the prompts is empty; give text for each, or remove it")


def _check_distributed(cfg: TrainConfig) -> None:
    d = cfg.distributed
    if d.node_rank >= d.nnodes:
        raise ConfigError(
            f"distributed.node_rank: {d.node_rank} with nnodes {d.nnodes}; "
            f"node ranks go from 0 to {d.nnodes - 1}"
        )
    if d.rdzv_endpoint is not None and not re.fullmatch(r"\[?[\w.:-]+\]?:\d{1,5}", d.rdzv_endpoint):
        raise ConfigError(
            f"distributed.rdzv_endpoint: {_quote(d.rdzv_endpoint)}; expected host:port of node 0, "
            "e.g. 10.0.0.1:29500"
        )
    if d.nnodes > 1 and d.rdzv_endpoint is None:
        raise ConfigError(
            f"distributed.rdzv_endpoint: required with nnodes {d.nnodes}; set it to host:port of node 0 "
            "(an address every node reaches, e.g. 10.0.0.1:29500), the same on every node"
        )
    if d.nnodes > 1 and d.master_port is not None:
        raise ConfigError(
            "distributed.master_port: only for one machine; with several, the port is part of rdzv_endpoint"
        )
    if cfg.method == "qlora" and cfg.quantization.bits == 8 and d.strategy == "fsdp":
        raise ConfigError(
            "distributed.strategy: fsdp shards 4-bit QLoRA weights only (bitsandbytes' quant_storage); with "
            "quantization.bits 8 use strategy ddp (or auto)"
        )


def _check_cost(cfg: TrainConfig) -> None:
    c = cfg.cost
    if c.max_usd is not None and c.price_per_hour is None:
        raise ConfigError(
            f"cost.max_usd: {c.max_usd:g} needs cost.price_per_hour to measure the cost against it; set the "
            "instance's price, e.g. cost.price_per_hour: 2.49"
        )
    for key in ("on_end", "on_idle"):
        command = getattr(c, key)
        if command is not None and not command.strip():
            raise ConfigError(f"cost.{key}: the command is empty; give a shell command or remove the key")


def _check_report_to(cfg: TrainConfig) -> None:
    """Each tracker named and installed (found without importing it: no torch or tracker import here)."""
    import importlib.util

    names = cfg.report_to or []
    unknown = [n for n in names if n not in REPORTERS]
    if unknown:
        close = difflib.get_close_matches(unknown[0], REPORTERS, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(
            f"report_to: {_quote(unknown[0])} is not a tracker the cockpit feeds; give any of "
            f"{', '.join(REPORTERS)} (or leave report_to out: off).{hint}"
        )
    if len(set(names)) != len(names):
        raise ConfigError("report_to: a tracker is named twice; name each once")
    missing = [n for n in names if all(importlib.util.find_spec(m) is None for m in REPORTER_PACKAGES[n][0])]
    if missing:
        installs = " ".join(REPORTER_PACKAGES[n][1] for n in missing)
        raise ConfigError(
            f"report_to: {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed in this "
            f"environment; install with: pip install {installs} (or drop it from report_to)"
        )


def with_absolute_paths(cfg: TrainConfig, base: Path | None = None) -> TrainConfig:
    """Local paths made absolute against `base` (the user's working directory).

    The trainer runs inside the run directory, so a relative path in the saved config
    would point somewhere else.
    """
    base = Path.cwd() if base is None else base
    if not shapes.is_synthetic(cfg.model.name) and looks_like_path(cfg.model.name):
        cfg.model.name = str((base / Path(cfg.model.name).expanduser()).resolve())
    if cfg.dataset.path != "demo" and looks_like_path(cfg.dataset.path):
        cfg.dataset.path = str((base / Path(cfg.dataset.path).expanduser()).resolve())
    for source in cfg.dataset.sources or []:
        if source.path is not None and source.path != "demo" and looks_like_path(source.path):
            source.path = str((base / Path(source.path).expanduser()).resolve())
    split = cfg.dataset.eval_split
    if split is not None and (
        looks_like_path(split) or Path(split).suffix.lower() in (".json", ".jsonl", ".csv")
    ):
        cfg.dataset.eval_split = str((base / Path(split).expanduser()).resolve())
    if cfg.output.dir:
        cfg.output.dir = str((base / Path(cfg.output.dir).expanduser()).resolve())
    if cfg.export.to:
        cfg.export.to = str((base / Path(cfg.export.to).expanduser()).resolve())
    if cfg.output.sync is not None:
        cfg.output.sync = sync_spec.absolute(cfg.output.sync, base)
    return cfg


def is_hub_id(name: str) -> bool:
    """`org/name` or `name` as the hub spells them: word characters, dots and dashes, each part at
    most HUB_NAME_CHARS."""
    return bool(re.fullmatch(r"[\w.-]+(/[\w.-]+)?", name)) and all(
        len(part) <= HUB_NAME_CHARS for part in name.split("/")
    )


def looks_like_path(name: str) -> bool:
    return name.startswith(("/", "./", "../", "~")) or name in (".", "..") or _exists(name)


def _exists(name: str) -> bool:
    """Whether a path exists; a name the OS cannot take (too long, a NUL byte) does not."""
    try:
        return Path(name).expanduser().exists()
    except (OSError, ValueError):
        return False
