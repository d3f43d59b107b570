"""The OOM wizard offers partial recomputation (speed: auto with the fewest recomputed layers that fit),
ranked by predicted speed: on the recorded OOMs its first fix is not full checkpointing where a
partial one fits, and keeps at least 0.9x the speed of the best split that fits (issue 44, item 6)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from fixtures_oom import ARTICLE_13B, DATA, H200, oom_event

from cockpit.config.load import config_from_dict, config_from_dotted
from cockpit.gpus.catalog import load_catalog
from cockpit.models.shape import load_shape
from cockpit.oom import rehearsal
from cockpit.oom.remedies import analyse, relative_speed
from cockpit.run import journal

KEEPS_RESULTS = 1  # effect ranks up to this keep the run's results (Option.auto)


def _recorded() -> tuple:
    """The shipped rehearsal: a real OOM of the article's 13B on an emulated 24 GiB card (H200)."""
    folder = rehearsal.recording_dir()
    raw = yaml.safe_load((folder / "config.yaml").read_text())
    raw["dataset"]["path"] = str(Path(folder) / raw["dataset"]["path"])
    cfg = config_from_dict(raw)
    path = Path(folder) / "events.jsonl"
    error, data = journal.last_event(path, "error"), journal.last_event(path, "data") or {}
    device = (journal.last_event(path, "hello") or {}).get("device") or H200
    return cfg, error, data, device


CASES = {
    "rehearsal-13b-24gib": _recorded,
    "fixture-13b-24gib": lambda: (config_from_dotted(ARTICLE_13B), oom_event(), DATA, H200),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_first_fix_is_the_fewest_layers_that_fit_at_nine_tenths_of_the_best_split(case):
    cfg, error, data, device = CASES[case]()
    a = analyse(cfg, error, load_shape(cfg.model.name), data, device, load_catalog())
    fitting = [
        o for o in a.options if o.applicable and o.verdict == "fits" and o.effect_rank <= KEEPS_RESULTS
    ]
    partial = [o for o in fitting if any(c.checkpoint_layers for c in o.choices)]
    assert partial, f"{case}: no partial recomputation fits"
    first = a.options[0]
    assert first is partial[0] and first is a.auto_choice()  # not every layer recomputed
    splits = [o for o in fitting if o.keys[0] in ("gradient_checkpointing", "micro_batch")]
    assert first.speed >= 0.9 * max(o.speed for o in splits)
    every_layer = relative_speed(a.workload, replace(a.workload, gradient_checkpointing=True), a.speed_card)
    assert first.speed > every_layer + 0.1  # full checkpointing: 0.72-0.78x on the recorded OOMs
    layers = partial[0].choices[0].checkpoint_layers
    assert 0 < layers < load_shape(cfg.model.name).num_layers
