#!/bin/bash
# H200 only: the 8B tune against the committed table, a 9-round re-check of its flagged shapes, the tune's
# convergence, then the unseen models with the time left.
set -u
GPU=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)
echo "gpu: $GPU  $(date -u +%FT%TZ)"
case "$GPU" in *H200*) REF=results/nvidia-h200/table.json;; *H100*) REF=results/nvidia-h100-80gb-hbm3/table.json;; *) echo "neither H200 nor H100: nothing run"; exit 3;; esac
T0=$(date +%s); CALL_S=${CALL_S:-530}
export GPU_CHECK_COMMIT=$(cat .run/commit)
T_TUNE=${T_TUNE:-330} bash scripts/gpu-check.sh tune; cp "$OUT/summary.txt" "$OUT/summary-tune.txt"
shapes=$(grep 'FLAG:' "$OUT/tune.log" | awk '{print $1}' | sort -u)
args=(); for s in $shapes; do args+=(--shape "$s"); done
if [ ${#args[@]} -gt 0 ]; then
  echo "== $(date -u +%FT%TZ) | gpu: $GPU | commit: $GPU_CHECK_COMMIT | command: python3 -m gemvtune check --table OUT/tune/table.json --against $REF ${args[*]} --rounds 9"
  timeout 150 python3 -m gemvtune check --table "$OUT/tune/table.json" --against $REF \
    "${args[@]}" --rounds 9 --out "$OUT/recheck" 2>&1 | tee "$OUT/recheck.log" | tail -n 30
fi
python3 -m gemvtune convergence "$OUT/tune" --table $REF > "$OUT/convergence.log" 2>&1
tail -n 25 "$OUT/convergence.log"
left=$((CALL_S - ($(date +%s) - T0)))
if [ "$left" -gt 60 ] && [[ "$GPU" == *H200* ]]; then T_UNSEEN=$left bash scripts/gpu-check.sh unseen; cp "$OUT/summary.txt" "$OUT/summary-unseen.txt"; fi
(cd "$OUT" && tar czf tune.tgz tune && rm -rf tune)
cat "$OUT"/summary-*.txt
