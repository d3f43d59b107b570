"""One card of the GPU catalog: its figures, the checks an entry passes, its price and how old it is.

An entry comes from the shipped file (`cockpit/data/gpus.yaml`, every figure stated, a dated
default price range) or from the user's `cards.yaml` (the figures a card needs at least, and
what the user pays). Errors name the file, the key and the fix.

Dense and sparse TFLOPS are separate fields and never stand in for each other: speed
estimates use `bf16_dense_tflops` (BF16 with FP32 accumulation, what training runs);
the 2:4-sparse headline is kept only to be shown for what it is.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass
from datetime import date
from typing import Any

VENDORS = ("nvidia", "amd")
USER_PRICE_SOURCE = "your cards.yaml"
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


def check_unique(card: Card, earlier: list[Card], where: str) -> None:
    """Raise CatalogError when `card`'s id or name is already one of `earlier`'s."""
    for other in earlier:
        # ids are matched ignoring case and punctuation, so "rtx4090" would shadow "rtx-4090"
        if norm(other.id) == norm(card.id):
            raise CatalogError(
                f"{where}.id: {card.id!r} is already a card ({other.name}). Pick another id, or set its "
                f"price under prices: ({other.id}: <USD per hour>)."
            )
        if norm(other.name) == norm(card.name):
            raise CatalogError(
                f"{where}.name: {card.name!r} is already the name of {other.id}; give the card a distinct "
                "name so it can be picked by name."
            )


# ---------------------------------------------------------------- one card


def card_from_entry(entry: Any, where: str, shipped: bool, today: date | None) -> Card:
    if not isinstance(entry, dict):
        raise CatalogError(f"{where}: expected a card (id:, name:, vram_gib:, ...), got {show_value(entry)}")
    for key in entry:
        if key not in CARD_KEYS:
            raise CatalogError(
                f"{where}: unknown key {key!r}.{did_you_mean(str(key), CARD_KEYS)} "
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


def _card_price(entry: dict[str, Any], where: str, shipped: bool, today: date | None) -> dict[str, Any]:
    """The price fields of a card: a dated default range (shipped) or the user's price."""
    price_where = f"{where}.price_usd_per_hour"
    raw = entry["price_usd_per_hour"]
    low = high = None
    if shipped or (isinstance(raw, dict) and ("low" in raw or "high" in raw)):
        low, high = _price_range(raw, price_where)
        price, when, source = round((low + high) / 2, 4), None, None
    else:
        assert today is not None
        price, when, source = user_price(raw, price_where, today)
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
        raise CatalogError(f"{where}: expected text, got {show_value(value)}")
    return value.strip()


def _number(value: Any, where: str, low: float, high: float, unit: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise CatalogError(f"{where}: expected a number in {unit}, got {show_value(value)}")
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
                f"{where}: expected a price in USD per hour like 0.44, got {show_value(value)}"
            ) from None
        raise CatalogError(f"{where}: write the price as a plain number ({value}), without quotes or '$'")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise CatalogError(f"{where}: expected a price in USD per hour like 0.44, got {show_value(value)}")
    if value < 0:
        raise CatalogError(f"{where}: price {value} is negative; give what one GPU costs per hour, e.g. 0.44")
    return float(value)


def _price_range(value: Any, where: str) -> tuple[float, float]:
    if not isinstance(value, dict) or set(value) != {"low", "high"}:
        raise CatalogError(f"{where}: expected a range {{low: 0.29, high: 0.60}}, got {show_value(value)}")
    low, high = _price(value["low"], f"{where}.low"), _price(value["high"], f"{where}.high")
    if low > high:
        raise CatalogError(f"{where}: low ({low}) is above high ({high}); swap them")
    return low, high


def user_price(value: Any, where: str, today: date) -> tuple[float, str, str]:
    """(price, date, source) from `0.44` or `{price: 0.44, date: 2026-11-20, source: ...}`."""
    if not isinstance(value, dict):
        return _price(value, where), today.isoformat(), USER_PRICE_SOURCE
    for key in value:
        if key not in PRICE_ENTRY_KEYS:
            raise CatalogError(
                f"{where}: unknown key {key!r}.{did_you_mean(str(key), PRICE_ENTRY_KEYS)} "
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
            date_of(value.strip())
        except ValueError:
            pass
        else:
            return value.strip()
    raise CatalogError(f"{where}: expected a date like 2026-11-20 or 2026-11, got {show_value(value)}")


def date_of(text: str) -> date:
    """The day a price date names; a month ("2026-11") counts from its first day."""
    match = DATE_PATTERN.fullmatch(text)
    if not match:
        raise ValueError(f"not a date: {text!r}")
    year, month, day = match.groups()
    return date(int(year), int(month), int(day or 1))


# ---------------------------------------------------------------- price age


def price_age_days(card: Card, today: date | None = None) -> int:
    """Days since the card's price was dated (negative for a date after today)."""
    return ((today or date.today()) - date_of(card.price_date)).days


def price_label(card: Card, today: date | None = None) -> str:
    """Where the price comes from and how old it is, e.g. "default price from 2026-11 (29 days old)"."""
    age = age_words(price_age_days(card, today))
    if card.price_is_default:
        return f"default price from {card.price_date} ({age})"
    source = "" if card.price_source == USER_PRICE_SOURCE else f", {card.price_source}"
    return f"your price from {card.price_date} ({age}{source})"


def age_words(days: int) -> str:
    if days == 0:
        return "today"
    if days < 0:
        return f"dated {-days} day{'s' if days < -1 else ''} after today"
    return f"{days} day{'s' if days > 1 else ''} old"


# ---------------------------------------------------------------- helpers


def norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", str(text).lower())


def did_you_mean(key: str, candidates: Any) -> str:
    close = difflib.get_close_matches(key.lower(), [str(c) for c in candidates], n=1, cutoff=0.6)
    return f" Did you mean {close[0]!r}?" if close else ""


def show_value(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"
