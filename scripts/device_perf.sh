#!/usr/bin/env bash
# Issue 7 on the lent H200: GPU tests; a 100-trial search of 14336x4096 from a cold compile cache and a
# fresh study (tuning wall time); shapes outside the suite tuned at n=1; the tuned benchmark of the
# suite and of those shapes (one process each: ceiling, tuned, llama.cpp, cuBLAS, dispatch cost).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 GEMVTUNE_CACHE_DIR=/tmp/gemvtune-cache
R=results/nvidia-h200
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc; } > "$OUT/env.txt" 2>&1
timeout 200 python3 -m pytest -m gpu -p no:cacheprovider -rA > "$OUT/pytest-gpu.log" 2>&1; echo "pytest rc=$?" >> "$OUT/pytest-gpu.log"
tail -2 "$OUT/pytest-gpu.log"
# tuning wall time, compiles included: empty compile cache, new study
rm -rf /tmp/cold /tmp/speed
( export GEMVTUNE_CACHE_DIR=/tmp/cold TIMEFORMAT='wall %R s (user %U s, sys %S s)'
  echo "command: gemvtune search --shape 14336x4096 --trials 100 --family gemv --results /tmp/speed (cold cache)"
  time python3 -m gemvtune search --shape 14336x4096 --trials 100 --family gemv --results /tmp/speed 2>&1 | tail -2 ) > "$OUT/search-speed.log" 2>&1
tail -1 "$OUT/search-speed.log"
OTHER="--shape 4608x3584 --shape 3584x3584 --shape 37888x3584 --shape 3584x18944 --shape 152064x3584 --shape 6144x5120 --shape 5120x4096 --shape 28672x5120 --shape 5120x14336 --shape 131072x5120 --shape 10240x8192 --shape 8192x8192 --shape 8192x28672"
echo "command: gemvtune search $OTHER --family gemv --trials 60 --results $R" > "$OUT/search-other.log"
timeout ${OTHER_S:-230} python3 -m gemvtune search $OTHER --family gemv --trials 60 --results $R >> "$OUT/search-other.log" 2>&1
echo "search rc=$?" >> "$OUT/search-other.log"; tail -3 "$OUT/search-other.log"
mkdir -p $R/bench
python3 -m gemvtune bench --suite decode --out $R/bench > "$OUT/bench-suite.log" 2>&1; echo "bench rc=$?" >> "$OUT/bench-suite.log"
python3 -m gemvtune bench $OTHER --out $R/bench > "$OUT/bench-other.log" 2>&1; echo "bench rc=$?" >> "$OUT/bench-other.log"
python3 -m gemvtune report --table $R/table.json --csv $R/table.csv > /dev/null 2>&1
tar czf "$OUT/results.tgz" $R/table.json $R/table.csv $R/bench $R/optuna-journal.log $(find $R -maxdepth 1 -newer "$OUT/env.txt" -name 'search-*')
tail -22 "$OUT/bench-suite.log"; tail -20 "$OUT/bench-other.log"
