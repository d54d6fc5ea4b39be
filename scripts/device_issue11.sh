#!/usr/bin/env bash
# Issue 11 on the lent H200: the GPU tests of the PyTorch drop-in (transformer block at Llama-3-8B
# widths, eager and in a CUDA graph; fallbacks) and of the decode-step benchmark (2-layer step), then
# the whole Llama-3-8B decode step (32 layers + LM head; tuned vs llama.cpp config vs cuBLAS).
# Writes logs under $OUT and the bench files under results/nvidia-h200/bench (copied to $OUT/bench).
#   usage: scripts/device_issue11.sh   (needs PYTHONPATH with the carried wheels; torch for the drop-in)
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 GEMVTUNE_CACHE_DIR=/tmp/gemvtune-cache
R=results/nvidia-h200
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv
  python3 -c "import cupy; print('cupy', cupy.__version__)"
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())"
} > "$OUT/env.txt" 2>&1
timeout ${TEST_S:-300} python3 -m pytest -m gpu -p no:cacheprovider -rA tests/test_torch.py tests/test_decodestep.py \
  > "$OUT/pytest-issue11.log" 2>&1
echo "pytest rc=$?" >> "$OUT/pytest-issue11.log"
mkdir -p $R/bench
echo "command: gemvtune bench --model llama-3-8b --layers 32 --out $R/bench" > "$OUT/decode-step.log"
timeout ${BENCH_S:-240} python3 -m gemvtune bench --model llama-3-8b --layers 32 --out $R/bench >> "$OUT/decode-step.log" 2>&1
echo "bench rc=$?" >> "$OUT/decode-step.log"
mkdir -p "$OUT/bench"; cp $(find $R/bench -maxdepth 1 -name 'decode-*' -newer "$OUT/env.txt") "$OUT/bench/" 2>/dev/null
cat "$OUT/env.txt"
grep -E "^(PASSED|FAILED|ERROR|SKIPPED)" "$OUT/pytest-issue11.log" | cut -c1-200
grep -E -A25 "^(=+ FAILURES|=+ ERRORS)" "$OUT/pytest-issue11.log" | head -60
tail -3 "$OUT/pytest-issue11.log"
tail -30 "$OUT/decode-step.log"
ls -l "$OUT/bench"
