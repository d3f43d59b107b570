"""The samples a run wrote (`sample` events): each prompt with its answers, base model first.

`cockpit samples RUN [--json]` and the run screen's Samples view read them from here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from cockpit.paths import cockpit_command
from cockpit.plain import PLAIN_WIDTH, hanging
from cockpit.run import journal
from cockpit.run.rundir import RunDir
from cockpit.run.state import RunState


@dataclass
class Answer:
    label: str  # base | checkpoint-N | final
    stage: str  # base | checkpoint | final
    step: int | None
    output: str
    finish: str | None  # eos | stop | length
    new_tokens: int | None
    seconds: float | None


@dataclass
class SamplePrompt:
    index: int
    prompt: str
    reference: str | None
    answers: list[Answer] = field(default_factory=list)

    @property
    def base(self) -> Answer | None:
        return next((a for a in self.answers if a.stage == "base"), None)

    def answer(self, label: str | None) -> Answer | None:
        """The answer of the weights `label`; None: the newest that is not the base."""
        if label is None:
            trained = [a for a in self.answers if a.stage != "base"]
            return trained[-1] if trained else None
        return next((a for a in self.answers if a.label == label), None)


@dataclass
class SampleBook:
    prompts: list[SamplePrompt] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)  # the weights sampled, in the order they came
    max_new_tokens: int | None = None
    seed: int | None = None
    style: str | None = None

    @property
    def trained_labels(self) -> list[str]:
        return [label for label in self.labels if label != "base"]

    def to_json(self) -> dict[str, Any]:
        return {
            "labels": self.labels,
            "max_new_tokens": self.max_new_tokens,
            "seed": self.seed,
            "prompt_style": self.style,
            "prompts": [asdict(p) for p in self.prompts],
        }


def label_of(sample: dict[str, Any]) -> str:
    stage = sample.get("stage")
    if stage == "base":
        return "base"
    if stage == "final":
        return "final"
    return sample.get("checkpoint") or f"step-{sample.get('step')}"


def collect(samples: list[dict[str, Any]]) -> SampleBook:
    """The book of `sample` events (a restart that samples the same weights again replaces them)."""
    book = SampleBook()
    by_index: dict[int, SamplePrompt] = {}
    for s in samples:
        index = s.get("index")
        if not isinstance(index, int):
            continue
        label = label_of(s)
        if label not in book.labels:
            book.labels.append(label)
        prompt = by_index.get(index)
        if prompt is None:
            prompt = by_index[index] = SamplePrompt(index, str(s.get("prompt") or ""), s.get("reference"))
        answer = Answer(
            label,
            str(s.get("stage")),
            s.get("step"),
            str(s.get("output") or ""),
            s.get("finish"),
            s.get("new_tokens"),
            s.get("seconds"),
        )
        prompt.answers = [a for a in prompt.answers if a.label != label] + [answer]
        book.max_new_tokens = s.get("max_new_tokens", book.max_new_tokens)
        book.seed = s.get("seed", book.seed)
        book.style = s.get("style", book.style)
    book.prompts = [by_index[i] for i in sorted(by_index)]
    return book


def read_state(run: RunDir) -> RunState:
    """Every event of the run folded, as `cockpit attach` would show it once caught up."""
    return journal.fold(run.events_path, RunState(run_id=run.run_id))


def no_samples_reason(state: RunState) -> str:
    """Why a run has no samples, and what gives it some."""
    if state.data and not state.data.get("sample_prompts"):
        return (
            f"run {state.run_id} has no samples: its config sets no eval.prompts. Give prompts "
            '(eval.prompts: ["What is LoRA?"], or a number with dataset.eval_fraction) in the next run\'s '
            f"config, or try the adapter now: {cockpit_command()} chat {state.run_id}"
        )
    return (
        f"run {state.run_id} has no samples yet: the first ones come before step 1 (status: {state.status})"
    )


ANSWER_CHARS = 100  # an answer or a reference is cut here in the text report; --json has it whole


def count_of(count: int | None, noun: str, kind: str = "") -> str:
    """`1 token`, `16 new tokens`, `2 prompts`."""
    return " ".join(filter(None, [str(count), kind, noun if count == 1 else noun + "s"]))


def finish_text(answer: Answer) -> str:
    """Why the answer ended and its length: `eos, 1 token`."""
    if answer.new_tokens is None:
        return str(answer.finish)
    return f"{answer.finish}, {count_of(answer.new_tokens, 'token')}"


def text_report(book: SampleBook, width: int = PLAIN_WIDTH) -> str:
    """Each prompt, then its answer from every sampled set of weights, for a terminal or a file:
    lines of `width` columns at most, each wrapped under its text."""
    at_most = count_of(book.max_new_tokens, "token", "new")
    lines = hanging(
        "",
        f"{count_of(len(book.prompts), 'prompt')}, greedy, {at_most} at most, seed {book.seed}; "
        f"weights: {', '.join(book.labels)}",
        width,
    )
    for p in book.prompts:
        lines.append("")
        for index, paragraph in enumerate(p.prompt.splitlines() or [""]):
            lines += hanging(
                f"[{p.index + 1}] " if index == 0 else " " * len(f"[{p.index + 1}] "), paragraph, width
            )
        if p.reference:
            lines += hanging("    reference: ", _one_line(p.reference, ANSWER_CHARS), width)
        for a in p.answers:
            tail = f"({finish_text(a)})" if a.finish else ""  # kept on one line
            shown = _one_line(a.output, ANSWER_CHARS) if a.output.strip() else "(no visible text)"
            head, keep = f"    {a.label:>14}: ", (tail,) if tail else ()
            lines += hanging(head, f"{shown}  {tail}" if tail else shown, width, keep=keep)
    return "\n".join(lines)


def _one_line(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"
