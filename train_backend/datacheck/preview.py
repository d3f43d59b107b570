"""A few rows as the trainer sees them: through the chat template, with the tokens that train
marked (train_backend.answer_mask), and where max_length cuts the row."""

from __future__ import annotations

PREVIEW_CHARS = 900  # of a row's rendered text shown; the rest is counted


def masked(tokenizer, row: dict, fmt: str, train_on: str, max_length: int) -> dict:
    """One row for the preview: its text in segments ({"text", "trained"}), its tokens, the tokens
    that train, and where max_length cuts it (a character offset), or an `error`."""
    try:
        from train_backend import answer_mask

        sample = answer_mask.tokenize_with_mask(tokenizer, row, fmt, train_on, max_length)
    except Exception as exc:  # DataError (a template the mask cannot read) or the template's own
        return {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    text = sample.text
    cut_at = None
    if sample.length > max_length and text:
        offsets = tokenizer(text, add_special_tokens=fmt == "text", return_offsets_mapping=True)[
            "offset_mapping"
        ]
        if len(offsets) > max_length:
            cut_at = offsets[max_length][0]
    shown = text[:PREVIEW_CHARS]
    return {
        "segments": segments(shown, sample.spans),
        "chars": len(text),
        "chars_hidden": max(0, len(text) - len(shown)),
        "tokens": sample.length,
        "trained_tokens": sample.trained_tokens,
        "answer_tokens_cut": sample.answer_tokens_cut,
        "cut_at": cut_at,
    }


def segments(text: str, spans: list[tuple[int, int]]) -> list[dict]:
    """`text` in runs that train or not, by the character spans that train."""
    out: list[dict] = []
    at = 0
    for start, end in sorted(spans):
        start, end = max(start, at), min(end, len(text))
        if start >= len(text):
            break
        if start > at:
            out.append({"text": text[at:start], "trained": False})
        if end > start:
            out.append({"text": text[start:end], "trained": True})
        at = max(at, end)
    if at < len(text):
        out.append({"text": text[at:], "trained": False})
    return out


def answer_cut_reader(tokenizer, train_on: str, max_length: int):
    """(row, format) -> (answer tokens cut, every answer token cut), or None without the mask."""
    try:
        from train_backend import answer_mask
    except ImportError:
        return None

    def read(row: dict, fmt: str) -> tuple[int, bool]:
        sample = answer_mask.tokenize_with_mask(tokenizer, row, fmt, train_on, max_length)
        return sample.answer_tokens_cut, sample.answers_cut_off

    return read
