"""output.sync on the command line: the target checked before a run starts, and `cockpit restart
--from TARGET` (a run rebuilt from its copy on a new machine, cockpit.sync.restore)."""

from __future__ import annotations

import argparse
import sys

from cockpit.config import schema as config
from cockpit.run import rundir
from cockpit.run.exit_codes import EXIT_FAILED


def check_line(cfg: config.TrainConfig) -> str | None:
    """Where the run's copy goes, in a line; ConfigError (exit 2) when it cannot go there."""
    if cfg.output.sync is None:
        return None
    from cockpit.sync.check import check_target

    return check_target(cfg.output.sync)


def warn_target(cfg: config.TrainConfig) -> None:
    """At a restart: a target that cannot take the copy now is said; the run starts all the same."""
    try:
        check_line(cfg)
    except config.ConfigError as exc:
        print(f"warning: {exc}; the run goes on and tries again at each checkpoint", file=sys.stderr)


def restored_run(args: argparse.Namespace) -> rundir.RunDir | int:
    """The run rebuilt from `--from` (and the run id given, if any), or the exit code of a refusal."""
    from cockpit.sync.restore import RestoreError, restore

    try:
        restored = restore(args.from_target, args.run)
    except RestoreError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_FAILED
    except OSError as exc:  # the runs folder: read-only, full
        print(f"cannot rebuild the run here: {exc.strerror or exc} ({exc.filename})", file=sys.stderr)
        return EXIT_FAILED
    print(restored.line(args.from_target), file=sys.stderr)
    return restored.run
