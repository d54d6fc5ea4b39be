#!/usr/bin/env bash
# Issue 7 on the lent H200: the occupancy lever (occ = auto | half | full, caps registers through
# __launch_bounds__) A/B on the tuned configs of the decode suite; the two shapes it is meant for
# re-searched with 40 more GEMV trials (the studies resume; occ is new to them); then the tuned
# benchmark of the suite. Writes under $OUT; results under results/nvidia-h200.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 GEMVTUNE_CACHE_DIR=/tmp/gemvtune-cache
R=results/nvidia-h200
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; } > "$OUT/env.txt" 2>&1
python3 scripts/lever_ab.py --table $R/table.json --lever occ --values auto,half,full --out $R/bench/occ-ab-2026-11-29 \
  > "$OUT/occ-ab.log" 2>&1; echo "occ rc=$?" >> "$OUT/occ-ab.log"; tail -12 "$OUT/occ-ab.log"
echo "command: gemvtune search --shape 4096x14336 --shape 4096x4096 --family gemv --trials 140 --results $R" > "$OUT/search-occ.log"
timeout 200 python3 -m gemvtune search --shape 4096x14336 --shape 4096x4096 --family gemv --trials 140 --results $R \
  >> "$OUT/search-occ.log" 2>&1; echo "search rc=$?" >> "$OUT/search-occ.log"; grep -v Warning "$OUT/search-occ.log" | tail -4
echo "command: gemvtune bench --suite decode --out $R/bench" > "$OUT/bench-suite.log"
timeout 200 python3 -m gemvtune bench --suite decode --out $R/bench >> "$OUT/bench-suite.log" 2>&1; echo "bench rc=$?" >> "$OUT/bench-suite.log"
python3 -m gemvtune report --table $R/table.json --csv $R/table.csv > /dev/null 2>&1
cp "$OUT/occ-ab.log" $R/bench/occ-ab-2026-11-29/; cp "$OUT/search-occ.log" $R/bench/search-occ-2026-11-29.log; cp "$OUT/bench-suite.log" $R/bench/bench-suite-2026-11-29-session4.log
tar czf "$OUT/results.tgz" $R/table.json $R/table.csv $R/bench $R/optuna-journal.log $(find $R -maxdepth 1 -newer "$OUT/env.txt" -name 'search-*')
tail -16 "$OUT/bench-suite.log"
