"""bench/vs_unsloth.py's own arithmetic, without a GPU or unsloth: the timed rate both sides share,
the ratio and its spread, the sequences, and a cockpit config the loader accepts."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import time

import pytest
from conftest import ROOT

from cockpit.config import load as config_load


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import vs_unsloth

    return vs_unsloth


def test_the_timed_rate_starts_at_the_end_of_the_warm_up(bench):
    marks = [
        {"step": 1, "t": 10.0, "tokens": 1000, "loss": 9.0},
        {"step": 2, "t": 12.0, "tokens": 2000, "loss": 8.0},  # the last warm-up step ends here
        {"step": 3, "t": 13.0, "tokens": 3100, "loss": 7.5},
        {"step": 4, "t": 14.0, "tokens": 4000, "loss": 7.0},
    ]
    # (4000 - 2000) tokens over (14 - 12) s = 1000 tokens/s over 2 timed steps
    assert bench.timed_rate(marks, warmup=2) == (1000.0, 7.0, 2)
    assert bench.timed_rate([], warmup=2) == (None, None, 0)


def test_the_ratio_of_means_and_the_spread_of_pairs(bench):
    runs = [
        {"side": "cockpit", "tokens_per_s": 1100.0, "device_used_gib": 17.0},
        {"side": "unsloth", "tokens_per_s": 1000.0, "device_used_gib": 15.0},
        {"side": "unsloth", "tokens_per_s": 1250.0, "device_used_gib": 15.5},
        {"side": "cockpit", "tokens_per_s": 1150.0, "device_used_gib": 17.5},
    ]
    s = bench.summarize(runs, flops_per_token=27e9, peak=989e12)
    # means 1125 / 1125 = 1.0; pairs 1100/1250 = 0.88 .. 1150/1000 = 1.15
    assert (s["ratio"], s["ratio_min"], s["ratio_max"]) == (1.0, 0.88, 1.15)
    assert (s["max_used_gib_cockpit"], s["max_used_gib_unsloth"]) == (17.5, 15.5)
    assert runs[0]["mfu"] == round(1100 * 27e9 / 989e12, 4)  # 3.0%
    assert "1.00x | 0.88-1.15 | 17.5 / 15.5" in bench.table(
        {"rows": [{"id": "r", "runs": runs, "summary": s}]}
    )


def test_the_sequences_are_seeded_and_in_bounds(bench, tmp_path):
    a = bench.write_sequences(tmp_path / "a.jsonl", (32, 512), 40, 32000)
    b = bench.write_sequences(tmp_path / "b.jsonl", (32, 512), 40, 32000)
    assert a == b and all(32 <= n <= 512 for n in a)
    assert (tmp_path / "a.jsonl").read_text() == (tmp_path / "b.jsonl").read_text()
    first = json.loads((tmp_path / "a.jsonl").read_text().splitlines()[0])["input_ids"]
    assert len(first) == a[0] and min(first) >= 3


def test_the_cockpit_side_is_a_valid_qlora_config_with_the_shared_settings(bench, tmp_path):
    path = tmp_path / "c.yaml"
    bench.write_sequences(tmp_path / "d.jsonl", (2048, 2048), 2, 32000)
    path.write_text(bench.cockpit_config("synthetic:llama-2-7b", tmp_path / "d.jsonl", 2048, 23, 22.0, False))
    cfg = config_load.load_config(path)
    assert (cfg.method, cfg.quantization.bits, cfg.lora.r, cfg.lora.dropout) == ("qlora", 4, 16, 0.0)
    assert cfg.lora.target_modules == bench.TARGETS and cfg.emulate_vram_gib == 22.0
    assert cfg.training.micro_batch_size * cfg.training.gradient_accumulation_steps == bench.SAMPLES_PER_STEP
    assert (cfg.training.optimizer, cfg.training.max_steps, cfg.speed.mode) == ("adamw_8bit", 23, "auto")


def _rows(bench, tmp_path, count=24):
    bench.write_sequences(tmp_path / "d.jsonl", (32, 512), count, 32000)
    return [json.loads(line)["input_ids"] for line in (tmp_path / "d.jsonl").read_text().splitlines()]


class _FakeTrainer:
    """Trainer's loop as unsloth's runs it: a step collects its micro-batches first (the loader
    collating one batch ahead), then calls training_step once per micro-batch, then the step ends."""

    def __init__(self, rows, micro, accum, padding_free, eos=None):
        import torch

        self.torch, self.rows, self.micro, self.accum = torch, rows, micro, accum
        self.padding_free, self.eos, self.trained = padding_free, eos, []

        def collate(features):
            seqs = [list(f["input_ids"]) + ([eos] if eos is not None else []) for f in features]
            if padding_free:
                return {"input_ids": torch.tensor([[i for seq in seqs for i in seq]])}
            width = max(len(s) for s in seqs)
            return {
                "input_ids": torch.tensor([s + [0] * (width - len(s)) for s in seqs]),
                "attention_mask": torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs]),
            }

        self.data_collator = collate

    def training_step(self, model, inputs, num_items_in_batch=None):
        self.trained.append(inputs)
        return 0.0

    def train(self, callback, steps, collator=None):
        order = list(range(len(self.rows)))
        order = order[1::2] + order[0::2]  # not the file's order: the counter must name the samples
        batches = [order[i : i + self.micro] for i in range(0, len(order), self.micro)]

        def loader():  # accelerate's loader collates one batch ahead of the one it yields
            ahead = None
            for b in batches:
                made = (collator or self.data_collator)([{"input_ids": self.rows[i]} for i in b])
                if ahead is not None:
                    yield ahead
                ahead = made
            yield ahead

        it, state, truth = loader(), type("S", (), {"global_step": 0})(), []
        for _ in range(steps):
            got = [next(it) for _ in range(self.accum)]
            callback.on_step_begin(None, state, None)
            for inputs in got:
                self.training_step(None, inputs, None)
            state.global_step += 1
            callback.on_step_end(None, state, None)
            callback.on_log(None, state, None, logs={"loss": 1.5})
        for k in range(steps * self.accum):
            truth.append(sum(len(self.rows[i]) for i in batches[k]))
        return truth


@pytest.mark.parametrize("padding_free", [True, False])
def test_the_unsloth_side_counts_each_steps_real_tokens_from_the_samples_it_was_fed(
    bench, tmp_path, padding_free
):
    rows = _rows(bench, tmp_path)
    trainer = _FakeTrainer(rows, micro=2, accum=3, padding_free=padding_free)
    counter = bench.TokenCounter({bench.sample_key(r): len(r) for r in rows}, 512, padding_free)
    marks, synced = [], []
    callback = bench.step_marks_callback(object, counter, marks, sync=lambda: synced.append(1))
    counter.attach(trainer)
    per_micro = trainer.train(callback, steps=3)
    # the running total at each step's end is the drawn lengths of that step's samples, cumulated
    want = [sum(per_micro[: 3 * (k + 1)]) for k in range(3)]
    assert [m["tokens"] for m in marks] == want and [m["step"] for m in marks] == [1, 2, 3]
    assert [m["loss"] for m in marks] == [1.5] * 3 and len(synced) == 3
    s = counter.summary()
    assert (s["micro_batches"], s["samples"], s["unmatched_samples"], s["problems"]) == (9, 18, 0, [])
    assert s["padded_micro_batches"] == (0 if padding_free else None)
    assert counter.from_batch == 0
    if padding_free:  # every position is a real token
        assert s["positions"] == s["tokens"]
    else:
        assert s["positions"] > s["tokens"]  # padding is not counted


def test_the_count_checks_the_batch_the_model_got_and_falls_back_to_it(bench, tmp_path):
    rows = _rows(bench, tmp_path)
    known = {bench.sample_key(r): len(r) for r in rows}
    # an EOS appended by the collator: counted as drawn, and the difference named
    trainer = _FakeTrainer(rows, micro=2, accum=2, padding_free=True, eos=2)
    counter = bench.TokenCounter(known, 512, True)
    counter.attach(trainer)
    per_micro = trainer.train(bench.step_marks_callback(object, counter, []), steps=2)
    assert counter.tokens == sum(per_micro[:4]) and len(counter.problems) == 4
    assert counter.problems[0] == (
        f"micro-batch 1: the model got {per_micro[0] + 2} positions for {per_micro[0]} collated "
        "tokens (padding-free)"
    )
    # samples truncated before collation (max_length 100): the drawn lengths capped, the cut named
    trainer = _FakeTrainer([r[:100] for r in rows], micro=2, accum=1, padding_free=True)
    counter = bench.TokenCounter(known, 100, True)
    counter.attach(trainer)
    trainer.train(bench.step_marks_callback(object, counter, []), steps=1)
    assert (counter.tokens, counter.positions, counter.problems) == (200, 200, [])
    counter = bench.TokenCounter(known, 512, True)  # the bench's cap above what was collated
    trainer = _FakeTrainer([r[:100] for r in rows], micro=2, accum=1, padding_free=True)
    counter.attach(trainer)
    trainer.train(bench.step_marks_callback(object, counter, []), steps=1)
    assert counter.problems == [f"micro-batch 1: collated 200 tokens, drawn {len(rows[1]) + len(rows[3])}"]
    # padding-free asked for, padded batches given (unsloth's CPU fallback): counted, no problem
    trainer = _FakeTrainer(rows, micro=2, accum=2, padding_free=False)
    counter = bench.TokenCounter(known, 512, True)
    counter.attach(trainer)
    per_micro = trainer.train(bench.step_marks_callback(object, counter, []), steps=2)
    assert (counter.tokens, counter.problems, counter.summary()["padded_micro_batches"]) == (
        sum(per_micro[:4]),
        [],
        4,
    )
    # a collator the wrapper never sees: each micro-batch is counted from the batch itself
    for padding_free in (True, False):
        trainer = _FakeTrainer(rows, micro=2, accum=2, padding_free=padding_free)
        counter = bench.TokenCounter(known, 512, padding_free)
        original = trainer.data_collator
        counter.attach(trainer)
        per_micro = trainer.train(bench.step_marks_callback(object, counter, []), steps=2, collator=original)
        assert counter.tokens == sum(per_micro[:4]) and counter.from_batch == 4
        assert "4 micro-batches counted from the batch itself" in counter.summary()["source"]


def test_a_count_that_never_grows_is_no_rate_and_says_why(bench):
    # the first H200 run: unsloth's compute_loss never logs TRL's num_tokens and Trainer's own
    # counter is off, so every step read 0 tokens
    marks = [{"step": s, "t": 10.0 + s, "tokens": 0, "loss": 11.2} for s in range(1, 24)]
    assert bench.timed_rate(marks, warmup=3) == (None, 11.2, 0)
    assert bench.no_rate_reason(marks, warmup=3) == "the token count stayed at 0 from step 3 to 23"
    assert bench.no_rate_reason([], warmup=3) == "no step counted tokens"
    runs = [
        {"side": "unsloth", "tokens_per_s": None, "no_rate": bench.no_rate_reason(marks, 3), "loss": 11.2},
        {
            "side": "unsloth",
            "tokens_per_s": 2500.0,
            "loss": 11.2,
            "token_count": {"problems": ["micro-batch 1: ..."], "unmatched_samples": 0},
        },
    ]
    text = bench.table({"rows": [{"id": "r", "runs": runs, "summary": bench.summarize(runs, 27e9, None)}]})
    assert "| no rate: the token count stayed at 0 from step 3 to 23 |" in text
    assert "| 2500 (count checks: 1 differences, 0 samples not the bench's; in the json) |" in text


def test_the_cockpit_run_held_to_unsloths_memory_takes_its_peak_rounded_up(bench):
    runs = [
        {"side": "cockpit", "tokens_per_s": 5000.0, "device_used_gib": 20.24},
        {"side": "unsloth", "tokens_per_s": 2000.0, "device_used_gib": 5.41},
        {"side": "unsloth", "tokens_per_s": 2500.0, "device_used_gib": 5.45},
    ]
    assert bench.matched_cap(runs) == 5.45  # already on the 0.05 grid: not raised
    assert bench.matched_cap(runs[:2]) == 5.45  # 5.41 up to the next 0.05
    assert bench.matched_cap(runs[:1]) is None  # no unsloth run: no matched run
    runs.append(
        {"side": "cockpit@unsloth-memory", "cap_gib": 5.45, "tokens_per_s": 2700.0, "device_used_gib": 5.3}
    )
    s = bench.summarize(runs, flops_per_token=27e9, peak=989e12)
    # 2700 over the unsloth mean 2250 = 1.2; against each unsloth run 2700/2500 = 1.08, 2700/2000 = 1.35
    assert (s["matched_ratio"], s["matched_ratio_min"], s["matched_ratio_max"]) == (1.2, 1.08, 1.35)
    assert s["ratio"] == 2.222  # the unmatched ratio counts only the "cockpit" side: 5000 / 2250
    text = bench.table({"rows": [{"id": "r", "runs": runs, "summary": s}]})
    assert "1.20x (1.08-1.35), 5.3 of 5.45" in text
    assert "cockpit@unsloth-memory (cap 5.45 GiB)" in text


def test_slow_steps_are_those_over_twice_the_median_interval_after_the_warm_up(bench):
    t, marks = 0.0, []
    for step, gap in enumerate([5.0, 0.5, 0.5, 0.5, 2.0, 0.5, 0.5, 1.1], start=1):
        t += gap
        marks.append({"step": step, "t": t, "tokens": step * 100, "loss": 1.0})
    # warm-up 1: the first step's 5 s is not judged; median of the rest 0.5 s; step 5 (2.0 s) and
    # step 8 (1.1 s) are over 1.0 s
    assert bench.stalled_steps(marks, warmup=1) == [5, 8]
    assert bench.stalled_steps(marks[:3], warmup=1) == []  # too few intervals to judge


def test_the_profiled_steps_come_after_the_timed_ones_and_make_their_own_table(bench, tmp_path):
    bench.write_sequences(tmp_path / "d.jsonl", (32, 512), 4, 32000)
    path = tmp_path / "c.yaml"
    path.write_text(
        bench.cockpit_config(
            "synthetic:llama-2-7b", tmp_path / "d.jsonl", 512, 23, 22.0, False, profile_steps=3
        )
    )
    cfg = config_load.load_config(path)
    assert cfg.training.max_steps == 26  # 23 timed and warm-up steps, then 3 profiled
    assert (cfg.debug.profile_steps, cfg.debug.profile_from_step) == (3, 24)
    profile = {
        "wall_s_per_step": 0.5,
        "busy_share": 0.8,
        "s_per_step_by_kind": {"matmul": 0.3, "attention": 0.05, "other": 0.05},
        "count_per_step_by_kind": {"matmul": 900, "attention": 64, "other": 36},
        "launches_per_step": 1010,
    }
    runs = [{"side": "cockpit", "tokens_per_s": 8000.0, "device_used_gib": 20.0, "profile": profile}]
    table = bench.table({"rows": [{"id": "r", "runs": runs, "summary": bench.summarize(runs, 27e9, 989e12)}]})
    assert "| r | cockpit | 500 | 80% | 300.0 | 50.0 | - | - | - | - | - | 50.0 | 1000 | 1010 |" in table


def test_rows_name_exactly_the_combinations_to_run(bench):
    assert bench.parse_rows("llama-3.1-8b:ragged:22, llama-2-7b:full:22") == [
        ("llama-3.1-8b", "ragged", "22"),
        ("llama-2-7b", "full", "22"),
    ]
    with pytest.raises(SystemExit, match="lengths one of ragged, full"):
        bench.parse_rows("llama-2-7b:long:22")
    with pytest.raises(SystemExit, match="not a number of GiB"):
        bench.parse_rows("llama-2-7b:full:big")


def test_a_profiled_unsloth_run_gets_the_time_its_profiled_steps_take(bench):
    # on the H200 two profiled unsloth steps took 93 s and the 200-s run timed out: its result lost
    assert bench.unsloth_timeout(200, 0) == 200
    assert bench.unsloth_timeout(200, 2) >= 200 + 93


def test_the_speed_models_held_out_check_reads_each_runs_split_and_compares_step_times(monkeypatch):
    """bench/speed_heldout.py on a made-up record: a 3 x 3 run at a rate whose step takes exactly the
    predicted time has error 0; one at twice that rate, -50% (the model under-predicts it)."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import speed_heldout

    plan = {
        "micro_batch_size": 3,
        "gradient_accumulation_steps": 3,
        "checkpoint_layers": 32,
        "checkpoint_offload": True,
        "liger": True,
    }
    base = speed_heldout.workload("llama-2-7b", 512, True)
    rate = speed_heldout.partial_tokens_per_s(
        dataclasses.replace(base, micro_batch=3, grad_accum=3), 32, speed_heldout.REFERENCE_CARD, True
    )
    mean = speed_heldout.mean_length("llama-2-7b", "ragged", 3, 20)
    assert 32 <= mean <= 512
    at_predicted = 16 * mean / (9 * 512 / rate)  # real tokens/s whose step takes the predicted time
    record = {
        "warmup_steps": 3,
        "timed_steps": 20,
        "rows": [
            {
                "id": "r",
                "arch": "llama-2-7b",
                "lengths": "ragged",
                "runs": [
                    {"side": "cockpit", "tokens_per_s": at_predicted, "plan": plan},
                    {"side": "cockpit", "tokens_per_s": 2 * at_predicted, "plan": plan},
                    {"side": "unsloth", "tokens_per_s": 1.0, "plan": {}},
                ],
            }
        ],
    }
    rows = speed_heldout.rows(record)
    assert [r["error"] for r in rows] == [pytest.approx(0, abs=1e-3), pytest.approx(-0.5, abs=1e-3)]
    assert rows[0]["split"] == "3 x 3, 32 of 32 recomputed, inputs in host memory"
    # --probe: at the run's own host, as its plan read it; a host-bound split on a host twice as slow
    # takes longer, so the same measured rate is a smaller error than at the reference host
    from cockpit.speed.model import HOST_PROBE_REFERENCE_MS

    plan["host_probe_ms"] = 2 * HOST_PROBE_REFERENCE_MS
    at_reference = speed_heldout.rows(record)
    at_own = speed_heldout.rows(record, probe=True)
    assert [r["host_scale"] for r in at_reference] == [1.0, 1.0]
    assert [r["host_scale"] for r in at_own] == [2.0, 2.0]
    assert at_own[0]["predicted_step_s"] > 1.5 * at_reference[0]["predicted_step_s"]
    assert at_own[0]["error"] < -0.25


def test_the_held_out_checks_steady_step_leaves_a_one_off_pause_out(monkeypatch):
    """--steady: the measured step at the median of the timed steps' times, so one 3 s pause among
    ten 1 s steps (the rate the record gives is over all of them) is the error of the 1 s steps."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import speed_heldout

    plan = {"micro_batch_size": 3, "gradient_accumulation_steps": 3, "checkpoint_layers": 32, "liger": True}
    base = speed_heldout.workload("llama-2-7b", 512, True)
    rate = speed_heldout.partial_tokens_per_s(
        dataclasses.replace(base, micro_batch=3, grad_accum=3), 32, speed_heldout.REFERENCE_CARD, False
    )
    mean = speed_heldout.mean_length("llama-2-7b", "ragged", 3, 10)
    steady = 16 * mean / (9 * 512 / rate)  # real tokens/s whose step takes the predicted time
    times = [1.0] * 9 + [3.0]  # the whole run's rate: 12 s for what 10 steady steps do in 10
    run = {"side": "cockpit", "tokens_per_s": steady * 10 / 12, "plan": plan, "step_s": times}
    record = {
        "warmup_steps": 3,
        "timed_steps": 10,
        "rows": [{"id": "r", "arch": "llama-2-7b", "lengths": "ragged", "runs": [run]}],
    }
    (whole,) = speed_heldout.rows(record)
    (median,) = speed_heldout.rows(record, steady=True)
    assert whole["error"] == pytest.approx(0.2, abs=1e-3) and median["error"] == pytest.approx(0, abs=1e-3)
    (no_times,) = speed_heldout.rows(
        {**record, "rows": [{**record["rows"][0], "runs": [{**run, "step_s": []}]}]}, steady=True
    )
    assert no_times["error"] == whole["error"]  # no step times: the mean, as without --steady


def test_the_held_out_check_predicts_a_run_that_read_its_figures_at_the_log_as_its_plan_did(monkeypatch):
    """A run that read its figures at the log (speed.read_figures: at_log, cockpit-late before it was
    the default) is held against the model with forward and
    backward overlapping, as its plan rated it: on a split whose forward the host binds and whose backward
    the device binds, a shorter predicted step than the same split read each micro-batch."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import speed_heldout

    plan = {"micro_batch_size": 2, "gradient_accumulation_steps": 8, "checkpoint_layers": 0, "liger": True}
    late = {**plan, "read_figures": "at_log"}
    assert speed_heldout.reads_at_log(late) and not speed_heldout.reads_at_log(plan)
    record = {
        "warmup_steps": 3,
        "timed_steps": 10,
        "rows": [
            {
                "id": "r",
                "arch": "llama-2-7b",
                "lengths": "full",
                "runs": [
                    {"side": "cockpit", "tokens_per_s": 10000.0, "plan": plan},
                    {"side": "cockpit-late", "tokens_per_s": 10000.0, "plan": late},
                ],
            }
        ],
    }
    eager, at_log = speed_heldout.rows(record)
    assert at_log["predicted_step_s"] < 0.95 * eager["predicted_step_s"], (eager, at_log)


def test_the_held_out_check_times_the_steps_sixteen_rows_where_the_split_has_room_for_more(monkeypatch):
    """Rows of 2048 tokens: a step is 16 of them, so 6 x 3 (room for 18) is predicted for 16 rows:
    a run whose 16 rows take the predicted time of 16 has error 0."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import speed_heldout

    plan = {"micro_batch_size": 6, "gradient_accumulation_steps": 3, "checkpoint_layers": 0, "liger": True}
    base = speed_heldout.workload("llama-3.1-8b", 2048, True)
    rate = speed_heldout.partial_tokens_per_s(
        dataclasses.replace(base, micro_batch=6, grad_accum=3), 0, speed_heldout.REFERENCE_CARD
    )
    record = {
        "warmup_steps": 3,
        "timed_steps": 20,
        "rows": [
            {
                "id": "f",
                "arch": "llama-3.1-8b",
                "lengths": "full",
                "runs": [{"side": "cockpit", "tokens_per_s": rate, "plan": plan}],
            }
        ],
    }
    (row,) = speed_heldout.rows(record)
    assert row["error"] == pytest.approx(0, abs=1e-3)
    assert row["predicted_step_s"] == pytest.approx(16 * 2048 / rate, abs=1e-3)


def test_sides_name_the_runs_of_a_row_and_the_hf_side_runs_peft_layers(bench, tmp_path):
    order = bench.sides_order("cockpit, cockpit-hf,unsloth,cockpit@unsloth-memory,cockpit-hf@9.5")
    assert order == ["cockpit", "cockpit-hf", "unsloth", "cockpit@unsloth-memory", "cockpit-hf@9.5"]
    for bad in ("unsloth@9", "cockpit@lots", "peft"):
        with pytest.raises(SystemExit, match="--sides"):
            bench.sides_order(bad)
    path = tmp_path / "c.yaml"
    bench.write_sequences(tmp_path / "d.jsonl", (32, 512), 2, 32000)
    for backend in ("hf", "auto"):
        path.write_text(
            bench.cockpit_config(
                "synthetic:llama-2-7b", tmp_path / "d.jsonl", 512, 5, 22.0, False, 0, backend
            )
        )
        assert config_load.load_config(path).speed.backend == backend


def test_the_fused_over_hf_ratio_and_the_step_times(bench):
    runs = [
        {"side": "cockpit", "tokens_per_s": 1200.0},
        {"side": "cockpit-hf", "tokens_per_s": 1000.0},
        {"side": "cockpit-hf", "tokens_per_s": 1100.0},
        {"side": "cockpit", "tokens_per_s": 1300.0},
    ]
    s = bench.summarize(runs, flops_per_token=27e9, peak=None)
    # means 1250 / 1050 = 1.190; pairs 1200/1100 = 1.091 .. 1300/1000 = 1.3
    assert (s["fused_over_hf"], s["fused_over_hf_min"], s["fused_over_hf_max"]) == (1.19, 1.091, 1.3)
    assert "ratio" not in s  # no unsloth run: no cockpit/unsloth ratio
    marks = [{"step": i, "t": t} for i, t in enumerate([0.0, 1.0, 2.5, 3.0, 6.0], start=1)]
    assert bench.step_times(marks, warmup=2) == [1.5, 0.5, 3.0]


def test_rows_of_other_caps_take_the_runs_that_do_not_depend_on_the_cap(bench, tmp_path, monkeypatch):
    """--share-across-caps: unsloth and the cockpit held to unsloth's memory run once per model and
    lengths; the 80 GiB row runs only the cockpit at its own cap and shows the others as shared."""
    ran = []

    def fake_cockpit(row, a, work, log, cap=None, side="cockpit"):
        cap = row["cap"] if cap is None else cap
        ran.append((row["id"], side, cap))
        return {"side": side, "cap_gib": cap, "tokens_per_s": 1000.0 * cap, "device_used_gib": cap / 2}

    def fake_unsloth(row, a, work, log):
        ran.append((row["id"], "unsloth", None))
        return {"side": "unsloth", "tokens_per_s": 9000.0, "device_used_gib": 7.11}

    monkeypatch.setattr(bench, "run_cockpit", fake_cockpit)
    monkeypatch.setattr(bench, "run_unsloth", fake_unsloth)
    order = bench.sides_order("cockpit,unsloth,cockpit@unsloth-memory")

    def table_of(share: bool) -> list[list[dict]]:
        a = type("A", (), {"share_across_caps": share, "budget_s": 1e9, "out": tmp_path, "workdir": tmp_path})
        shared, took, rows = {}, {}, []
        with open(os.devnull, "w") as log:
            for cap in (22.0, 80.0):
                row = {"id": f"l7b full {cap:g} GiB", "arch": "l7b", "lengths": "full", "cap": cap}
                runs = bench.run_row(row, order, a, log, shared, took, time.time(), rows)
                rows.append({"id": row["id"], "runs": runs})
        return [r["runs"] for r in rows]

    first, second = table_of(share=True)
    assert ran == [
        ("l7b full 22 GiB", "cockpit", 22.0),
        ("l7b full 22 GiB", "unsloth", None),
        ("l7b full 22 GiB", "cockpit@unsloth-memory", 7.15),  # unsloth's peak rounded up to 0.05 GiB
        ("l7b full 80 GiB", "cockpit", 80.0),
    ]
    assert [r["side"] for r in second] == ["cockpit", "unsloth", "cockpit@unsloth-memory"]
    assert [r.get("shared_from") for r in second] == [None, "l7b full 22 GiB", "l7b full 22 GiB"]
    assert second[1]["tokens_per_s"] == first[1]["tokens_per_s"] and "shared_from" not in first[1]
    summary = bench.summarize(second, 27e9, 989e12)
    assert summary["ratio"] == round(80000 / 9000, 3) and summary["matched_cap_gib"] == 7.15
    text = bench.table({"rows": [{"id": "l7b full 80 GiB", "runs": second, "summary": summary}]})
    assert "| l7b full 80 GiB | unsloth (the run of l7b full 22 GiB, not repeated) | 9000 |" in text
    assert json.loads((tmp_path / "vs_unsloth.partial.json").read_text())["rows"][-1]["in_progress"]

    ran.clear()
    table_of(share=False)  # without the flag every row runs every side
    assert [side for _, side, _ in ran] == [*order, *order]


def test_the_packed_side_keeps_the_scales_double_quantised_and_its_ratio_is_reported(bench, tmp_path):
    """cockpit-packed: the same run with quantization.unpack_scales: false written (speed: auto keeps
    it), so a row measures what unpacking the 4-bit scales gains on the same split."""
    assert bench.sides_order("cockpit,cockpit-packed") == ["cockpit", "cockpit-packed"]
    bench.write_sequences(tmp_path / "d.jsonl", (32, 512), 2, 32000)
    path = tmp_path / "c.yaml"
    for packed in (True, False):
        path.write_text(
            bench.cockpit_config(
                "synthetic:llama-2-7b", tmp_path / "d.jsonl", 512, 5, 22.0, False, packed_scales=packed
            )
        )
        cfg = config_load.load_config(path)
        assert cfg.quantization.double_quant and cfg.quantization.unpack_scales is False
        assert ("quantization.unpack_scales" in (cfg.speed.keep or [])) == packed
    runs = [
        {"side": "cockpit", "tokens_per_s": 1100.0},
        {"side": "cockpit-packed", "tokens_per_s": 1000.0},
        {"side": "cockpit", "tokens_per_s": 1050.0},
    ]
    s = bench.summarize(runs, 27e9, 989e12)
    assert (s["unpacked_over_packed"], s["unpacked_over_packed_min"], s["unpacked_over_packed_max"]) == (
        1.075,
        1.05,
        1.1,
    )


def test_the_mlp_side_runs_the_fused_mlp_block(bench, tmp_path):
    assert bench.sides_order("cockpit-mlp,cockpit-mlp@unsloth-memory") == [
        "cockpit-mlp",
        "cockpit-mlp@unsloth-memory",
    ]
    bench.write_sequences(tmp_path / "d.jsonl", (32, 512), 2, 32000)
    path = tmp_path / "c.yaml"
    path.write_text(
        bench.cockpit_config(
            "synthetic:llama-2-7b", tmp_path / "d.jsonl", 512, 5, 22.0, False, 0, "hf", mlp_block=True
        )
    )
    cfg = config_load.load_config(path)
    assert (cfg.speed.mlp_block, cfg.speed.backend, cfg.lora.dropout) == ("fused", "hf", 0.0)


def test_the_eager_side_reads_the_figures_each_micro_batch_and_its_ratio_is_reported(bench, tmp_path):
    """cockpit-eager: the same run with speed.read_figures: each_micro_batch (TRL's and HF's reads), so a
    row measures what reading a step's figures at the log (the default) gains, at_log over eager."""
    assert bench.sides_order("cockpit,cockpit-eager,cockpit-eager,cockpit") == [
        "cockpit",
        "cockpit-eager",
        "cockpit-eager",
        "cockpit",
    ]
    bench.write_sequences(tmp_path / "d.jsonl", (32, 512), 2, 32000)
    path = tmp_path / "c.yaml"
    for eager in (True, False):
        path.write_text(
            bench.cockpit_config(
                "synthetic:llama-2-7b", tmp_path / "d.jsonl", 512, 5, 22.0, False, eager_figures=eager
            )
        )
        wanted = "each_micro_batch" if eager else "at_log"
        assert config_load.load_config(path).speed.read_figures == wanted
    runs = [
        {"side": "cockpit", "tokens_per_s": 1100.0},
        {"side": "cockpit-eager", "tokens_per_s": 1000.0},
        {"side": "cockpit-eager", "tokens_per_s": 1050.0},
        {"side": "cockpit", "tokens_per_s": 1050.0},
    ]
    s = bench.summarize(runs, 27e9, 989e12)
    got = (s["at_log_over_each_micro_batch"], s["at_log_over_each_micro_batch_min"])
    assert got == (1.049, 1.0) and s["at_log_over_each_micro_batch_max"] == 1.1
    assert "fused_over_hf" not in s and "unpacked_over_packed" not in s


def test_the_noliger_side_turns_ligers_kernels_off_and_its_ratio_is_reported(bench, tmp_path):
    """cockpit-noliger: speed.fused_kernels: off, so a row measures Liger's kernels against none on the
    same memory (the speed model rates them slower on a split the host binds: docs/benchmarks.md)."""
    assert bench.sides_order("cockpit-noliger@unsloth-memory,cockpit@unsloth-memory") == [
        "cockpit-noliger@unsloth-memory",
        "cockpit@unsloth-memory",
    ]
    bench.write_sequences(tmp_path / "d.jsonl", (32, 512), 2, 32000)
    path = tmp_path / "c.yaml"
    for liger in (True, False):
        path.write_text(
            bench.cockpit_config(
                "synthetic:llama-2-7b", tmp_path / "d.jsonl", 512, 5, 22.0, False, liger=liger
            )
        )
        assert config_load.load_config(path).speed.fused_kernels == ("auto" if liger else "off")
    runs = [{"side": "cockpit", "tokens_per_s": 1200.0}, {"side": "cockpit-noliger", "tokens_per_s": 1000.0}]
    s = bench.summarize(runs, 27e9, 989e12)
    assert (s["liger_over_off"], s["liger_over_off_min"], s["liger_over_off_max"]) == (1.2, 1.2, 1.2)
    assert "held_liger_over_off" not in s
    # held to unsloth's memory: against the default held there, never against the unheld default
    runs += [
        {"side": "cockpit@unsloth-memory", "tokens_per_s": 300.0},
        {"side": "cockpit-noliger@unsloth-memory", "tokens_per_s": 400.0},
    ]
    s = bench.summarize(runs, 27e9, 989e12)
    assert (s["liger_over_off"], s["held_liger_over_off"]) == (1.2, 0.75)


def test_a_stalled_step_is_recorded_with_what_its_log_event_says_of_it(bench):
    """stall_detail: the stalled step and the one before it, with the data wait, compute, the garbage
    collector's time and full collections, tokens a micro-batch, allocator retries and reserved GiB."""
    logs = [
        {"step": s, "ts": 100.0 + s, "loss": 1.0, "data_wait_s": 0.001, "compute_s": 0.45, "gc_s": 0.0}
        for s in range(1, 8)
    ]
    logs[5].update(data_wait_s=0.002, compute_s=2.9, gc_s=2.4, gc_full=1, mem_reserved_bytes=3 * 2**30)
    marks = [{"step": e["step"], "t": e["ts"] + (2.5 if e["step"] >= 6 else 0)} for e in logs]
    stalled = bench.stalled_steps(marks, 2)
    assert stalled == [6]
    detail = bench.stall_detail(logs, stalled)
    assert [d["step"] for d in detail] == [5, 6]
    assert detail[1]["gc_s"] == 2.4 and detail[1]["gc_full"] == 1 and detail[1]["mem_reserved_gib"] == 3.0
    assert detail[0]["gc_full"] is None and "mem_reserved_gib" not in detail[0]
    assert bench.stall_detail(logs, []) == []
    note = bench.stall_note({"stalled_steps": stalled, "stall_detail": detail})
    assert note == "; 6: data wait 0.00 s, gc 2.40 s"
    assert bench.stall_note({"stalled_steps": [6]}) == ""  # a record before the detail existed


def test_the_table_job_runs_commands_the_bench_takes(bench, tmp_path):
    """bench/table_job.sh run with a stand-in python3 that records its arguments: three vs_unsloth.py
    commands, each one the bench's parser, rows and sides take, held rows with unsloth first (its peak
    is their cap) and each part's budget up to its end."""
    fake = tmp_path / "bin" / "python3"
    fake.parent.mkdir()
    calls = tmp_path / "calls"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\0" "$@" >> {calls}\nprintf "\\n" >> {calls}\n')
    fake.chmod(0o755)
    now = int(time.time())
    env = {
        **os.environ,
        "PATH": f"{fake.parent}:{os.environ['PATH']}",
        "HELD_END": str(now + 600),
        "ALL_END": str(now + 1200),
    }
    done = subprocess.run(
        ["bash", str(ROOT / "bench" / "table_job.sh")], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    commands = [line.strip("\0").split("\0") for line in calls.read_text().split("\n") if line.strip("\0")]
    assert len(commands) == 3 and all(c[0] == "bench/vs_unsloth.py" for c in commands)
    parsed = [bench.arg_parser().parse_args(c[1:]) for c in commands]
    held, held2048, at22 = parsed
    assert [r[1] for r in bench.parse_rows(held.rows)] == ["ragged", "ragged"]
    assert [r[1] for r in bench.parse_rows(held2048.rows)] == ["full", "full"]
    for a in parsed:
        sides = bench.sides_order(a.sides)
        assert all(s.startswith("cockpit") for s in sides if s != "unsloth")
        if any(s.endswith("@unsloth-memory") for s in sides):
            assert sides[0] == "unsloth"
    assert "cockpit-eager@unsloth-memory" in held2048.sides and "cockpit-eager" in at22.sides
    assert 500 <= held.budget_s <= 600 and 1100 <= at22.budget_s <= 1200 and at22.caps == "22"
