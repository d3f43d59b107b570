"""Architecture shapes shipped with the project, for `synthetic:<arch>` model specs.

A shape is a Hugging Face `config.json` (as published for the real model) with two
extra keys: `_source` (where the figures come from) and `_params` (the parameter count
of the real model, checked by the tests). A synthetic model is that architecture with
random weights: memory and speed do not depend on the weight values.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

SYNTHETIC_PREFIX = "synthetic:"


def shape_names() -> list[str]:
    folder = resources.files("cockpit") / "data" / "shapes"
    return sorted(p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json"))


def load_shape(name: str) -> dict[str, Any]:
    """The shipped config for `name` (e.g. "llama-2-7b"), including the `_` keys."""
    if name not in shape_names():
        raise KeyError(f"unknown architecture shape {name!r}; shipped shapes are: {', '.join(shape_names())}")
    path = resources.files("cockpit") / "data" / "shapes" / f"{name}.json"
    shape: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return shape


def hf_config_dict(name: str) -> dict[str, Any]:
    """The shape as a plain Hugging Face config dict (without the project's `_` keys)."""
    return {k: v for k, v in load_shape(name).items() if not k.startswith("_")}


def is_synthetic(model_name: str) -> bool:
    return model_name.startswith(SYNTHETIC_PREFIX)


def synthetic_arch(model_name: str) -> str:
    return model_name[len(SYNTHETIC_PREFIX) :]
