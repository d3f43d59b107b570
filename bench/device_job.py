#!/usr/bin/env python3
"""A benchmark longer than one device call, run on one machine across back-to-back calls.

The device machine ends what a call leaves running when the call returns, except a process in a
session of its own, which runs on until the machine is given back; the machine stays warm (its
/tmp and processes kept) for a short while after each call. So a bench that needs 20 minutes of
one machine (bench/vs_unsloth.py's whole table: both shapes, both caps, both sides) starts here
in its own session in one call, and the calls after it wait for it and take its files:

  python3 bench/device_job.py start --name table -- python3 bench/vs_unsloth.py --out /tmp/w/table ...
  python3 bench/device_job.py wait --name table --max-s 570          # again, until it says done
  python3 bench/device_job.py collect --name table --to $OUT /tmp/w/table/vs_unsloth.json ...

`wait` prints the output the job wrote since the last `wait`, then a status line, and exits 0
once the job has ended well, 1 when it failed (its exit code is in that line and in the job's `rc`
file) or its process is gone without one, 3 while it still runs, 4 when no such job was started on
this machine (a new machine: the earlier one was given back, and the job with it). Each job
keeps its folder (`--jobs`, default /tmp/device-jobs/NAME): `cmd`, `pid`, `log`, `rc`,
`started`, `ended`. Nothing here needs a GPU; tests/test_device_job.py runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

JOBS = Path("/tmp/device-jobs")
RUNNING, DONE, MISSING = 3, 0, 4


def job_dir(jobs: Path, name: str) -> Path:
    if not name or "/" in name or name.startswith("."):
        raise SystemExit(f"--name {name!r}: a plain folder name is expected (letters, digits, '-', '_')")
    return jobs / name


def start(jobs: Path, name: str, cmd: list[str]) -> int:
    """Start `cmd` in a session of its own (it outlives this call); refuse a job of that name that
    still runs. Its output goes to the job's log."""
    if not cmd:
        raise SystemExit("start: give the command after --, e.g. start --name t -- python3 bench/x.py")
    folder = job_dir(jobs, name)
    if folder.exists() and state(folder)["state"] == "running":
        pid = (folder / "pid").read_text().strip()
        print(f"job {name} still runs (pid {pid}): wait for it", file=sys.stderr)
        return RUNNING
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "cmd").write_text(json.dumps(cmd) + "\n")
    with open(folder / "log", "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "_run", str(folder)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own session: the call's end does not end it
            cwd=os.getcwd(),
        )
    (folder / "pid").write_text(f"{proc.pid}\n")
    print(f"job {name} started: pid {proc.pid}, log {folder / 'log'}")
    return DONE


def _run(folder: Path) -> int:
    """The job's own process: run the command, then write its exit code and end time."""
    cmd = json.loads((folder / "cmd").read_text())
    (folder / "started").write_text(f"{time.time():.3f}\n")
    try:
        rc = subprocess.call(cmd, stdin=subprocess.DEVNULL)
    except OSError as exc:  # the command could not start: say so in the log, as its exit code
        print(f"device_job: {cmd[0]!r} did not start: {exc}", flush=True)
        rc = 127
    (folder / "ended").write_text(f"{time.time():.3f}\n")
    (folder / "rc").write_text(f"{rc}\n")
    return rc


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (ended, not yet reaped) is not running
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def state(folder: Path) -> dict:
    """{state: running | done | lost | missing, rc, elapsed_s}. lost: its process is gone without
    an exit code (killed, or the machine restarted under it)."""
    if not (folder / "pid").is_file():
        return {"state": "missing"}
    started = float((folder / "started").read_text()) if (folder / "started").is_file() else None
    if (folder / "rc").is_file():
        ended = float((folder / "ended").read_text())
        return {
            "state": "done",
            "rc": int((folder / "rc").read_text()),
            "elapsed_s": round(ended - started, 1) if started else None,
        }
    pid = int((folder / "pid").read_text())
    elapsed = round(time.time() - started, 1) if started else 0.0
    if _alive(pid):
        return {"state": "running", "elapsed_s": elapsed}
    return {"state": "lost", "elapsed_s": elapsed}


def _new_output(folder: Path) -> str:
    """What the job wrote to its log since the last call asked."""
    log, mark = folder / "log", folder / "log.read"
    seen = int(mark.read_text()) if mark.is_file() else 0
    if not log.is_file():
        return ""
    with open(log, "rb") as f:
        f.seek(seen)
        data = f.read()
    mark.write_text(f"{seen + len(data)}\n")
    return data.decode("utf-8", "replace")


def wait(jobs: Path, name: str, max_s: float, poll_s: float = 1.0) -> int:
    """Until the job ends or `max_s` pass: its new output, then one status line."""
    folder = job_dir(jobs, name)
    deadline = time.time() + max_s
    while True:
        now = state(folder)
        sys.stdout.write(_new_output(folder))
        if now["state"] != "running" or time.time() >= deadline:
            break
        time.sleep(min(poll_s, max(0.0, deadline - time.time())))
    sys.stdout.flush()
    if now["state"] == "missing":
        print(f"job {name}: none on this machine ({folder} has no job): start it again", flush=True)
        return MISSING
    if now["state"] == "running":
        print(f"job {name}: still running after {now['elapsed_s']:.0f} s: wait again", flush=True)
        return RUNNING
    if now["state"] == "lost":
        print(f"job {name}: its process is gone with no exit code after {now['elapsed_s']:.0f} s", flush=True)
        return 1
    print(f"job {name}: done, exit code {now['rc']}, {now['elapsed_s']} s", flush=True)
    return DONE if now["rc"] == 0 else 1


def collect(jobs: Path, name: str, to: Path, paths: list[Path]) -> int:
    """Copy the job's log and `paths` (those that exist) into `to`, flat; say what is missing."""
    folder = job_dir(jobs, name)
    to.mkdir(parents=True, exist_ok=True)
    missing = 0
    for path in [folder / "log", *paths]:
        if path.is_file():
            shutil.copy2(path, to / (f"{name}-job.log" if path == folder / "log" else path.name))
        else:
            print(f"collect: {path} is not there", file=sys.stderr)
            missing += 1
    return 1 if missing else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 2 and argv[0] == "_run":
        return _run(Path(argv[1]))
    cmd: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, cmd = argv[:at], argv[at + 1 :]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("verb", choices=("start", "wait", "status", "collect"))
    ap.add_argument("--name", required=True)
    ap.add_argument("--jobs", type=Path, default=JOBS, help="where the jobs' folders are")
    ap.add_argument("--max-s", type=float, default=570.0, help="wait: return after this many seconds")
    ap.add_argument("--to", type=Path, help="collect: the folder to copy into ($OUT)")
    ap.add_argument("paths", nargs="*", type=Path, help="collect: files the job wrote")
    # the files after the options (`collect --name t --to OUT FILE ...`, as the docstring has it):
    # parse_args takes the positionals in one run only and refuses them there
    a = ap.parse_intermixed_args(argv)
    if a.verb == "start":
        return start(a.jobs, a.name, cmd)
    if a.verb == "wait":
        return wait(a.jobs, a.name, a.max_s)
    if a.verb == "status":
        print(json.dumps(state(job_dir(a.jobs, a.name))))
        return DONE
    if a.to is None:
        raise SystemExit("collect: --to FOLDER is needed")
    return collect(a.jobs, a.name, a.to, a.paths)


if __name__ == "__main__":
    sys.exit(main())
