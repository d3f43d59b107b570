"""K-quants through llama.cpp's llama-quantize (train_backend/export/kquant.py): a fake tool on PATH
that records its arguments; without one, the f16 file stays and the exact command is said."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest
from conftest import ROOT

from cockpit.results import export as exporter
from cockpit.results import export_needs as needs
from train_backend.export import kquant

FAKE = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "version: 4242 (f00dcafe)"; echo "built with cc"; exit 0; fi
printf '%s\\n' "$@" > "$(dirname "$0")/argv.txt"
{fail}
cp "$1" "$2"
"""


def fake_tool(folder: Path, monkeypatch, fail: bool = False) -> Path:
    folder.mkdir(exist_ok=True)
    tool = folder / "llama-quantize"
    tool.write_text(
        FAKE.format(
            fail='echo "llama_model_quantize: failed to quantize: bad magic" >&2; exit 1' if fail else ""
        )
    )
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return tool


def test_with_llama_quantize_the_f16_file_becomes_the_k_quant_and_the_version_is_said(tmp_path, monkeypatch):
    tool = fake_tool(tmp_path / "bin", monkeypatch)
    f16 = tmp_path / "out" / "tiny-f16.gguf"
    f16.parent.mkdir()
    f16.write_bytes(b"GGUF f16 weights")
    made = kquant.k_quantize(f16, "q4_k_m")
    target = tmp_path / "out" / "tiny-q4_k_m.gguf"
    assert made == {
        "type": "q4_k_m",
        "command": "llama-quantize tiny-f16.gguf tiny-q4_k_m.gguf Q4_K_M",
        "done": True,
        "tool": str(tool),
        "version": "version: 4242 (f00dcafe)",
        "file": "tiny-q4_k_m.gguf",
    }
    assert (tmp_path / "bin" / "argv.txt").read_text().split() == [str(f16), str(target), "Q4_K_M"]
    assert target.read_bytes() == b"GGUF f16 weights" and not f16.exists()
    line = exporter.summary_lines(tmp_path / "out", {"kquant": made})[-1]
    assert line == f"q4_k_m: quantised by {tool} (version: 4242 (f00dcafe)): tiny-q4_k_m.gguf"


def test_without_it_the_f16_file_stays_and_the_exact_command_is_said(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    f16 = tmp_path / "tiny-f16.gguf"
    f16.write_bytes(b"GGUF")
    made = kquant.k_quantize(f16, "q6_k")
    assert made == {
        "type": "q6_k",
        "command": "llama-quantize tiny-f16.gguf tiny-q6_k.gguf Q6_K",
        "done": False,
        "tool": None,
        "file": "tiny-f16.gguf",
    }
    assert f16.exists()
    out = tmp_path / "exports" / "x"
    line, how = exporter.summary_lines(out, {"kquant": made})[1:]
    assert line == (
        "q6_k: llama-quantize (llama.cpp's) is not on PATH: the f16 GGUF tiny-f16.gguf is written; for q6_k "
        f"run: cd {out} && llama-quantize tiny-f16.gguf tiny-q6_k.gguf Q6_K (then point Modelfile at it)"
    )
    # and where the tool comes from: this checkout's build script, which is there and runnable
    script = ROOT / "scripts" / "build_llama_quantize.sh"
    assert how == f"  llama-quantize: {script} builds it into ~/.local/bin (cmake and a C++ compiler; " + (
        "~7 min on 2 cores), then put that folder on PATH"
    )
    assert script.is_file() and os.access(script, os.X_OK)
    note = exporter.k_quant_note("q6_k")
    assert "is not on PATH" in note and str(script) in note
    monkeypatch.setattr(exporter, "BUILD_SCRIPT", tmp_path / "absent.sh")  # an installed package: no scripts/
    assert "cmake --build build --target llama-quantize" in exporter.how_to_get_llama_quantize()


def test_a_failing_llama_quantize_fails_the_export_with_its_last_line_and_keeps_the_f16(
    tmp_path, monkeypatch
):
    fake_tool(tmp_path / "bin", monkeypatch, fail=True)
    f16 = tmp_path / "tiny-f16.gguf"
    f16.write_bytes(b"GGUF")
    with pytest.raises(
        RuntimeError, match=r"\(version: 4242 \(f00dcafe\)\) failed: llama_model_quantize: failed"
    ):
        kquant.k_quantize(f16, "q5_k_m")
    assert f16.exists() and not (tmp_path / "tiny-q5_k_m.gguf").exists()


def test_a_k_quant_needs_the_f16_file_and_its_own_on_disk(tmp_path, monkeypatch):
    monkeypatch.setattr(needs, "available_ram_bytes", lambda: 64 * 2**30)
    monkeypatch.setattr(needs, "free_disk_bytes", lambda path: 100 * 2**30)
    n = needs.estimate(6_738_415_616, 32000 * 4096, "bf16", True, "q4_k_m", 0, tmp_path)
    assert n.disk_bytes == 6_738_415_616 * 2 + int(6_738_415_616 * (2 + 4.89 / 8))
    assert "+ GGUF f16 (removed once quantised) 12.55 GiB + GGUF q4_k_m 3.84 GiB" in n.disk_parts


def test_the_k_types_the_cli_offers_are_the_ones_it_can_make():
    from cockpit.config.schema import GGUF_TYPES

    assert set(kquant.K_TYPES) == {t for t in GGUF_TYPES if "_k" in t} == set(needs.K_BITS)


BUILD_ONLY = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "usage: $0 [--help] [--allow-requantize]"; exit 1; fi
echo "main: build 8123 (abcdef0) with cc (Debian 12.2.0-14) for x86_64-linux-gnu" >&2
cp "$1" "$2"
"""


def test_a_build_whose_version_flag_prints_the_usage_says_its_build_from_the_run(tmp_path, monkeypatch):
    """llama.cpp builds (0.3.36's vendored tree, as built on the H100 box) answer --version with the
    usage; their build line comes from the quantisation's own output."""
    folder = tmp_path / "bin"
    folder.mkdir()
    tool = folder / "llama-quantize"
    tool.write_text(BUILD_ONLY)
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    assert kquant.tool_version(str(tool)) == "version unknown"
    f16 = tmp_path / "tiny-f16.gguf"
    f16.write_bytes(b"GGUF")
    assert kquant.k_quantize(f16, "q6_k")["version"] == "build 8123 (abcdef0)"


def test_the_older_build_line_is_read_too():
    assert kquant.build_line("main: build = 4242 (f00dcafe)\nmain: quantizing") == "build 4242 (f00dcafe)"
    assert kquant.build_line("llama_model_quantize: failed") is None
    said = "version: 0.5.0-dev (build 1, commit 0c1e570)\nbuilt with GNU 12.2.0 for Linux x86_64\n"
    assert kquant.build_line(said) == "version: 0.5.0-dev (build 1, commit 0c1e570)"


def test_the_build_script_names_what_it_lacks_before_fetching_anything(tmp_path):
    """scripts/build_llama_quantize.sh on a box with no cmake, compiler or pip: exit 2, each one named
    with how to get it, nothing fetched or created."""
    import subprocess

    bash = shutil.which("bash")
    assert bash is not None
    empty = tmp_path / "bin"
    empty.mkdir()
    dest = tmp_path / "dest"
    proc = subprocess.run(
        [bash, str(ROOT / "scripts" / "build_llama_quantize.sh"), str(dest)],
        env={"PATH": str(empty), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2, proc.stderr
    for need in ("cmake (apt install cmake", "a C++ compiler (apt install g++)", "pip (python3 -m pip)"):
        assert need in proc.stderr
    assert "install them, then run this again" in proc.stderr and not dest.exists()
