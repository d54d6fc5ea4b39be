#!/usr/bin/env bash
# Issue 16, H200 smoke of the new run-time path: the plan/op/epilogue GPU tests, the per-call bench,
# and a 2-layer end-to-end HF bench. Full outputs under $OUT; a short table last.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 GEMVTUNE_CACHE_DIR=/tmp/gemvtune-cache
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > "$OUT/env.txt" 2>&1
timeout ${T_TESTS:-300} python3 -m pytest -x -q -p no:cacheprovider -rA ${TESTS:-tests/test_gpu_epilogue.py tests/test_torch.py tests/test_gpu_hf.py} > "$OUT/pytest.log" 2>&1; echo "pytest rc=$?" >> "$OUT/pytest.log"
timeout 120 python3 -m gemvtune percall --out "$OUT" > "$OUT/percall.log" 2>&1; echo "percall rc=$?" >> "$OUT/percall.log"
timeout ${T_HF:-240} python3 -m gemvtune bench --hf-config gemvtune/hf_configs/llama-3-8b.json ${HF_ARGS:---layers 2 --tokens 16 --rounds 1} --out "$OUT" > "$OUT/hf.log" 2>&1; echo "hf rc=$?" >> "$OUT/hf.log"
grep -E "passed|failed|error|rc=" "$OUT/pytest.log" | tail -15
grep -E "^E |Error" "$OUT/pytest.log" | head -20
tail -25 "$OUT/percall.log"; tail -30 "$OUT/hf.log"
