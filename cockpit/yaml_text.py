"""YAML read through libyaml when PyYAML has it (its PyPI wheels do), else the pure-Python reader.

The same documents, the same errors (yaml.YAMLError); libyaml reads the shipped card catalog in a
few milliseconds where the pure-Python reader takes ~0.1 s of CPU, paid at every `cockpit train`
by the process that then draws the live view.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:  # the checker sees one class it can derive from; libyaml's has the same methods
    SafeLoader = yaml.SafeLoader
else:
    SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(text: str) -> Any:
    """yaml.safe_load(text), through libyaml when there is one."""
    return yaml.load(text, Loader=SafeLoader)
