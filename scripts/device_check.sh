#!/usr/bin/env bash
# Issues 7 and 8 on the lent H200, one pass: the GPU tests (planted faults, hang under the watchdog,
# PDL launch), compute-sanitizer memcheck and racecheck over both families and every vector width on
# edge shapes, pdl on/off with the same-size read ceiling (scripts/pdl_ab.py), and ncu on the small
# shapes. Writes under $OUT.   usage: scripts/device_check.sh   (needs PYTHONPATH with the carried wheels)
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 GEMVTUNE_CACHE_DIR=/tmp/gemvtune-cache
R=results/nvidia-h200
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; uname -r; } > "$OUT/env.txt" 2>&1
timeout ${TEST_S:-280} python3 -m pytest -m gpu -p no:cacheprovider -rA > "$OUT/pytest-gpu.log" 2>&1
echo "pytest rc=$?" >> "$OUT/pytest-gpu.log"; tail -2 "$OUT/pytest-gpu.log"
EDGE="--shape 1x8 --shape 1x72 --shape 1x4104 --shape 7x8 --shape 7x72 --shape 7x4104 --shape 129x8 --shape 129x72 --shape 129x4104"
python3 -m gemvtune verify $EDGE --batch 1,3 --configs tests/data/sanitize_configs.json > /dev/null 2>&1  # fills the compile cache
for tool in memcheck racecheck; do
  log="$OUT/$tool.log"
  echo "command: GEMVTUNE_NO_POOL=1 compute-sanitizer --tool $tool --error-exitcode 9 python3 -m gemvtune verify $EDGE --batch 1,3 --configs tests/data/sanitize_configs.json" > "$log"
  GEMVTUNE_NO_POOL=1 timeout ${SAN_S:-150} compute-sanitizer --tool $tool --error-exitcode 9 \
    python3 -m gemvtune verify $EDGE --batch 1,3 --configs tests/data/sanitize_configs.json >> "$log" 2>&1
  echo "$tool rc=$?" >> "$log"; tail -3 "$log"
done
python3 scripts/pdl_ab.py --table $R/table.json --out "$OUT/pdl" > "$OUT/pdl-ab.log" 2>&1; echo "pdl_ab rc=$?" >> "$OUT/pdl-ab.log"
for s in 4096x4096 1024x16384 4096x14336; do
  timeout 90 ncu --clock-control none --kernel-name regex:"gemv|read_stream" --launch-skip 2 --launch-count 4 \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__block_size,launch__waves_per_multiprocessor,sm__warps_active.avg.pct_of_peak_sustained_active,sm__cycles_active.avg,gpc__cycles_elapsed.max,launch__registers_per_thread \
    --csv python3 scripts/ncu_small.py --table $R/table.json --shape $s > "$OUT/ncu-$s.csv" 2>&1
  echo "ncu rc=$?" >> "$OUT/ncu-$s.csv"
done
tar czf "$OUT/extra.tgz" -C "$OUT" pdl $(cd "$OUT" && ls ncu-*.csv)
grep -E "^(FAILED|ERROR)" "$OUT/pytest-gpu.log" | head -20
tail -14 "$OUT/pdl-ab.log"
for s in 4096x4096; do grep -E "gpu__time_duration|dram__throughput" "$OUT/ncu-$s.csv" | cut -c1-220 | head -8; done
