"""K-quants (q4_k_m, q5_k_m, q6_k) through llama.cpp's own `llama-quantize`: the gguf package has no
K-quant quantizer that matches llama.cpp's (its importance-free mixes per tensor are llama.cpp's).

The export writes the f16 GGUF first; with `llama-quantize` on PATH it is quantised into the K type,
the tool's version said, and the f16 file removed; without it, the f16 file stays and the exact
command to run is said. No torch here: the tests drive it with a fake tool on PATH.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

K_TYPES = {"q4_k_m": "Q4_K_M", "q5_k_m": "Q5_K_M", "q6_k": "Q6_K"}
TOOL = "llama-quantize"
VERSION_TIMEOUT_S = 30.0


def tool_version(tool: str) -> str:
    """`llama-quantize --version`'s first line (llama.cpp: `version: 4567 (abcdef0)`), or why not."""
    try:
        proc = subprocess.run(
            [tool, "--version"], capture_output=True, text=True, timeout=VERSION_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"version unknown ({type(exc).__name__})"
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    found = [line for line in lines if "version" in line.lower() and not line.lower().startswith("usage")]
    return found[0].strip() if found else "version unknown"


def build_line(output: str) -> str | None:
    """The version llama-quantize prints as it starts, for builds whose `--version` prints only the
    usage: `version: 0.5.0-dev (build 1, commit 0c1e570)` (llama.cpp as vendored by
    llama-cpp-python 0.3.36), or a `main: build 8123 (abcdef0) with cc for x86_64` line (older:
    `build = 8123 (abcdef0)`, said as `build 8123 (abcdef0)`)."""
    for line in output.splitlines():
        if line.strip().lower().startswith("version:"):
            return line.strip()
    found = re.search(r"\bbuild\s*=?\s*(\d+)\s*\(([^)]*)\)", output)
    return f"build {found.group(1)} ({found.group(2)})" if found else None


def k_quantize(f16_file: Path, kind: str) -> dict:
    """The K-quant of `f16_file` beside it (`NAME-f16.gguf` -> `NAME-q4_k_m.gguf`): what was done, as
    the `export_done` event's `kquant`. Raises RuntimeError when the tool runs and fails."""
    target = f16_file.with_name(f16_file.name.removesuffix("-f16.gguf") + f"-{kind}.gguf")
    tool = shutil.which(TOOL)
    command = [tool or TOOL, str(f16_file), str(target), K_TYPES[kind]]
    # by names, run in the export folder: the export is written aside and renamed into place
    said = {"type": kind, "command": shlex.join([TOOL, f16_file.name, target.name, K_TYPES[kind]])}
    if tool is None:
        return {**said, "done": False, "tool": None, "file": f16_file.name}
    version = tool_version(tool)
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not target.is_file():
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
        target.unlink(missing_ok=True)
        raise RuntimeError(f"{TOOL} ({version}) failed: {last[0]}; the f16 GGUF is kept: {f16_file}")
    if version == "version unknown":
        version = build_line(proc.stdout + proc.stderr) or version
    f16_file.unlink()
    return {**said, "done": True, "tool": tool, "version": version, "file": target.name}
