"""Several sources in one run: each prepared as one source is (`train_backend.data.prepare`),
then mixed: `samples` rows of a source, the weighted sources' rows redrawn in proportion to their
weights, the others whole (`cockpit.config.sources.mix_counts`, which `cockpit data` shows), drawn
and shuffled with training.seed."""

from __future__ import annotations

import random

from cockpit.config.schema import DatasetSection
from cockpit.config.sources import mix_counts
from train_backend import data as data_mod
from train_backend.errors import DataError


def prepare_all(section: DatasetSection, tokenizer, max_length: int, seed: int) -> data_mod.PreparedData:
    """The training rows: the one source's, or every source's in the mix's proportions."""
    if not section.sources:
        return data_mod.prepare(section, tokenizer, max_length)
    import datasets

    prepared = []
    for number, source in enumerate(section.source_list(), 1):
        one = DatasetSection(
            path=str(source.path),
            split=source.split,
            format=source.format,
            text_field=source.text_field,
            messages_field=source.messages_field,
            prompt_field=source.prompt_field,
            completion_field=source.completion_field,
            train_on=section.train_on,
        )
        try:
            prepared.append(data_mod.prepare(one, tokenizer, max_length, f"dataset.sources[{number}].split"))
        except DataError as exc:
            raise DataError(f"dataset source {number} ({source.path}): {exc}") from exc
    formats = {p.format for p in prepared}
    if len(formats) > 1:
        named = ", ".join(f"source {n}: {p.format}" for n, p in enumerate(prepared, 1))
        raise DataError(
            f"the dataset's sources are in different formats ({named}); one run trains on one format. "
            "Convert the odd source's rows, or set each source's format and fields so they agree"
        )
    counts = mix_counts([len(p.dataset) for p in prepared], section.source_list())
    picks = [
        drawn(len(p.dataset), count, seed + number)
        for number, (p, count) in enumerate(zip(prepared, counts), 1)
    ]
    order = [(s, i) for s, rows in enumerate(picks) for i in rows]
    random.Random(seed).shuffle(order)
    starts, at = [], 0
    for p in prepared:
        starts.append(at)
        at += len(p.dataset)
    whole = _concatenate(datasets, [p.dataset for p in prepared])
    mixed = whole.select([starts[s] + i for s, i in order])
    lengths = [prepared[s].lengths[i] for s, i in order]
    stats = data_mod.length_stats(lengths, max_length)
    stats.update(
        samples=len(mixed),
        dropped=sum(p.stats["dropped"] for p in prepared),
        source_rows=sum(p.stats["source_rows"] for p in prepared),
        format=prepared[0].format,
        column=prepared[0].stats["column"],
    )
    notes = [f"source {n}: {p.dropped_note}" for n, p in enumerate(prepared, 1) if p.dropped_note]
    return data_mod.PreparedData(mixed, prepared[0].format, stats, lengths, "; ".join(notes) or None)


def drawn(rows: int, count: int, seed: int) -> list[int]:
    """`count` row indices of `rows`: all of them (in order) when count is rows; fewer drawn
    without repeats; more: every row as often as it fits, the rest drawn."""
    if count == rows:
        return list(range(rows))
    rng = random.Random(seed)
    whole, rest = divmod(count, rows) if rows else (0, 0)
    return sorted(list(range(rows)) * whole + rng.sample(range(rows), rest))


def _concatenate(datasets, parts: list):
    """The sources' datasets as one; where their columns' types differ (a chat turn with a key
    another source lacks), rebuilt from plain rows so they agree."""
    try:
        return datasets.concatenate_datasets(parts)
    except ValueError:
        column = parts[0].column_names[0]
        rows = [value for part in parts for value in part[column]]
        return datasets.Dataset.from_dict({column: rows})
