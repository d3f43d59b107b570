"""The model's tokenizer alone (no weights, no torch where the folder allows), and each row's
length in tokens as the trainer counts it: a text row with its end-of-sequence token and the
tokenizer's specials, a chat row as its chat template renders it.

Every row of a small file is tokenized. Past SAMPLE_BYTES, a uniform sample (every k-th row,
k from the file's size) is, with every row that may come near `max_length` by its characters;
the others are counted from their characters at the sample's characters per token. The report
says which.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from cockpit.config.schema import TrainConfig
from cockpit.models import packaged
from cockpit.models import shipped as shapes

SAMPLE_BYTES = 8 << 20  # of a source's bytes are tokenized whole; past it, every k-th row
SAMPLE_ROWS = 40_000  # the same for a source whose size is counted in rows
NEAR_SHARE = 0.8  # a row whose characters could make this share of max_length is tokenized
CPT_MARGIN = 0.6  # characters per token assumed for that: this share of the sample's
CPT_START = 2.0  # ... and before the sample has said anything
ROWS_NAMED = 5
ANSWER_CUT_ROWS_MAX = 2000  # truncated chat rows whose answers are looked at


@dataclass
class TokenizerFound:
    tokenizer: object | None
    source: str  # where it came from, in words
    problem: str = ""  # why there is none


def load_tokenizer(cfg: TrainConfig) -> TokenizerFound:
    """The tokenizer the trainer will use, without the model's weights."""
    name = cfg.model.name
    if shapes.is_synthetic(name):
        from train_backend.model import shipped_tokenizer_dir

        return _from_folder(Path(shipped_tokenizer_dir()), f"the shipped tokenizer ({name} uses it)", cfg)
    if packaged.is_packaged(name):
        if not packaged.is_fetched(name):
            return TokenizerFound(
                None, name, f"{name} is not in the model cache yet: cockpit fetch {name} (the trainer would)"
            )
        return _from_folder(packaged.model_dir(name), f"{name} (model cache)", cfg)
    local = Path(name).expanduser()
    if local.is_dir():
        return _from_folder(local, f"local folder {name}", cfg)
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(
            name, revision=cfg.model.revision, trust_remote_code=cfg.model.trust_remote_code
        )
    except Exception as exc:  # offline, gated, no such model: the tokenizer is not a data error
        return TokenizerFound(None, f"hub {name}", f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
    return TokenizerFound(_as_trainer_has_it(tokenizer), f"hub {name} (its tokenizer files only)")


def _from_folder(folder: Path, source: str, cfg: TrainConfig) -> TokenizerFound:
    """A folder's tokenizer by the class its tokenizer_config names: transformers' tokenizers
    backend when it is the fast one (no torch import), else that class, else AutoTokenizer."""
    import transformers

    settings = folder / "tokenizer_config.json"
    named = None
    if settings.is_file():
        try:
            named = json.loads(settings.read_text(encoding="utf-8")).get("tokenizer_class")
        except (OSError, ValueError):
            named = None
    try:
        if (folder / "tokenizer.json").is_file() and named in (
            None,
            "PreTrainedTokenizerFast",
            "TokenizersBackend",
        ):
            tokenizer = transformers.PreTrainedTokenizerFast.from_pretrained(str(folder))
        elif named and hasattr(transformers, named):
            tokenizer = getattr(transformers, named).from_pretrained(str(folder))
        else:
            tokenizer = transformers.AutoTokenizer.from_pretrained(
                str(folder), trust_remote_code=cfg.model.trust_remote_code
            )
    except Exception as exc:
        return TokenizerFound(None, source, f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
    return TokenizerFound(_as_trainer_has_it(tokenizer), source)


def _as_trainer_has_it(tokenizer):
    if tokenizer.pad_token is None:  # as train_backend.model.load_tokenizer does
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def sample_every(size_bytes: int | None, num_rows: int | None) -> int:
    """k of every k-th row tokenized: 1 for a small source."""
    if size_bytes:
        return max(1, math.ceil(size_bytes / SAMPLE_BYTES))
    if num_rows:
        return max(1, math.ceil(num_rows / SAMPLE_ROWS))
    return 1


@dataclass
class Named:
    """A count with the first few rows it counts."""

    count: int = 0
    rows: list[dict] = field(default_factory=list)

    def add(self, ref: dict) -> None:
        self.count += 1
        if len(self.rows) < ROWS_NAMED:
            self.rows.append(ref)


@dataclass
class Lengths:
    """One source's token lengths."""

    max_length: int
    every: int = 1
    sample: Counter = field(default_factory=Counter)  # length -> rows, the uniform sample
    exact_rows: int = 0
    exact_used: int = 0  # tokens the exact rows train on: each cut at max_length
    sample_tokens: int = 0
    sample_chars: int = 0
    estimated_rows: int = 0
    estimated_chars: int = 0
    longest: int = 0
    longest_row: dict | None = None
    truncated: Named = field(default_factory=Named)
    answer_lost: Named = field(default_factory=Named)  # max_length cut every answer token
    answer_cut: Named = field(default_factory=Named)  # it cut some
    answers_looked_at: int = 0
    cut_tokens: int = 0  # tokens max_length cuts off the exact rows
    ordinal: int = 0

    def chars_per_token(self) -> float:
        return self.sample_chars / self.sample_tokens if self.sample_tokens else CPT_START

    def wanted(self, chars: int) -> tuple[bool, bool]:
        """(in the sample, to tokenize) for the next row of `chars` characters."""
        in_sample = self.ordinal % self.every == 0
        self.ordinal += 1
        if in_sample:
            return True, True
        cpt = max(1.0, self.chars_per_token() * CPT_MARGIN) if self.sample_tokens else 1.0
        return False, chars / cpt >= NEAR_SHARE * self.max_length

    def add_exact(self, ref: dict, tokens: int, chars: int, in_sample: bool) -> bool:
        """Count a tokenized row; True when max_length cuts it."""
        self.exact_rows += 1
        self.exact_used += min(tokens, self.max_length)
        if in_sample:
            self.sample[tokens] += 1
            self.sample_tokens += tokens
            self.sample_chars += chars
        if tokens > self.longest:
            self.longest, self.longest_row = tokens, ref
        if tokens > self.max_length:
            self.truncated.add(ref)
            self.cut_tokens += tokens - self.max_length
            return True
        return False

    def add_estimated(self, chars: int) -> None:
        self.estimated_rows += 1
        self.estimated_chars += chars

    @property
    def rows(self) -> int:
        return self.exact_rows + self.estimated_rows

    def used_tokens(self) -> int:
        """Tokens of this source the trainer trains on in one epoch (each row cut at max_length)."""
        estimated = self.estimated_chars / self.chars_per_token() if self.estimated_rows else 0
        return int(self.exact_used + estimated)

    def to_dict(self) -> dict:
        sampled = sum(self.sample.values())
        out = {
            "rows": self.rows,
            "exact_rows": self.exact_rows,
            "estimated_rows": self.estimated_rows,
            "sample_every": self.every,
            "sample_rows": sampled,
            "chars_per_token": round(self.chars_per_token(), 3) if self.sample_tokens else None,
            "per_epoch": self.used_tokens(),
            "mean_used": round(self.used_tokens() / self.rows, 1) if self.rows else None,
            "max": self.longest,
            "max_row": self.longest_row,
            "truncated": {"count": self.truncated.count, "rows": self.truncated.rows},
            "cut_tokens": self.cut_tokens,
            "answer_lost": {"count": self.answer_lost.count, "rows": self.answer_lost.rows},
            "answer_cut": {"count": self.answer_cut.count, "rows": self.answer_cut.rows},
            "answers_looked_at": self.answers_looked_at,
        }
        out.update(percentiles(self.sample))
        return out


def percentiles(counts: Counter) -> dict:
    """p50, p90, p99 of a length -> rows count (nearest rank)."""
    total = sum(counts.values())
    if not total:
        return {"p50": None, "p90": None, "p99": None, "mean": None}
    ordered = sorted(counts.items())
    out = {}
    for name, share in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        rank, seen = max(1, math.ceil(share * total)), 0
        for length, count in ordered:
            seen += count
            if seen >= rank:
                out[name] = length
                break
    out["mean"] = round(sum(k * v for k, v in ordered) / total, 1)
    return out


NICE_WIDTHS = [m * 10**e for e in range(8) for m in (1, 2, 4, 5, 8)]  # a histogram's bin widths


def histogram(counts: Counter, max_length: int, bins: int = 12) -> list[dict]:
    """Rows by length: at most `bins` equal bins from the shortest row to the longest that
    max_length keeps whole, and one past max_length (the rows it cuts)."""
    if not counts:
        return []
    top = min(max_length, max(counts))
    bottom = min(min(counts), top)

    def bin_of(length: int, width: int) -> int:
        return max(0, (length - 1) // width)

    width = next((w for w in NICE_WIDTHS if bin_of(top, w) - bin_of(bottom, w) < bins), top or 1)
    first, last = bin_of(bottom, width), bin_of(top, width)
    out = [
        {"low": i * width + 1 if i else 0, "high": min((i + 1) * width, max_length), "count": 0}
        for i in range(first, last + 1)
    ]
    over = {"low": max_length + 1, "high": max(counts), "count": 0}
    for length, count in counts.items():
        if length > max_length:
            over["count"] += count
        else:
            out[bin_of(length, width) - first]["count"] += count
    return out + ([over] if over["count"] else [])


def merge(counters: list[Counter]) -> Counter:
    total: Counter = Counter()
    for counts in counters:
        total.update(counts)
    return total
