"""Regenerate the data check's recorded reports (tests/fixtures/data/report_*.json) that the Data
screen's tests draw: the check run on the fixture files with the shipped tokenizer, the run's time
and cost on an RTX 4090 at the catalog's default price, and what changes from machine to machine
(paths, time taken, memory) fixed.

    python tests/support/data_reports.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "data"
REPORTS = {"chat_issues": "report_chat_issues.json", "chat_errors": "report_errors.json"}


def recorded(name: str) -> dict:
    from cockpit.config.load import load_config
    from cockpit.datacheck.run_cost import run_figures
    from train_backend.datacheck.check import run_check

    data = FIXTURES / f"{name}.jsonl"
    overrides = [
        f"dataset.path={data}",
        "model.name=synthetic:tiny",
        "method=lora",
        "training.max_length=64",
        "training.optimizer=adamw_torch",
    ]
    cfg = load_config(None, overrides)
    report = run_check(cfg)
    report["run"] = run_figures(cfg, report["totals"]["tokens_per_epoch"], "rtx-4090")
    text = json.dumps(report, ensure_ascii=False).replace(str(data), f"data/{name}.jsonl")
    report = json.loads(text)
    report.update(elapsed_s=1.2, peak_rss_bytes=250_000_000)
    return report


def main() -> int:
    sys.path.insert(0, str(ROOT))
    for name, out in REPORTS.items():
        (FIXTURES / out).write_text(json.dumps(recorded(name), indent=1, ensure_ascii=False) + "\n")
        print(f"wrote {FIXTURES / out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
