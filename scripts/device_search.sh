#!/usr/bin/env bash
# On the lent H200: the 100-trial search of 14336x4096, llama-3-8b end to end, the table's GPU tests.
set -uo pipefail
OUT=${OUT:-/tmp/out}; R=$OUT/r; mkdir -p "$R"
export PYTHONUNBUFFERED=1 GEMVTUNE_CACHE_DIR=/tmp/gemvtune-cache
date -u > "$OUT/search.log"
( time python3 -m gemvtune search --shape 14336x4096 --trials 100 --results "$R" ) >> "$OUT/search.log" 2>&1
( time python3 -m gemvtune search --model llama-3-8b --trials 100 --results "$R" ) >> "$OUT/search.log" 2>&1
python3 -m gemvtune report --table "$R/table.json" --csv "$R/table.csv" >> "$OUT/search.log" 2>&1
cat "$OUT/search.log"
GEMVTUNE_TEST_TABLE="$R/table.json" python3 -m pytest tests/test_gpu_table.py tests/test_gpu.py -m gpu -p no:cacheprovider -rA > "$OUT/pytest-gpu.log" 2>&1
tail -8 "$OUT/pytest-gpu.log"
tar czf "$OUT/search-results.tgz" -C "$R" .
