"""The launcher of a run on several GPUs: torchrun (or `accelerate launch`) inside this process.

    python -m train_backend.launcher RUN_DIR {torchrun|accelerate} LAUNCHER_ARGS...

The supervisor starts it (built by `cockpit.run.ranks.trainer_command`) as the leader of the
run's process group, with stdout on events.jsonl. It starts one trainer process per GPU and
waits for them. When ranks fail, it writes the run's one `error` event: the root cause from
the ranks' `rank-N.error.json` files (or, for a rank killed without a word, its exit status
and the end of its log), naming the rank. Ranks die with it (train_backend.distributed).
SIGTERM is forwarded by torchrun to every rank (each stops with a checkpoint, together);
SIGHUP is ignored, as by the one-process trainer.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from train_backend.channel import Emitter, take_stdout

USAGE = __doc__.split("\n\n")[1]


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] not in ("torchrun", "accelerate"):
        print(USAGE, file=sys.stderr)
        return 2
    run_path, launcher, args = Path(argv[0]).resolve(), argv[1], argv[2:]
    os.umask(0o077)
    emitter = Emitter(take_stdout())
    from cockpit.run import ranks as plan

    os.environ["COCKPIT_LAUNCHER_PID"] = str(os.getpid())  # each rank checks its parent is still us
    os.environ["TORCHELASTIC_SIGNALS_TO_HANDLE"] = "SIGTERM,SIGINT,SIGQUIT"  # not SIGHUP: an SSH drop
    for key, value in plan.DEFAULT_ENV.items():
        os.environ.setdefault(key, value)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    plan.clear_rank_files(run_path)
    emitter.emit("phase", phase="starting", message=f"{launcher}: {' '.join(args[:-4])}")
    failures: dict[int, dict] = {}
    code = 0
    try:
        _run(launcher, args)
    except BaseException as exc:
        failures, code = _failures(exc, run_path)
        if code is None:  # the launcher itself failed (bad arguments, rendezvous)
            return _own_error(emitter, exc, run_path)
    errors = plan.read_rank_errors(run_path)
    folded = plan.fold_rank_errors(errors, failures)
    if folded is not None:
        from train_backend.errors import EXIT_CODES

        folded["checkpoints"] = _checkpoints(run_path)
        emitter.emit("error", **folded)
        return EXIT_CODES.get(folded["kind"], 1)
    return code


def _run(launcher: str, args: list[str]) -> None:
    if launcher == "torchrun":
        from torch.distributed.run import main as torchrun

        torchrun(args)
        return
    from accelerate.commands.launch import launch_command, launch_command_parser

    launch_command(launch_command_parser().parse_args(args))


def _failures(exc: BaseException, run_path: Path) -> tuple[dict[int, dict], int | None]:
    """Ranks that failed (rank -> exit code, signal, log tail) and this process's exit code;
    code None: the failure is the launcher's own."""
    from cockpit.run import ranks as plan

    failures = getattr(exc, "failures", None)
    if isinstance(failures, dict):  # torchrun's ChildFailedError
        out = {}
        for rank, failure in failures.items():
            exitcode = getattr(failure, "exitcode", None)
            sig = None
            if exitcode is not None and exitcode < 0:
                sig = signal.Signals(-exitcode).name
            local = getattr(failure, "local_rank", rank)
            log = plan.rank_log_path(run_path, rank) if local != 0 else run_path / "backend.log"
            out[int(rank)] = {
                "exitcode": exitcode,
                "signal": sig,
                "local_rank": local,
                "log_tail": _tail(log),
            }
        return out, 1
    sigval = getattr(exc, "sigval", None)
    if sigval is not None:  # torchrun's SignalException: we were asked to stop, ranks were told
        return {}, 128 + int(sigval)
    if isinstance(exc, SystemExit):
        return {}, exc.code if isinstance(exc.code, int) else 1
    if isinstance(exc, KeyboardInterrupt):
        return {}, 130
    return {}, None


def _own_error(emitter: Emitter, exc: BaseException, run_path: Path) -> int:
    from train_backend.errors import format_traceback

    text = f"{type(exc).__name__}: {exc}".split("\n")[0][:600]
    emitter.emit(
        "error",
        kind="other",
        message=f"the launcher failed before the ranks ran: {text}",
        hint="With several machines: is node 0 up and distributed.rdzv_endpoint reachable from here "
        "(same value on every node)? See backend.log.",
        phase="starting",
        step=None,
        oom=None,
        traceback=format_traceback(exc),
        checkpoints=_checkpoints(run_path),
        rank=None,
        failed_ranks=[],
    )
    print(format_traceback(exc), file=sys.stderr)
    return 1


def _checkpoints(run_path: Path) -> list[str]:
    from cockpit.run import rundir

    return [p.name for p in rundir.complete_checkpoints(run_path / rundir.CHECKPOINTS_NAME)]


def _tail(path: Path, size: int = 2000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - size))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
