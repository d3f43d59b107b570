#!/usr/bin/env bash
# Build llama.cpp's llama-quantize, the tool `cockpit export --gguf q4_k_m|q5_k_m|q6_k` calls for the
# K-quants, on a box that has no package for it (pip's llama-cpp-python ships no such binary).
#
#   scripts/build_llama_quantize.sh [DEST]        DEST: where the binary goes (default ~/.local/bin)
#
# The source is llama.cpp as vendored in llama-cpp-python's source release on PyPI (pip download:
# the same index the install used, no git needed), pinned below. Only the one target is built,
# CPU-only, with no -march=native and libstdc++ linked in, so the binary also runs on another
# x86-64 box (a GPU box without a compiler). About 7 minutes on 2 cores (6 m 45 s on the
# project's 2-core dev box, 2026-12-07).
# Needs: cmake >= 3.14, a C++17 compiler, pip. Afterwards: put DEST on PATH; `cockpit export`
# finds llama-quantize there and says its version.
set -euo pipefail

VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
DEST=${1:-$HOME/.local/bin}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}

missing=()
command -v cmake >/dev/null || missing+=("cmake (apt install cmake, or pip install cmake)")
command -v c++ >/dev/null || command -v g++ >/dev/null || missing+=("a C++ compiler (apt install g++)")
PY=${PYTHON:-$(command -v python3 || true)}
[ -n "$PY" ] && "$PY" -m pip --version >/dev/null 2>&1 || missing+=("pip (python3 -m pip)")
if [ ${#missing[@]} -gt 0 ]; then
    echo "build_llama_quantize: missing what the build needs:" >&2
    printf '  - %s\n' "${missing[@]}" >&2
    echo "install them, then run this again" >&2
    exit 2
fi
mkdir -p "$DEST" || { echo "build_llama_quantize: cannot create $DEST: give a folder you can write" >&2; exit 2; }
[ -w "$DEST" ] || { echo "build_llama_quantize: $DEST is not writable: give a folder you can write" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/llama-quantize.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "fetching llama.cpp's source (llama-cpp-python $VERSION's source release) ..." >&2
"$PY" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$work"
tar -xzf "$work"/llama_cpp_python-"$VERSION".tar.gz -C "$work"
src="$work/llama_cpp_python-$VERSION/vendor/llama.cpp"
[ -f "$src/CMakeLists.txt" ] || { echo "build_llama_quantize: no llama.cpp source in the release at $src" >&2; exit 1; }

echo "building llama-quantize with $JOBS jobs (minutes) ..." >&2
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DCMAKE_EXE_LINKER_FLAGS="-static-libgcc -static-libstdc++" >"$work/cmake.log" 2>&1 \
    || { tail -30 "$work/cmake.log" >&2; echo "build_llama_quantize: cmake's configure failed (above)" >&2; exit 1; }
cmake --build "$work/build" --target llama-quantize -j "$JOBS" >"$work/build.log" 2>&1 \
    || { tail -30 "$work/build.log" >&2; echo "build_llama_quantize: the build failed (above)" >&2; exit 1; }
install -m 0755 "$work/build/bin/llama-quantize" "$DEST/llama-quantize"
# GGML's CPU backend is built with OpenMP where the compiler has it: its runtime goes beside the binary
omp=$(ldd "$DEST/llama-quantize" 2>/dev/null | awk '/libgomp/ {print $3}')
if [ -n "$omp" ] && [ -f "$omp" ]; then
    cp "$omp" "$DEST/" && echo "copied $(basename "$omp") beside it: on another box set LD_LIBRARY_PATH=$DEST" >&2
fi
"$DEST/llama-quantize" --help >/dev/null 2>&1 || [ $? -eq 1 ] \
    || { echo "build_llama_quantize: $DEST/llama-quantize does not start" >&2; exit 1; }
echo "$DEST/llama-quantize"
case ":$PATH:" in *":$DEST:"*) ;; *) echo "put it on PATH: export PATH=$DEST:\$PATH" >&2 ;; esac
