#!/usr/bin/env bash
# Issues 9, 10 and 11 on a lent machine with 2 H200s: the PyTorch drop-in GPU tests; two workers on one
# GPU (scripts/device_workers.sh, pinned to GPU 0); then `search --model llama-3-8b --devices 0,1`
# against the same total budget on one GPU (wall time, table agreement, device per trial). Under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 GEMVTUNE_CACHE_DIR=/tmp/gemvtune-cache NCCL_NVLS_ENABLE=0
R=results/nvidia-h200/runs/multi-gpu-2026-11-29
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,memory.total --format=csv; nproc; } > "$OUT/env.txt" 2>&1
timeout 150 python3 -m pytest -m gpu -p no:cacheprovider -rA tests/test_torch.py > "$OUT/pytest-torch.log" 2>&1
echo "pytest rc=$?" >> "$OUT/pytest-torch.log"; tail -2 "$OUT/pytest-torch.log"
CUDA_VISIBLE_DEVICES=0 RESULTS=$R/two-workers-one-gpu bash scripts/device_workers.sh > /dev/null 2>&1
cp "$OUT/workers.log" "$OUT/workers-check.log" $R/two-workers-one-gpu/ 2>/dev/null; tail -3 "$OUT/workers-check.log"
rm -rf $R/devices $R/single; mkdir -p $R
TIMEFORMAT='wall %R s'
{ echo "command: gemvtune search --model llama-3-8b --trials ${TRIALS:-40} --devices 0,1 --results $R/devices"
  time python3 -m gemvtune search --model llama-3-8b --trials ${TRIALS:-40} --devices 0,1 --results $R/devices; echo "rc=$?"
  echo "command: CUDA_VISIBLE_DEVICES=0 gemvtune search --model llama-3-8b --trials ${TRIALS:-40} --results $R/single"
  time CUDA_VISIBLE_DEVICES=0 python3 -m gemvtune search --model llama-3-8b --trials ${TRIALS:-40} --results $R/single; echo "rc=$?"
} > $R/search.log 2>&1
python3 scripts/compare_tables.py $R/single/table.json $R/devices/table.json --trials-dir $R/devices > $R/compare.md 2>&1
cp "$OUT/env.txt" $R/machine.txt
tar czf "$OUT/multi.tgz" $R
grep -E "wall|rc=|finished" $R/search.log; cat $R/compare.md
