"""The finish line's pure parts: the samples book, the chat target, the state's eval figures, the
headless lines, the eval curve in the loss plot, and the prompt styles and stop-string streaming."""

from __future__ import annotations

import json

import pytest

from cockpit.live import headless
from cockpit.results import samples as samples_mod
from cockpit.results import targets
from cockpit.run import rundir
from cockpit.run.state import RunState
from train_backend import generation
from widgets.loss_plot import plot_lines


def sample(stage, index, output, step=0, checkpoint=None, **extra):
    return {
        "v": 1,
        "type": "sample",
        "ts": 1.0,
        "stage": stage,
        "step": step,
        "checkpoint": checkpoint,
        "index": index,
        "count": 2,
        "prompt": f"question {index}",
        "reference": f"answer {index}",
        "output": output,
        "finish": "eos",
        "new_tokens": 5,
        "max_new_tokens": 16,
        "seed": 42,
        **extra,
    }


def test_the_book_puts_base_first_and_a_resample_replaces_the_old_answer():
    events = [
        sample("base", 0, "b0"),
        sample("base", 1, "b1"),
        sample("checkpoint", 0, "c0", 4, "checkpoint-4"),
        sample("checkpoint", 0, "c0 again", 4, "checkpoint-4"),  # a restart sampled it again
        sample("final", 1, "f1", 8, "final"),
    ]
    book = samples_mod.collect(events)
    assert book.labels == ["base", "checkpoint-4", "final"] and book.trained_labels == [
        "checkpoint-4",
        "final",
    ]
    first, second = book.prompts
    assert first.base.output == "b0" and first.answer(None).output == "c0 again"
    assert [a.label for a in first.answers] == ["base", "checkpoint-4"]
    assert second.answer(None).label == "final" and second.answer("checkpoint-4") is None
    data = json.loads(json.dumps(book.to_json()))
    assert data["max_new_tokens"] == 16 and data["prompts"][0]["reference"] == "answer 0"
    report = samples_mod.text_report(book)
    assert "[1] question 0" in report and "base: b0" in report and "final: f1" in report


def test_the_state_folds_evals_checkpoints_and_the_best():
    state = RunState()
    for event in [
        {"type": "eval", "v": 1, "ts": 1, "step": 0, "eval_loss": 3.0, "best_step": 0, "best_eval_loss": 3.0},
        {"type": "eval", "v": 1, "ts": 2, "step": 4, "eval_loss": 2.0, "best_step": 4, "best_eval_loss": 2.0},
        {
            "type": "checkpoint",
            "v": 1,
            "ts": 3,
            "step": 4,
            "path": "/r/checkpoints/checkpoint-4",
            "bytes": 10,
            "eval_loss": 2.0,
            "best_checkpoint": "checkpoint-4",
        },
        {"type": "eval", "v": 1, "ts": 4, "step": 8, "eval_loss": 2.5, "best_step": 4, "best_eval_loss": 2.0},
        sample("base", 0, "x"),
    ]:
        state.apply(event)
    assert state.evals == [(0, 3.0), (4, 2.0), (8, 2.5)] and state.eval_loss == 2.5
    assert state.best_eval == {"step": 4, "eval_loss": 2.0} and state.best_checkpoint == "checkpoint-4"
    assert state.checkpoints[0]["eval_loss"] == 2.0 and len(state.samples) == 1
    assert "eval 2.5000" in headless.status_line(state, None)


def test_headless_lines_for_eval_and_sample_events():
    base = {"type": "eval", "step": 0, "stage": "base", "eval_loss": 3.0, "eval_samples": 34, "best_step": 0}
    assert (
        headless.describe(base) == "eval: base model, before step 1: loss 3.0000 on 34 samples (best so far)"
    )
    later = {
        "type": "eval",
        "step": 8,
        "stage": "train",
        "eval_loss": 2.5,
        "eval_samples": 34,
        "best_step": 4,
        "best_eval_loss": 2.0,
        "best_checkpoint": "checkpoint-4",
    }
    line = headless.describe(later)
    assert "step 8: loss 2.5000" in line and "best: step 4, 2.0000; best checkpoint checkpoint-4" in line
    # step 24's eval is the best so far: checkpoint-12, the best kept before it, is not the best now
    # (checkpoint-24 is written after the eval, and the `done` line names it)
    newest = {**later, "step": 24, "eval_loss": 0.8844, "best_step": 24, "best_eval_loss": 0.8844}
    newest["best_checkpoint"] = "checkpoint-12"
    assert headless.describe(newest) == "eval: step 24: loss 0.8844 on 34 samples (best so far)"
    newest["best_checkpoint"] = "checkpoint-24"  # a restart's eval of a step already saved
    assert headless.describe(newest).endswith("(best so far; best checkpoint checkpoint-24)")
    text = headless.describe(sample("checkpoint", 1, "a long answer " * 20, 4, "checkpoint-4"))
    assert text.startswith("sample 2/2 (checkpoint-4, eos): 'a long answer") and text.endswith("…'")


def test_the_loss_plot_draws_the_eval_line_on_the_training_loss_scale():
    train = [(s, 3.0 - s * 0.2) for s in range(1, 9)]
    evals = [(0, 3.5), (4, 2.4), (8, 1.6)]
    rows = plot_lines(train, 40, 8, eval_points=evals)
    assert rows[0].label.strip() == "3.5000"  # the eval's base sets the top of the shared scale
    assert rows[-1].text.startswith("0") and rows[-1].text.endswith("step 8")
    assert any(row.eval_columns for row in rows[:-1])
    assert not plot_lines(train, 40, 8)[0].eval_columns
    assert "eval 1.6000" in plot_lines(train, 5, 1, eval_points=evals)[0].text  # too small: one line


class FakeTokenizer:
    """Characters as tokens: decode is the join; specials are skipped."""

    eos_token, bos_token, eos_token_id = "</s>", "<s>", 0
    chat_template = None

    def __init__(self, pieces):
        self.pieces = pieces

    def decode(self, ids, skip_special_tokens=True):
        return "".join(self.pieces[i] for i in ids if not (skip_special_tokens and self.pieces[i] == "</s>"))


class _Ids(list):
    def reshape(self, *_):
        return self

    def tolist(self):
        return list(self)


def test_streaming_holds_back_what_may_start_a_stop_string_and_never_shows_it():
    pieces = ["</s>", "Par", "is", " [", "IN", "ST]", " more"]
    shown = []
    stream = generation._TextStream(FakeTokenizer(pieces), ("[INST]",), shown.append)
    stream.put(_Ids([9, 9]))  # the prompt comes first and is not shown
    for token in range(1, 7):
        stream.put(_Ids([token]))
    stream.end()
    assert "".join(shown) == "Paris " and "[" not in "".join(shown)
    assert stream.text() == "Paris "


def test_prompts_are_written_the_way_the_data_is():
    tok = FakeTokenizer([])
    llama = ["<s>[INST] What is 2+2? [/INST] 4 </s>"] * 3
    assert generation.detect_style("text", llama, tok) == "llama2"
    assert generation.text_prefix(llama) == "<s>"
    assert generation.detect_style("text", ["### Human: hi### Assistant: yo"], tok) == "guanaco"
    assert generation.detect_style("text", ["just prose"], tok) == "plain"
    turns = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "and?"},
    ]
    text = generation.render_chat("llama2", tok, turns, "<s>").text
    assert text == "<s>[INST] hi [/INST] hello </s><s>[INST] and? [/INST]"
    assert generation.render_chat("guanaco", tok, turns[:1]).text == "### Human: hi### Assistant:"
    shown, rendered, reference = generation.split_example("llama2", "text", llama[0], tok, "<s>")
    assert (shown, rendered.text, reference) == ("What is 2+2?", "<s>[INST] What is 2+2? [/INST]", "4")


def make_checkpoint(run: rundir.RunDir, step: int) -> None:
    folder = run.checkpoints_dir / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text("{}")
    (folder / rundir.COMPLETE_MARKER).write_text("{}")


def test_the_chat_target_final_checkpoint_best_and_what_is_missing(tmp_path):
    run = rundir.RunDir(tmp_path / "run")
    run.path.mkdir()
    state = RunState(run_id="run", status="failed")
    with pytest.raises(
        targets.TargetError, match="has nothing to chat with: no final/ and no complete checkpoint"
    ):
        targets.resolve(run, state, None, None)
    make_checkpoint(run, 4)
    make_checkpoint(run, 8)
    (run.checkpoints_dir / "checkpoint-12").mkdir()  # never completed
    chosen = targets.resolve(run, state, None, None)
    assert chosen.label == "checkpoint-8" and "no final adapter (failed)" in chosen.note
    with pytest.raises(targets.TargetError) as caught:
        targets.resolve(run, state, "12", None)
    assert "no complete checkpoint-12; its complete checkpoints are: steps 4, 8" in str(caught.value)
    with pytest.raises(targets.TargetError, match="has no checkpoint with an eval loss"):
        targets.resolve(run, state, "best", None)
    state.best_checkpoint = "checkpoint-4"
    assert targets.resolve(run, state, "best", None).path == run.checkpoints_dir / "checkpoint-4"
    with pytest.raises(targets.TargetError, match="give a step number"):
        targets.resolve(run, state, "latest", None)
    run.final_dir.mkdir()
    (run.final_dir / "adapter_config.json").write_text("{}")
    final = targets.resolve(run, state, None, None)
    assert (final.label, final.kind, final.note) == ("final", "adapter", "")
    with pytest.raises(targets.TargetError, match="not a model folder"):
        targets.resolve(run, state, None, str(tmp_path))


def test_cockpit_samples_wraps_at_80_columns_and_counts_one_token(tmp_path, capsys):
    """Walkthrough: `cockpit samples RUN | cat` had a 96-column first line and `(eos, 1 tokens)`."""
    from cockpit.cli.main import main

    prompt = (
        "Explain in two sentences what a LoRA adapter changes in a transformer, and what it leaves alone."
    )
    answer = (
        "A LoRA adapter adds small low-rank matrices beside the attention weights; the base weights stay."
    )
    events = [
        sample("base", 0, ".", prompt=prompt, new_tokens=1),
        sample("checkpoint", 0, answer, 150, "checkpoint-150", prompt=prompt, finish="length", new_tokens=16),
        sample("final", 0, answer, 150, "final", prompt=prompt),
    ]
    run = tmp_path / "20261203-150541-tiny"
    run.mkdir()
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    assert main(["samples", str(run)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    text = " ".join(" ".join(lines).split())
    assert "base: . (eos, 1 token)" in text and "1 tokens" not in text
    assert "(length, 16 tokens)" in text and text.startswith("1 prompt, greedy, 16 new tokens at most")
    assert f"[1] {prompt}" in text and f"checkpoint-150: {answer}" in text  # every word kept
    answer_at = next(i for i, line in enumerate(lines) if "checkpoint-150: " in line)
    column = lines[answer_at].index("checkpoint-150: ") + len("checkpoint-150: ")
    assert lines[answer_at + 1][:column].strip() == "" and lines[answer_at + 1][column] != " "  # under it
