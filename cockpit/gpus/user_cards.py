"""The user's cards.yaml: what they pay per card (prices:) and cards of their own (cards:).

For example:

    prices:
      rtx-4090: 0.44                      # today, "your cards.yaml"
      h100-sxm: {price: 2.49, date: 2026-11-20, source: my provider}
    cards:
      - {id: my-l40s-48, name: My L40S, vram_gib: 44.99, bandwidth_gbs: 864,
         bf16_dense_tflops: 362, price_usd_per_hour: 0.9}
"""

from __future__ import annotations

import os
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Any

import yaml

from cockpit import yaml_text
from cockpit.gpus.card import (
    Card,
    CatalogError,
    card_from_entry,
    check_unique,
    date_of,
    did_you_mean,
    norm,
    show_value,
    user_price,
)

USER_FILE_KEYS = ("prices", "cards")


def user_cards_path() -> Path:
    """$COCKPIT_CONFIG/cards.yaml, else $XDG_CONFIG_HOME/lora-cockpit/cards.yaml, else ~/.config/..."""
    if os.environ.get("COCKPIT_CONFIG"):
        return Path(os.environ["COCKPIT_CONFIG"]).expanduser() / "cards.yaml"
    base = os.environ.get("XDG_CONFIG_HOME") or "~/.config"
    return Path(base).expanduser() / "lora-cockpit" / "cards.yaml"


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if mark is None or problem is None:
        return f": {exc}"
    return f" at line {mark.line + 1}, column {mark.column + 1}: {problem}"


def read_yaml(path: Path, where: str) -> dict[str, Any]:
    """The mapping at the top of a cards.yaml (empty for an empty file). Raises CatalogError."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CatalogError(f"{where}: cannot be read ({exc}). Make it a readable UTF-8 text file.") from None
    try:
        raw = yaml_text.safe_load(text)
    except yaml.YAMLError as exc:
        raise CatalogError(f"{where}: not valid YAML{_yaml_problem(exc)}. Fix the syntax there.") from None
    except ValueError as exc:  # YAML reads 2026-02-30 as a date and fails
        raise CatalogError(f"{where}: a value YAML cannot read ({exc}); check the dates.") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise CatalogError(
            f"{where}: expected a mapping with prices: and/or cards: at the top, got {show_value(raw)}"
        )
    return raw


def apply_user_file(
    cards: list[Card], raw: dict[str, Any], where: str, today: date, warnings: list[str]
) -> list[Card]:
    """`cards` with the user's cards added and their prices set; odd dates go to `warnings`."""
    for key in raw:
        if key not in USER_FILE_KEYS:
            raise CatalogError(
                f"{where}: unknown key {key!r}.{did_you_mean(str(key), USER_FILE_KEYS)} "
                "Valid keys: prices (what you pay per card), cards (cards to add)."
            )
    added = raw.get("cards") or []
    if not isinstance(added, list):
        raise CatalogError(
            f"{where}: cards: expected a list of cards (lines starting with '- id: ...'), "
            f"got {show_value(added)}"
        )
    cards = list(cards)
    for index, entry in enumerate(added):
        card_where = f"{where}: cards[{index}]"
        if isinstance(entry, dict) and isinstance(entry.get("id"), str):
            card_where += f" ({entry['id']})"
        card = card_from_entry(entry, card_where, shipped=False, today=today)
        card = replace(card, figures_source=f"your cards.yaml ({where})")
        check_unique(card, cards, card_where)
        cards.append(card)

    prices = raw.get("prices") or {}
    if not isinstance(prices, dict):
        raise CatalogError(f"{where}: prices: expected a mapping of card id to price, e.g. rtx-4090: 0.44")
    by_id = {card.id: i for i, card in enumerate(cards)}
    seen: dict[str, str] = {}
    for key, value in prices.items():
        key_where = f"{where}: prices.{key}"
        card_id = _price_key_to_id(str(key), cards)
        if card_id is None:
            ids = [c.id for c in cards]
            raise CatalogError(
                f"{key_where}: unknown card id {str(key)!r}.{did_you_mean(str(key), ids)} "
                f"Card ids: {', '.join(ids)}. Fix the id, or add the card under cards:."
            )
        if card_id in seen:
            raise CatalogError(
                f"{key_where}: {card_id} already has a price (under {seen[card_id]!r}); keep one of the two"
            )
        seen[card_id] = str(key)
        price, when, source = user_price(value, key_where, today)
        if date_of(when) > today:
            warnings.append(f"{key_where}: date {when} is after today ({today.isoformat()}); check the date")
        i = by_id[card_id]
        cards[i] = replace(
            cards[i], price_per_hour=price, price_is_default=False, price_date=when, price_source=source
        )
    return cards


def _price_key_to_id(key: str, cards: list[Card]) -> str | None:
    wanted = norm(key)
    for card in cards:
        if wanted in (norm(card.id), norm(card.name)):
            return card.id
    return None
