"""`cockpit compare RUN RUN ...`: each run's losses by step, tokens and dollars (a restart's attempts
billed together), the config keys that differ, the final figures; text and --json."""

from __future__ import annotations

import json

import pytest

from cockpit.cli.main import main
from cockpit.config.load import config_from_dict
from cockpit.config.schema import dump_config
from cockpit.results import compare
from cockpit.run import journal, rundir

T0 = 1_700_000_000.0


def make_run(
    root,
    lr: float,
    price: float,
    logs: list[tuple[int, float]],
    evals: list[tuple[int, float]],
    restart_at: int | None = None,
) -> rundir.RunDir:
    """A run whose steps each take 10 s and 1,000 tokens; `restart_at`: a second attempt from there,
    after a 100 s gap that is not billed."""
    raw = {
        "model": {"name": "synthetic:tiny"},
        "dataset": {"path": "demo", "eval_fraction": 0.1},
        "training": {"learning_rate": lr, "max_steps": 4},
        "cost": {"price_per_hour": price},
    }
    run = rundir.create(root, "synthetic:tiny", dump_config(config_from_dict(raw)))
    path = run.events_path
    journal.append(path, "hello", ts=T0, pid=1, price_per_hour=price)
    journal.append(path, "train_begin", ts=T0, total_steps=4, start_step=0)
    for step, loss in evals:
        if step == 0:
            journal.append(path, "eval", ts=T0, step=0, stage="base", eval_loss=loss, eval_samples=4)
    for step, loss in logs:
        ts = T0 + 10 * step
        if restart_at is not None and step > restart_at:
            ts += 100
            if step == restart_at + 1:
                journal.append(path, "hello", ts=T0 + 10 * restart_at + 100, pid=2, price_per_hour=price)
        journal.append(path, "log", ts=ts, step=step, total_steps=4, loss=loss, tokens_seen=1000 * step)
        for s, v in evals:
            if s == step:
                journal.append(path, "eval", ts=ts, step=s, stage="train", eval_loss=v, eval_samples=4)
    journal.append(
        path, "done", ts=T0 + 10 * 4 + (100 if restart_at else 0), status="finished", step=4, total_steps=4
    )
    return run


@pytest.fixture
def runs(tmp_path, monkeypatch):
    monkeypatch.setenv("COCKPIT_HOME", str(tmp_path / "home"))
    root = tmp_path / "home" / "runs"
    a = make_run(root, 1e-4, 3.6, [(1, 2.0), (2, 1.8), (3, 1.7), (4, 1.6)], [(0, 2.5), (2, 1.9), (4, 1.7)])
    b = make_run(
        root,
        1e-3,
        3.6,
        [(1, 1.9), (2, 1.5), (3, 1.3), (4, 1.2)],
        [(0, 2.5), (2, 1.6), (4, 1.4)],
        restart_at=2,
    )
    return a, b


def test_each_point_carries_its_step_tokens_and_the_dollars_billed_by_then(runs):
    a, b = (compare.curves_of(r) for r in runs)
    assert [(p.step, p.tokens, p.loss) for p in a.train] == [
        (1, 1000, 2.0),
        (2, 2000, 1.8),
        (3, 3000, 1.7),
        (4, 4000, 1.6),
    ]
    # $3.60/h is a cent per 10 s step; b's 100 s between its attempts is not billed
    assert [round(p.usd, 4) for p in a.train] == [0.01, 0.02, 0.03, 0.04]
    assert [round(p.usd, 4) for p in b.train] == [0.01, 0.02, 0.03, 0.04]
    assert [(p.step, p.loss) for p in b.evals] == [(0, 2.5), (2, 1.6), (4, 1.4)]
    assert (b.figures()["best_eval_loss"], b.figures()["best_eval_step"]) == (1.4, 4)
    assert a.figures()["status"] == "finished" and a.figures()["tokens"] == 4000


def test_the_config_difference_is_the_keys_set_differently(runs):
    diff = compare.config_diff([compare.curves_of(r) for r in runs])
    assert diff == {"training.learning_rate": [1e-4, 1e-3]}


def test_the_table_reads_each_run_at_the_same_points_on_each_axis(runs):
    curves = [compare.curves_of(r) for r in runs]
    by_step = compare.report(curves, "step", rows=3)["table"]
    assert [row["step"] for row in by_step] == [0.0, 2.0, 4.0]
    assert by_step[1] == {"step": 2.0, "train": [1.8, 1.5], "eval": [1.9, 1.6]}
    assert by_step[0]["train"] == [None, None] and by_step[0]["eval"] == [2.5, 2.5]
    by_usd = compare.report(curves, "usd", rows=5)["table"]
    assert by_usd[-1]["usd"] == pytest.approx(0.04) and by_usd[-1]["train"] == [1.6, 1.2]
    by_tokens = compare.report(curves, "tokens", rows=5)["table"]
    assert [row["tokens"] for row in by_tokens] == [0, 1000, 2000, 3000, 4000]


def test_compare_prints_figures_config_and_losses(runs, capsys):
    a, b = runs
    assert main(["compare", a.run_id, b.run_id, "--no-ui", "--rows", "3"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split() == ["run", a.run_id, b.run_id]
    assert any(line.split() == ["eval", "loss", "1.7000", "1.4000"] for line in lines)
    assert any(
        line.split() == ["best", "eval", "1.7000", "at", "step", "4", "1.4000", "at", "step", "4"]
        for line in lines
    )
    assert any(line.split() == ["cost", "$0.040", "$0.040"] for line in lines), out
    assert "config (what differs):" in out
    assert any(line.split() == ["training.learning_rate", "0.0001", "0.001"] for line in lines)
    assert "loss by step (train / eval; - where a run has no point):" in out
    assert any(line.split() == ["2", "1.8000", "/", "1.9000", "1.5000", "/", "1.6000"] for line in lines)


def test_compare_json_holds_every_point_and_the_difference(runs, capsys):
    a, b = runs
    assert main(["compare", a.run_id, b.run_id, "--json", "--by", "usd"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["axis"] == "usd" and [r["run"] for r in data["runs"]] == [a.run_id, b.run_id]
    assert len(data["runs"][1]["train"]) == 4 and data["runs"][1]["train"][-1]["tokens"] == 4000
    assert data["config_diff"] == {"training.learning_rate": [0.0001, 0.001]}


def test_compare_needs_two_runs(runs, capsys):
    a, _ = runs
    assert main(["compare", a.run_id, a.run_id, "--no-ui"]) == 2
    assert "at least two different runs" in capsys.readouterr().err


def test_the_overlay_colours_each_run_and_shares_the_axes():
    from widgets.overlay_plot import overlay_rows

    grid = overlay_rows([[(0, 2.0), (10, 1.0)], [(0, 1.0), (5, 1.0)]], columns=10, rows=4)
    assert grid is not None
    # run 0 falls from the top left to the bottom right; run 1 is flat along the bottom, half as long
    assert grid[0][0] == (grid[0][0][0], 0) and grid[0][0][0]
    assert {index for _, index in grid[-1][:5]} == {1} and grid[-1][9][1] == 0
    assert all(bits == 0 for bits, _ in grid[0][5:])  # the top right: nobody there
    assert overlay_rows([[], []], 10, 4) is None


async def test_the_compare_screen_overlays_the_runs_and_switches_its_axis(runs):
    from support.pilot import screen_text

    from screens.compare.app import CompareApp

    app = CompareApp([compare.curves_of(r) for r in runs])
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        text = screen_text(app)
        assert "training loss by step" in text and "eval loss by step" in text
        assert any(0x2800 < ord(ch) <= 0x28FF for ch in text)  # braille dots drawn
        assert f"■ {runs[0].run_id}" in text and "training.learning_rate" in text
        assert "(train / eval;" not in text  # the text's table: the plots draw it
        await pilot.press("d")
        await pilot.pause()
        text = screen_text(app)
        assert "training loss by dollars" in text and "$0.040" in text
        await pilot.press("t")
        await pilot.pause()
        assert "eval loss by tokens" in screen_text(app) and "4,000 tokens" in screen_text(app)


def test_compare_without_the_screen_never_imports_textual_or_torch(runs):
    import os
    import subprocess
    import sys

    a, b = runs
    code = (
        "import sys\nfrom cockpit.cli.main import main\n"
        f"assert main(['compare', {a.run_id!r}, {b.run_id!r}, '--json']) == 0\n"
        "roots = {m.split('.')[0] for m in sys.modules}\n"
        "assert not {'textual', 'torch', 'screens', 'widgets'} & roots, roots\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=dict(os.environ), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert '"config_diff"' in proc.stdout
