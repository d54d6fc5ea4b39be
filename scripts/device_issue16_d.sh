#!/usr/bin/env bash
# Issue 16, H200, last call: the two GPU tests fixed after the full run, then the end-to-end HF bench
# on Llama-3-8B (32 layers) and Qwen2.5-7B (28 layers, q/k/v biases). Logs tarred into $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; L=/tmp/logs; mkdir -p $L
export PYTHONUNBUFFERED=1 GEMVTUNE_CACHE_DIR=/tmp/gemvtune-cache
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > "$L/env.txt" 2>&1
timeout 120 python3 -m pytest -m gpu -p no:cacheprovider -rA tests/test_gpu.py tests/test_gpu_table.py -k "race or fastest" > $L/pytest-gpu-fixed.log 2>&1; echo "pytest rc=$?" >> $L/pytest-gpu-fixed.log
timeout 230 python3 -m gemvtune bench --hf-config gemvtune/hf_configs/llama-3-8b.json --layers 32 --tokens 128 --rounds 3 --out $L > $L/hf-llama.log 2>&1; echo "hf rc=$?" >> $L/hf-llama.log
timeout 200 python3 -m gemvtune bench --hf-config gemvtune/hf_configs/qwen2.5-7b.json --layers 28 --tokens 128 --rounds 2 --out $L > $L/hf-qwen.log 2>&1; echo "hf rc=$?" >> $L/hf-qwen.log
tar czf "$OUT/logs.tgz" -C $L .
grep -E "passed|failed|rc=" $L/pytest-gpu-fixed.log | tail -5
tail -6 $L/hf-llama.log; tail -6 $L/hf-qwen.log
