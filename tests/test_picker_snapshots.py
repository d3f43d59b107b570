"""Snapshots of the card picker in its main states: the article's 13B QLoRA recipe without
checkpointing (some cards need a change to fit) at 100x32 and 80x24, a run no card fits (a 70B
full fine-tune), the memory breakdown open, and a bad input marked.

Deterministic: fixed terminal sizes, the shipped catalog priced as on a fixed day (no user
cards.yaml), a fixed clock, focus on the table (no blinking cursor). After `--snapshot-update`,
read snapshot_report.html first.
"""

from __future__ import annotations

import pytest
from test_picker import make_app


@pytest.fixture(autouse=True)
def no_user_cards(tmp_path, monkeypatch):
    monkeypatch.setenv("COCKPIT_CONFIG", str(tmp_path / "no-config"))


async def settled(pilot) -> None:
    await pilot.pause()


async def breakdown_on_a_tight_card(pilot) -> None:
    await pilot.press("down", "down", "down", "b")  # RTX 4090: tight as given
    # the breakdown scrolls into view: its animation done, then one more refresh (a loaded box drew
    # the screen mid-way once, the same text in other styles)
    await pilot.wait_for_scheduled_animations()
    await pilot.pause()


async def bad_sequence_length(pilot) -> None:
    field = pilot.app.screen.query_one("#seq")
    field.value = "-5"
    await pilot.pause()
    await pilot.press("escape")  # back to the table: no cursor in the field
    await pilot.pause()


def test_default(snap_compare, tmp_path):
    assert snap_compare(make_app(tmp_path, budget=5.0), terminal_size=(100, 32), run_before=settled)


def test_default_80x24(snap_compare, tmp_path):
    assert snap_compare(make_app(tmp_path, budget=5.0), terminal_size=(80, 24), run_before=settled)


def test_no_card_fits(snap_compare, tmp_path):
    app = make_app(tmp_path, ["model.name=synthetic:llama-2-70b", "method=full"])
    assert snap_compare(app, terminal_size=(100, 32), run_before=settled)


def test_breakdown_open(snap_compare, tmp_path):
    app = make_app(tmp_path, budget=5.0)
    assert snap_compare(app, terminal_size=(100, 32), run_before=breakdown_on_a_tight_card)


LARGE_VOCAB = [  # a 1B model with a 128k vocabulary, 8 x 2048 tokens, no checkpointing: no band (tiles)
    "model.name=synthetic:llama-3.2-1b",
    "method=lora",
    "training.max_length=2048",
    "training.micro_batch_size=8",
    "training.gradient_checkpointing=false",
]


async def breakdown_on_a_large_vocabulary(pilot) -> None:
    await pilot.press("b")
    await pilot.pause()


def test_large_vocabulary_loss_in_tiles(snap_compare, tmp_path):
    assert snap_compare(
        make_app(tmp_path, LARGE_VOCAB), terminal_size=(100, 32), run_before=breakdown_on_a_large_vocabulary
    )


def test_bad_input(snap_compare, tmp_path):
    assert snap_compare(make_app(tmp_path), terminal_size=(100, 32), run_before=bad_sequence_length)


def test_breakdown_open_80x24(snap_compare, tmp_path):
    """At 80 columns each part's note goes under its figures rather than off the edge."""
    app = make_app(tmp_path, budget=5.0)
    assert snap_compare(app, terminal_size=(80, 24), run_before=breakdown_on_a_tight_card)


def test_large_vocabulary_loss_in_tiles_80x24(snap_compare, tmp_path):
    assert snap_compare(
        make_app(tmp_path, LARGE_VOCAB), terminal_size=(80, 24), run_before=breakdown_on_a_large_vocabulary
    )
