"""Entry point of the trainer process.

    python -m train_backend train RUN_DIR

The launcher (cockpit.run.process) points stdout at RUN_DIR/events.jsonl and stderr at
RUN_DIR/backend.log, in a new session so the trainer outlives its client.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "train":
        print(__doc__, file=sys.stderr)
        return 2
    # before any library import: protocol stays alone on the real stdout
    from train_backend.channel import Emitter, take_stdout
    from train_backend.distributed import RankEmitter, World

    os.umask(0o077)  # everything in the run directory is the owner's alone
    run_path = Path(argv[1]).resolve()
    world = World.from_env(run_path)  # one of several processes started by torchrun
    emitter = Emitter(take_stdout()) if world is None else RankEmitter(world.bootstrap(), world)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from cockpit.run.rundir import RunDir
    from train_backend.trainer import run_training

    return run_training(RunDir(run_path), emitter, world)


if __name__ == "__main__":
    from train_backend.quick_exit import exit_now

    exit_now(main(sys.argv[1:]))
