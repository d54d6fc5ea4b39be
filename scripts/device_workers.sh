#!/usr/bin/env bash
# Issue 9 on the lent H200: two worker processes sharing the one GPU complete a search end to end
# (`gemvtune search --workers 2`, embedded journal storage), then the same budget by one worker, for
# the wall time and the winner. Writes under $OUT.   usage: scripts/device_workers.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 GEMVTUNE_CACHE_DIR=/tmp/gemvtune-cache-workers
R=${RESULTS:-results/nvidia-h200/workers}
SHAPE=${SHAPE:-6144x4096}; TRIALS=${TRIALS:-60}
rm -rf "$R" /tmp/single-worker
TIMEFORMAT='wall %R s'
{ echo "command: gemvtune search --shape $SHAPE --family gemv --trials $TRIALS --workers 2 --results $R"
  time python3 -m gemvtune search --shape $SHAPE --family gemv --trials $TRIALS --workers 2 --results "$R"
  echo "rc=$?"
  echo "command: gemvtune search --shape $SHAPE --family gemv --trials $TRIALS --results /tmp/single-worker (one worker, for comparison)"
  time python3 -m gemvtune search --shape $SHAPE --family gemv --trials $TRIALS --results /tmp/single-worker
  echo "rc=$?"; } > "$OUT/workers.log" 2>&1
python3 - "$R" > "$OUT/workers-check.log" 2>&1 <<'PY'
import collections, glob, json, sys
import pandas as pd
r = sys.argv[1]
df = pd.concat(pd.read_csv(f) for f in glob.glob(f"{r}/search-*.csv"))
m = df[df.measured == True]
print("trials in the CSV:", len(df), "measured:", len(m), "distinct labels measured:", m.label.nunique())
print("measured per worker:", dict(collections.Counter(m.worker)))
print("devices:", dict(collections.Counter(m.device)))
print("states:", dict(collections.Counter(df.state)))
e = json.load(open(f"{r}/table.json"))["entries"]
print({k: (v["winner"]["label"], round(v["winner"]["us"], 3)) for k, v in e.items()})
e1 = json.load(open("/tmp/single-worker/table.json"))["entries"]
print("one worker:", {k: (v["winner"]["label"], round(v["winner"]["us"], 3)) for k, v in e1.items()})
PY
tail -12 "$OUT/workers.log"; cat "$OUT/workers-check.log"
