"""Test aids (train_backend.test_aids): read from COCKPIT_TEST_AIDS, checked as config keys are,
never part of the user's config; a fault fires in a run's first trainer only."""

from __future__ import annotations

import json

import pytest

from cockpit.config import schema
from cockpit.config.load import load_config
from cockpit.config.schema import ConfigError
from train_backend import test_aids
from train_backend.errors import classify

AID_NAMES = (
    "fail_at_step",
    "fail_kind",
    "fail_rank",
    "step_sleep_s",
    "collate_cpu_ms",
    "log_cpu_ms",
    "free_bytes",
    "eval_losses",
    "count_reads",
    "corrupt_gguf_tensor",
)


def read(text: str | None, *overrides: str, first_attempt: bool = True) -> test_aids.Aids:
    env = {} if text is None else {test_aids.ENV: text}
    return test_aids.read(env, load_config(None, list(overrides)), first_attempt)


def test_no_aids_is_a_plain_run():
    assert read(None) == read("") == test_aids.Aids()
    aids = read(None)
    assert aids.fail_at_step is None and aids.step_sleep_s == 0 and aids.free_bytes is None


def test_the_aids_a_test_writes_reach_the_trainer():
    env = test_aids.environ(fail_at_step=3, fail_kind="oom", step_sleep_s=0.2)
    assert json.loads(env[test_aids.ENV]) == {"fail_at_step": 3, "fail_kind": "oom", "step_sleep_s": 0.2}
    aids = test_aids.read(env, load_config(None, ["training.max_steps=4"]), first_attempt=True)
    assert (aids.fail_at_step, aids.fail_kind, aids.step_sleep_s) == (3, "oom", 0.2)


def test_a_fault_fires_in_the_first_trainer_only_the_slowdowns_in_every_one():
    later = read('{"fail_at_step": 3, "fail_kind": "oom", "step_sleep_s": 0.2}', first_attempt=False)
    assert later.fail_at_step is None and later.step_sleep_s == 0.2


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("{fail_at_step: 3}", "COCKPIT_TEST_AIDS: not JSON"),
        ("[3]", "COCKPIT_TEST_AIDS: expected a section"),
        ('{"fail_at_stpe": 3}', "unknown key 'COCKPIT_TEST_AIDS.fail_at_stpe'. Did you mean"),
        (
            '{"fail_kind": "segfault"}',
            "COCKPIT_TEST_AIDS.fail_kind: 'segfault' (str) is not one of other, oom",
        ),
        (
            '{"step_sleep_s": 61}',
            "COCKPIT_TEST_AIDS.step_sleep_s: 61.0 (float) is out of range; it must be <= 60",
        ),
        ('{"fail_at_step": 0}', "COCKPIT_TEST_AIDS.fail_at_step: 0 (int) is out of range; it must be >= 1"),
        ('{"free_bytes": "lots"}', "COCKPIT_TEST_AIDS.free_bytes: expected a whole number"),
    ],
)
def test_an_aid_the_trainer_cannot_honour_is_refused(text, needle):
    with pytest.raises(test_aids.AidError) as caught:
        read(text)
    assert needle in str(caught.value)


def test_a_misspelt_aid_fails_the_test_that_writes_it():
    with pytest.raises(ConfigError) as caught:
        test_aids.environ(sleep_s=1)
    assert "unknown key 'COCKPIT_TEST_AIDS.sleep_s'" in str(caught.value)


def test_the_trainer_reports_a_bad_aid_as_a_config_error_that_names_it():
    with pytest.raises(test_aids.AidError) as caught:
        read('{"fail_at_step": 9}', "training.max_steps=4")
    verdict = classify(caught.value, "starting")
    assert verdict.kind == "config" and verdict.exit_code == 2
    assert "fail_at_step 9 is after training.max_steps (4)" in verdict.message
    assert "COCKPIT_TEST_AIDS" in verdict.hint and "config" not in verdict.hint


def test_the_user_never_sees_a_test_aid():
    keys = {key.rsplit(".", 1)[-1] for key, _, _ in schema.reference_rows()}
    template = schema.template()
    for name in AID_NAMES:
        assert name not in keys and f"{name}:" not in template
    assert {f.name for f in test_aids.Aids.__dataclass_fields__.values()} == set(AID_NAMES)
