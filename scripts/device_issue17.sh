#!/usr/bin/env bash
# Issue 17, H200. PART=tests: every GPU test on the final code (log tarred into $OUT).
# PART=tiny: tiny shapes timed cold vs warm (scripts/tiny_cold.py), then tiny-shape searches, each timed.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; L=/tmp/logs; mkdir -p $L
export PYTHONUNBUFFERED=1 GEMVTUNE_CACHE_DIR=/tmp/gemvtune-cache
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > "$L/env.txt" 2>&1
if [ "${PART:-tests}" = tests ]; then
  echo "command: python3 -m pytest -m gpu -p no:cacheprovider -rA" > $L/pytest-gpu.log
  timeout ${T_TESTS:-540} python3 -m pytest -m gpu -p no:cacheprovider -rA ${TESTS:-} >> $L/pytest-gpu.log 2>&1; echo "pytest rc=$?" >> $L/pytest-gpu.log
  tar czf "$OUT/logs.tgz" -C $L .
  grep -E "^(FAILED|ERROR)|passed|failed|rc=" $L/pytest-gpu.log | tail -25
  grep -E "^E " $L/pytest-gpu.log | head -20
else
  R=$OUT/issue17; mkdir -p $R
  timeout 200 python3 scripts/tiny_cold.py --out $R > $L/tiny-cold.log 2>&1; echo "tiny_cold rc=$?" >> $L/tiny-cold.log
  for s in 1x4096 8x4096 16x4096 33x8200 256x7168; do
    t0=$(date +%s.%N)
    timeout 240 python3 -m gemvtune search --shape $s --trials 40 --family gemv --results $R > $L/search-$s.log 2>&1
    rc=$?; t1=$(date +%s.%N)
    echo "search $s --trials 40 --family gemv: rc=$rc wall_s=$(python3 -c "print(round($t1-$t0,1))")" | tee -a $L/search-walls.log
  done
  cp $L/*.log $R/ 2>/dev/null
  tar czf "$OUT/issue17.tgz" -C $OUT issue17
  rm -rf $R
  cat $L/tiny-cold.log | tail -14
  grep -h "µs" $L/search-*.log | cut -c1-230
fi
