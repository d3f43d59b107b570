#!/usr/bin/env bash
# One folder for a device call that needs both the product's wheels and unsloth's: a call's carry
# holds 64 MiB with the working tree (12 MiB on 2026-12-07), and ./.whl (45 MiB, bitsandbytes' wheel
# 42 MiB of it: its libraries for every CUDA and ROCm build) with ./.uw (16 MiB) came to 73.
#
#   bench/gpu_carry.sh [OUT] [WHL] [UW]     defaults: ./.wgpu ./.whl ./.uw (add /.wgpu/ to .git/info/exclude)
#
# OUT gets every wheel of WHL, bitsandbytes' repacked with only the libraries the GPU box's torch
# (2.11, CUDA 13.0) can load (libbitsandbytes_cuda130.so, _cuda132.so, _cpu.so; RECORD rewritten to
# match: 7 MiB), and UW's wheels under OUT/uw. On the box:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#       --target /tmp/site OUT/*.whl
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#       --target /tmp/unsloth-site OUT/uw/*.whl
# Used on 2026-12-07 for the vs_unsloth row on an H100 (bench/results/2026-12-07-vs-unsloth-7b-ragged-h100.*).
set -euo pipefail
shopt -s nullglob
out=${1:-.wgpu}
whl=${2:-.whl}
uw=${3:-.uw}
keep=${BNB_KEEP:-cuda130,cuda132,cpu}
rm -rf "$out"
mkdir -p "$out/uw"
for f in "$whl"/*.whl; do
    case $(basename "$f") in
        bitsandbytes-*) ;;
        *) cp "$f" "$out/" ;;
    esac
done
for f in "$whl"/bitsandbytes-*.whl; do
    python3 - "$f" "$out/$(basename "$f")" "$keep" <<'EOF'
import sys, zipfile

src, dst, keep = sys.argv[1], sys.argv[2], sys.argv[3].split(",")

def wanted(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    if not (base.startswith("libbitsandbytes_") and base.endswith(".so")):
        return True
    return base[len("libbitsandbytes_") : -len(".so")] in keep

with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
    names = [n for n in zin.namelist() if wanted(n)]
    for n in names:
        data = zin.read(n)
        if n.endswith(".dist-info/RECORD"):
            lines = data.decode().splitlines()
            data = ("\n".join(ln for ln in lines if wanted(ln.split(",", 1)[0])) + "\n").encode()
        zout.writestr(zin.getinfo(n), data)
    dropped = len(zin.namelist()) - len(names)
print(f"{dst}: {dropped} libraries left out (kept: {', '.join(keep)})")
EOF
done
uw_wheels=("$uw"/*.whl)
if [ ${#uw_wheels[@]} -gt 0 ]; then cp "${uw_wheels[@]}" "$out/uw/"; fi
du -sh "$out"
