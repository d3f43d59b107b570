"""The GPU catalog: shipped figures match shared/reference/gpus.md, user prices and cards
override and extend it, and bad input gets an error that names the file, the key and the fix."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import FrozenInstanceError
from datetime import date
from pathlib import Path

import pytest
from conftest import ROOT

from cockpit.gpus.card import USER_PRICE_SOURCE, Card, CatalogError, price_age_days, price_label
from cockpit.gpus.catalog import load_catalog
from cockpit.gpus.user_cards import user_cards_path

TODAY = date(2026, 11, 30)

# shared/reference/gpus.md, one row per card (merged PCIe/SXM rows split):
# id: (box GB, memory type, GB/s, dense BF16, sparse, FP8 dense, TDP W, compute cap., $/h low, high)
REFERENCE = {
    "rtx-3090": (24, "GDDR6X", 936, 71, 142, None, 350, "8.6", 0.22, 0.39),
    "rtx-4090": (24, "GDDR6X", 1008, 165, 330, 330, 450, "8.9", 0.29, 0.60),
    "rtx-5090": (32, "GDDR7", 1792, 209.5, 419, 419, 575, "12.0", 0.69, 1.22),
    "rtx-a6000": (48, "GDDR6", 768, 155, 310, None, 300, "8.6", 0.41, 0.82),
    "rtx-6000-ada": (48, "GDDR6", 960, 364, 728, 728, 300, "8.9", 0.64, 0.73),
    "a10": (24, "GDDR6", 600, 125, 250, None, 150, "8.6", 0.86, 0.86),
    "a10g": (24, "GDDR6", 600, 70, None, None, 300, "8.6", 1.01, 1.01),
    "l4": (24, "GDDR6", 300, 121, 242, 242, 72, "8.9", 0.44, 0.80),
    "l40s": (48, "GDDR6", 864, 362, 733, 733, 350, "8.9", 0.79, 1.95),
    "a100-40gb-pcie": (40, "HBM2", 1555, 312, 624, None, 250, "8.0", 1.00, 1.99),
    "a100-40gb-sxm": (40, "HBM2", 1555, 312, 624, None, 400, "8.0", 1.00, 1.99),
    "a100-80gb-pcie": (80, "HBM2e", 1935, 312, 624, None, 300, "8.0", 1.14, 1.79),
    "a100-80gb-sxm": (80, "HBM2e", 2039, 312, 624, None, 400, "8.0", 1.14, 1.79),
    "h100-pcie": (80, "HBM2e", 2000, 756, 1513, 1513, 350, "9.0", 1.99, 3.29),
    "h100-sxm": (80, "HBM3", 3350, 989, 1979, 1979, 700, "9.0", 2.40, 4.29),
    "h200-sxm": (141, "HBM3e", 4800, 989, 1979, 1979, 700, "9.0", 3.45, 6.31),
    "b200": (180, "HBM3e", 8000, 2250, 4500, 4500, 1000, "10.0", 5.00, 6.79),
    "mi300x": (192, "HBM3", 5300, 1307, 2615, 2615, 750, "gfx942", 1.71, 3.45),
}
NVLINK = {
    "rtx-3090": "bridge 112.5 GB/s",
    "rtx-a6000": "bridge 112.5 GB/s",
    "a100-40gb-pcie": "bridge",
    "a100-40gb-sxm": "600 GB/s",
    "a100-80gb-pcie": "bridge 600 GB/s",
    "a100-80gb-sxm": "600 GB/s",
    "h100-pcie": "bridge 600 GB/s",
    "h100-sxm": "900 GB/s",
    "h200-sxm": "900 GB/s",
    "b200": "1800 GB/s",
    "mi300x": "Infinity Fabric 896 GB/s",
}


@pytest.fixture(autouse=True)
def no_user_file(tmp_path, monkeypatch):
    """Each test starts with an empty config folder, never the developer's own cards.yaml."""
    monkeypatch.setenv("COCKPIT_CONFIG", str(tmp_path / "config"))


@pytest.fixture
def shipped():
    return load_catalog(today=TODAY)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cards.yaml"
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------- shipped figures


def test_every_reference_card_is_shipped_once(shipped):
    assert sorted(shipped.ids()) == sorted(REFERENCE)
    assert len(set(shipped.ids())) == len(shipped.cards)


@pytest.mark.parametrize("card_id", sorted(REFERENCE))
def test_figures_match_the_reference(shipped, card_id):
    box_gb, memory, bandwidth, dense, sparse, fp8, tdp, cc, low, high = REFERENCE[card_id]
    card = shipped.get(card_id)
    assert card.memory_type == memory
    assert card.bandwidth_gbs == bandwidth
    assert card.bf16_dense_tflops == dense
    assert card.bf16_sparse_tflops == sparse
    assert card.fp8_dense_tflops == fp8
    assert card.tdp_w == tdp
    assert card.compute_capability == cc
    assert card.vendor == ("amd" if card_id == "mi300x" else "nvidia")
    assert card.nvlink == NVLINK.get(card_id)
    assert (card.price_low_usd_per_hour, card.price_high_usd_per_hour) == (low, high)
    # the driver reports a little less than the box (GiB vs GB, ECC), never more
    assert 0.9 * box_gb * 1e9 / 2**30 <= card.vram_gib <= box_gb


def test_spot_checks_from_the_brief(shipped):
    rtx4090 = shipped.get("rtx-4090")
    assert (rtx4090.bandwidth_gbs, rtx4090.bf16_dense_tflops, rtx4090.bf16_sparse_tflops) == (1008, 165, 330)
    h100 = shipped.get("h100-sxm")
    assert (h100.bf16_dense_tflops, h100.bf16_sparse_tflops) == (989, 1979)
    assert shipped.get("a10").bf16_dense_tflops == 125
    assert shipped.get("mi300x").bf16_dense_tflops == 1307
    assert shipped.get("mi300x").compute_capability == "gfx942"
    assert shipped.get("b200").bf16_dense_tflops == 2250
    assert shipped.get("rtx-3090").fp16_acc_fp16_tflops == 142


@pytest.mark.parametrize("card_id", sorted(REFERENCE))
def test_vram_is_what_the_driver_reports(shipped, card_id):
    card = shipped.get(card_id)
    mib = re.search(r"reports (\d+) MiB", card.vram_note or "")
    if mib:
        assert card.vram_gib == round(int(mib.group(1)) / 1024, 2)
    else:
        reported = re.search(r"reports (\d+) B\b", card.vram_note or "")
        assert reported, f"{card_id}: vram_note must give the reported figure: {card.vram_note!r}"
        assert card.vram_gib == round(int(reported.group(1)) / 2**30, 2)


def test_driver_figures_from_the_brief(shipped):
    assert shipped.get("h100-sxm").vram_gib == pytest.approx(79.6, abs=0.1)
    assert shipped.get("h200-sxm").vram_gib == pytest.approx(143771 / 1024, abs=0.01)


def test_dense_and_sparse_are_never_mixed(shipped):
    for card in shipped.cards:
        if card.bf16_sparse_tflops is None:
            assert card.tflops_note, f"{card.id}: no sparse figure needs a note"
            continue
        assert card.bf16_sparse_tflops != card.bf16_dense_tflops, card.id
        if card.id == "l40s":
            # the table prints 362 / 733, not exactly 2x: the card says so
            assert "724" in card.tflops_note
            continue
        # sparse is 2x dense; the table rounds each figure, so 2x may be off by one
        assert abs(card.bf16_sparse_tflops - 2 * card.bf16_dense_tflops) <= 1, card.id


def test_approximate_and_unofficial_figures_say_so(shipped):
    assert "approximate" in shipped.get("rtx-6000-ada").tflops_note
    assert "unofficial" in shipped.get("a10g").tflops_note
    assert "FP16 accumulation" in shipped.get("rtx-3090").tflops_note


def test_measured_rates_carry_their_source(shipped):
    measured = {c.id: c.measured_bf16_tflops for c in shipped.cards if c.measured_bf16_tflops}
    assert measured == {"a100-40gb-sxm": 271, "a100-80gb-sxm": 271, "h100-sxm": 794, "h200-sxm": 783}
    for card_id in measured:
        card = shipped.get(card_id)
        assert "random data" in card.measured_bf16_source
        assert card.measured_bf16_tflops < card.bf16_dense_tflops
    assert "769-798" in shipped.get("h200-sxm").measured_bf16_source


def test_article_corrections(shipped):
    assert '"35.6' in shipped.get("rtx-3090").article_corrections
    assert '"82.6' in shipped.get("rtx-4090").article_corrections
    assert "shader" in shipped.get("rtx-4090").article_corrections
    assert "dense" in shipped.get("a10").article_corrections


def test_default_prices_are_dated_midpoints(shipped):
    for card in shipped.cards:
        assert card.price_is_default
        assert card.price_date == "2026-11"
        assert "public on-demand price lists" in card.price_source
        assert card.figures_source == "shared/reference/gpus.md"
        low, high = card.price_low_usd_per_hour, card.price_high_usd_per_hour
        assert card.price_per_hour == pytest.approx((low + high) / 2)
    assert shipped.get("rtx-4090").price_per_hour == pytest.approx(0.445)


def test_sorted_by_vram_then_price(shipped):
    keys = [(c.vram_gib, c.price_per_hour) for c in shipped.cards]
    assert keys == sorted(keys)
    assert shipped.cards[-1].id == "mi300x"


def test_cards_are_frozen(shipped):
    with pytest.raises(FrozenInstanceError):
        shipped.cards[0].price_per_hour = 0.0  # type: ignore[misc]


# ---------------------------------------------------------------- the user's file


def test_user_prices_override_defaults(tmp_path):
    path = write(
        tmp_path,
        "prices:\n  rtx-4090: 0.44\n  h100-sxm: {price: 2.49, date: 2026-11-20, source: my provider}\n",
    )
    catalog = load_catalog(path, today=TODAY)
    rtx4090 = catalog.get("rtx-4090")
    assert (rtx4090.price_per_hour, rtx4090.price_is_default) == (0.44, False)
    assert (rtx4090.price_date, rtx4090.price_source) == ("2026-11-30", USER_PRICE_SOURCE)
    # the default range stays known for the picker to show beside the user's price
    assert rtx4090.price_low_usd_per_hour == 0.29
    h100 = catalog.get("h100-sxm")
    assert (h100.price_per_hour, h100.price_is_default) == (2.49, False)
    assert (h100.price_date, h100.price_source) == ("2026-11-20", "my provider")
    assert catalog.get("h200-sxm").price_is_default
    assert catalog.user_file == path


def test_prices_accept_a_card_name(tmp_path):
    catalog = load_catalog(write(tmp_path, "prices:\n  RTX 4090: 0.5\n"), today=TODAY)
    assert catalog.get("rtx-4090").price_per_hour == 0.5


def test_added_card_appears(tmp_path):
    path = write(
        tmp_path,
        "cards:\n"
        "  - id: my-l40s-48\n"
        "    name: My L40S\n"
        "    vram_gib: 47.99\n"
        "    bandwidth_gbs: 864\n"
        "    bf16_dense_tflops: 362\n"
        "    compute_capability: 8.9\n"
        "    price_usd_per_hour: 0.9\n",
    )
    catalog = load_catalog(path, today=TODAY)
    card = catalog.get("my-l40s-48")
    assert isinstance(card, Card)
    assert (card.vram_gib, card.bandwidth_gbs, card.bf16_dense_tflops) == (47.99, 864, 362)
    assert (card.price_per_hour, card.price_is_default, card.price_date) == (0.9, False, "2026-11-30")
    assert card.compute_capability == "8.9"
    assert card.bf16_sparse_tflops is None
    assert str(path) in card.figures_source
    assert catalog.get("My L40S") is card
    assert len(catalog.cards) == len(REFERENCE) + 1
    keys = [(c.vram_gib, c.price_per_hour) for c in catalog.cards]
    assert keys == sorted(keys)


def test_prices_can_target_an_added_card(tmp_path):
    path = write(
        tmp_path,
        "cards:\n"
        "  - {id: box-1, name: Box 1, vram_gib: 24, bandwidth_gbs: 900, bf16_dense_tflops: 70,\n"
        "     price_usd_per_hour: {price: 0.3, date: 2026-11-01, source: quote}}\n"
        "prices:\n  box-1: 0.25\n",
    )
    card = load_catalog(path, today=TODAY).get("box-1")
    assert (card.price_per_hour, card.price_date, card.price_source) == (
        0.25,
        "2026-11-30",
        USER_PRICE_SOURCE,
    )


def test_user_file_found_through_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("COCKPIT_CONFIG", str(tmp_path / "cfg"))
    assert user_cards_path() == tmp_path / "cfg" / "cards.yaml"
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "cards.yaml").write_text("prices: {l4: 0.5}\n", encoding="utf-8")
    assert load_catalog(today=TODAY).get("l4").price_per_hour == 0.5

    monkeypatch.delenv("COCKPIT_CONFIG")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert user_cards_path() == tmp_path / "xdg" / "lora-cockpit" / "cards.yaml"
    catalog = load_catalog(today=TODAY)  # no file there: defaults only
    assert catalog.user_file is None
    assert catalog.get("l4").price_is_default

    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert user_cards_path() == tmp_path / "home" / ".config" / "lora-cockpit" / "cards.yaml"


def test_empty_user_file_changes_nothing(tmp_path):
    catalog = load_catalog(write(tmp_path, "# nothing yet\n"), today=TODAY)
    assert all(c.price_is_default for c in catalog.cards)


# a valid added card, left open so a case can append keys before the closing brace
CARD = (
    "{id: box-1, name: Box 1, vram_gib: 24, bandwidth_gbs: 900, bf16_dense_tflops: 70, "
    "price_usd_per_hour: 0.3"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "prices:\n  rtx-4909: 0.44\n",
            ["prices.rtx-4909", "unknown card id", "Did you mean 'rtx-4090'?", "Card ids:", "h200-sxm"],
        ),
        ("prices:\n  rtx-4090: -0.44\n", ["prices.rtx-4090", "negative", "e.g. 0.44"]),
        ("prices:\n  rtx-4090: cheap\n", ["prices.rtx-4090", "expected a price in USD per hour like 0.44"]),
        ("prices:\n  rtx-4090: '$0.44'\n", ["prices.rtx-4090", "plain number", "without quotes or '$'"]),
        ("prices:\n  rtx-4090: .nan\n", ["prices.rtx-4090", "expected a price"]),
        ("prices:\n  rtx-4090: {cost: 0.4}\n", ["prices.rtx-4090", "unknown key 'cost'", "{price: 0.44"]),
        ("prices:\n  rtx-4090: {price: 0.4, date: soon}\n", ["prices.rtx-4090.date", "like 2026-11-20"]),
        ("prices:\n  rtx-4090: 0.4\n  RTX 4090: 0.5\n", ["prices.RTX 4090", "already has a price"]),
        ("prices: [rtx-4090]\n", ["prices:", "mapping of card id to price"]),
        ("price:\n  rtx-4090: 0.4\n", ["unknown key 'price'", "Did you mean 'prices'?"]),
        ("prices: {rtx-4090: 0.4\n", ["not valid YAML at line", "Fix the syntax"]),
        ("- rtx-4090\n", ["expected a mapping with prices: and/or cards:"]),
        ("prices:\n  l4: {price: 0.5, date: 2026-02-30}\n", ["day is out of range", "check the dates"]),
        (
            "cards:\n  - {id: box-1, name: Box 1, bandwidth_gbs: 900, bf16_dense_tflops: 70,"
            " price_usd_per_hour: 0.3}\n",
            ["cards[0] (box-1)", "missing vram_gib", "A card needs at least"],
        ),
        (
            f"cards:\n  - {CARD.replace('vram_gib: 24', 'vram_gib: 0')}}}\n",
            ["cards[0] (box-1).vram_gib", "> 0"],
        ),
        (
            f"cards:\n  - {CARD.replace('vram_gib: 24', 'vram_gib: 5000')}}}\n",
            ["cards[0] (box-1).vram_gib", "out of range", "<= 4096 GiB"],
        ),
        (
            f"cards:\n  - {CARD.replace('vram_gib: 24', 'vram_gib: -3')}}}\n",
            ["cards[0] (box-1).vram_gib", "out of range"],
        ),
        (
            f"cards:\n  - {CARD.replace('price_usd_per_hour: 0.3', 'price_usd_per_hour: -1')}}}\n",
            ["cards[0] (box-1).price_usd_per_hour", "negative"],
        ),
        (
            f"cards:\n  - {CARD.replace('id: box-1', 'id: rtx-4090')}}}\n",
            ["cards[0] (rtx-4090).id", "already a card", "Pick another id", "prices:"],
        ),
        (
            f"cards:\n  - {CARD}}}\n  - {CARD.replace('name: Box 1', 'name: Box 2')}}}\n",
            ["cards[1] (box-1).id", "already a card"],
        ),
        (
            f"cards:\n  - {CARD.replace('name: Box 1', 'name: rtx 4090')}}}\n",
            ["cards[0] (box-1).name", "already the name of rtx-4090"],
        ),
        (
            f"cards:\n  - {CARD.replace('id: box-1', 'id: My Box')}}}\n",
            [".id", "not a valid id", "lowercase"],
        ),
        (f"cards:\n  - {CARD}, vram: 24}}\n", ["unknown key 'vram'", "Did you mean 'vram_gib'?"]),
        (f"cards:\n  - {CARD}, vendor: intel}}\n", [".vendor", "not one of nvidia, amd"]),
        (
            f"cards:\n  - {CARD}, bf16_sparse_tflops: 35}}\n",
            [".bf16_sparse_tflops", "below bf16_dense_tflops", "swapped"],
        ),
        (
            f"cards:\n  - {CARD}, measured_bf16_tflops: 90}}\n",
            [".measured_bf16_tflops", "above the dense spec", "random data"],
        ),
        ("cards:\n  id: box-1\n", ["cards:", "expected a list of cards"]),
        ("cards:\n  - box-1\n", ["cards[0]", "expected a card"]),
    ],
)
def test_bad_input_names_the_file_the_key_and_the_fix(tmp_path, text, expected):
    path = write(tmp_path, text)
    with pytest.raises(CatalogError) as info:
        load_catalog(path, today=TODAY)
    message = str(info.value)
    assert message.startswith(str(path)), message
    for part in expected:
        assert part in message, f"{part!r} not in: {message}"
    assert "Traceback" not in message


def test_explicit_missing_user_file(tmp_path):
    with pytest.raises(CatalogError, match="not found"):
        load_catalog(tmp_path / "nope.yaml", today=TODAY)


def test_unreadable_user_file(tmp_path):
    path = tmp_path / "cards.yaml"
    path.write_bytes(b"prices: {l4: \xff}\n")
    with pytest.raises(CatalogError, match="cannot be read"):
        load_catalog(path, today=TODAY)


# ---------------------------------------------------------------- lookup


@pytest.mark.parametrize(
    ("query", "card_id"),
    [
        ("rtx-4090", "rtx-4090"),
        ("RTX-4090", "rtx-4090"),
        ("RTX 4090", "rtx-4090"),
        ("rtx4090", "rtx-4090"),
        ("4090", "rtx-4090"),
        ("a10", "a10"),  # exact id wins over the A100s that contain it
        ("L40S", "l40s"),
        ("h100 sxm", "h100-sxm"),
        ("80gb sxm", "a100-80gb-sxm"),
        ("h200", "h200-sxm"),
        ("MI300X", "mi300x"),
    ],
)
def test_get_by_id_name_or_part(shipped, query, card_id):
    assert shipped.get(query).id == card_id


def test_get_ambiguous_lists_the_candidates(shipped):
    with pytest.raises(CatalogError, match="h100-pcie, h100-sxm") as info:
        shipped.get("h100")
    assert "Give one of these ids" in str(info.value)


def test_get_unknown_suggests(shipped):
    with pytest.raises(CatalogError, match="Did you mean 'rtx-4090'") as info:
        shipped.get("rtx-4900")
    assert "Card ids:" in str(info.value)
    assert shipped.find("") == []


# ---------------------------------------------------------------- price age


def test_price_age_and_label(tmp_path):
    path = write(
        tmp_path,
        "prices:\n  rtx-4090: 0.44\n  h100-sxm: {price: 2.49, date: 2026-11-20, source: my provider}\n"
        "  l4: {price: 0.5, date: 2026-11-29 18:30:00}\n",
    )
    catalog = load_catalog(path, today=TODAY)
    default = catalog.get("h200-sxm")
    assert price_age_days(default, TODAY) == 29
    assert price_label(default, TODAY) == "default price from 2026-11 (29 days old)"
    assert price_label(catalog.get("rtx-4090"), TODAY) == "your price from 2026-11-30 (today)"
    assert (
        price_label(catalog.get("h100-sxm"), TODAY) == "your price from 2026-11-20 (10 days old, my provider)"
    )
    assert price_label(catalog.get("l4"), TODAY) == "your price from 2026-11-29 (1 day old)"
    assert price_age_days(default, date(2026, 11, 1)) == 0


def test_stale_default_prices_warn():
    assert load_catalog(today=TODAY).warnings == []
    later = load_catalog(today=date(2027, 3, 1))
    assert len(later.warnings) == 1
    assert "default prices from 2026-11 (120 days old)" in later.warnings[0]
    assert "cards.yaml" in later.warnings[0]


def test_price_dated_after_today_warns(tmp_path):
    path = write(tmp_path, "prices:\n  l4: {price: 0.5, date: 2026-12-25}\n")
    catalog = load_catalog(path, today=TODAY)
    assert any("prices.l4" in w and "after today" in w for w in catalog.warnings)
    assert price_label(catalog.get("l4"), TODAY) == "your price from 2026-12-25 (dated 25 days after today)"


# ---------------------------------------------------------------- boundary


def test_catalog_imports_only_yaml_and_the_standard_library():
    probe = (
        "import sys, json; before = set(sys.modules); import cockpit.gpus.catalog; "
        "print(json.dumps(sorted({m.split('.')[0] for m in set(sys.modules) - before})))"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    new = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert not new & {"torch", "textual", "rich", "pynvml", "psutil", "transformers"}, new
