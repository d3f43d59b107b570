"""A stand-in for `python -m train_backend.export` (the export screen's tests): the same JSON lines
(export_progress per stage, export_check, export_readback, export_done, or error) with fixed
figures, and files written into the request's out_dir. FAKE_EXPORT_FAIL=1 makes it fail as a
refused GGUF would."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from cockpit.protocol.wire import encode


def emit(msg_type: str, **fields) -> None:
    sys.stdout.buffer.write(encode(msg_type, ts=1796164700.0, **fields))
    sys.stdout.buffer.flush()


def gguf_event(request: dict, out: Path) -> dict:
    path = out / f"{request['name']}-{request['gguf']}.gguf"
    kinds = {request["gguf"].upper(): 6, "F32": 3}
    return {
        "file": path.name,
        "tensors": 9,
        "bytes": path.stat().st_size,
        "type": request["gguf"],
        "architecture": "llama",
        "types": kinds,
    }


def main() -> int:
    request = json.loads(sys.argv[1])
    out = Path(request["out_dir"])
    stages = ["load", "merge", "check", "write"] + (["convert"] if request.get("gguf") else [])
    for stage in stages:
        emit("export_progress", stage=stage, done=0, total=4, unit="tensors", message="")
        if os.environ.get("FAKE_EXPORT_FAIL") and stage == "merge":
            emit(
                "error",
                kind="unsupported",
                message="the fake export was told to fail at the merge",
                hint="",
                phase="export",
            )
            return 1
        emit("export_progress", stage=stage, done=2, total=4, unit="tensors")
        emit("export_progress", stage=stage, done=1, total=1, unit="stage", elapsed_s=1.5, finished=True)
    check = {
        "compared": "merged vs base + adapter (bf16, cpu)",
        "inputs": 3,
        "positions": 24,
        "rms_diff": 0.0123,
        "ref_rms": 1.0,
        "max_abs_diff": 0.05,
        "ref_max_abs": 4.0,
        "tolerance": 0.06,
        "top1_agree": 1.0,
        "adapter_effect_rms": 0.25,
        "relative": 0.0123,
        "passed": True,
        "discriminates": True,
    }
    emit("export_check", **check)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text("{}")
    (out / "model.safetensors").write_bytes(b"\0" * 4096)
    readback = None
    if request.get("gguf"):
        (out / f"{request['name']}-{request['gguf']}.gguf").write_bytes(b"GGUF" + b"\0" * 2044)
        (out / "Modelfile").write_text("FROM ./model.gguf\n")
        readback = {
            "file": f"{request['name']}-{request['gguf']}.gguf",
            "file_type": request["gguf"],
            "tensors": 9,
            "inputs": 3,
            "gaps": [0.0168, 0.015, 0.0141],
            "gap": 0.0168,
            "tolerance": 0.1,
            "top1_same": 3,
            "elapsed_s": 0.4,
            "passed": True,
        }
        emit("export_readback", **readback)
    files = sorted(p.name for p in out.iterdir())
    emit(
        "export_done",
        out_dir=str(out),
        files=[{"name": f, "bytes": (out / f).stat().st_size} for f in files],
        merged=True,
        dtype=request["dtype"],
        device={"kind": "cpu"},
        params=1234567,
        model_type="llama",
        eos_tokens=["</s>"],
        check=check,
        gguf=gguf_event(request, out) if request.get("gguf") else None,
        readback=readback,
        export_versions={},
        timings_s={"load": 1.5, "merge": 1.5, "write": 1.5},
        peak_rss_bytes=512 * 2**20,
        stage_peak_rss_bytes={},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
