"""A real run (tiny model, CPU) with `notify.urls`: its end runner tells a local webhook, through
Apprise, each new best eval loss while it trains and how it ended; the URL's secret is in no file
the run or the cockpit writes (notify.json, 0600, aside) and in no line it prints."""

from __future__ import annotations

import pytest
from conftest import cockpit, only_run, wait_for, write_config
from test_finish_cost_e2e import make_env
from test_notify import TOKEN, _Hook, hook  # noqa: F401  (the webhook fixture)

pytestmark = pytest.mark.slow
pytest.importorskip("apprise")


def test_a_real_run_tells_its_best_evals_and_its_end_and_keeps_the_url_out_of_every_record(
    tmp_path,
    cache_dir,
    hook,  # noqa: F811
):
    url, received = hook
    env = make_env(tmp_path, cache_dir)
    overrides = {
        "training.max_steps": 4,
        "output.save_steps": 2,
        "dataset.eval_fraction": 0.1,
        "eval.steps": 2,
        "eval.max_samples": 8,
        "training.learning_rate": 3e-3,
        "notify": {"urls": [url], "best_eval": True},
    }
    config = write_config(tmp_path / "recipe.yaml", overrides)
    proc = cockpit(["train", str(config), "--no-ui", "--skip-preflight"], env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = only_run(env)
    wait_for(lambda: any("finished at step 4" in r["title"] for r in received), 60, what="the end's notice")
    titles = [r["title"].removeprefix(f"lora-cockpit: {run.name}: ") for r in received]
    assert titles[-1] == "finished at step 4 of 4"
    assert any(t.startswith("new best eval loss") for t in titles[:-1]), titles
    assert all(r["path"] == f"/{TOKEN}" for r in received)
    assert "notify: json://127.0.0.1:" in proc.stderr + proc.stdout and TOKEN not in proc.stderr + proc.stdout
    assert f"json://127.0.0.1:{url.split(':')[2].split('/')[0]}/***" in (run / "config.yaml").read_text()
    holders = [
        p.relative_to(tmp_path / "home")
        for p in (tmp_path / "home").rglob("*")
        if p.is_file() and TOKEN.encode() in p.read_bytes()
    ]
    assert holders == [(run / "notify.json").relative_to(tmp_path / "home")]
    assert (run / "notify.json").stat().st_mode & 0o777 == 0o600
