#!/usr/bin/env bash
# Issue 16, first H200 call (run from a clean export of HEAD): tune the new unfused shapes of Llama-3-8B
# (k/v 1024x4096) and Qwen2.5-7B (k/v 512x3584, gate/up 18944x3584) into the table with the existing
# search (studies in their own journal), then probe the per-call cost of the launch paths a PyTorch
# layer can take (scripts/probe16.py).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 GEMVTUNE_CACHE_DIR=/tmp/gemvtune-cache
R=results/nvidia-h200
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > "$OUT/env.txt" 2>&1
cmd="python3 -m gemvtune search --shape 1024x4096 --shape 512x3584 --shape 18944x3584 --results $R --storage journal:$R/optuna-journal-issue16.log"
echo "command: $cmd" > "$OUT/search.log"
( time timeout 330 $cmd ) >> "$OUT/search.log" 2>&1; echo "search rc=$?" >> "$OUT/search.log"
python3 probe16.py > "$OUT/probe.log" 2>&1; echo "probe rc=$?" >> "$OUT/probe.log"
tar czf "$OUT/results.tgz" $R/table.json $R/optuna-journal-issue16.log $(find $R -maxdepth 1 -newer "$OUT/env.txt" -name 'search-*')
grep -E "winner|rc=|real|x1 " "$OUT/search.log" | tail -14
cat "$OUT/probe.log"
