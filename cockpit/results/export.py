"""`cockpit export RUN`: the adapter, or the merged model (safetensors, GGUF), with a filled model card.

The client picks what to export (final/, else the last complete checkpoint, or --checkpoint N),
checks RAM and disk against what the export needs, and starts `python -m train_backend.export`,
which does everything that needs torch and reports over JSON lines (export_progress,
export_check, export_readback, export_done, error). The export is written into a staging folder beside the
target and renamed into place only when complete; the run directory is never changed except
for the `exports/` folder and `export.log`.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TextIO, cast

from cockpit import fmt
from cockpit.config.load import load_config
from cockpit.config.schema import TrainConfig
from cockpit.models.shape import ModelShape
from cockpit.paths import cockpit_command
from cockpit.plain import PLAIN_WIDTH, terminal_width
from cockpit.protocol.wire import Fault, LineDecoder
from cockpit.results import export_needs as needs_mod
from cockpit.results import model_card as card_mod
from cockpit.results.merge_check import describe_event, describe_readback
from cockpit.run import rundir
from cockpit.run.process import is_alive, project_root

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
LOG_NAME = "export.log"
BAR_WIDTH = 24


class ExportError(RuntimeError):
    """An export that cannot start or did not finish; the message says why and what to do."""


@dataclass(frozen=True)
class Source:
    path: Path
    label: str  # final | checkpoint-N
    note: str | None = None  # said to the user (e.g. no final adapter: the last checkpoint instead)


def pick_source(run: rundir.RunDir, checkpoint: int | None) -> Source:
    complete = run.complete_checkpoints()
    names = ", ".join(p.name for p in complete) or "none"
    if checkpoint is not None:
        wanted = run.checkpoints_dir / f"checkpoint-{checkpoint}"
        if wanted in complete:
            return Source(wanted, wanted.name)
        if wanted.is_dir():
            raise ExportError(
                f"{wanted.name} of run {run.run_id} is incomplete (its save never finished, no "
                f"{rundir.COMPLETE_MARKER}); complete checkpoints: {names}."
            )
        raise ExportError(
            f"run {run.run_id} has no checkpoint-{checkpoint}; complete checkpoints: {names}"
            + (" and final/" if _has_weights(run.final_dir) else "")
            + ". Pass one of those numbers to --checkpoint, or leave it out for the final adapter."
        )
    if _has_weights(run.final_dir):
        return Source(run.final_dir, rundir.FINAL_NAME)
    if complete:
        last = complete[-1]
        return Source(
            last,
            last.name,
            f"run {run.run_id} has no final adapter (it did not finish); exporting its last complete "
            f"checkpoint, {last.name}.",
        )
    said = f"run {run.run_id} has neither a final adapter nor a complete checkpoint: nothing to export."
    from cockpit.run.status import run_status

    if run_status(run).state == "finished":  # `cockpit restart` refuses a finished run
        raise ExportError(
            f"{said} It finished, so its weights were deleted or moved since (a copied folder holds "
            f"only what was copied); train it again with `{cockpit_command()} train` on its config.yaml."
        )
    raise ExportError(f"{said} Continue it with `{cockpit_command()} restart {run.run_id}`.")


def _has_weights(folder: Path) -> bool:
    return folder.is_dir() and any((folder / n).is_file() for n in ("adapter_config.json", "config.json"))


def default_out(run: rundir.RunDir, source: Source, merge: bool, dtype: str, gguf: str | None) -> Path:
    kind = "adapter" if not (merge or gguf) else f"merged-{dtype}" + (f"-{gguf}" if gguf else "")
    return run.path / "exports" / f"{source.label}-{kind}"


def model_size(cfg: TrainConfig, run_facts: card_mod.RunFacts) -> tuple[int, int, ModelShape | None]:
    """(parameters, largest tensor's elements, the shape) of the base: from its shape when one can be
    read without the weights, else the run's own count (its `model` event) and no shape."""
    from cockpit.models.shape import ShapeError, load_shape

    try:
        shape = load_shape(cfg.model.name, revision=cfg.model.revision or "main", timeout_s=5.0)
        return shape.params, shape.embedding_params, shape
    except (ShapeError, OSError):
        counted = int(run_facts.state.model.get("params_total") or 0)
        return counted, counted // 8, None


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def slug(text: str) -> str:
    return (
        re.sub(r"[^A-Za-z0-9.]+", "-", text.rsplit("/", 1)[-1].replace("synthetic:", "")).strip("-")
        or "model"
    )


# ---------------------------------------------------------------- progress


def stage_line(event: dict[str, Any], width: int = BAR_WIDTH) -> str:
    """One `export_progress` event as a line: the stage's bar, or its time once finished."""
    stage, done, total = event.get("stage", "?"), event.get("done", 0), event.get("total") or 1
    if event.get("finished"):
        line = f"  {stage:<8} done in {event.get('elapsed_s', 0):.1f} s"
        return line + (f"  {event['message']}" if event.get("message") else "")
    fraction = min(1.0, done / total)
    filled = round(fraction * width)
    bar = "#" * filled + "-" * (width - filled)
    line = f"  {stage:<8} [{bar}] {fraction:4.0%}  {done}/{total} {event.get('unit', '')}"
    return line + (f"  {event['message']}" if done == 0 and event.get("message") else "")


class ProgressSink(Protocol):
    """What an export's events are shown by: a `Progress`, or a screen's own."""

    def update(self, event: dict[str, Any]) -> None: ...

    def check(self, event: dict[str, Any]) -> None: ...

    def readback(self, event: dict[str, Any]) -> None: ...

    def warning(self, message: str) -> None: ...


class Progress:
    """Progress bars for load, merge, check, write and convert: redrawn in place on a terminal,
    plain lines (start, every quarter, end) otherwise."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self._last_quarter: dict[str, int] = {}
        self._drawn = False  # a bar is on the terminal's last row, not ended by a newline

    def update(self, event: dict[str, Any]) -> None:
        line = stage_line(event)
        if event.get("finished"):
            self._print(line, final=True)
            return
        quarter = int(min(1.0, event.get("done", 0) / (event.get("total") or 1)) * 4)
        stage = event.get("stage", "?")
        if self.tty or event.get("done", 0) == 0 or quarter > self._last_quarter.get(stage, -1):
            self._last_quarter[stage] = quarter
            self._print(line, final=not self.tty)

    def check(self, event: dict[str, Any]) -> None:
        self._print(f"  check    {describe_event(event)}", final=True)

    def readback(self, event: dict[str, Any]) -> None:
        self._print(f"  readback {describe_readback(event)}", final=True)

    def warning(self, message: str) -> None:
        self._print(f"  warning: {message}", final=True)

    def clear(self) -> None:
        """Take away a bar drawn in place and not yet ended by its stage's end."""
        if self.tty and self._drawn:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()
            self._drawn = False

    def _print(self, line: str, final: bool) -> None:
        if self.tty:
            # a bar drawn in place fits one row: one that wrapped would leave its first rows behind,
            # as `\r` goes back to the start of its last row only
            width = terminal_width(self.stream) or PLAIN_WIDTH
            if not final and len(line) >= width:
                line = line[: width - 2] + "…"
            if final:  # the bar taken away, then a line of its own: broken at words on the terminal
                self.stream.write("\r\x1b[2K")
                self.stream.write(line + "\n")
            else:
                self.stream.write("\r\x1b[2K" + line)
            self._drawn = not final
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


# ---------------------------------------------------------------- the export


def backend_command(request: dict[str, Any]) -> list[str]:
    return [sys.executable, "-m", "train_backend.export", json.dumps(request)]


def run_backend(
    request: dict[str, Any], log_path: Path, progress: ProgressSink
) -> tuple[int, list[dict[str, Any]], list[str]]:
    """Start the export process, show its progress, return (exit code, events, faults)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (project_root(), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    events: list[dict[str, Any]] = []
    faults: list[str] = []
    decoder = LineDecoder()
    with open(log_path, "ab") as log:
        log.write(f"\n--- cockpit export {time.strftime('%Y-%m-%dT%H:%M:%S')}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            backend_command(request),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            cwd=project_root(),
            env=env,
        )
        # stdout=PIPE in binary mode with the default buffering: Popen wraps the pipe in a BufferedReader
        stdout = cast(io.BufferedReader, proc.stdout)
        try:
            for chunk in iter(lambda: stdout.read1(65536), b""):
                for item in decoder.feed(chunk):
                    _take(item, events, faults, progress)
            for item in decoder.finish():
                _take(item, events, faults, progress)
            code = proc.wait()
        except KeyboardInterrupt:
            proc.terminate()
            proc.wait()
            raise
        finally:
            stdout.close()
    return code, events, faults


def _take(
    item: dict[str, Any] | Fault, events: list[dict[str, Any]], faults: list[str], progress: ProgressSink
) -> None:
    if isinstance(item, Fault):
        faults.append(item.describe())
        return
    events.append(item)
    if item.get("type") == "export_progress":
        progress.update(item)
    elif item.get("type") == "export_check":
        progress.check(item)
    elif item.get("type") == "export_readback":
        progress.readback(item)
    elif item.get("type") == "warning":
        progress.warning(str(item.get("message")))


@dataclass
class Plan:
    """An export checked and ready to start: what, from where, to where, and what it needs."""

    run: rundir.RunDir
    source: Source
    merge: bool
    dtype: str
    gguf: str | None
    out: Path
    need: needs_mod.Needs
    request: dict[str, Any]
    facts: card_mod.RunFacts
    title: str
    notes: list[str]

    @property
    def what(self) -> str:
        if not self.merge:
            return "adapter"
        return f"merged model ({self.dtype})" + (f" + GGUF {self.gguf}" if self.gguf else "")


def prepare(
    run: rundir.RunDir,
    checkpoint: int | None = None,
    merge: bool = False,
    dtype: str = "bf16",
    gguf: str | None = None,
    to: str | None = None,
    readback: bool = True,
) -> Plan:
    """Pick the source and the folder and measure RAM and disk; ExportError when it cannot start
    (its `Needs` figures are in the message when they are the reason)."""
    if is_alive(run) and checkpoint is None:
        raise ExportError(
            f"run {run.run_id} is still training; export a complete checkpoint with --checkpoint N, or "
            f"wait until it ends ({cockpit_command()} attach {run.run_id})"
        )
    source = pick_source(run, checkpoint)
    notes = [source.note] if source.note else []
    if gguf and not merge:
        notes.append("--gguf writes the merged model: merging first (as --merge).")
        merge = True
    if gguf in needs_mod.K_BITS:
        notes.append(k_quant_note(gguf))
    cfg = load_config(run.config_path)
    facts = card_mod.read_facts(run)
    out = Path(to).expanduser().resolve() if to else default_out(run, source, merge, dtype, gguf)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(
            f"{out} already exists and is not empty; remove it, or choose another folder with --to"
        )
    params, largest, shape = model_size(cfg, facts)
    need = needs_mod.estimate(params, largest, dtype, merge, gguf, folder_bytes(source.path), out, shape)
    if need.problems:
        raise ExportError(" ".join(need.problems) + " Nothing was written.")
    request = {
        "run_dir": str(run.path),
        "source": str(source.path),
        "out_dir": "",  # the staging folder, set when it starts
        "dtype": dtype,
        "gguf": gguf,
        "merge": merge,
        "name": f"{slug(cfg.model.name)}-{run.run_id[:15]}",
        "train_precision": facts.state.precision,
        "readback": readback,  # --skip-readback: the GGUF is not read back and checked
    }
    title = f"{slug(cfg.model.name)} · {run.run_id}"
    return Plan(run, source, merge, dtype, gguf, out, need, request, facts, title, notes)


def execute(plan: Plan, progress: ProgressSink) -> tuple[Path, dict[str, Any]]:
    """Run the export process for `plan`; `progress` is fed its events (a `Progress`, or a screen's
    own with the same `update`, `check` and `warning`). Returns (the folder, what export_done said
    plus the card's inputs); ExportError with the reason when it failed."""
    run, out = plan.run, plan.out
    staging = out.with_name(f".{out.name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.parent.mkdir(parents=True, exist_ok=True)
    request = dict(plan.request, out_dir=str(staging))
    started = time.time()
    try:
        code, events, faults = run_backend(request, run.path / LOG_NAME, progress)
        done = next((e for e in events if e.get("type") == "export_done"), None)
        error = next((e for e in events if e.get("type") == "error"), None)
        if done is None or code != 0:
            if error:
                raise ExportError(f"export failed: {error.get('message')} {error.get('hint') or ''}".strip())
            raise ExportError(
                f"the export process exited with code {code} without finishing"
                + (f" ({'; '.join(faults[:2])})" if faults else "")
                + f"; see {run.path / LOG_NAME}"
            )
        info = {k: v for k, v in done.items() if k not in ("v", "type", "ts")}
        info["quantised_check"] = next(
            (e for e in events if e.get("type") == "export_check" and e.get("gating") is False), None
        )
        info.update(
            source_label=plan.source.label,
            source_note=plan.source.note,
            wall_s=round(time.time() - started, 2),
            title=plan.title,
        )
        card_mod.write_card(staging, plan.facts, info)
        info["files"] = [{"name": p.name, "bytes": p.stat().st_size} for p in sorted(staging.iterdir())]
        if out.exists():
            out.rmdir()  # empty, checked above
        os.rename(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    info["out_dir"] = str(out)
    read = info.get("readback") or {}
    if read.get("passed") is False:
        raise ExportError(readback_failed(out, plan, read))
    return out, info


def readback_failed(out: Path, plan: Plan, read: dict[str, Any]) -> str:
    """A GGUF that failed its read-back: what was found, what is kept, and what to do."""
    again = f"{cockpit_command()} export {plan.run.run_id} --gguf {plan.gguf} --to NEW_DIR"
    more_bits = "f16" if plan.gguf in ("q8_0", "f16") else "q8_0"
    return (
        f"the GGUF failed its read-back check: {describe_readback(read)}. The export is kept in {out}: "
        f"the merged safetensors passed the merge check; the GGUF is kept as {read.get('kept_as')}, "
        "with no Modelfile, so that nothing takes it for a checked model. Export again "
        f"({again}): a file damaged while it was written reads back differently the next time. If it "
        f"fails again, choose a type with more bits (--gguf {more_bits}) and report it with "
        f"{plan.run.path / LOG_NAME}."
    )


BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "build_llama_quantize.sh"


def how_to_get_llama_quantize() -> str:
    """Where llama-quantize comes from: this checkout's build script, else llama.cpp's own build."""
    if BUILD_SCRIPT.is_file():
        return (
            f"{BUILD_SCRIPT} builds it into ~/.local/bin (cmake and a C++ compiler; ~7 min on 2 cores), "
            "then put that folder on PATH"
        )
    return (
        "build it from llama.cpp's source: cmake -B build && cmake --build build --target llama-quantize, "
        "then put build/bin on PATH"
    )


def k_quant_note(gguf: str) -> str:
    """Before a K-quant export: whether llama.cpp's llama-quantize was found, and what follows."""
    tool = shutil.which("llama-quantize")
    if tool is None:
        return (
            f"{gguf}: llama-quantize (llama.cpp's) is not on PATH: the f16 GGUF is written, and the command "
            f"that makes the {gguf} file from it is said at the end. "
            f"To have it: {how_to_get_llama_quantize()}."
        )
    return f"{gguf}: the f16 GGUF is quantised by {tool} (its version is said at the end)."


def export(
    run: rundir.RunDir,
    checkpoint: int | None = None,
    merge: bool = False,
    dtype: str = "bf16",
    gguf: str | None = None,
    to: str | None = None,
    say: Callable[[str], object] = lambda text: print(text, file=sys.stderr),
    readback: bool = True,
) -> tuple[Path, dict[str, Any]]:
    """Export and return (the folder, what export_done said plus the card's inputs)."""
    plan = prepare(run, checkpoint, merge, dtype, gguf, to, readback)
    for note in plan.notes:
        say(note)
    say(f"exporting {plan.what} of run {run.run_id} from {plan.source.label}; {plan.need.line()}")
    for line in plan.need.lines():
        say(f"  {line}")
    progress = Progress()
    try:
        return execute(plan, progress)
    finally:
        progress.clear()  # a bar the export left unfinished (it failed) is not left on the terminal


def summary_lines(out: Path, info: dict[str, Any]) -> list[str]:
    lines = [f"exported to {out}"]
    for f in info.get("files") or []:
        lines.append(f"  {f['name']:<34} {fmt.size(f['bytes']):>10}")
    if info.get("check"):
        lines.append(f"merge check: {describe_event(info['check'])}")
    if info.get("quantised_check"):
        lines.append(f"against the trained 4-bit base: {describe_event(info['quantised_check'])}")
    if info.get("readback"):
        lines.append(f"GGUF check: {describe_readback(info['readback'])}")
    timings = info.get("timings_s") or {}
    if timings:
        lines.append(
            "time: "
            + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items())
            + f"; peak RAM {fmt.size(info.get('peak_rss_bytes'))}"
            + (f", peak GPU {fmt.size(info['peak_gpu_bytes'])}" if info.get("peak_gpu_bytes") else "")
        )
    kq = info.get("kquant")
    if kq and kq.get("done"):
        lines.append(f"{kq['type']}: quantised by {kq['tool']} ({kq.get('version')}): {kq['file']}")
    elif kq:
        lines.append(
            f"{kq['type']}: llama-quantize (llama.cpp's) is not on PATH: the f16 GGUF {kq['file']} is "
            f"written; for {kq['type']} run: cd {out} && {kq['command']} (then point Modelfile at it)"
        )
        lines.append(f"  llama-quantize: {how_to_get_llama_quantize()}")
    if info.get("gguf"):
        lines.append(f"Ollama: cd {out} && ollama create NAME -f Modelfile")
    return lines
