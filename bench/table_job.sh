#!/usr/bin/env bash
# bench/vs_unsloth.py's whole table (issue 44, item 7) in one lease, as one job of bench/device_job.py:
#   HELD_END=<epoch s> ALL_END=<epoch s> python3 bench/device_job.py start --name table -- bash bench/table_job.sh
# then `wait` and `collect` in the calls after it (docs/benchmarks.md, "The table on one H100 lease").
# 1. every row held to unsloth's own peak: unsloth first (its peak is the cap), then the cockpit's
#    default (speed: auto weighs Liger there), and on the 2048-token rows the figures read each
#    micro-batch beside it (cockpit-eager: what at_log, the default, gains where the GPU binds);
# 2. every row at 22 GiB: the cockpit's default and cockpit-eager, while the time lasts.
# ARCHS (default llama-2-7b,llama-3.1-8b); HELD_END, ALL_END: the epoch seconds each part must end by.
set -x
A=${ARCHS:-llama-2-7b,llama-3.1-8b}
rows() { echo "$A" | tr ',' '\n' | sed "s/\$/:$1:22/" | paste -sd, -; }
UNSLOTH_PATH=${UNSLOTH_PATH:-/tmp/unsloth-site:/tmp/site}
now=$(date +%s)
python3 bench/vs_unsloth.py --out /tmp/w/held --workdir /tmp/w --rows "$(rows ragged)" \
    --sides unsloth,cockpit@unsloth-memory \
    --steps 10 --budget-s $((HELD_END - now)) --run-timeout-s 240 --unsloth-path "$UNSLOTH_PATH"
now=$(date +%s)
python3 bench/vs_unsloth.py --out /tmp/w/held2048 --workdir /tmp/w --rows "$(rows full)" \
    --sides unsloth,cockpit@unsloth-memory,cockpit-eager@unsloth-memory \
    --steps 10 --budget-s $((HELD_END - now)) --run-timeout-s 240 --unsloth-path "$UNSLOTH_PATH"
now=$(date +%s)
python3 bench/vs_unsloth.py --out /tmp/w/c22 --workdir /tmp/w --archs "$A" --caps 22 \
    --sides cockpit,cockpit-eager --steps 10 --budget-s $((ALL_END - now)) --run-timeout-s 200
