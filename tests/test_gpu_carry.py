"""bench/gpu_carry.sh: the product's and unsloth's wheels in one folder small enough for a device call's
carry, bitsandbytes' wheel cut to the libraries the GPU box's torch loads, its RECORD to match."""

from __future__ import annotations

import subprocess
import zipfile

from conftest import ROOT

LIBS = ("cuda118", "cuda130", "cuda132", "cpu", "rocm64")


def _wheel(path, files):
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)


def test_the_carry_keeps_every_wheel_and_only_the_loadable_bitsandbytes_libraries(tmp_path):
    whl, uw, out = tmp_path / "whl", tmp_path / "uw", tmp_path / "out"
    whl.mkdir()
    uw.mkdir()
    libs = {f"bitsandbytes/libbitsandbytes_{k}.so": b"x" * 100 for k in LIBS}
    record = "".join(f"{n},sha256=abc,100\n" for n in libs) + "bitsandbytes/__init__.py,sha256=def,1\n"
    _wheel(
        whl / "bitsandbytes-0.50.2-py3-none-any.whl",
        {**libs, "bitsandbytes/__init__.py": b"#", "bitsandbytes-0.50.2.dist-info/RECORD": record},
    )
    _wheel(whl / "trl-1.16.0-py3-none-any.whl", {"trl/__init__.py": b"#"})
    _wheel(uw / "unsloth-2026.10.9-py3-none-any.whl", {"unsloth/__init__.py": b"#"})
    done = subprocess.run(
        ["bash", str(ROOT / "bench" / "gpu_carry.sh"), str(out), str(whl), str(uw)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "2 libraries left out" in done.stdout
    assert sorted(p.name for p in out.glob("*.whl")) == [
        "bitsandbytes-0.50.2-py3-none-any.whl",
        "trl-1.16.0-py3-none-any.whl",
    ]
    assert [p.name for p in (out / "uw").glob("*.whl")] == ["unsloth-2026.10.9-py3-none-any.whl"]
    with zipfile.ZipFile(out / "bitsandbytes-0.50.2-py3-none-any.whl") as z:
        kept = sorted(n for n in z.namelist() if n.endswith(".so"))
        rows = z.read("bitsandbytes-0.50.2.dist-info/RECORD").decode().splitlines()
    assert kept == [f"bitsandbytes/libbitsandbytes_{k}.so" for k in ("cpu", "cuda130", "cuda132")]
    assert sorted(r.split(",")[0] for r in rows) == sorted([*kept, "bitsandbytes/__init__.py"])
