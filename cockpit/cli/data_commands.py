"""`cockpit data CONFIG`: the dataset read as the trainer will read it (the data check), and the
same check before `cockpit train` makes a run directory, and for `cockpit cards` / `pick` the
data's real tokens per epoch."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from cockpit import fmt, yaml_text
from cockpit.config import load as config_load
from cockpit.config import schema as config
from cockpit.plain import output_width, terminal_width, wrapped
from cockpit.run.exit_codes import EXIT_FAILED, EXIT_USAGE

PROGRESS_AFTER_S = 3.0  # a check this long says how far it has read


def cmd_data(args: argparse.Namespace) -> int:
    from cockpit.datacheck.run_cost import run_figures
    from cockpit.datacheck.text import report_lines

    try:
        cfg = config_load.load_config(args.config, args.overrides)
    except config.ConfigError as exc:
        raise type(exc)(f"{args.config}: {exc}") from None
    answer = _checked(cfg, fresh=args.fresh)
    if answer.report is None:
        print(f"{args.config}: {answer.problem()}", file=sys.stderr)
        return EXIT_FAILED
    report = answer.report
    report["cached"] = answer.cached
    report["run"] = run_figures(cfg, (report.get("totals") or {}).get("tokens_per_epoch"), args.card)
    if args.json:
        print(json.dumps(report, indent=1, ensure_ascii=False))
    else:
        print("\n".join(report_lines(report, args.config, output_width())))
    return EXIT_USAGE if report.get("problems") else 0


def data_ok_to_start(cfg: config.TrainConfig, source: str) -> bool:
    """The data check before a run starts (before its directory is made): the errors and warnings
    on stderr; False when there are errors. A check that itself fails is said, not a refusal: the
    trainer checks the data again as it loads it."""
    from cockpit.datacheck.text import start_lines

    answer = _checked(cfg)
    if answer.report is None:
        _say([f"data: not checked before the start ({answer.problem()}); the trainer checks it as it loads"])
        return True
    _say(start_lines(answer.report, source))
    if answer.report.get("problems"):
        _say(["Nothing was started and no run directory was made; fix the data, then run again."])
        return False
    return True


def config_tokens(args: argparse.Namespace) -> tuple[str, dict[str, Any] | None]:
    """(the dataset size as the picker's field reads it, the data check's report) when the config
    names a dataset and no --tokens or --samples were given; else ("", None)."""
    if not names_dataset(args):
        return "", None

    cfg = config_load.load_config(args.config, args.overrides)
    answer = _checked(cfg)
    report = answer.report
    if report is None:
        _say([f"dataset size: not counted ({answer.problem()}); give --tokens for time and cost"])
        return "", None
    tokens = (report.get("totals") or {}).get("tokens_per_epoch")
    if report.get("problems") or not tokens:
        found = len(report.get("problems") or [])
        _say(
            [f"dataset size: not counted: the data check found {found} error(s); cockpit data {args.config}"]
        )
        return "", report
    _say([f"dataset: {tokens:,} tokens per epoch, counted by the data check (cockpit data {args.config})"])
    return str(tokens), report


def names_dataset(args: argparse.Namespace) -> bool:
    """Whether the command's config (or a --set) names a dataset, and no size flag was given."""
    if getattr(args, "tokens", None) is not None or getattr(args, "samples", None) is not None:
        return False
    if any(item.strip().startswith("dataset") for item in getattr(args, "overrides", []) or []):
        return True
    if not getattr(args, "config", None):
        return False
    try:
        raw = yaml_text.safe_load(Path(args.config).read_text(encoding="utf-8"))
    except (OSError, ValueError, Exception):  # the config's own load says what is wrong with it
        return False
    return isinstance(raw, dict) and raw.get("dataset") is not None


def _say(lines: list[str]) -> None:
    print("\n".join(wrapped(lines, output_width())), file=sys.stderr, flush=True)


class _Progress:
    """Progress on stderr once the check has taken PROGRESS_AFTER_S: in place on a terminal (one row,
    cut to its width, taken away by `done`), a line every few seconds otherwise."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.last = 0.0
        self.width = terminal_width(sys.stderr)
        self.drawn = False

    def __call__(self, message: dict[str, Any]) -> None:
        now = time.monotonic()
        if now - self.started < PROGRESS_AFTER_S or (not self.width and now - self.last < 10):
            return
        self.last = now
        total = message.get("bytes_total")
        read = message.get("bytes_read") or 0
        share = f" ({read / total:.0%})" if total else ""
        text = (
            f"checking the data: source {message.get('source')}, {message.get('rows_read', 0):,} rows, "
            f"{fmt.size(read)}{f' of {fmt.size(total)}' if total else ''}{share}"
        )
        if not self.width:
            print(text, file=sys.stderr, flush=True)
            return
        if len(text) >= self.width:  # one row: a line that wrapped would leave its first rows behind
            text = text[: self.width - 2] + "…"
        print(f"\r{text}\033[K", end="", file=sys.stderr, flush=True)
        self.drawn = True

    def done(self) -> None:
        if self.drawn:
            print("\r\033[K", end="", file=sys.stderr, flush=True)
            self.drawn = False


def _checked(cfg: config.TrainConfig, **kw: Any) -> Any:
    """The data check with its progress, the progress line taken away when it is done."""
    from cockpit.datacheck.cache import cached_check

    progress = _Progress()
    try:
        return cached_check(cfg, on_progress=progress, **kw)
    finally:
        progress.done()
