"""Entry point of the export process, started by `cockpit export` (cockpit.results.export).

    python -m train_backend.export REQUEST_JSON

Speaks the JSON-lines protocol on stdout (export_progress, export_check, export_done, error);
everything libraries print goes to stderr, which the client keeps in the run's export log.
"""

from __future__ import annotations

import json
import os
import sys


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    from train_backend.channel import Emitter, take_stdout

    emitter = Emitter(take_stdout())  # before any library import: the protocol stays alone on stdout
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from train_backend.export.job import run_export

    return run_export(json.loads(argv[0]), emitter)


if __name__ == "__main__":
    from train_backend.quick_exit import exit_now

    exit_now(main(sys.argv[1:]))
