#!/usr/bin/env bash
# Issue 16, H200: every GPU test on the final code, then the per-call bench. Logs tarred into $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; L=/tmp/logs; mkdir -p $L
export PYTHONUNBUFFERED=1 GEMVTUNE_CACHE_DIR=/tmp/gemvtune-cache
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > "$L/env.txt" 2>&1
echo "command: python3 -m pytest -m gpu -p no:cacheprovider -rA" > $L/pytest-gpu.log
timeout ${T_TESTS:-420} python3 -m pytest -m gpu -p no:cacheprovider -rA ${TESTS:-} >> $L/pytest-gpu.log 2>&1; echo "pytest rc=$?" >> $L/pytest-gpu.log
timeout 100 python3 -m gemvtune percall --out $L > $L/percall.log 2>&1; echo "percall rc=$?" >> $L/percall.log
tar czf "$OUT/logs.tgz" -C $L .
grep -E "^(FAILED|ERROR)|passed|failed|rc=" $L/pytest-gpu.log | tail -25
grep -E "^E " $L/pytest-gpu.log | head -20
tail -22 $L/percall.log
