#!/bin/sh
# The README's two commands on a fresh clone of this checkout, as a new user types them, timed; then
# what they left: the size of .venv, its NVIDIA packages, and `cockpit attach RUN` typed in a shell.
# Prints the record (docs/measurements.md quotes it):
#
#   bench/fresh_clone.sh [DEST] > bench/results/DATE-fresh-clone-cpu.txt     (DEST: /tmp/fresh)
#
# The demo's run goes into DEST-home ($COCKPIT_HOME), not the caller's runs. install.sh may link
# `cockpit` into ~/.local/bin or /usr/local/bin: the link points into DEST afterwards.
set -eu
SRC=$(cd "$(dirname "$0")/.." && pwd)
DEST=${1:-/tmp/fresh}
COCKPIT_HOME=${COCKPIT_HOME:-$DEST-home}
export COCKPIT_HOME
rm -rf "$DEST" "$COCKPIT_HOME"
git clone -q "$SRC" "$DEST"
cd "$DEST"

now() { date +%s.%N; }
took() { awk -v a="$1" -v b="$2" 'BEGIN { s = b - a; printf "%d:%05.2f (%.1f s)", s / 60, s - 60 * int(s / 60), s }'; }
# the two lines of the README's "Two commands" block
first=$(awk '/^## Two commands/ { on = 1 } on && /^```bash/ { getline; print; exit }' README.md)
second=$(awk '/^## Two commands/ { on = 1 } on && /^```bash/ { getline; getline; print; exit }' README.md)

echo "# The README's two commands on a fresh clone (bench/fresh_clone.sh)"
echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "commit: $(git rev-parse --short HEAD)"
echo "machine: $(uname -a)"
echo "nproc: $(nproc)"
echo "load average at the start (1, 5, 15 min): $(cut -d' ' -f1-3 /proc/loadavg)"
echo "python: $(python3 -V 2>&1)"
echo "pip: $(python3 -m pip --version)"
echo "NVIDIA GPU: $(nvidia-smi -L 2>/dev/null || echo 'none (nvidia-smi -L fails)')"
echo "COCKPIT_HOME: $COCKPIT_HOME"
echo

echo "## first command: $first"
start=$(now)
set +e
sh -c "$first" >"$DEST-first.log" 2>&1
code=$?
set -e
end=$(now)
echo "exit $code, wall $(took "$start" "$end")"
echo "install.sh said:"
grep '^install.sh:' "$DEST-first.log" | sed 's/^/  /'
echo "the demo ended with (its output is not a terminal: plain lines):"
tail -n 8 "$DEST-first.log" | sed 's/^/  /'
echo

echo "## what it left"
echo "du -sh .venv: $(du -sh .venv | cut -f1)"
echo "torch: $(.venv/bin/python -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)' 2>/dev/null)"
packages=$(.venv/bin/python -m pip list 2>/dev/null)
listed() { printf '%s\n' "$packages" | grep -i -E "$1" | sed 's/^/  /' || true; }
echo "pip list | grep -i nvidia:"
echo "$(listed nvidia)" | grep . || echo "  (none)"
echo "CUDA libraries (pip list | grep -i -E '^(nvidia-.*-cu|triton) '):"
echo "$(listed '^(nvidia-.*-cu|triton) ')" | grep . || echo "  (none)"
echo "cockpit, as a shell finds it: $(sh -c 'command -v cockpit' || echo 'not on PATH')"
link=$(sh -c 'command -v cockpit' || true)
[ -n "$link" ] && echo "  which is: $(readlink -f "$link")"
run=$(.venv/bin/python -c 'import json, sys; print(json.load(sys.stdin)[-1]["run"])' <<EOF
$(.venv/bin/cockpit runs --json)
EOF
)
echo "\$ cockpit attach $run --no-ui    (typed: the shell finds cockpit on PATH)"
set +e
sh -c "cockpit attach $run --no-ui" >"$DEST-attach.log" 2>&1
code=$?
set -e
tail -n 6 "$DEST-attach.log" | sed 's/^/  /'
echo "  exit $code"
echo

echo "## second command: $second"
start=$(now)
set +e
sh -c "$second" >"$DEST-second.log" 2>&1
code=$?
set -e
end=$(now)
echo "exit $code, wall $(took "$start" "$end")"
echo "load average at the end (1, 5, 15 min): $(cut -d' ' -f1-3 /proc/loadavg)"
grep -E '^[0-9]+ (passed|failed)|(passed|failed).* in [0-9]' "$DEST-second.log" | tail -n 3 | sed 's/^/  /'
