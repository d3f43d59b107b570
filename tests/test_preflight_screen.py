"""The preflight screen: snapshots (all pass, mixed with a failure's fix, no GPU; 100x32 and 80x24)
and pilot tests (rows fill in as checks finish, details follow the cursor, re-run one or all, export,
exit codes), on fake machines (tests/preflight_fakes.py). Deterministic: fixed check durations, an
injected clock and date, checks held and released by the test.

After `--snapshot-update`, read snapshot_report.html (or the SVGs) before accepting.
"""

from __future__ import annotations

import datetime as dt
import json
import time

from preflight_fakes import Counted, machine
from textual.geometry import Region
from textual.widgets import Input
from textual.widgets._toast import Toast

from cockpit.preflight.runner import Preflight
from screens.preflight.app import PreflightApp
from screens.preflight.export import ExportReport
from widgets.check_details import LABEL_WIDTH, CheckDetails

WHEN = dt.datetime(2026, 3, 14, 9, 26, 53, tzinfo=dt.timezone.utc)
META = {"cockpit": "0.1.0", "python": "3.12.3", "quick": False, "driver": "580.82.07"}


class Clock:
    """The first reading is when the run starts, every later one 3.4 s on."""

    def __init__(self) -> None:
        self.readings = 0

    def __call__(self) -> float:
        self.readings += 1
        return 1000.0 if self.readings == 1 else 1003.4


def app_for(checks, tmp_path=None, quick: bool = False) -> PreflightApp:
    session = Preflight(checks, meta=lambda: dict(META))
    return PreflightApp(session, quick=quick, clock=Clock(), now=lambda: WHEN, export_dir=tmp_path)


async def until(pilot, predicate, what: str, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await pilot.pause(0.02)
    await pilot.pause()


async def finished(pilot) -> None:
    app = pilot.app
    await until(pilot, lambda: app.started_at is not None and not app.running_all, "the checks to finish")


def rows(app: PreflightApp) -> dict[str, str]:
    """Row key -> status shown."""
    return {key: row.status for key, row in app.view.check_list.rows.items()}


def notes(app: PreflightApp) -> list[str]:
    return [n.message for n in app._notifications]


def details(app: PreflightApp) -> str:
    return str(app.view.query_one(CheckDetails).render())


def shown_lines(widget) -> list[str]:
    """The rows a widget draws, as text."""
    return [strip.text.rstrip() for strip in widget.render_lines(Region(0, 0, *widget.region.size))]


# ---- snapshots


def test_all_pass(snap_compare):
    assert snap_compare(app_for(machine("healthy")), terminal_size=(100, 32), run_before=finished)


def test_mixed_with_a_failures_fix(snap_compare):
    async def on_the_failure(pilot):
        await finished(pilot)
        await pilot.press("down")  # from "GPU visible" to "Driver runs torch's CUDA", failed
        await pilot.pause()
        assert pilot.app.view.check_list.selected_row.result.status == "fail"

    assert snap_compare(app_for(machine("mixed")), terminal_size=(100, 32), run_before=on_the_failure)


def test_mixed_80x24(snap_compare):
    async def on_the_failure(pilot):
        await finished(pilot)
        await pilot.press("down")
        await pilot.pause()

    assert snap_compare(app_for(machine("mixed")), terminal_size=(80, 24), run_before=on_the_failure)


def test_no_gpu(snap_compare):
    assert snap_compare(app_for(machine("no_gpu"), quick=True), terminal_size=(100, 32), run_before=finished)


# ---- behaviour


async def test_rows_fill_in_as_checks_finish():
    fake = Counted(machine("mixed"), hold=True)
    app = app_for(fake.checks)
    async with app.run_test(size=(100, 32)) as pilot:
        await until(pilot, lambda: len(rows(app)) == 7, "the plan")
        assert set(rows(app).values()) == {"running"} and "running" in details(app)
        fake.release("host.cpu")
        await until(pilot, lambda: rows(app).get("r:host.cpu") == "warn", "host.cpu's answer")
        assert "p:host.cpu" not in rows(app) and rows(app)["p:gpu"] == "running"
        assert list(rows(app).values()).count("running") == 6
        fake.release("gpu")  # one check, seventeen rows
        await until(pilot, lambda: "r:gpu.cuda_driver" in rows(app), "the GPU probe's answers")
        assert "p:gpu" not in rows(app) and rows(app)["r:gpu.cuda_driver"] == "fail"
        fake.release()
        await finished(pilot)
        assert "running" not in rows(app).values()
        assert app.view.check_list.results[0].id == "gpu.visible"  # GPU first, whatever finished first


async def test_selecting_a_row_shows_its_evidence_threshold_and_fix():
    app = app_for(machine("mixed"))
    async with app.run_test(size=(100, 32)) as pilot:
        await finished(pilot)
        assert "GPU visible to NVML" in details(app) and "Tesla T4" in details(app)
        await pilot.press("down")
        shown = details(app)
        driver = app.view.check_list.selected_row.result
        assert driver.id == "gpu.cuda_driver" and driver.status == "fail"
        assert driver.threshold in shown and driver.fix[:60] in shown and "535.104.05" in shown
        assert "re-runs check 'gpu' (18 rows)" in shown  # it came from the GPU probe
        await pilot.press("end")
        assert app.view.check_list.selected_row.result.id == "software.versions"
        await pilot.press("up")  # over the "Software" heading: the cursor lands on checks only
        assert app.view.check_list.selected_row.check_id == "network.hub"
        assert "412 ms" in details(app) and "HF_ENDPOINT" in details(app)


async def test_rerun_one_check_runs_only_it():
    fake = Counted(machine("mixed"))
    app = app_for(fake.checks)
    async with app.run_test(size=(100, 32)) as pilot:
        await finished(pilot)
        for _ in range(20):
            await pilot.press("down")
            if app.view.check_list.selected_row.check_id == "disk.type.cache":
                break
        fake.gates["disk.type.cache"].clear()  # hold the re-run to see it running
        await pilot.press("r")
        await until(pilot, lambda: fake.runs["disk.type.cache"] == 2, "the re-run to start")
        assert rows(app)["r:disk.type.cache"] == "running" and "running again" in details(app)
        assert app.exit_code() == 2
        fake.release("disk.type.cache")
        await until(pilot, lambda: rows(app)["r:disk.type.cache"] == "warn", "the re-run's answer")
        assert set(fake.runs.values()) == {1} | {2} and fake.runs["disk.type.cache"] == 2
        assert sum(fake.runs.values()) == len(fake.checks) + 1
        await pilot.press("q")
    assert app.return_value == 2


async def test_rerun_a_gpu_row_reruns_the_probe_whole():
    fake = Counted(machine("healthy"))
    app = app_for(fake.checks)
    async with app.run_test(size=(100, 32)) as pilot:
        await finished(pilot)
        before = rows(app)
        await pilot.press("down", "down", "r")
        await until(pilot, lambda: fake.runs["gpu"] == 2 and not app._reruns, "the probe to run again")
        assert fake.runs["host.cpu"] == 1 and rows(app) == before


async def test_rerun_all_and_quit_codes():
    fake = Counted(machine("healthy"))
    app = app_for(fake.checks)
    async with app.run_test(size=(100, 32)) as pilot:
        await finished(pilot)
        await pilot.press("a")
        await until(pilot, lambda: set(fake.runs.values()) == {2}, "every check to run twice")
        await finished(pilot)
        assert "exit 0" in str(app.view.query_one("#summary").render())
        await pilot.press("q")
    assert app.return_value == 0


async def test_quit_before_the_checks_finish_is_not_a_pass():
    fake = Counted(machine("healthy"), hold=True)
    app = app_for(fake.checks)
    async with app.run_test(size=(100, 32)) as pilot:
        await until(pilot, lambda: len(rows(app)) == 7, "the plan")
        await pilot.press("q")
    assert app.return_value == 1
    fake.release()


async def test_export_writes_the_json_report(tmp_path):
    app = app_for(machine("mixed"), tmp_path)
    async with app.run_test(size=(100, 32)) as pilot:
        await finished(pilot)
        await pilot.press("e")
        await until(pilot, lambda: isinstance(app.screen, ExportReport), "the export prompt")
        assert app.screen.query_one(Input).value == str(tmp_path / "preflight-20260314-092653.json")
        await pilot.press("enter")
        await until(pilot, lambda: app.last_export is not None, "the report to be written")
        written = app.last_export
        assert any(str(written) in n.replace("\n", "") for n in notes(app))
        # a path of one's own, relative to the directory
        await pilot.press("e")
        await until(pilot, lambda: isinstance(app.screen, ExportReport), "the export prompt")
        app.screen.query_one(Input).value = "reports/box.json"
        await pilot.press("enter")
        await until(pilot, lambda: app.last_export == tmp_path / "reports" / "box.json", "the second report")
    data = json.loads(written.read_text())
    assert set(data) == {"kind", "date", "hostname", "meta", "exit_code", "summary", "results"}
    assert data["kind"] == "preflight" and data["date"] == "2026-03-14T09:26:53+00:00"
    assert data["exit_code"] == 2 and data["meta"]["driver"] == "580.82.07"
    assert data["meta"]["duration_s"] == 3.4
    ids = [r["id"] for r in data["results"]]
    assert ids[0] == "gpu.visible" and ids[-1] == "network.hub" and len(ids) == 24
    assert data["summary"] == {s: sum(r["status"] == s for r in data["results"]) for s in data["summary"]}
    assert json.loads((tmp_path / "reports" / "box.json").read_text())["results"] == data["results"]


async def test_a_wrapped_fix_goes_on_under_its_text_not_under_its_label():
    """Walkthrough: at 80x24 the details' `fix` went on at the left edge (`... or a torch` / `wheel`)."""
    app = app_for(machine("mixed"))
    async with app.run_test(size=(80, 24)) as pilot:
        await finished(pilot)
        await pilot.press("down")
        await pilot.pause()
        fix = app.view.check_list.selected_row.result.fix
        lines = shown_lines(app.view.query_one(CheckDetails))
    at = next(i for i, line in enumerate(lines) if line.lstrip().startswith("fix "))
    column = lines[at].index("fix ") + LABEL_WIDTH
    assert lines[at + 1][:column].strip() == "" and lines[at + 1][column] != " ", lines
    assert " ".join(" ".join(line[column:] for line in lines[at : at + 2]).split()) == fix


async def test_the_exported_report_s_toast_keeps_its_file_name_whole(tmp_path):
    """Walkthrough: at 80x24 the toast read `.../preflight-20261203-15102` / `0.json`."""
    folder = tmp_path / "wk-cwd"
    app = app_for(machine("mixed"), folder)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await finished(pilot)
        await pilot.press("e")
        await until(pilot, lambda: isinstance(app.screen, ExportReport), "the export prompt")
        await pilot.press("enter")
        await until(pilot, lambda: app.last_export is not None, "the report to be written")
        await until(pilot, lambda: app.screen.query(Toast), "the toast")
        await pilot.pause()
        toast = app.screen.query(Toast).last()
        lines = [line.strip("▌ ") for line in shown_lines(toast) if line.strip("▌ ")]
    assert "preflight-20260314-092653.json" in lines, lines
    assert "".join(lines[1:]) == str(folder / "preflight-20260314-092653.json"), lines


async def test_export_refuses_while_checks_run(tmp_path):
    fake = Counted(machine("healthy"), hold=True)
    app = app_for(fake.checks, tmp_path)
    async with app.run_test(size=(100, 32)) as pilot:
        await until(pilot, lambda: len(rows(app)) == 7, "the plan")
        await pilot.press("e")
        await pilot.pause()
        assert not isinstance(app.screen, ExportReport) and "still running" in notes(app)[-1]
        fake.release()
        await finished(pilot)
    assert not list(tmp_path.iterdir())


async def test_export_to_an_unwritable_place_says_so(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    app = app_for(machine("healthy"), tmp_path)
    async with app.run_test(size=(100, 32)) as pilot:
        await finished(pilot)
        await pilot.press("e")
        await until(pilot, lambda: isinstance(app.screen, ExportReport), "the export prompt")
        app.screen.query_one(Input).value = str(blocker / "r.json")
        await pilot.press("enter")
        await until(pilot, lambda: not isinstance(app.screen, ExportReport), "the prompt to close")
        assert app.last_export is None and "could not write" in notes(app)[-1]


async def test_footer_names_every_key():
    app = app_for(machine("healthy"))
    async with app.run_test(size=(80, 24)) as pilot:
        await finished(pilot)
        shown = {k: a.binding.description for k, a in app.active_bindings.items() if a.binding.show}
    assert {"r", "a", "e", "q"} <= set(shown) and all(shown[k] for k in "raeq")


async def test_the_real_quick_preflight_fills_the_screen_here(env):
    """The real plan and probe: it finishes (here with no GPU: saying why) and quits with its verdict."""
    from cockpit.preflight.checks.base import exit_code
    from cockpit.preflight.full import full_preflight

    app = PreflightApp(full_preflight(True), quick=True)
    async with app.run_test(size=(100, 32)) as pilot:
        await until(pilot, lambda: app.started_at is not None and not app.running_all, "the checks", 120)
        shown = rows(app)
        assert {"r:gpu.visible", "r:network.hub", "r:host.cpu"} <= set(shown)
        assert shown["r:software.versions"] == "pass" and "running" not in shown.values()
        visible = app.view.check_list.rows["r:gpu.visible"].result
        assert visible.status == "pass" or ("NVML" in visible.value and "NVML" in details(app))
        results = app.view.check_list.results
        await pilot.press("q")
    assert app.return_value == exit_code(results)
