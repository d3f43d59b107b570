"""docs/architecture.md draws the core's rooms as the import contract enforces them."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT

tomllib = pytest.importorskip("tomllib")


def contract_layers() -> list[set[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (layers,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    assert layers["containers"] == ["cockpit"]
    return [{room.strip() for room in row.split("|")} for row in layers["layers"] if row != "__main__"]


def documented_layers() -> list[set[str]]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text.split("<!-- rooms:", 1)[1].split("\n\n", 1)[0]
    floors: dict[int, set[str]] = {}
    for line in table.splitlines():
        row = re.match(r"\| (\d+) \| (.+?) \|", line)
        if row:
            floors.setdefault(int(row.group(1)), set()).update(re.findall(r"`(\w+)/?`", row.group(2)))
    return [floors[f] for f in sorted(floors, reverse=True)]


def test_the_rooms_table_is_the_layers_contract():
    assert documented_layers() == contract_layers()


def test_every_room_of_the_core_is_in_the_contract():
    rooms = {p.name for p in (ROOT / "cockpit").iterdir() if (p / "__init__.py").exists()}
    rooms |= {p.stem for p in (ROOT / "cockpit").glob("*.py") if p.stem not in ("__init__", "__main__")}
    in_contract = set().union(*contract_layers())
    assert rooms == in_contract, (rooms - in_contract, in_contract - rooms)
