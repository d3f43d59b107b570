#!/usr/bin/env bash
# unsloth's side of bench/vs_unsloth.py for the GPU box (Python 3.12, x86_64, no package index): the
# wheels it needs beyond what the box and the product's wheelhouse (shared/gpu/wheelhouse.sh) give,
# in a folder of its own that travels in a call's carry (64 MiB at most).
#
#   bench/unsloth_wheels.sh [DIR]          DIR defaults to ./.uw (add /.uw/ to .git/info/exclude)
#
# On the GPU box, in a call after the one that installed the product's wheels on /tmp/site (the
# machine kept warm between them), the install line bench/vs_unsloth.py's --unsloth-path expects:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#       --target /tmp/unsloth-site DIR/*.whl
#
# The versions are those of the recorded H200 table (bench/results/2026-12-04-vs-unsloth-*.json:
# unsloth and unsloth_zoo 2026.10.9, trl 1.15.0, datasets 4.8.5; unsloth pins trl<=1.15 and
# datasets<5, the product runs 1.16 and 5.2, hence a site of its own first on unsloth's path).
# unsloth's wheel is repacked without its studio/ web app (80 MB unpacked, not imported by
# training), so that the folder fits one carry. xformers is left out: unsloth runs PyTorch's
# SDPA without it. The box's own torch, transformers, peft, accelerate, numpy, pandas, pyarrow,
# psutil, rich, pyyaml are used as they are. The set is the packages' own Requires-Dist less what the
# box has (16 MiB). On an H100 box on 2026-12-07, `PYTHONPATH=/tmp/unsloth-site:/tmp/site python3 -c
# "import unsloth"` imported unsloth 2026.10.9 with trl 1.15.0 and the vs_unsloth row ran. With the
# product's 45 MiB .whl and the 12 MiB tree it is over a call's 64 MiB carry: bench/gpu_carry.sh
# makes one 26 MiB folder of both (bitsandbytes' wheel with only the libraries the box can load).
set -euo pipefail
dir=${1:-.uw}
mkdir -p "$dir"
pkgs=(
    unsloth==2026.10.9 unsloth_zoo==2026.10.9 trl==1.15.0 datasets==4.8.5
    tyro docstring_parser shtab typeguard
    cut_cross_entropy torchao hf_transfer msgspec sentencepiece einops json5 structlog
    typer shellingham annotated_doc nest_asyncio
)
# datasets 4.8.5 takes the product's dill 0.4.1 and multiprocess 0.70.19 (/tmp/site, second on the path)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$dir" "${pkgs[@]}"
# unsloth's wheel without studio/: its files and their RECORD lines
wheel=$(ls "$dir"/unsloth-2026.10.9-*.whl)
python3 - "$wheel" <<'EOF'
import os
import sys
import zipfile

path = sys.argv[1]
tmp = path + ".part"
with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out:
    dropped = 0
    for info in src.infolist():
        if info.filename.startswith("studio/"):
            dropped += 1
            continue
        data = src.read(info)
        if info.filename.endswith(".dist-info/RECORD"):
            lines = data.decode().splitlines(keepends=True)
            data = "".join(line for line in lines if not line.startswith("studio/")).encode()
        out.writestr(info, data)
os.replace(tmp, path)
print(f"{os.path.basename(path)}: studio/ left out ({dropped} files)", file=sys.stderr)
EOF
du -sh "$dir"
size=$(du -sm "$dir" | cut -f1)
if [ "$size" -ge 64 ]; then
    echo "unsloth_wheels: $dir is $size MiB, over a call's 64 MiB carry" >&2
    exit 1
fi
