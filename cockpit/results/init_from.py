"""`init_from`: the earlier run's adapter a run starts from (SFT, then DPO), found before anything
starts: RUN (its final adapter, else its last complete checkpoint), RUN:best, RUN:N, or an adapter
folder. `cockpit train` puts the folder it found into the run's config, so the trainer loads
exactly that (docs/preference.md)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from cockpit import yaml_text
from cockpit.config.schema import ConfigError
from cockpit.fmt import quoted
from cockpit.paths import cockpit_command
from cockpit.results import targets
from cockpit.run import journal, rundir
from cockpit.run.state import RunState


@dataclass(frozen=True)
class InitAdapter:
    path: Path  # the adapter folder (adapter_config.json, adapter_model.safetensors)
    what: str  # "run 2026...-tiny final", for the events and the start line
    base_model: str | None  # the model the adapter was trained on, as its run's config names it


def resolve(spec: str, model_name: str) -> InitAdapter:
    """The adapter `spec` names, checked against this config's model. Raises ConfigError."""
    folder = Path(spec).expanduser()
    if _is_adapter(folder):
        return InitAdapter(folder.resolve(), f"adapter {folder}", _adapter_base(folder))
    run_spec, checkpoint = _split(spec)
    try:
        run = rundir.find(run_spec)
    except rundir.RunNotFound as exc:
        raise ConfigError(
            f"init_from: {quoted(spec)}: {exc}; give a run id, RUN:best, RUN:N or an adapter folder "
            "(one with adapter_config.json)"
        ) from None
    state = journal.fold(run.events_path, RunState(run_id=run.run_id))
    try:
        target = targets.resolve(run, state, checkpoint, None)
    except targets.TargetError as exc:
        raise ConfigError(f"init_from: {exc}".replace("--checkpoint", "init_from RUN:")) from None
    if target.kind != "adapter":
        raise ConfigError(
            f"init_from: run {run.run_id} trained the whole model (method full): there is no adapter to "
            f"start from. Give its folder as model.name instead ({target.path})"
        )
    base = _run_model(run)
    if base is not None and not _same_model(base, model_name):
        raise ConfigError(
            f"init_from: run {run.run_id} trained an adapter of {quoted(base)}, but this config's model.name "
            f"is {quoted(model_name)}: an adapter fits only the model it was trained on. Set model.name: "
            f"{base}"
        )
    return InitAdapter(target.path, f"run {run.run_id} {target.label}", base)


def resolved(cfg_init_from: str, model_name: str) -> tuple[str, str]:
    """(the adapter folder, what it is) for the run's config and the start line."""
    found = resolve(cfg_init_from, model_name)
    return str(found.path), found.what


def _same_model(a: str, b: str) -> bool:
    """The same name, or the same local folder however it was written."""
    if a == b:
        return True
    try:
        pa, pb = Path(a).expanduser(), Path(b).expanduser()
        return pa.exists() and pb.exists() and pa.resolve() == pb.resolve()
    except (OSError, ValueError):
        return False


def _split(spec: str) -> tuple[str, str | None]:
    """RUN:best -> (RUN, best); RUN:120 -> (RUN, 120); RUN:final or RUN -> (RUN, None)."""
    if ":" in spec:
        head, tail = spec.rsplit(":", 1)
        if tail == "best" or tail.isdigit():
            return head, tail
        if tail == "final":
            return head, None
        raise ConfigError(
            f"init_from: {quoted(spec)}: after the ':' give best, final or a step number (e.g. RUN:120); "
            f"`{cockpit_command()} runs` lists runs and their checkpoints"
        )
    return spec, None


def _is_adapter(folder: Path) -> bool:
    try:
        return (folder / "adapter_config.json").is_file()
    except OSError:
        return False


def _adapter_base(folder: Path) -> str | None:
    try:
        data = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    base = data.get("base_model_name_or_path") if isinstance(data, dict) else None
    return base if isinstance(base, str) else None


def _run_model(run: rundir.RunDir) -> str | None:
    try:
        cfg = yaml_text.safe_load(run.config_path.read_text(encoding="utf-8")) or {}
    except (OSError, ValueError):
        return None
    model = cfg.get("model") if isinstance(cfg, dict) else None
    name = model.get("name") if isinstance(model, dict) else None
    return name if isinstance(name, str) else None
