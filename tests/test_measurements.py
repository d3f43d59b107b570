"""Every figure of docs/measurements.md and docs/limits.md is what its record says: each test reads
the record under bench/results/ (or docs/) and finds the figure, as written, in the doc that holds it.
(These ties were the README's until its figures moved to these docs.)"""

from __future__ import annotations

import re

from conftest import ROOT

NUMBER_WORDS = {3: "three", 5: "five", 8: "eight"}


RESULTS = ROOT / "bench" / "results"


def _json(path):
    import json

    return json.loads(path.read_text())


def _flat(text: str) -> str:
    return " ".join(text.split())


MEASURED = _flat((ROOT / "docs" / "measurements.md").read_text())
LIMITS = _flat((ROOT / "docs" / "limits.md").read_text())
# what no doc may say any more (figures a record has since replaced): every page a user reads
EVERYWHERE = _flat(
    "\n".join(
        (ROOT / name).read_text()
        for name in ("README.md", "docs/guide.md", "docs/measurements.md", "docs/limits.md")
    )
)


def test_fast_by_default_figures_are_the_benchs():
    summary = _json(RESULTS / "2026-11-30-fast-vs-seed-h200.json")["summary"]
    assert f"{summary['mixed']['ratio_tokens_per_s']:.2f}x the real tokens/s on ragged data" in MEASURED
    assert f"{summary['fixed']['ratio_tokens_per_s']:.2f}x on rows of exactly 512 tokens" in MEASURED
    peak = max(summary["mixed"]["max_device_used_gib"], summary["fixed"]["max_device_used_gib"])
    assert f"at {peak:.1f} GiB (fits a 24 GB card)" in MEASURED


def test_speed_off_is_parity_within_the_spread_not_a_speed_up():
    spine = _json(RESULTS / "2026-11-30-spine-vs-seed-fixed-h200.json")
    seed = [r["tokens_per_s"] for r in spine["seed"]]
    ours = [r["tokens_per_s"] for r in spine["cockpit"]]
    ratio = (sum(ours) / len(ours)) / (sum(seed) / len(seed))
    drift = max(seed) / min(seed) - 1
    assert ratio - 1 < drift  # the gap is smaller than the reference's own spread
    assert f"({ratio:.2f}x its tokens/s" in MEASURED and f"moved {drift:.0%} between its two runs" in MEASURED
    assert "parity within their spread" in MEASURED
    (used,) = {r["device_used_gib"] for r in spine["seed"] + spine["cockpit"]}
    assert f"same device memory ({used:.2f} GiB)" in MEASURED


def test_the_oom_scenarios_are_told_as_they_ran():
    runs = sorted(RESULTS.glob("*oom*-h200.json"))
    assert len(runs) == 5
    scenarios = [s for run in runs for s in _json(run)["scenarios"]]
    caught = [s for s in scenarios if s["oom"]["caught"]]
    # a scenario run again after a fix counts once
    fixed = {s["name"] for s in caught if s["relaunch"]["finished"] and s["relaunch"]["trainers"] == 2}
    words = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}
    assert f"{words[len(fixed)]} real OOMs" in MEASURED and fixed == {s["name"] for s in caught}
    cards = sorted({s["card_gib"] for s in caught}, reverse=True)
    cards_text = ", ".join(str(c) for c in cards[:-1]) + f" and {cards[-1]}"
    assert f"OOMs on emulated {cards_text} GiB cards" in MEASURED
    for missed in (s for s in scenarios if not s["oom"]["caught"]):
        assert f"({missed['oom']['nvml_peak_gib']:.1f} GiB peak by NVML)" in MEASURED
    # since the emulation counts the whole process: every scenario re-run, each held to its size
    (recheck,) = [run for run in runs if "oom-scenarios-recheck" in run.name]
    held = _json(recheck)["scenarios"]
    assert {s["name"] for s in held} == fixed - {"vocab152k-lora-8x2048-24gib"}  # re-run just before
    for s in held:
        assert s["emulated_vram"]["whole_process"] and s["held_to_emulated_size"]
        assert (
            s["nvml_max_gib"] <= s["card_gib"]
            and f"{s['nvml_max_gib']:.2f} of {s['card_gib']} GiB" in MEASURED
        )
    (vocab,) = _json(RESULTS / "2026-12-02-oom-vocab152k-recheck-h200.json")["scenarios"]
    assert f"{vocab['nvml_max_gib']:.2f} of {vocab['card_gib']} GiB" in MEASURED


def test_the_doctor_fixes_are_the_benchs():
    bench = _json(RESULTS / "2026-12-02-doctor-fixes-2-h200.json")
    cases = {c["case"]: c for c in bench["cases"]}
    demo, slow, cpu, foreign = (cases[n] for n in ("demo-packed", "slow-loader", "cpu-bound", "foreign"))
    assert any("GPU underfed" in line for line in demo["runs"][0]["doctor_live_lines"])
    for case, rule in ((demo, "gpu_underfed"), (slow, "input_bound"), (cpu, "cpu_bound")):
        assert case["rules"][rule]["named_live"] and case["rules"][rule]["named_replayed"]
    assert (
        f"x{demo['gain']:.2f} real tokens/s" in MEASURED
        and f"(predicted x{demo['predicted_gain']:.2f})" in MEASURED
    )
    assert f"x{demo['wrong_fix_gain']:.2f} for the old advice" in MEASURED
    assert f"x{slow['gain']:.2f} with loader workers (predicted x{slow['predicted_gain']:.2f})" in MEASURED
    assert f"x{cpu['gain']:.2f} with fewer logs" in MEASURED
    assert not foreign["rules"]["foreign_process"]["named_live"] and "was not named in two calls" in MEASURED
    rest = {
        c["case"]: c for c in _json(RESULTS / "2026-12-02-doctor-rest-h200" / "doctor_fixes.json")["cases"]
    }
    assert not rest["foreign"]["rules"]["foreign_process"]["named_live"]
    assert f"stopping it gave x{foreign['gain']:.2f}, then x{rest['foreign']['gain']:.2f}" in MEASURED
    fp32 = rest["fp32"]["rules"]["fp32_on_bf16_card"]
    assert (
        fp32["named_live"]
        and fp32["named_replayed"]
        and f"named, x{rest['fp32']['gain']:.2f} in bf16" in MEASURED
    )


def _unsloth_summary(name: str) -> tuple[dict, dict]:
    (row,) = _json(RESULTS / f"2026-12-02-vs-unsloth-{name}-h200.json")["rows"]
    return row, row["summary"]


def test_the_unsloth_figures_are_the_benchs():
    row, s = _unsloth_summary("7b-matched3")
    spread = f"({s['ratio_min']:.2f}-{s['ratio_max']:.2f})"
    assert f"{s['ratio']:.2f}x unsloth's real tokens/s on llama-2-7b {spread}" in MEASURED
    assert (
        f"{s['matched_ratio']:.2f}x on the 7B ({s['matched_ratio_min']:.2f}-{s['matched_ratio_max']:.2f}, "
        f"{s['matched_used_gib']:.2f} of {s['matched_cap_gib']:.2f} GiB" in MEASURED
    )
    assert f"against unsloth's {s['max_used_gib_unsloth']:.2f} and" in MEASURED
    mfus = sorted(r["mfu"] for r in row["runs"] if r["side"] == "cockpit")
    assert f"MFU on the 7B ragged row: {mfus[0]:.0%}-{mfus[-1]:.0%}".replace("%-", "-") in LIMITS
    _, s8 = _unsloth_summary("8b-matched")
    assert f"{s8['ratio']:.2f}x on llama-3.1-8b ({s8['ratio_min']:.2f}-{s8['ratio_max']:.2f})" in MEASURED
    assert f"and {s8['max_used_gib_unsloth']:.2f}. Held to" in MEASURED
    cockpit_gib = {f"{x['max_used_gib_cockpit']:.1f}" for x in (s, s8)}
    assert len(cockpit_gib) == 1 and f"at {cockpit_gib.pop()} GiB against unsloth's" in MEASURED
    assert f"and {s8['matched_ratio']:.2f}x on the 8B" in MEASURED
    _, sf = _unsloth_summary("7b-full")
    assert (
        f"{sf['ratio']:.2f}x at the same cap, {sf['matched_ratio']:.2f}x held to unsloth's "
        f"{sf['max_used_gib_unsloth']:.2f} GiB" in MEASURED
    )


def test_the_attached_views_cost_on_the_gpu_box_is_the_benchs():
    calls = [_json(RESULTS / f"2026-12-04-attach-overhead-interleaved{n}-h200.json") for n in ("", "-2")]
    turns = [r for call in calls for r in call["runs"] if r["kind"] == "interleaved"]
    assert len(turns) == 3 and all(r["status"] == "stopped" for r in turns)
    ratios = [r["ratio_attached_over_detached"] for r in turns]
    assert f"was {ratios[0]:.3f}, {ratios[1]:.3f} and {ratios[2]:.3f} in three runs" in LIMITS
    assert f"mean {sum(ratios) / 3:.3f} (the goal: 0.99;" in LIMITS
    spans = [s for r in turns for s in r["spans"]]
    assert all(s["steps"] >= 5 for s in spans)  # every span timed some whole steps
    rates = [s["tokens_per_s"] for s in spans]
    assert f"moved between {min(rates):.0f} and {max(rates):.0f} tokens/s" in LIMITS
    attached = [r for r in calls[0]["runs"] if r["kind"] == "attached"]
    assert calls[0]["steps"] == 40 and len(attached) == 2
    assert all(r["status"] == "finished" for r in attached)
    whole = " and ".join(f"{r['tui_core_share']:.2%}" for r in attached)
    assert f"{whole} of a core over two whole attached runs of 40 steps" in LIMITS
    assert max(r["tui_core_share"] for r in attached) <= 0.03  # the goal, as the README says it is met
    walls = " and ".join(f"{r['wall_s']:.0f}" for r in attached)
    assert f"({walls} s, ~30 s" in LIMITS
    drawn = [r["tui_core_share_drawn"] for r in attached]
    assert f"{min(drawn):.1%}-{max(drawn):.1%} from its first screen on".replace("%-", "-", 1) in LIMITS
    start = [r["tui_start_cpu_s"] for r in attached]
    assert f"{min(start):.2f}-{max(start):.2f} s of CPU before it" in LIMITS
    before = [_json(RESULTS / f"2026-12-03-attach-overhead-{n}-h200.json") for n in (4, 5, 6, 7)]
    shares = [r["tui_core_share"] for call in before for r in call["runs"] if r["kind"] == "attached"]
    assert f"26 steps gave {min(shares):.2%}-{max(shares):.2%}".replace("%-", "-", 1) in LIMITS
    separate = [
        _json(RESULTS / name)["ratio_attached_over_detached"]
        for name in (
            "2026-12-02-attach-overhead-h200.json",
            "2026-12-02-attach-overhead-2-h200.json",
            "2026-12-03-attach-overhead-h200.json",
            "2026-12-03-attach-overhead-2-h200.json",
            "2026-12-03-attach-overhead-3-h200.json",
            "2026-12-03-attach-overhead-4-h200.json",
            "2026-12-03-attach-overhead-5-h200.json",
            "2026-12-03-attach-overhead-6-h200.json",
            "2026-12-03-attach-overhead-7-h200.json",
        )
    ]
    listed = ", ".join(f"{r:.3f}" for r in separate[:-1]) + f" and {separate[-1]:.3f}"
    assert f"the ratio attached/detached {listed}" in LIMITS


def test_the_preflight_on_h200s_is_the_reports():
    report = _json(ROOT / "docs" / "preflight-2026-11-30-h200x2.json")
    assert f"2 x H200: {report['meta']['duration_s']:.1f} s" in MEASURED
    gpu = [c for c in report["results"] if c["group"] == "gpu"]
    assert gpu and all(c["status"] == "pass" for c in gpu) and "every GPU check passed" in MEASURED
    assert "still to come" not in EVERYWHERE and "recorded probe answers" not in EVERYWHERE


def test_the_demo_loss_claim_is_what_the_test_asks_and_the_fixture_shows():
    import json

    demo_test = (ROOT / "tests" / "test_demo.py").read_text()
    assert "1 - losses[-1] / losses[0] >= 0.30" in demo_test and "the test asks for 30%" in MEASURED
    events = [
        json.loads(line) for line in (ROOT / "tests/fixtures/demo_run_events.jsonl").read_text().splitlines()
    ]
    losses = [e["loss"] for e in events if e["type"] == "log" and "loss" in e]
    steps = max(e["step"] for e in events if e["type"] == "log")
    assert f"fell {1 - losses[-1] / losses[0]:.0%} in its {steps} steps" in MEASURED
    assert "more than half" not in EVERYWHERE


def test_the_live_views_cpu_figures_are_the_benchs_quiet_and_loaded():
    means = {}
    for path in RESULTS.glob("*ui-overhead-cpu-*.json"):
        data = _json(path)
        if "tui_core_share_mean" in data:
            means[path.name] = data["tui_core_share_mean"]
    quiet = sorted(v for v in means.values() if v < 0.03)
    loaded = sorted(v for v in means.values() if v >= 0.03)
    assert f"{quiet[0]:.1%} and {quiet[-1]:.1%} of a core (means) when the 2-core machine was quiet" in LIMITS
    assert f"{100 * loaded[0]:.1f}-{loaded[-1]:.1%} when it was loaded" in LIMITS
    assert "2.5-2.9%" not in EVERYWHERE


def test_the_two_gpu_speed_is_the_benchs():
    runs = _json(RESULTS / "2026-11-30-multi-gpu-h200x2.json")["runs"]
    (ddp,) = [r for r in runs if r["name"] == "qlora-2gpu-ddp"]
    assert ddp["returncode"] == 0 and f"trained at {ddp['tokens_per_s']} tokens/s" in MEASURED


def _new_points(record: str, who: str) -> tuple[str, str, str]:
    """(count, median, worst without its sign) of a new-points report's last line
    (bench/speed_new_points.py, bench/memory_new_points.py)."""
    last = (RESULTS / record).read_text().strip().splitlines()[-1]
    pattern = re.escape(who) + r", (\d+) new runs: median \|error\| ([\d.]+%), worst [+-]([\d.]+%)"
    return re.fullmatch(pattern, last).groups()


def test_the_estimators_figures_are_docs_estimator():
    estimator = _flat((ROOT / "docs" / "estimator.md").read_text())
    # held-out (left-one-out) figures only, in the README as in the fit's output in docs/estimator.md
    # the speed model's: the last line of bench/fit_speed.py's recorded output
    fit = (RESULTS / "2026-12-04-fit-speed-loo-final.txt").read_text().strip().splitlines()[-1]
    pattern = (
        r"left-one-out over (\d+) points of (\d+) configurations: median ([\d.]+%), worst [+-]?([\d.]+)%"
    )
    points, count, median, worst = re.fullmatch(pattern, fit).groups()
    assert fit in estimator
    claim = (
        f"left-one-out over {points} points of {count} configurations on the same H200: median {median}, "
        f"worst {worst}%"
    )
    assert claim in MEASURED
    assert float(median.rstrip("%")) <= 10 and float(worst) <= 25  # "goals 10% and 25%: met"
    assert "(goals 10% and 25%: met;" in MEASURED
    # the shipped coefficients are that fit's first line, as docs/estimator.md prints it
    from cockpit.speed import model as speed

    first = (RESULTS / "2026-12-04-fit-speed-loo-final.txt").read_text().splitlines()[0]
    for name, value in re.findall(r"(\w+) = ([0-9.e+-]+)", first):
        assert getattr(speed, name) == float(value), name
    heldout = (RESULTS / "2026-12-04-speed-heldout-vs-unsloth-final.txt").read_text().strip().splitlines()[-1]
    runs, median, worst = re.fullmatch(
        r"(\d+) runs: median \|error\| ([\d.]+%), worst ([\d.]+%)", heldout
    ).groups()
    assert (
        f"comparison's {runs} cockpit runs (never fitted on) within {median} median, {worst} worst"
        in MEASURED
    )
    # the speed model on new points, predicted by the model as committed before they were measured
    count, median, worst = _new_points("2026-12-04-speed-heldout-long-new-points.txt", "model at d1717d3")
    assert f"on {NUMBER_WORDS[int(count)]} configurations first measured after the model" in MEASURED
    assert (
        f"first measured after the model predicting them was committed: median {median}, worst {worst}"
        in MEASURED
    )
    assert f"**median {median}, worst -{worst}**" in (ROOT / "docs" / "estimator.md").read_text()
    earlier = (RESULTS / "2026-12-03-speed-new-points-cfe35f0.txt").read_text().strip().splitlines()[-1]
    median, worst = re.fullmatch(
        r"model at cfe35f0, 5 new runs: median \|error\| ([\d.]+%), worst ([+-][\d.]+%)", earlier
    ).groups()
    assert f"median {median}, worst {worst}" in estimator
    # the memory model on the runs its fit never read
    count, median, worst = _new_points("2026-12-04-memory-new-points.txt", "memory model at 2258e0f")
    assert f"on {NUMBER_WORDS[int(count)]} configurations first measured after it was committed" in MEASURED
    assert (
        f"median {median}, worst {worst};" in MEASURED and f"**median {median}, worst -{worst}**" in estimator
    )
    # the memory model's: the last line of the fit's recorded output, in the docs and the README
    fit = (RESULTS / "2026-12-02-fit-estimator-loo-liger.txt").read_text().strip().splitlines()[-1]
    pattern = r"left-one-out over (\d+) points: median ([\d.]+%), worst \+?(-?[\d.]+%)"
    count, median, worst = re.fullmatch(pattern, fit).groups()
    assert fit in estimator and f"{count} configurations measured on an H200" in MEASURED
    assert f"median error {median}, worst {worst}" in MEASURED
    assert "median error 3.0%, worst 9.9%" not in EVERYWHERE
    assert "median 11.9%" not in EVERYWHERE


def test_the_suites_time_is_the_records():
    record = (RESULTS / "2026-12-05-suite-2core.txt").read_text()
    last = [line for line in record.splitlines() if " passed" in line][-1]
    passed, took = last.split(" passed")[0], last.rsplit("(", 1)[1].split(")")[0].lstrip("0:")
    assert f"{passed} tests in {took} on a" in MEASURED and "2026-12-05-suite-2core.txt" in MEASURED


def test_the_fused_lora_figures_are_the_benchs():
    records = {
        n: _json(RESULTS / f"2026-12-04-vs-unsloth-{n}-full-fused-h200.json")["rows"][0] for n in ("7b", "8b")
    }
    s7, s8 = records["7b"]["summary"], records["8b"]["summary"]
    assert (
        f"{s7['ratio']:.2f}x on llama-2-7b and {s8['ratio']:.2f}x on llama-3.1-8b at the same cap" in MEASURED
    )
    held = f"{s7['matched_ratio']:.2f}x and {s8['matched_ratio']:.2f}x"
    assert f"{held} held to unsloth's memory" in MEASURED
    for s in (s7, s8):
        assert f"{s['matched_used_gib']:.2f} of {s['matched_cap_gib']:.2f}" in MEASURED
    ragged = _json(RESULTS / "2026-12-04-fused-vs-hf-7b-ragged-h200.json")["rows"][0]["summary"]
    assert f"{s7['fused_over_hf']:.2f}x over them on the 7B 2048-token row" in MEASURED
    spread = f"({ragged['fused_over_hf_min']:.2f}-{ragged['fused_over_hf_max']:.2f})"
    assert f"{ragged['fused_over_hf']:.2f}x {spread} on its ragged one" in MEASURED
    memory = sorted(s["max_used_gib_cockpit"] / s["max_used_gib_unsloth"] for s in (s7, s8))
    assert (
        f"the fused LoRA layers {held} on the 2048-token rows, where at the same cap it is "
        f"{s7['ratio']:.2f}x and {s8['ratio']:.2f}x with {memory[0]:.1f} to {memory[1]:.1f} times "
        "unsloth's memory" in LIMITS
    )
    fused = [
        r
        for row in records.values()
        for r in row["runs"]
        if r["side"] in ("cockpit", "cockpit@unsloth-memory")
    ]
    assert fused and all(r["lora_fused"] == {"fused": 224, "kept": {}} for r in fused)


def test_the_fresh_clone_figures_are_the_record():
    record = (RESULTS / "2026-12-07-fresh-clone-cpu.txt").read_text()
    # the doc's excerpt is the record's own lines
    excerpt = (ROOT / "docs" / "measurements.md").read_text().split("From the record:\n\n```\n", 1)[1]
    lines = record.splitlines()
    assert all(line in lines for line in excerpt.split("\n```", 1)[0].splitlines())
    (first, second) = re.findall(r"(?m)^## (?:first|second) command: (.+)$", record)
    readme = (ROOT / "README.md").read_text()
    assert f"{first}\n{second}\n" in readme  # the README's two commands, as the record ran them
    (code1, m1, s1), (code2, _, _) = re.findall(r"(?m)^exit (\d+), wall (\d+):(\d+)\.\d+ \(", record)
    assert code1 == "0" and f"`{first}`: exit 0 in {m1}:{s1}." in MEASURED
    start = re.search(r"(?m)^date: \S+T(\d\d):(\d\d):(\d\d)Z$", record).groups()
    run = re.search(r"(?m)^\$ cockpit attach \d{8}-(\d\d)(\d\d)(\d\d)-tiny --no-ui", record).groups()
    took = sum(int(r) * f for r, f in zip(run, (3600, 60, 1))) - sum(
        int(s) * f for s, f in zip(start, (3600, 60, 1))
    )
    assert f"install.sh took about {took // 60}:{took % 60:02d}" in MEASURED
    venv = re.search(r"(?m)^du -sh \.venv: (\S+)$", record).group(1)
    assert f"`.venv` {venv}, torch 2.13.0+cpu" in MEASURED and "torch: 2.13.0+cpu cuda None" in record
    nvidia = re.search(r"pip list \| grep -i nvidia:\n((?:  .*\n)+)", record).group(1).split()
    assert nvidia[0] == "nvidia-ml-py" and len(nvidia) == 2 and "lists only nvidia-ml-py" in MEASURED
    assert re.search(r"CUDA libraries .*:\n  \(none\)\n", record) and "no CUDA library" in MEASURED
    assert re.search(r"cockpit, as a shell finds it: /usr/local/bin/cockpit\n  which is: /tmp/fresh/", record)
    assert re.search(r"--no-ui    \(typed.*\n(?:  .*\n)*?  exit 0\n", record)
    assert "Watch: cockpit attach 20261207-023318-tiny" in record
    failed, passed, skipped, h, m, s = re.search(
        r"(?m)^  (\d+) failed, (\d+) passed, (\d+) skipped, .* \((\d+):(\d\d):(\d\d)\)$", record
    ).groups()
    assert code2 == "1" and int(h) == 0
    assert f"{passed} passed, {skipped} skipped, {failed} failed in {m}:{s}" in MEASURED
    assert len(re.findall(r"(?m)^  FAILED ", record)) == int(failed)
