"""The GPU catalog: the cards the card picker offers, each figure with its source.

The shipped file (`cockpit/data/gpus.yaml`) holds datasheet figures from
shared/reference/gpus.md and default prices: ranges seen in public price lists, dated.
The user's `cards.yaml` sets what they actually pay and adds cards of their own:

    prices:
      rtx-4090: 0.44                      # today, "your cards.yaml"
      h100-sxm: {price: 2.49, date: 2026-11-20, source: my provider}
    cards:
      - {id: my-l40s-48, name: My L40S, vram_gib: 44.99, bandwidth_gbs: 864,
         bf16_dense_tflops: 362, price_usd_per_hour: 0.9}

Dense and sparse TFLOPS are separate fields and never stand in for each other: speed
estimates use `bf16_dense_tflops` (BF16 with FP32 accumulation, what training runs);
the 2:4-sparse headline is kept only to be shown for what it is.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from dataclasses import dataclass, field, replace
from datetime import date
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

VENDORS = ("nvidia", "amd")
USER_PRICE_SOURCE = "your cards.yaml"
# default prices older than this get a warning: rental prices move weekly
STALE_PRICE_DAYS = 60
SHIPPED_NAME = "cockpit/data/gpus.yaml (shipped)"
ID_PATTERN = re.compile(r"[a-z0-9][a-z0-9._-]*")
DATE_PATTERN = re.compile(r"(\d{4})-(\d{2})(?:-(\d{2}))?")

# number fields: (exclusive lower bound, inclusive upper bound, unit for messages)
NUMBER_FIELDS: dict[str, tuple[float, float, str]] = {
    "vram_gib": (0, 4096, "GiB"),
    "bandwidth_gbs": (0, 100_000, "GB/s"),
    "bf16_dense_tflops": (0, 100_000, "TFLOPS"),
    "bf16_sparse_tflops": (0, 200_000, "TFLOPS"),
    "fp16_acc_fp16_tflops": (0, 200_000, "TFLOPS"),
    "fp8_dense_tflops": (0, 200_000, "TFLOPS"),
    "tdp_w": (0, 10_000, "W"),
    "measured_bf16_tflops": (0, 100_000, "TFLOPS"),
}
TEXT_FIELDS = (
    "name",
    "vendor",
    "compute_capability",
    "memory_type",
    "vram_note",
    "tflops_note",
    "nvlink",
    "tdp_note",
    "measured_bf16_source",
    "article_corrections",
    "price_note",
)
PRICE_FIELDS = ("price_usd_per_hour", "price_date", "price_source")
CARD_KEYS = ("id", *TEXT_FIELDS, *NUMBER_FIELDS, *PRICE_FIELDS)
REQUIRED_USER = ("id", "name", "vram_gib", "bandwidth_gbs", "bf16_dense_tflops", "price_usd_per_hour")
# the shipped file states every figure, "no" included (as null), so nothing is left to a default
REQUIRED_SHIPPED = (
    *REQUIRED_USER,
    "vendor",
    "compute_capability",
    "memory_type",
    "vram_note",
    "tdp_w",
    "price_date",
    "price_source",
)
STATED_SHIPPED = ("bf16_sparse_tflops", "fp16_acc_fp16_tflops", "fp8_dense_tflops", "nvlink")
USER_FILE_KEYS = ("prices", "cards")
PRICE_ENTRY_KEYS = ("price", "date", "source")


class CatalogError(ValueError):
    """A catalog file that cannot be used; the message names the file, the key and the fix."""


@dataclass(frozen=True)
class Card:
    id: str
    name: str
    vram_gib: float
    bandwidth_gbs: float
    bf16_dense_tflops: float
    # the price the picker uses: the user's if set, else the middle of the default range
    price_per_hour: float
    price_is_default: bool
    price_date: str
    price_source: str
    vendor: str | None = None
    compute_capability: str | None = None
    memory_type: str | None = None
    vram_note: str | None = None
    bf16_sparse_tflops: float | None = None
    fp16_acc_fp16_tflops: float | None = None
    fp8_dense_tflops: float | None = None
    tflops_note: str | None = None
    nvlink: str | None = None
    tdp_w: float | None = None
    tdp_note: str | None = None
    measured_bf16_tflops: float | None = None
    measured_bf16_source: str | None = None
    article_corrections: str | None = None
    price_low_usd_per_hour: float | None = None
    price_high_usd_per_hour: float | None = None
    price_note: str | None = None
    figures_source: str = ""


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
        wanted = _norm(query)
        if not wanted:
            return []
        exact = [c for c in self.cards if wanted in (_norm(c.id), _norm(c.name))]
        if exact:
            return exact
        words = re.findall(r"[a-z0-9]+", query.lower())
        found = []
        for card in self.cards:
            text = f"{_norm(card.id)} {_norm(card.name)}"
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
            f"no card {query!r}.{_did_you_mean(query, self.ids())} Card ids: {', '.join(self.ids())}."
        )


# ---------------------------------------------------------------- loading


def user_cards_path() -> Path:
    """$COCKPIT_CONFIG/cards.yaml, else $XDG_CONFIG_HOME/lora-cockpit/cards.yaml, else ~/.config/..."""
    if os.environ.get("COCKPIT_CONFIG"):
        return Path(os.environ["COCKPIT_CONFIG"]).expanduser() / "cards.yaml"
    base = os.environ.get("XDG_CONFIG_HOME") or "~/.config"
    return Path(base).expanduser() / "lora-cockpit" / "cards.yaml"


def load_catalog(user_file: Path | None = None, today: date | None = None) -> Catalog:
    """The shipped cards, then the user's prices and cards. Raises CatalogError.

    `user_file` defaults to `user_cards_path()` when that exists; a file given explicitly
    must exist. `today` dates plain-number prices and ages the defaults.
    """
    today = today or date.today()
    shipped_text = (resources.files("cockpit") / "data" / "gpus.yaml").read_text(encoding="utf-8")
    cards = _parse_shipped(shipped_text)
    warnings: list[str] = []

    if user_file is None:
        path: Path | None = user_cards_path()
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
        raw = _read_yaml(path, str(path))
        cards = _apply_user_file(cards, raw, str(path), today, warnings)

    defaults = [c for c in cards if c.price_is_default]
    if defaults:
        oldest = max(defaults, key=lambda c: price_age_days(c, today))
        age = price_age_days(oldest, today)
        if age > STALE_PRICE_DAYS:
            warnings.append(
                f"{len(defaults)} cards use default prices from {oldest.price_date} ({_age_words(age)}); "
                f"rental prices move weekly. Set what you pay in {path or user_cards_path()} "
                f"under prices: (e.g. {defaults[0].id}: <USD per hour>)"
            )
    cards.sort(key=lambda c: (c.vram_gib, c.price_per_hour, c.id))
    return Catalog(cards=cards, warnings=warnings, user_file=path)


def _parse_shipped(text: str) -> list[Card]:
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CatalogError(f"{SHIPPED_NAME}: not valid YAML: {exc}. This is a bug in lora-cockpit.") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("cards"), list):
        raise CatalogError(f"{SHIPPED_NAME}: expected figures_source: and a cards: list. This is a bug.")
    source = str(raw.get("figures_source") or "")
    cards: list[Card] = []
    for index, entry in enumerate(raw["cards"]):
        card = _card_from_entry(entry, f"{SHIPPED_NAME}: cards[{index}]", shipped=True, today=None)
        card = replace(card, figures_source=source)
        _check_unique(card, cards, f"{SHIPPED_NAME}: cards[{index}]")
        cards.append(card)
    return cards


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if mark is None or problem is None:
        return f": {exc}"
    return f" at line {mark.line + 1}, column {mark.column + 1}: {problem}"


def _read_yaml(path: Path, where: str) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CatalogError(f"{where}: cannot be read ({exc}). Make it a readable UTF-8 text file.") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CatalogError(f"{where}: not valid YAML{_yaml_problem(exc)}. Fix the syntax there.") from None
    except ValueError as exc:  # YAML reads 2026-02-30 as a date and fails
        raise CatalogError(f"{where}: a value YAML cannot read ({exc}); check the dates.") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise CatalogError(
            f"{where}: expected a mapping with prices: and/or cards: at the top, got {_show(raw)}"
        )
    return raw


def _apply_user_file(
    cards: list[Card], raw: dict, where: str, today: date, warnings: list[str]
) -> list[Card]:
    for key in raw:
        if key not in USER_FILE_KEYS:
            raise CatalogError(
                f"{where}: unknown key {key!r}.{_did_you_mean(str(key), USER_FILE_KEYS)} "
                "Valid keys: prices (what you pay per card), cards (cards to add)."
            )
    added = raw.get("cards") or []
    if not isinstance(added, list):
        raise CatalogError(
            f"{where}: cards: expected a list of cards (lines starting with '- id: ...'), got {_show(added)}"
        )
    cards = list(cards)
    for index, entry in enumerate(added):
        card_where = f"{where}: cards[{index}]"
        if isinstance(entry, dict) and isinstance(entry.get("id"), str):
            card_where += f" ({entry['id']})"
        card = _card_from_entry(entry, card_where, shipped=False, today=today)
        card = replace(card, figures_source=f"your cards.yaml ({where})")
        _check_unique(card, cards, card_where)
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
                f"{key_where}: unknown card id {str(key)!r}.{_did_you_mean(str(key), ids)} "
                f"Card ids: {', '.join(ids)}. Fix the id, or add the card under cards:."
            )
        if card_id in seen:
            raise CatalogError(
                f"{key_where}: {card_id} already has a price (under {seen[card_id]!r}); keep one of the two"
            )
        seen[card_id] = str(key)
        price, when, source = _user_price(value, key_where, today)
        if _date_of(when) > today:
            warnings.append(f"{key_where}: date {when} is after today ({today.isoformat()}); check the date")
        i = by_id[card_id]
        cards[i] = replace(
            cards[i], price_per_hour=price, price_is_default=False, price_date=when, price_source=source
        )
    return cards


def _price_key_to_id(key: str, cards: list[Card]) -> str | None:
    wanted = _norm(key)
    for card in cards:
        if wanted in (_norm(card.id), _norm(card.name)):
            return card.id
    return None


def _check_unique(card: Card, earlier: list[Card], where: str) -> None:
    for other in earlier:
        # ids are matched ignoring case and punctuation, so "rtx4090" would shadow "rtx-4090"
        if _norm(other.id) == _norm(card.id):
            raise CatalogError(
                f"{where}.id: {card.id!r} is already a card ({other.name}). Pick another id, or set its "
                f"price under prices: ({other.id}: <USD per hour>)."
            )
        if _norm(other.name) == _norm(card.name):
            raise CatalogError(
                f"{where}.name: {card.name!r} is already the name of {other.id}; give the card a distinct "
                "name so it can be picked by name."
            )


# ---------------------------------------------------------------- one card


def _card_from_entry(entry: Any, where: str, shipped: bool, today: date | None) -> Card:
    if not isinstance(entry, dict):
        raise CatalogError(f"{where}: expected a card (id:, name:, vram_gib:, ...), got {_show(entry)}")
    for key in entry:
        if key not in CARD_KEYS:
            raise CatalogError(
                f"{where}: unknown key {key!r}.{_did_you_mean(str(key), CARD_KEYS)} "
                f"Valid keys: {', '.join(CARD_KEYS)}."
            )
    required = REQUIRED_SHIPPED if shipped else REQUIRED_USER
    missing = [k for k in required if entry.get(k) is None]
    if missing:
        raise CatalogError(
            f"{where}: missing {', '.join(missing)}. A card needs at least: {', '.join(required)} "
            "(vram_gib as the driver reports it, bf16_dense_tflops without sparsity)."
        )
    if shipped:
        unstated = [k for k in STATED_SHIPPED if k not in entry]
        if unstated:
            raise CatalogError(f"{where}: state {', '.join(unstated)} (null where the card has none)")

    card_id = entry["id"]
    if not isinstance(card_id, str) or not ID_PATTERN.fullmatch(card_id):
        raise CatalogError(
            f"{where}.id: {card_id!r} is not a valid id; use lowercase letters, digits, '-', '.' and '_', "
            "e.g. my-l40s-48"
        )
    values: dict[str, Any] = {"id": card_id}
    for key in TEXT_FIELDS:
        value = entry.get(key)
        if value is None:
            values[key] = None
        elif key == "compute_capability" and isinstance(value, (int, float)) and not isinstance(value, bool):
            values[key] = str(value)  # YAML reads 8.9 as a number
        else:
            values[key] = _text(value, f"{where}.{key}")
    if values["vendor"] is not None and values["vendor"] not in VENDORS:
        raise CatalogError(f"{where}.vendor: {values['vendor']!r} is not one of {', '.join(VENDORS)}")
    for key, (low, high, unit) in NUMBER_FIELDS.items():
        value = entry.get(key)
        values[key] = None if value is None else _number(value, f"{where}.{key}", low, high, unit)

    dense, sparse = values["bf16_dense_tflops"], values["bf16_sparse_tflops"]
    if sparse is not None and sparse < dense:
        raise CatalogError(
            f"{where}.bf16_sparse_tflops: {sparse} is below bf16_dense_tflops ({dense}). Dense is the rate "
            "without 2:4 sparsity, half the sparse headline; check the two are not swapped."
        )
    measured = values["measured_bf16_tflops"]
    if measured is not None and measured > dense:
        raise CatalogError(
            f"{where}.measured_bf16_tflops: {measured} is above the dense spec ({dense}). A healthy card "
            "reaches 70-90% of dense; more usually means a matmul of zeros or a sparse spec. Measure "
            "with random data."
        )

    values.update(_card_price(entry, where, shipped, today))
    return Card(**values)


def _card_price(entry: dict, where: str, shipped: bool, today: date | None) -> dict[str, Any]:
    """The price fields of a card: a dated default range (shipped) or the user's price."""
    price_where = f"{where}.price_usd_per_hour"
    raw = entry["price_usd_per_hour"]
    low = high = None
    if shipped or (isinstance(raw, dict) and ("low" in raw or "high" in raw)):
        low, high = _price_range(raw, price_where)
        price, when, source = round((low + high) / 2, 4), None, None
    else:
        assert today is not None
        price, when, source = _user_price(raw, price_where, today)
    if entry.get("price_date") is not None:
        when = _date_text(entry["price_date"], f"{where}.price_date")
    if entry.get("price_source") is not None:
        source = _text(entry["price_source"], f"{where}.price_source")
    if not shipped:
        assert today is not None
        when = when or today.isoformat()
        source = source or USER_PRICE_SOURCE
    return {
        "price_per_hour": price,
        "price_is_default": shipped,
        "price_date": when,
        "price_source": source,
        "price_low_usd_per_hour": low,
        "price_high_usd_per_hour": high,
    }


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise CatalogError(f"{where}: expected text, got {_show(value)}")
    return value.strip()


def _number(value: Any, where: str, low: float, high: float, unit: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise CatalogError(f"{where}: expected a number in {unit}, got {_show(value)}")
    if not low < value <= high:
        raise CatalogError(
            f"{where}: {value} {unit} is out of range; it must be > {low} and <= {high} {unit}"
        )
    return float(value)


def _price(value: Any, where: str) -> float:
    if isinstance(value, str):
        try:
            value = float(value.strip().lstrip("$"))
        except ValueError:
            raise CatalogError(
                f"{where}: expected a price in USD per hour like 0.44, got {_show(value)}"
            ) from None
        raise CatalogError(f"{where}: write the price as a plain number ({value}), without quotes or '$'")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise CatalogError(f"{where}: expected a price in USD per hour like 0.44, got {_show(value)}")
    if value < 0:
        raise CatalogError(f"{where}: price {value} is negative; give what one GPU costs per hour, e.g. 0.44")
    return float(value)


def _price_range(value: Any, where: str) -> tuple[float, float]:
    if not isinstance(value, dict) or set(value) != {"low", "high"}:
        raise CatalogError(f"{where}: expected a range {{low: 0.29, high: 0.60}}, got {_show(value)}")
    low, high = _price(value["low"], f"{where}.low"), _price(value["high"], f"{where}.high")
    if low > high:
        raise CatalogError(f"{where}: low ({low}) is above high ({high}); swap them")
    return low, high


def _user_price(value: Any, where: str, today: date) -> tuple[float, str, str]:
    """(price, date, source) from `0.44` or `{price: 0.44, date: 2026-11-20, source: ...}`."""
    if not isinstance(value, dict):
        return _price(value, where), today.isoformat(), USER_PRICE_SOURCE
    for key in value:
        if key not in PRICE_ENTRY_KEYS:
            raise CatalogError(
                f"{where}: unknown key {key!r}.{_did_you_mean(str(key), PRICE_ENTRY_KEYS)} "
                "Write a number (0.44) or {price: 0.44, date: 2026-11-20, source: my provider}."
            )
    if value.get("price") is None:
        raise CatalogError(f"{where}: missing price; write {{price: 0.44, date: 2026-11-20, source: ...}}")
    price = _price(value["price"], f"{where}.price")
    when = today.isoformat() if value.get("date") is None else _date_text(value["date"], f"{where}.date")
    source = USER_PRICE_SOURCE if value.get("source") is None else _text(value["source"], f"{where}.source")
    return price, when, source


def _date_text(value: Any, where: str) -> str:
    if isinstance(value, date):  # YAML reads 2026-11-20 as a date (and with a time, a datetime)
        return date(value.year, value.month, value.day).isoformat()
    if isinstance(value, str):
        try:
            _date_of(value.strip())
        except ValueError:
            pass
        else:
            return value.strip()
    raise CatalogError(f"{where}: expected a date like 2026-11-20 or 2026-11, got {_show(value)}")


def _date_of(text: str) -> date:
    """The day a price date names; a month ("2026-11") counts from its first day."""
    match = DATE_PATTERN.fullmatch(text)
    if not match:
        raise ValueError(f"not a date: {text!r}")
    year, month, day = match.groups()
    return date(int(year), int(month), int(day or 1))


# ---------------------------------------------------------------- price age


def price_age_days(card: Card, today: date | None = None) -> int:
    """Days since the card's price was dated (negative for a date after today)."""
    return ((today or date.today()) - _date_of(card.price_date)).days


def price_label(card: Card, today: date | None = None) -> str:
    """Where the price comes from and how old it is, e.g. "default price from 2026-11 (29 days old)"."""
    age = _age_words(price_age_days(card, today))
    if card.price_is_default:
        return f"default price from {card.price_date} ({age})"
    source = "" if card.price_source == USER_PRICE_SOURCE else f", {card.price_source}"
    return f"your price from {card.price_date} ({age}{source})"


def _age_words(days: int) -> str:
    if days == 0:
        return "today"
    if days < 0:
        return f"dated {-days} day{'s' if days < -1 else ''} after today"
    return f"{days} day{'s' if days > 1 else ''} old"


# ---------------------------------------------------------------- helpers


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", str(text).lower())


def _did_you_mean(key: str, candidates: Any) -> str:
    close = difflib.get_close_matches(key.lower(), [str(c) for c in candidates], n=1, cutoff=0.6)
    return f" Did you mean {close[0]!r}?" if close else ""


def _show(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"
