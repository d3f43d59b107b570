"""The config against the model it names, before anything starts: the LoRA targets it must have and
the context it was built for. What `cockpit estimate` knows (the model's config.json, read without
torch: cockpit.models.shape) is checked here once, for `train`, `restart`, `estimate` and the picker.
"""

from __future__ import annotations

import difflib

from cockpit.config.schema import ConfigError, TrainConfig
from cockpit.models import shape as modelshape

# modules a LoRA adapter can sit on besides the blocks' linear layers
OTHER_TARGETS = ("lm_head", "embed_tokens")
# families whose linear layers are not named as ModelShape.linear_shapes names them (fused qkv_proj)
UNNAMED_FAMILIES = {"phi3"}
SHAPE_TIMEOUT_S = 5.0


def model_shape(cfg: TrainConfig) -> modelshape.ModelShape | None:
    """The model's shape, or None when its config.json cannot be read here (offline, a family not
    modelled): the trainer then finds out itself, with the weights loaded."""
    try:
        return modelshape.load_shape(cfg.model.name, cfg.model.revision or "main", SHAPE_TIMEOUT_S)
    except modelshape.ShapeError:
        return None


def check_against_model(cfg: TrainConfig, shape: modelshape.ModelShape | None = None) -> list[str]:
    """Raise ConfigError for LoRA targets the model does not have; return warnings (a max_length
    past the model's context). `shape`: given when the caller has it, else read (may be None)."""
    shape = shape if shape is not None else model_shape(cfg)
    if shape is None:
        return []
    if cfg.method != "full":
        unknown = unknown_targets(shape, cfg.lora.target_modules)
        if unknown:
            raise ConfigError(unknown_targets_message(shape, unknown))
    warning = context_warning(shape, cfg.training.max_length)
    return [warning] if warning else []


def target_names(shape: modelshape.ModelShape) -> list[str]:
    return [*shape.linear_shapes(), *OTHER_TARGETS]


def unknown_targets(shape: modelshape.ModelShape, targets: list[str] | str) -> list[str]:
    """Targets no module of the model ends with (peft matches a name or its dotted suffix)."""
    if targets == "all-linear" or shape.model_type in UNNAMED_FAMILIES:
        return []
    names = set(target_names(shape))
    return [t for t in targets if t.rsplit(".", 1)[-1] not in names]


def unknown_targets_message(shape: modelshape.ModelShape, unknown: list[str]) -> str:
    names = target_names(shape)
    close = [m for t in unknown for m in difflib.get_close_matches(t, names, n=1)]
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    return (
        f"lora.target_modules: {', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not a module of "
        f"{shape.name}; its layers are: {', '.join(names)} (or give 'all-linear').{hint}"
    )


def context_warning(shape: modelshape.ModelShape, max_length: int) -> str | None:
    if shape.max_positions is None or max_length <= shape.max_positions:
        return None
    return (
        f"training.max_length: {max_length} is longer than {shape.name}'s context "
        f"(max_position_embeddings {shape.max_positions}); positions past it were never trained and a "
        f"model with learned positions cannot take them. Set training.max_length to {shape.max_positions} "
        "or less unless you extend the context on purpose (rope scaling)."
    )
