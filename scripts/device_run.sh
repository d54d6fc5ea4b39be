#!/usr/bin/env bash
# One pass on the lent H200: tests, compute-sanitizer, benchmark. Writes everything under $OUT.
#   usage: scripts/device_run.sh [quick|full]   (needs PYTHONPATH with the carried wheels)
set -uo pipefail
mode=${1:-quick}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 GEMVTUNE_CACHE_DIR=/tmp/gemvtune-cache
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv; python3 -c "import cupy; print('cupy', cupy.__version__)"; } 2>&1 | tee "$OUT/env.txt"
python3 -m pytest -m gpu -p no:cacheprovider -rA 2>&1 > "$OUT/pytest-gpu.log"; tail -5 "$OUT/pytest-gpu.log"
GEMVTUNE_NO_POOL=1 compute-sanitizer --tool memcheck --error-exitcode 9 \
  python3 -m gemvtune verify --shape 1x8 --shape 7x72 --shape 129x4104 --configs tests/data/sanitize_configs.json \
  > "$OUT/memcheck.log" 2>&1; echo "memcheck rc=$?" | tee -a "$OUT/memcheck.log"; tail -4 "$OUT/memcheck.log"
if [ "$mode" = quick ]; then
  python3 -m gemvtune bench --shape 14336x4096 --shape 4096x4096 --configs sample:24 --out "$OUT" 2>&1 | tee "$OUT/bench.log"
else
  python3 -m gemvtune bench --suite decode --configs sample:${SAMPLE:-200} --out "$OUT" 2>&1 | tee "$OUT/bench.log"
fi
