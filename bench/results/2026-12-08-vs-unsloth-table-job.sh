# on the device, in a session of its own (bench/device_job.py): unsloth and the held cockpit first on
# every row (the ragged rows also held without Liger: cockpit-noliger), then the cockpit at 22 GiB on
# every row while the time lasts. HELD_END, ALL_END: epoch s.
set -x
A=${ARCHS:-llama-2-7b,llama-3.1-8b}
rows() { echo "$A" | tr ',' '\n' | sed "s/\$/:$1:22/" | paste -sd, -; }
now=$(date +%s)
python3 bench/vs_unsloth.py --out /tmp/w/held --workdir /tmp/w --rows "$(rows ragged)" --sides unsloth,cockpit@unsloth-memory,cockpit-noliger@unsloth-memory --steps 10 --budget-s $(( HELD_END - now )) --run-timeout-s 240 --unsloth-path /tmp/unsloth-site:/tmp/site
now=$(date +%s)
python3 bench/vs_unsloth.py --out /tmp/w/held2048 --workdir /tmp/w --rows "$(rows full)" --sides unsloth,cockpit@unsloth-memory --steps 10 --budget-s $(( HELD_END - now )) --run-timeout-s 240 --unsloth-path /tmp/unsloth-site:/tmp/site
now=$(date +%s)
python3 bench/vs_unsloth.py --out /tmp/w/c22 --workdir /tmp/w --archs "$A" --caps 22 --sides cockpit,cockpit-late --steps 10 --budget-s $(( ALL_END - now )) --run-timeout-s 200
