#!/usr/bin/env bash
# Issue 6 on the lent H200: GPU tests, then the decode suite tuned at several batch sizes over both
# families (GEMV and split-K GEMM), the table, its CSV and the crossover plots. Writes under $OUT.
#   usage: scripts/device_batch.sh tests|search   (needs PYTHONPATH with the carried wheels)
set -uo pipefail
mode=${1:-tests}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 GEMVTUNE_CACHE_DIR=/tmp/gemvtune-cache
R=results/nvidia-h200
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > "$OUT/env.txt" 2>&1
if [ "$mode" = tests ]; then
  python3 -m pytest -m gpu -p no:cacheprovider -rA > "$OUT/pytest-gpu.log" 2>&1; echo "pytest rc=$?" >> "$OUT/pytest-gpu.log"
  tail -4 "$OUT/pytest-gpu.log"
  # smoke: the search CLI end to end at n=2 over both families, into a scratch folder
  python3 -m gemvtune search --shape 4096x4096 --batch 2 --trials 12 --results /tmp/smoke 2>&1 | tail -3
  exit 0
fi
SHAPES="--shape 4096x4096 --shape 6144x4096 --shape 14336x4096 --shape 28672x4096 --shape 4096x14336 --shape 128256x4096 --shape 1024x16384"
echo "command: gemvtune search $SHAPES --batch ${BATCH:-1,2,4,8,16} --trials ${TRIALS:-40} --results $R" | tee "$OUT/search.log"
timeout ${BUDGET_S:-520} python3 -m gemvtune search $SHAPES --batch ${BATCH:-1,2,4,8,16} --trials ${TRIALS:-40} \
  --results $R >> "$OUT/search.log" 2>&1; echo "search rc=$?" >> "$OUT/search.log"
python3 -m gemvtune report --table $R/table.json --csv $R/table.csv --crossover $R/crossover >> "$OUT/search.log" 2>&1
tar czf "$OUT/results.tgz" $R/table.json $R/table.csv $R/crossover $R/optuna-journal.log $(find $R -maxdepth 1 -newer "$OUT/env.txt" -name 'search-*')
tail -45 "$OUT/search.log"
