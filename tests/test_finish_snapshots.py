"""Snapshots at 80x24 of what the finish line adds: the run screen of a recorded run with an eval
split (train and eval curves, the best checkpoint marked), its Samples view (base vs the newest
weights, and vs an earlier checkpoint), and the chat screen over a scripted backend.

The run is a real recording (tests/fixtures/eval_run_events.jsonl: the tiny model, 8 steps, eval
every 2, 2 prompts). Deterministic: fixed size, fixed clock, no cursor blink."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from cockpit.live.session import RunSession
from cockpit.results.chat_client import Done, Token
from cockpit.results.targets import ChatTarget
from cockpit.run.rundir import RunDir
from screens.chat.app import ChatApp
from screens.run.app import CockpitApp
from screens.run.samples import SamplesView

FIXTURE = Path(__file__).parent / "fixtures" / "eval_run_events.jsonl"
RUN_ID = "20261201-223529-tiny"
SIZE = (80, 24)


def replay(tmp_path: Path) -> CockpitApp:
    run = RunDir(tmp_path / RUN_ID)
    run.path.mkdir()
    shutil.copy(FIXTURE, run.events_path)
    session = RunSession(run, recorded=True)
    return CockpitApp(session, poll_interval_s=0.02, clock=lambda: 1796164340.0)


async def drawn(pilot) -> None:
    deadline = time.monotonic() + 5
    while pilot.app.run_view.updates_shown == 0 or not pilot.app.session.state.ended:
        assert time.monotonic() < deadline, "the run view was never drawn"
        await pilot.pause(0.02)
    await pilot.pause()


def test_run_view_with_eval_curve_and_best_checkpoint(snap_compare, tmp_path):
    assert snap_compare(replay(tmp_path), terminal_size=SIZE, run_before=drawn)


def test_samples_view_base_vs_final(snap_compare, tmp_path):
    async def open_samples(pilot):
        await drawn(pilot)
        await pilot.press("m")
        await pilot.pause()
        assert isinstance(pilot.app.screen, SamplesView)

    assert snap_compare(replay(tmp_path), terminal_size=SIZE, run_before=open_samples)


def test_samples_view_base_vs_an_earlier_checkpoint(snap_compare, tmp_path):
    async def earlier(pilot):
        await drawn(pilot)
        await pilot.press("m", "left_square_bracket", "left_square_bracket")
        await pilot.pause()
        assert pilot.app.screen.shown_label == "checkpoint-4"

    assert snap_compare(replay(tmp_path), terminal_size=SIZE, run_before=earlier)


class ScriptedChat:
    """The ChatSession interface with a scripted backend: loads at once, answers word by word."""

    def __init__(self, tmp_path: Path):
        self.target = ChatTarget(tmp_path / "final", "adapter", "final")
        self.asked: list[str] = []
        self.closed = False

    def start(self) -> dict:
        return {
            "load_s": 3.1,
            "device": {"kind": "cpu"},
            "precision": "fp32",
            "quantized": False,
            "style": "llama2",
            "stop_tokens": ["</s>"],
            "stop_strings": ["[INST]"],
        }

    def ask(self, text: str):
        self.asked.append(text)
        words = ["LoRA ", "trains ", "two ", "small ", "matrices ", "beside ", "each ", "frozen ", "weight."]
        for word in words:
            yield Token(word)
        yield Done("".join(words), "eos", 11, 0.5, 22.0)

    def reset(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def test_chat_screen_after_one_answer(snap_compare, tmp_path):
    session = ScriptedChat(tmp_path)

    async def one_answer(pilot):
        deadline = time.monotonic() + 5
        while pilot.app.ready is None:
            assert time.monotonic() < deadline
            await pilot.pause(0.02)
        await pilot.press(*"What is LoRA?", "enter")
        while pilot.app.turns == 0:
            assert time.monotonic() < deadline
            await pilot.pause(0.02)
        await pilot.pause()
        assert session.asked == ["What is LoRA?"]

    assert snap_compare(ChatApp(session, RUN_ID), terminal_size=SIZE, run_before=one_answer)
