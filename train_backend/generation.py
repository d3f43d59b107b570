"""Prompts rendered the way the run's data is written, and greedy generation that stops where the
format ends a turn (the tokenizer's end tokens, or the text format's next-turn marker).

Shared by the samples the trainer writes (train_backend.evaluation) and `cockpit chat`
(train_backend.chat). Prompt styles:

- `chat_template`: chat data (messages), rendered with the tokenizer's chat template;
- `llama2`: text like the article's guanaco-llama2 data, `<s>[INST] question [/INST] answer </s>`;
- `guanaco`: text in the original guanaco turns, `### Human: question### Assistant: answer`;
- `plain`: any other text; a prompt is continued as it is.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

PROMPT_STYLES = ("chat_template", "llama2", "guanaco", "plain")
# end-of-turn tokens of the common chat templates; those the vocabulary has stop generation
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>")
STOP_STRINGS = {"llama2": ("[INST]",), "guanaco": ("### Human:",), "chat_template": (), "plain": ()}
LLAMA2_END = "</s>"  # where llama2-style rows end an answer; plain text when the vocabulary has no such token


def stop_strings(style: str, tokenizer) -> tuple[str, ...]:
    """The text that ends an answer in this prompt style: the next-turn marker, and for llama2-style
    rows under a tokenizer whose `</s>` is not a special token (e.g. SmolLM2's), the literal `</s>`."""
    stops = STOP_STRINGS.get(style, ())
    if style == "llama2" and LLAMA2_END not in set(getattr(tokenizer, "all_special_tokens", ()) or ()):
        stops = (*stops, LLAMA2_END)
    return stops


@dataclass
class Rendered:
    """A prompt as the model sees it: `text`, tokenized with or without the tokenizer's own specials
    (text rows as TRL tokenizes them: with; a chat template writes its specials itself: without)."""

    text: str
    add_special_tokens: bool


@dataclass
class Generated:
    text: str
    finish: str  # eos | stop | length
    new_tokens: int
    seconds: float
    prompt_tokens: int
    end_token: str | None = None  # the end token that stopped it (finish eos)


def detect_style(fmt: str, texts: list[str], tokenizer) -> str:
    """The prompt style of a dataset of format `fmt` (text | messages | tokens), from its first rows."""
    if fmt == "messages" and getattr(tokenizer, "chat_template", None):
        return "chat_template"
    head = [t for t in texts[:50] if isinstance(t, str)]
    if head and sum("[INST]" in t and "[/INST]" in t for t in head) * 2 >= len(head):
        return "llama2"
    if head and sum("### Human:" in t and "### Assistant:" in t for t in head) * 2 >= len(head):
        return "guanaco"
    return "plain"


def text_prefix(texts: list[str]) -> str:
    """What llama2-style rows put before their first `[INST]` (usually `<s>`), so a rendered prompt
    starts as the training rows do."""
    for text in texts[:50]:
        if isinstance(text, str) and "[INST]" in text:
            return text[: text.index("[INST]")].lstrip()
    return ""


def render_chat(style: str, tokenizer, messages: list[dict], prefix: str = "") -> Rendered:
    """A conversation (role/content dicts, the last one the user's) ready for the assistant's answer."""
    if style == "chat_template":
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return Rendered(text, False)  # the template writes the special tokens itself
    if style == "llama2":
        eos = tokenizer.eos_token or ""
        parts, system = [], ""
        for m in messages:
            if m["role"] == "system":
                system = f"<<SYS>>\n{m['content'].strip()}\n<</SYS>>\n\n"
            elif m["role"] == "user":
                parts.append(f"{prefix}[INST] {system}{m['content'].strip()} [/INST]")
                system = ""
            else:
                parts.append(f" {m['content'].strip()} {eos}")
        return Rendered("".join(parts), True)  # tokenized as the trainer tokenizes text rows
    if style == "guanaco":
        parts = []
        for m in messages:
            if m["role"] == "user":
                parts.append(f"### Human: {m['content'].strip()}")
            elif m["role"] == "assistant":
                parts.append(f"### Assistant: {m['content'].strip()}")
        return Rendered("".join(parts) + "### Assistant:", True)
    return Rendered("\n".join(m["content"] for m in messages if m["role"] != "system"), True)


def split_example(style: str, fmt: str, value, tokenizer, prefix: str = "") -> tuple[str, Rendered, str]:
    """An eval-split row as (the prompt shown, the prompt rendered, the reference answer)."""
    if fmt == "prompt_completion":  # a row of text: its prompt, continued as it is
        return value["prompt"].strip(), Rendered(value["prompt"], True), value["completion"].strip()
    if fmt == "messages":
        turns = list(value)
        last = max((i for i, m in enumerate(turns) if m["role"] == "assistant"), default=None)
        context = turns[:last] if last else turns
        reference = turns[last]["content"] if last else ""
        users = [m["content"] for m in context if m["role"] == "user"]
        shown = users[-1] if users else str(context[-1]["content"]) if context else ""
        return shown, render_chat(style, tokenizer, context, prefix), reference
    text = str(value)
    marker = {"llama2": "[/INST]", "guanaco": "### Assistant:"}.get(style)
    if marker and marker in text:
        end = text.index(marker) + len(marker)
        head, rest = text[:end], text[end:]
        opener = "[INST]" if style == "llama2" else "### Human:"
        shown = head[head.find(opener) + len(opener) : -len(marker)] if opener in head else head
        ends = (tokenizer.eos_token or "\0", opener, *stop_strings(style, tokenizer))
        stop = min([i for i in (rest.find(end) for end in ends) if i >= 0] or [None])
        reference = rest[:stop] if stop is not None else rest
        return shown.strip(), Rendered(head, True), reference.strip()
    words = text.split()
    half = max(1, min(len(words) // 2, 48))
    shown = " ".join(words[:half])
    return shown, Rendered(shown, True), " ".join(words[half:])


def stop_token_ids(tokenizer, model=None) -> list[int]:
    """The eos token, the model's own eos ids, and the end-of-turn tokens the vocabulary holds."""
    ids: list[int] = []
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in configured if isinstance(configured, list) else [configured]:
        if isinstance(value, int):
            ids.append(value)
    vocab = tokenizer.get_vocab()
    ids.extend(vocab[t] for t in END_OF_TURN_TOKENS if t in vocab)
    return sorted(set(ids))


class _TextStream:
    """A transformers streamer: hands on new text as tokens come, holding back a tail that may be
    the start of a stop string (so the marker that ends a turn is never shown), and an unfinished
    multi-byte character."""

    def __init__(self, tokenizer, stop_strings: tuple[str, ...], on_text):
        self.tokenizer, self.stop_strings, self.on_text = tokenizer, stop_strings, on_text
        self.ids: list[int] = []
        self.prompt_seen = False
        self.sent = 0

    def put(self, value) -> None:
        if not self.prompt_seen:  # generate() hands the prompt in first
            self.prompt_seen = True
            return
        self.ids.extend(int(i) for i in value.reshape(-1).tolist())
        self._flush(final=False)

    def end(self) -> None:
        self._flush(final=True)

    def text(self) -> str:
        return cut_at_stop(self.tokenizer.decode(self.ids, skip_special_tokens=True), self.stop_strings)

    def _flush(self, final: bool) -> None:
        full = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        text = cut_at_stop(full, self.stop_strings)
        ready = len(text)
        if not final and text == full:
            if text.endswith("\ufffd"):
                ready -= 1
            ready -= max(
                (n for s in self.stop_strings for n in range(len(s), 0, -1) if text.endswith(s[:n])),
                default=0,
            )
        if self.on_text is not None and ready > self.sent:
            self.on_text(text[self.sent : ready])
            self.sent = ready


def cut_at_stop(text: str, stop_strings: tuple[str, ...]) -> str:
    cuts = [text.index(s) for s in stop_strings if s in text]
    return text[: min(cuts)] if cuts else text


def generate(
    model,
    tokenizer,
    rendered: Rendered,
    style: str,
    max_new_tokens: int,
    seed: int,
    on_text=None,
) -> Generated:
    """Greedy decoding of one prompt; `on_text(piece)` sees the answer as it grows.

    Runs under `torch.random.fork_rng`, so a sample taken in the middle of training leaves the
    training's random state as it was.
    """
    import torch

    stops = stop_strings(style, tokenizer)
    encoded = tokenizer(rendered.text, return_tensors="pt", add_special_tokens=rendered.add_special_tokens)
    device = getattr(model, "device", None) or next(model.parameters()).device
    input_ids = encoded["input_ids"].to(device)
    attention = encoded["attention_mask"].to(device)
    eos_ids = stop_token_ids(tokenizer, model)
    stream = _TextStream(tokenizer, stops, on_text)
    kwargs = dict(
        input_ids=input_ids,
        attention_mask=attention,
        max_new_tokens=max_new_tokens,
        do_sample=False,
        num_beams=1,
        temperature=None,
        top_p=None,
        top_k=None,
        eos_token_id=eos_ids or None,
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (eos_ids or [0])[0],
        use_cache=True,
        streamer=stream,
    )
    if stops:
        kwargs.update(stop_strings=list(stops), tokenizer=tokenizer)
    started = time.perf_counter()
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        with torch.no_grad():
            output = model.generate(**kwargs)
    seconds = time.perf_counter() - started
    new_ids = output[0, input_ids.shape[1] :].tolist()
    raw = tokenizer.decode(new_ids, skip_special_tokens=True)
    if new_ids and new_ids[-1] in eos_ids:
        finish = "eos"
    elif any(s in raw for s in stops):
        finish = "stop"
    else:
        finish = "length"
    text = stream.text().strip()
    if not text and new_ids:  # only special tokens: show them rather than nothing
        shown = new_ids[:-1] if finish == "eos" else new_ids
        text = tokenizer.decode(shown, skip_special_tokens=False).strip()
    end_token = tokenizer.convert_ids_to_tokens(new_ids[-1]) if finish == "eos" else None
    return Generated(text, finish, len(new_ids), round(seconds, 3), int(input_ids.shape[1]), end_token)
