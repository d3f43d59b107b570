"""The GPU catalog: the cards the card picker offers, each figure with its source.

The shipped file (`cockpit/data/gpus.yaml`) holds datasheet figures from
shared/reference/gpus.md and default prices: ranges seen in public price lists, dated.
The user's `cards.yaml` (cockpit.gpus.user_cards) sets what they actually pay and adds cards
of their own. One card, its checks and its price's age are in cockpit.gpus.card.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import date
from importlib import resources
from pathlib import Path

import yaml

from cockpit import yaml_text
from cockpit.gpus.card import (
    Card,
    CatalogError,
    age_words,
    card_from_entry,
    check_unique,
    did_you_mean,
    norm,
    price_age_days,
)
from cockpit.gpus.user_cards import apply_user_file, read_yaml, user_cards_path

__all__ = ["Card", "Catalog", "CatalogError", "load_catalog"]

# default prices older than this get a warning: rental prices move weekly
STALE_PRICE_DAYS = 60
SHIPPED_NAME = "cockpit/data/gpus.yaml (shipped)"


@dataclass
class Catalog:
    cards: list[Card]
    warnings: list[str] = field(default_factory=list)
    user_file: Path | None = None

    def ids(self) -> list[str]:
        return [card.id for card in self.cards]

    def find(self, query: str) -> list[Card]:
        """Cards matching `query`: an exact id or name wins, else every card containing it.

        Case, spaces and dashes do not matter ("rtx4090", "RTX 4090", "4090").
        """
        wanted = norm(query)
        if not wanted:
            return []
        exact = [c for c in self.cards if wanted in (norm(c.id), norm(c.name))]
        if exact:
            return exact
        words = re.findall(r"[a-z0-9]+", query.lower())
        found = []
        for card in self.cards:
            text = f"{norm(card.id)} {norm(card.name)}"
            if wanted in text or all(word in text for word in words):
                found.append(card)
        return found

    def get(self, query: str) -> Card:
        """The one card `query` names (id, name or an unambiguous part). Raises CatalogError."""
        found = self.find(query)
        if len(found) == 1:
            return found[0]
        if found:
            raise CatalogError(
                f"card {query!r} matches {len(found)} cards: {', '.join(c.id for c in found)}. "
                "Give one of these ids."
            )
        raise CatalogError(
            f"no card {query!r}.{did_you_mean(query, self.ids())} Card ids: {', '.join(self.ids())}."
        )


# ---------------------------------------------------------------- loading


def load_catalog(user_file: Path | None = None, today: date | None = None) -> Catalog:
    """The shipped cards, then the user's prices and cards. Raises CatalogError.

    `user_file` defaults to `user_cards_path()` when that exists; a file given explicitly
    must exist. `today` dates plain-number prices and ages the defaults.
    """
    today = today or date.today()
    shipped_text = (resources.files("cockpit") / "data" / "gpus.yaml").read_text(encoding="utf-8")
    cards = _parse_shipped(shipped_text)
    warnings: list[str] = []

    path: Path | None
    if user_file is None:
        path = user_cards_path()
        if not path.exists():
            path = None
    else:
        path = Path(user_file).expanduser()
        if not path.exists():
            raise CatalogError(
                f"{path}: not found. Write it with prices: and/or cards: sections, or leave it out to "
                f"use the default prices (your cards file lives at {user_cards_path()})."
            )
    if path is not None:
        raw = read_yaml(path, str(path))
        cards = apply_user_file(cards, raw, str(path), today, warnings)

    defaults = [c for c in cards if c.price_is_default]
    if defaults:
        oldest = max(defaults, key=lambda c: price_age_days(c, today))
        age = price_age_days(oldest, today)
        if age > STALE_PRICE_DAYS:
            warnings.append(
                f"{len(defaults)} cards use default prices from {oldest.price_date} ({age_words(age)}); "
                f"rental prices move weekly. Set what you pay in {path or user_cards_path()} "
                f"under prices: (e.g. {defaults[0].id}: <USD per hour>)"
            )
    cards.sort(key=lambda c: (c.vram_gib, c.price_per_hour, c.id))
    return Catalog(cards=cards, warnings=warnings, user_file=path)


def _parse_shipped(text: str) -> list[Card]:
    try:
        raw = yaml_text.safe_load(text)
    except yaml.YAMLError as exc:
        raise CatalogError(f"{SHIPPED_NAME}: not valid YAML: {exc}. This is a bug in lora-cockpit.") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("cards"), list):
        raise CatalogError(f"{SHIPPED_NAME}: expected figures_source: and a cards: list. This is a bug.")
    source = str(raw.get("figures_source") or "")
    cards: list[Card] = []
    for index, entry in enumerate(raw["cards"]):
        card = card_from_entry(entry, f"{SHIPPED_NAME}: cards[{index}]", shipped=True, today=None)
        card = replace(card, figures_source=source)
        check_unique(card, cards, f"{SHIPPED_NAME}: cards[{index}]")
        cards.append(card)
    return cards


# NVML name -> catalog id, first match wins (the NVL variants are not in the catalog)
CARD_PATTERNS = (
    (r"h200 nvl|h100 nvl", None), (r"h200", "h200-sxm"), (r"h100.*pcie", "h100-pcie"), (r"h100", "h100-sxm"),
    (r"a100.*sxm.*80|a100.*80.*sxm", "a100-80gb-sxm"), (r"a100.*sxm", "a100-40gb-sxm"),
    (r"a100.*80gb", "a100-80gb-pcie"), (r"a100", "a100-40gb-pcie"), (r"b200", "b200"),
    (r"a10g", "a10g"), (r"\ba10\b", "a10"), (r"l40s", "l40s"), (r"\bl4\b", "l4"),
    (r"rtx 6000 ada", "rtx-6000-ada"), (r"rtx a6000", "rtx-a6000"), (r"rtx 3090", "rtx-3090"),
    (r"rtx 4090", "rtx-4090"), (r"rtx 5090", "rtx-5090"),
)  # fmt: skip


def find_card(nvml_name: str | None, catalog: Catalog | None = None) -> Card | None:
    """The catalog card an NVML name denotes ("NVIDIA H200" -> h200-sxm), else None."""
    name = (nvml_name or "").lower()
    for pattern, card_id in CARD_PATTERNS:
        if re.search(pattern, name):
            if card_id is None:
                return None
            catalog = catalog or load_catalog()
            return next((c for c in catalog.cards if c.id == card_id), None)
    return None
