#!/usr/bin/env bash
# Issue 18 (the layout move, no behaviour change), H200. Full outputs under $OUT; a short table last.
# PART=tests: every GPU test (CI=true, so slow-marked ones too), log tarred; PERCALL_REPEATS="1 2": then
#   gemvtune percall that many times.
# PART=clients: per-call cost (gemvtune percall) and the Hugging Face bench of Llama-3-8B, eager and
#   compiled (the run-time path's modules moved), then compute-sanitizer memcheck of `gemvtune verify`
#   with GEMVTUNE_NO_POOL=1 (the runner's arrays now bypass the pool in a scoped allocator).
#   --report-api-errors no: cuda-bindings resolves every driver symbol through cuGetProcAddress at cuInit,
#   and those the driver lacks come back CUDA_ERROR_INVALID_VALUE (34 API errors, no memory error, on
#   driver 580.159.04); gemvtune checks its own API calls. SAN_ONLY=1: the memcheck alone.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; L=$OUT/issue18; mkdir -p $L
export PYTHONUNBUFFERED=1 GEMVTUNE_CACHE_DIR=/tmp/gemvtune-cache CI=true
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; git log --oneline -1 2>/dev/null; } > "$L/env-${PART:-tests}.txt" 2>&1
if [ "${PART:-tests}" = tests ]; then
  echo "command: CI=true python3 -m pytest -m gpu -p no:cacheprovider -rA" > $L/pytest-gpu.log
  timeout ${T_TESTS:-540} python3 -m pytest -m gpu -p no:cacheprovider -rA ${TESTS:-} >> $L/pytest-gpu.log 2>&1; echo "pytest rc=$?" >> $L/pytest-gpu.log
  for i in ${PERCALL_REPEATS:-}; do   # per-call cost again on the same machine, after the tests
    timeout 150 python3 -m gemvtune percall --out $L/percall-$i > $L/percall-$i.log 2>&1; echo "percall rc=$?" >> $L/percall-$i.log
  done
  tar czf "$OUT/issue18-tests.tgz" -C $OUT issue18
  grep -E "^(FAILED|ERROR)" $L/pytest-gpu.log | head -20; grep -E "^E " $L/pytest-gpu.log | head -10
  tail -2 $L/pytest-gpu.log
else
  [ -n "${SAN_ONLY:-}" ] || timeout 150 python3 -m gemvtune percall --out $L > $L/percall.log 2>&1; echo "percall rc=$?" >> $L/percall.log
  [ -n "${SAN_ONLY:-}" ] || timeout ${T_HF:-300} python3 -m gemvtune bench --hf-config gemvtune/kernels/hf_configs/llama-3-8b.json \
    ${HF_ARGS:---layers 32 --tokens 128 --rounds 2} --out $L > $L/hf.log 2>&1; echo "hf rc=$?" >> $L/hf.log
  EDGE="--shape 1x8 --shape 7x72 --shape 129x4104"
  echo "command: GEMVTUNE_NO_POOL=1 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 python3 -m gemvtune verify $EDGE --batch 1,3 --configs tests/data/sanitize_configs.json" > $L/memcheck.log
  GEMVTUNE_NO_POOL=1 timeout ${SAN_S:-150} compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 \
    python3 -m gemvtune verify $EDGE --batch 1,3 --configs tests/data/sanitize_configs.json >> $L/memcheck.log 2>&1
  echo "memcheck rc=$?" >> $L/memcheck.log
  tar czf "$OUT/issue18-clients.tgz" -C $OUT issue18
  tail -3 $L/memcheck.log; tail -16 $L/percall.log; tail -22 $L/hf.log
fi
