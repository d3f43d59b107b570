#!/bin/sh
# Sets up lora-cockpit in ./.venv, for this machine: torch first (the CUDA build where an NVIDIA GPU
# is, else a CPU build: never the multi-GB CUDA build on a box without a GPU), then the project with
# its test extras (and, with the CUDA build, the gpu extra: bitsandbytes), then `cockpit` linked into
# a folder on PATH. Running it again is safe.
#
#   PYTHON=python3.12 ./install.sh   the interpreter .venv is made with (default: python3, >= 3.10)
#   COCKPIT_TORCH=cpu ./install.sh   that build of torch whatever this machine has (cpu or cuda)
set -eu
cd "$(dirname "$0")"

PYTHON=${PYTHON:-python3}
VENV=.venv
CPU_INDEX=https://download.pytorch.org/whl/cpu

say() { printf 'install.sh: %s\n' "$*"; }
die() {
    printf 'install.sh: %s\n' "$*" >&2
    exit 1
}
pip() { "$VENV/bin/python" -m pip "$@"; }

has_nvidia_gpu() { nvidia-smi -L >/dev/null 2>&1 || [ -e /proc/driver/nvidia/version ]; }

torch_build() { # cpu or cuda; empty when torch is not in .venv
    "$VENV/bin/python" -c 'import torch; print("cuda" if torch.version.cuda else "cpu")' 2>/dev/null || true
}

cpu_only_wheel() { # a torch wheel that asks for no CUDA library (no nvidia-* requirement)
    "$VENV/bin/python" - "$1" <<'EOF'
import sys
import zipfile

with zipfile.ZipFile(sys.argv[1]) as wheel:
    meta = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    lines = wheel.read(meta).decode().splitlines()
sys.exit(any(line.startswith("Requires-Dist: nvidia-") for line in lines))
EOF
}

install_cpu_torch() {
    # 1. a CPU wheel that pip's own configuration finds without an index (find-links: a local disk)
    wheels=$(mktemp -d)
    if pip download -q --no-index --no-deps -d "$wheels" torch >/dev/null 2>&1; then
        for wheel in "$wheels"/torch-*.whl; do
            if [ -f "$wheel" ] && cpu_only_wheel "$wheel"; then
                say "torch: the CPU build pip finds on this machine, $(basename "$wheel")"
                pip install -q "$wheel" && rm -rf "$wheels" && return 0
            fi
        done
    fi
    rm -rf "$wheels"
    # 2. PyTorch's CPU index
    say "torch: the CPU build from $CPU_INDEX"
    pip install -q --timeout 20 --retries 1 torch --index-url "$CPU_INDEX" && return 0
    return 1
}

"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null ||
    die "needs Python >= 3.10; $PYTHON is $("$PYTHON" -V 2>&1 || echo 'not found'). Run: PYTHON=python3.X ./install.sh"
if [ ! -x "$VENV/bin/python" ]; then
    say "making $VENV with $("$PYTHON" -V 2>&1)"
    "$PYTHON" -m venv "$VENV" || die "could not make $VENV (Debian/Ubuntu: apt install python3-venv)"
fi

want=${COCKPIT_TORCH:-}
if [ -z "$want" ]; then
    if has_nvidia_gpu; then want=cuda; else want=cpu; fi
fi
have=$(torch_build)
if [ -n "$have" ]; then
    say "torch: $have build already in $VENV, kept"
    if [ "$have" = cuda ] && [ "$want" = cpu ]; then
        say "note: no NVIDIA GPU here, and that build weighs several GB; for the CPU build: rm -rf $VENV && ./install.sh"
    fi
elif [ "$want" = cuda ]; then
    say "torch: NVIDIA GPU found; the CUDA build from the package index (a few GB)"
    pip install -q torch || die "torch did not install (above: pip's reason)"
elif [ "$want" = cpu ]; then
    install_cpu_torch || die "no CPU build of torch could be installed: none on this disk through pip's
configuration, and $CPU_INDEX did not answer. Install one into $VENV yourself
(for example: $VENV/bin/pip install torch --index-url <a mirror of $CPU_INDEX>), then run ./install.sh
again; it keeps the torch it finds. (COCKPIT_TORCH=cuda ./install.sh takes the CUDA build instead.)"
    [ "$(torch_build)" = cpu ] || die "the torch installed is not a CPU build; rm -rf $VENV and try again"
else
    die "COCKPIT_TORCH is '$want': cpu or cuda"
fi

# bitsandbytes (QLoRA, paged optimizers) only with the CUDA build: it has no use on a CPU box, where
# it is 125 MB on disk and ~2 s of every trainer's start (peft imports it wherever it is installed)
extras=test
if [ "$(torch_build)" = cuda ]; then extras=test,gpu; fi
say "the project and its extras [$extras] (editable)"
pip install -q -e ".[$extras]" || die "the project did not install (above: pip's reason)"

# `cockpit` as typed: a link in the first folder on PATH it can write (~/.local/bin, /usr/local/bin)
entry="$(pwd)/$VENV/bin/cockpit"
linked=
for dir in "$HOME/.local/bin" /usr/local/bin; do
    case ":$PATH:" in *":$dir:"*) ;; *) continue ;; esac
    [ -d "$dir" ] || mkdir -p "$dir" 2>/dev/null || continue
    [ -w "$dir" ] || continue
    if [ -e "$dir/cockpit" ] && [ ! -L "$dir/cockpit" ]; then
        say "$dir/cockpit is another program: left as it is"
        continue
    fi
    ln -sfn "$entry" "$dir/cockpit" && linked="$dir/cockpit" && break
done
if [ -n "$linked" ]; then
    say "done: cockpit works as typed ($linked -> $entry)"
else
    say "done: no folder on PATH to link cockpit from (~/.local/bin, /usr/local/bin): type $VENV/bin/cockpit,"
    say "or add it to PATH: export PATH=\"$(pwd)/$VENV/bin:\$PATH\""
fi
