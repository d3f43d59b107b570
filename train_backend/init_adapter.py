"""`init_from`: an earlier run's adapter loaded onto the base as the adapter this run trains (SFT,
then DPO). `cockpit train` resolved the run into the adapter's folder; a config edited by hand
that still names a run is resolved here the same way (cockpit.results.init_from)."""

from __future__ import annotations

from pathlib import Path

from cockpit.config.schema import TrainConfig
from train_backend.errors import ModelLoadError


def folder(cfg: TrainConfig) -> Path:
    """The adapter folder `init_from` names."""
    from cockpit.results.init_from import resolve

    spec = str(cfg.init_from)
    path = Path(spec).expanduser()
    if (path / "adapter_config.json").is_file():
        return path
    return resolve(spec, cfg.model.name).path


def attach(cfg: TrainConfig, model):
    """The base with the init_from adapter, trainable (peft's PeftModel, adapter 'default'); the
    model as it is without init_from."""
    if not cfg.init_from:
        return model
    from peft import PeftModel

    path = folder(cfg)
    try:
        return PeftModel.from_pretrained(model, str(path), is_trainable=True)
    except Exception as exc:  # a folder of another model's adapter, or a damaged one
        raise ModelLoadError(
            f"init_from: the adapter in {path} does not load onto {cfg.model.name}: {type(exc).__name__}: "
            f"{str(exc)[:400]}. Give a run (or adapter folder) trained on this model"
        ) from exc
