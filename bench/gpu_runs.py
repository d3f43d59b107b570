"""Shared by the live-view benchmarks (attach_overhead, input_bound, record_example): short real
runs through the product, the TUI in a pseudo-terminal, and what a run directory says afterwards.

Two sizes of run: `FULL` is the article's QLoRA recipe on `synthetic:llama-2-7b` (512 tokens,
micro-batch 4 x accumulation 4, bf16, gradient checkpointing) for the GPU machine; `SMOKE` is the
shipped tiny model on the CPU, so each script's `--smoke` mode runs here, in the tests.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import platform
import pty
import random
import signal
import statistics
import struct
import subprocess
import sys
import termios
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import cockpit_env  # noqa: E402

from cockpit.doctor.engine import Doctor  # noqa: E402
from cockpit.live.replay import sample_of_bin  # noqa: E402
from cockpit.run import process  # noqa: E402
from cockpit.run.rundir import RunDir  # noqa: E402
from cockpit.run.state import RunState  # noqa: E402
from cockpit.telemetry.history import TELEMETRY_NAME, read_history  # noqa: E402

TUI_SIZE = (100, 30)  # columns, rows


@dataclass(frozen=True)
class Shape:
    """One run's model and recipe; `tokens_per_step` real tokens per optimizer step (full rows)."""

    name: str
    model: str
    method: str
    max_length: int
    micro_batch_size: int
    accumulation: int
    precision: str
    vocab: int
    extra: dict = field(default_factory=dict)

    @property
    def tokens_per_step(self) -> int:
        return self.max_length * self.micro_batch_size * self.accumulation


FULL = Shape(
    "llama-2-7b qlora 512",
    "synthetic:llama-2-7b",
    "qlora",
    512,
    4,
    4,
    "bf16",
    32000,
    {
        "quantization": {"bits": 4, "quant_type": "nf4", "double_quant": True},
        "lora": {"r": 64, "alpha": 16, "dropout": 0.1, "target_modules": ["q_proj", "v_proj"]},
        "training": {"optimizer": "paged_adamw_32bit", "gradient_checkpointing": True, "max_grad_norm": 0.3},
    },
)
# a 1B LoRA in bf16 for the cases that need no 7B: it loads in seconds, not QLoRA's ~25 s
SMALL = Shape(
    "llama-3.2-1b lora 512",
    "synthetic:llama-3.2-1b",
    "lora",
    512,
    4,
    4,
    "bf16",
    128256,
    {
        "lora": {"r": 16, "alpha": 32, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]},
        "training": {"optimizer": "adamw_torch", "gradient_checkpointing": False},
    },
)
SMOKE = Shape(
    "tiny lora 64 (CPU)",
    "synthetic:tiny",
    "lora",
    64,
    4,
    1,
    "auto",  # fp32 on the CPU
    512,
    {
        "lora": {"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": "all-linear"},
        "training": {"optimizer": "adamw_torch", "gradient_checkpointing": False},
    },
)


def bench_env(home: Path) -> dict:
    """A private COCKPIT_HOME; the model cache stays shared (a synthetic model is built once)."""
    return cockpit_env(home, PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1")


def write_tokens(path: Path, shape: Shape, rows: int, seed: int = 0, ids: int | None = None) -> Path:
    """Full-length rows of random token ids: every step has the same real tokens. `ids`: drawn from
    that many of the vocabulary's tokens only (default: all of them but the 3 special ones)."""
    rng = random.Random(seed)
    top = shape.vocab if ids is None else 3 + ids
    with open(path, "w") as f:
        for _ in range(rows):
            f.write(
                json.dumps({"input_ids": [rng.randrange(3, top) for _ in range(shape.max_length)]}) + "\n"
            )
    return path


def write_config(path: Path, shape: Shape, data: Path, steps: int, **overrides) -> Path:
    """The shape's run for `steps` optimizer steps; `overrides` as {"section.key": value}."""
    cfg = {
        "model": {"name": shape.model},
        "dataset": {"path": str(data), "format": "tokens"},
        "method": shape.method,
        "training": {
            "max_length": shape.max_length,
            "micro_batch_size": shape.micro_batch_size,
            "gradient_accumulation_steps": shape.accumulation,
            "max_steps": steps,
            "learning_rate": 2e-4,
            "lr_scheduler": "constant",
            "precision": shape.precision,
            "packing": False,
            "logging_steps": 1,
        },
        "output": {"save_steps": 100000, "save_final": False},
        "speed": {"mode": "off"},  # the settings as written: the same run every time
    }
    for section, values in shape.extra.items():
        cfg.setdefault(section, {}).update(values)
    for dotted, value in overrides.items():
        section, key = dotted.split(".")
        cfg.setdefault(section, {})[key] = value
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def prebuild(shape: Shape, env: dict) -> None:
    """Build the synthetic model into the cache now, so no timed run pays for it."""
    arch = shape.model.removeprefix("synthetic:")
    dtype = "bf16" if shape.precision == "bf16" else "fp32"  # as the trainer names it (auto on a CPU: fp32)
    code = (
        "import torch; from train_backend import model; "
        f"model.ensure_synthetic({arch!r}, {dtype!r}, 'cuda' if torch.cuda.is_available() else 'cpu')"
    )
    subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)


def newest_run(home: Path, after: set[str] = frozenset()) -> Path:
    runs = sorted(p for p in (home / "runs").iterdir() if p.name not in after)
    if not runs:
        raise SystemExit(f"no run appeared under {home / 'runs'}")
    return runs[-1]


def run_ids(home: Path) -> set[str]:
    return {p.name for p in (home / "runs").iterdir()} if (home / "runs").exists() else set()


def train_headless(
    config: Path, env: dict, timeout_s: float = 900
) -> tuple[Path, subprocess.CompletedProcess]:
    """`cockpit train CONFIG --no-ui` (plain lines, every log event), to its end."""
    home = Path(env["COCKPIT_HOME"])
    before = run_ids(home)
    done = subprocess.run(
        [sys.executable, "-m", "cockpit", "train", str(config), "--no-ui", "--skip-preflight"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    return newest_run(home, before), done


def events_of(run: Path) -> list[dict]:
    out = []
    for line in (run / "events.jsonl").read_text(errors="replace").splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict):
            out.append(item)
    return out


def throughput(events: list[dict], shape: Shape, skip_steps: int = 2) -> dict:
    """Tokens a second over the steady steps (after the first `skip_steps`): the trainer's own
    figure (median of its log events) and real tokens per step over the median step time."""
    logs = [e for e in events if e.get("type") == "log" and e.get("step", 0) > skip_steps]
    if not logs:
        return {"steps_measured": 0}
    step_s = statistics.median(e["step_time_s"] for e in logs)
    first, last = logs[0], logs[-1]
    return {
        "steps_measured": len(logs),
        "step_s_median": round(step_s, 4),
        "tokens_per_s": round(shape.tokens_per_step / step_s, 1),
        "tokens_per_s_trainer": round(statistics.median(e["tokens_per_s"] for e in logs), 1),
        "training_s": round(last["ts"] - first["ts"] + step_s, 1),
    }


def ending(events: list[dict]) -> dict:
    done = next((e for e in reversed(events) if e.get("type") in ("done", "error")), None)
    if done is None:
        return {"status": "no final event"}
    if done["type"] == "error":
        return {"status": "failed", "kind": done.get("kind"), "message": str(done.get("message"))[:300]}
    return {"status": done.get("status"), "step": done.get("step")}


def versions(events: list[dict]) -> dict:
    hello = next((e for e in events if e.get("type") == "hello"), {})
    return {
        "device": hello.get("device"),
        "precision": hello.get("precision"),
        **(hello.get("versions") or {}),
    }


def machine() -> dict:
    out = {"host": platform.node(), "python": platform.python_version(), "gpus": []}
    try:
        import pynvml

        pynvml.nvmlInit()
        out["driver"] = pynvml.nvmlSystemGetDriverVersion()
        for i in range(pynvml.nvmlDeviceGetCount()):
            out["gpus"].append(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)))
    except Exception as exc:  # no driver here: say so rather than fail
        out["nvml"] = f"{type(exc).__name__}: {exc}"
    return out


def wait_trainer_gone(run: Path, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not process.is_alive(RunDir(run)):
            return True
        time.sleep(1.0)
    return False


# ---------------------------------------------------------------- the TUI in a pseudo-terminal


class PtyTui:
    """A cockpit TUI command in a pseudo-terminal of TUI_SIZE, its output read and thrown away
    (a terminal that never reads would block it), keys sent as a user types them.

    Use it as a context manager (or call close()): however the bench ends, the TUI's process
    group is killed and the master closed, so no client outlives its bench. The TUI runs in a
    session of its own, the trainer it starts in another: closing this one never stops a run."""

    _open: ClassVar[set[PtyTui]] = set()  # closed at exit too, should a caller forget

    def __init__(self, args: list[str], env: dict, command: list[str] | None = None) -> None:
        """`python -m cockpit ARGS`, or `command` (a whole command line) in its place."""
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", TUI_SIZE[1], TUI_SIZE[0], 0, 0))
        self.master: int | None = master
        try:
            self.proc = subprocess.Popen(
                command or [sys.executable, "-m", "cockpit", *args],
                stdin=slave,
                stdout=slave,
                stderr=slave,
                env=dict(env, TERM="xterm-256color", COLUMNS=str(TUI_SIZE[0]), LINES=str(TUI_SIZE[1])),
                cwd=ROOT,
                start_new_session=True,
            )
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)
        PtyTui._open.add(self)
        _exit_on_sigterm()
        self.received = 0
        self.tail = b""
        self._reader = threading.Thread(target=self._drain, args=(master,), daemon=True)
        self._reader.start()

    def __enter__(self) -> PtyTui:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    def _drain(self, master: int) -> None:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                return
            if not chunk:
                return
            self.received += len(chunk)
            self.tail = (self.tail + chunk)[-65536:]

    def wait_for_output(self, min_bytes: int = 2000, timeout_s: float = 60.0) -> bool:
        """Until the TUI has drawn something (its first screen is several KB of escapes)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.proc.poll() is None:
            if self.received >= min_bytes:
                return True
            time.sleep(0.2)
        return self.received >= min_bytes

    def press(self, key: str) -> None:
        os.write(self.master, key.encode())

    def finish(self, timeout_s: float = 30.0) -> int | None:
        """Wait for the TUI to exit (after a key that ends it); kill it if it does not."""
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None
        finally:
            self.close()

    def close(self) -> None:
        """Kill what is left of the TUI's process group (its own session: never the trainer),
        reap it, close the master."""
        PtyTui._open.discard(self)
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        if self.master is not None:
            try:
                os.close(self.master)
            except OSError:
                pass
            self.master = None
        self._reader.join(timeout=2)

    @classmethod
    def close_all(cls) -> None:
        for tui in list(cls._open):
            tui.close()


atexit.register(PtyTui.close_all)


def _exit_on_sigterm() -> None:
    """A bench ended by SIGTERM (a harness's timeout) unwinds, so its TUIs are closed too (the
    default action would end it at once, `finally` and atexit unrun). SIGKILL cannot be caught:
    then the master closes with the bench and the TUI detaches by itself (screens/hangup.py)."""
    main = threading.current_thread() is threading.main_thread()
    if main and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))


# ---------------------------------------------------------------- the doctor over a recording


def doctor_over_recording(run: Path) -> dict:
    """The doctor's findings over the run's recorded telemetry (`telemetry.jsonl`, every bin as
    recorded), each bin judged with the run's state at its end (the events up to then), as a
    replay plays it: which rules fired, when first, and their evidence then."""
    events = sorted(
        (e for e in events_of(run) if isinstance(e.get("ts"), (int, float))), key=lambda e: e["ts"]
    )
    history = read_history(run / TELEMETRY_NAME, max_points=100_000, full_resolution_s=1e9)
    state, doctor = RunState(run_id=run.name), Doctor()
    fired: dict[str, dict] = {}
    start = events[0]["ts"] if events else None
    next_event = 0
    for line in history.bins:
        while next_event < len(events) and events[next_event]["ts"] <= line["ts_end"]:
            state.apply(events[next_event])
            next_event += 1
        sample = sample_of_bin(line)
        doctor.observe(sample, state)
        for finding in doctor.findings(sample.ts):
            if finding.rule not in fired:
                fired[finding.rule] = {
                    "title": finding.title,
                    "severity": finding.severity,
                    "evidence": finding.evidence,
                    "fix": finding.fix,
                    "at_s": None if start is None else round(sample.ts - start, 1),
                }
    nvml = sorted({line.get("nvml") or "ok" for line in history.bins})
    return {"bins": len(history.bins), "nvml": nvml, "fired": fired}


def doctor_lines(stdout: str) -> list[str]:
    """The live doctor's lines in `--no-ui` plain output (cockpit.live.watch.finding_line)."""
    return [line.strip() for line in stdout.splitlines() if "doctor [" in line]


def write_json(out_dir: Path, name: str, result: dict) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / name
    path.write_text(json.dumps(result, indent=1) + "\n")
    return path
