"""eval.early_stop_patience and eval.early_stop_min_gain: the count, the stop, the cost not spent,
the config's check, and what the eval line, the done line and the summary say."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from cockpit.config.load import config_from_dict
from cockpit.config.schema import ConfigError
from cockpit.live.event_text import describe as event_text
from cockpit.results.summary import summarize, summary_lines
from cockpit.run.state import RunState
from train_backend import test_aids
from train_backend.early_stop import EarlyStop, not_spent, stop_message


def test_patience_counts_evals_without_a_gain_and_a_new_best_resets_it():
    early = EarlyStop(patience=2)
    assert early.feed(0, 3.0)  # the base model's: the first best
    assert early.feed(100, 2.5)
    assert not early.feed(200, 2.6) and not early.due
    assert early.feed(300, 2.4) and early.without_gain == 0  # a new best starts the count again
    assert not early.feed(400, 2.4)  # equal is no gain
    assert not early.feed(500, math.nan)  # nor is NaN
    assert early.due and (early.best_step, early.best_loss) == (300, 2.4)


def test_a_gain_below_the_minimum_is_no_gain_and_does_not_move_the_best():
    early = EarlyStop(patience=2, min_gain=0.05)
    early.feed(0, 2.0)
    assert not early.feed(10, 1.97)  # 0.03 lower: not enough
    assert early.best_loss == 2.0
    assert early.feed(20, 1.9)
    assert early.why() == "eval loss not below 1.9000 (step 20) by more than 0.05 in 0 evals"


def test_the_cost_not_spent_is_the_steps_left_at_this_attempts_pace():
    # 1,200 steps in 1 h from step 0: 1,800 left are 1.5 h; at $2.7333/h that is ~$4.10
    seconds, usd = not_spent(1200, 3000, 0, 3600.0, 2.7333)
    assert seconds == pytest.approx(5400.0) and usd == pytest.approx(4.10, abs=0.005)
    early = EarlyStop(patience=3, best_step=800, best_loss=1.2345, without_gain=3)
    assert stop_message(early, 1200, 3000, seconds, usd) == (
        "stopped early at 1,200 of 3,000 steps: ~$4.10 not spent (~1:30:00); "
        "eval loss not below 1.2345 (step 800) in 3 evals"
    )
    # a resumed attempt: its own steps and time; no price: the time alone
    assert not_spent(1200, 3000, 600, 3600.0, None) == (pytest.approx(10800.0), None)
    assert stop_message(early, 1200, 3000, 10800.0, None).startswith(
        "stopped early at 1,200 of 3,000 steps: ~3:00:00 not spent;"
    )
    assert not_spent(10, 10, 0, 60.0, 2.0) == (None, None)  # nothing left


def test_patience_without_eval_data_is_refused_at_the_config():
    raw = {
        "model": {"name": "synthetic:tiny"},
        "dataset": {"path": "demo"},
        "eval": {"early_stop_patience": 3},
    }
    with pytest.raises(ConfigError, match=r"eval.early_stop_patience: 3, but there is no eval loss"):
        config_from_dict(raw)
    raw["dataset"]["eval_fraction"] = 0.1
    assert config_from_dict(raw).eval.early_stop_patience == 3


def test_the_eval_aid_reports_the_given_losses_then_the_measured_ones():
    aids = test_aids.parse('{"eval_losses": "3, 2.5"}')
    assert [aids.eval_loss(i, 9.0) for i in range(3)] == [3.0, 2.5, 9.0]
    bad = test_aids.parse('{"eval_losses": "3, two"}')
    cfg = config_from_dict({"model": {"name": "synthetic:tiny"}, "dataset": {"path": "demo"}})
    with pytest.raises(test_aids.AidError, match="give numbers"):
        test_aids.read({test_aids.ENV: '{"eval_losses": "3, two"}'}, cfg, True)
    assert bad.eval_losses == "3, two"


def _eval(step: int, loss: float, best: int, without: int) -> dict:
    return {
        "type": "eval",
        "step": step,
        "stage": "train",
        "eval_loss": loss,
        "eval_samples": 8,
        "best_step": best,
        "best_eval_loss": 2.0,
        "evals_without_gain": without,
        "early_stop_patience": 3,
    }


def test_the_eval_line_counts_towards_the_stop():
    assert event_text(_eval(20, 2.0, 20, 0)) == "eval: step 20: loss 2.0000 on 8 samples (best so far)"
    assert event_text(_eval(30, 2.1, 20, 2)) == (
        "eval: step 30: loss 2.1000 on 8 samples (best: step 20, 2.0000; no gain 2 of 3 before early stop)"
    )
    assert event_text(_eval(40, 2.2, 20, 3)).endswith("; early stop: 3 evals without gain)")


def test_the_done_line_and_the_summary_say_where_it_stopped_and_what_was_not_spent(tmp_path: Path):
    message = (
        "stopped early at 1,200 of 3,000 steps: ~$4.10 not spent (~1:30:00); eval loss not below "
        "1.2345 (step 800) in 3 evals; final/ holds checkpoint-800's weights (eval loss 1.2345)"
    )
    done = {
        "type": "done",
        "status": "finished",
        "step": 1200,
        "total_steps": 3000,
        "train_loss": 1.1,
        "reason": "early_stop",
        "message": message,
        "output": str(tmp_path / "final"),
        "not_spent_usd": 4.1,
    }
    assert event_text(done).endswith("\n  " + message)
    state = RunState()
    state.apply({"type": "train_begin", "total_steps": 3000, "start_step": 0})
    state.apply(done)
    (tmp_path / "final").mkdir()
    s = summarize(state, tmp_path, [])
    assert (s.reason, s.early_stop, s.adapter_is_final) == ("early_stop", message, True)
    lines = summary_lines(s)
    assert lines[0].startswith("finished early (eval.early_stop_patience): step 1200/3000")
    assert message in lines


def test_the_ends_notification_says_it_stopped_early_and_what_was_not_spent():
    from cockpit.money.notices import RunNotices

    message = "stopped early at 4 of 6 steps: ~$0.0012 not spent (~0:00:02); eval loss not below 2.0000 ..."
    state = RunState()
    state.apply({"type": "hello", "ts": 1.0, "pid": 1, "price_per_hour": 2.0})
    state.apply({"type": "log", "ts": 5.0, "step": 4, "total_steps": 6, "loss": 1.5})
    state.apply({"type": "done", "ts": 6.0, "status": "finished", "step": 4, "total_steps": 6,
                 "reason": "early_stop", "message": message, "output": "/runs/r/final"})  # fmt: skip
    notice = RunNotices().ending(state, ["then: export"])
    assert notice is not None and notice.title == "finished (early_stop) at step 4 of 6"
    assert notice.body.splitlines()[0] == message and notice.body.endswith("then: export")
