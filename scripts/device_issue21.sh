#!/usr/bin/env bash
# Issue 21 (BF16) on the H200. Full outputs under $OUT/issue21/<part>, packed into logs-<parts>.tgz at the end; the changed results come back as results-<parts>.tgz;
# a short table last. PART may name several parts, run in order: PART="tests san".
# PART=tests: the BF16 GPU tests (tests/test_dtype_gpu.py and the kernel side's tests/test_bf16_*.py, gpu-marked),
#   then the FP16 GPU tests of the run-time path (no regression: tests/test_gpu_table.py tests/test_torch.py);
#   TESTS overrides the list.
# PART=san: compute-sanitizer memcheck and racecheck of every template config of tests/data/sanitize_configs.json
#   in BF16 on the edge shapes (1x8, 7x72, 129x4104 at n = 1 and 3).
# PART=search: gemvtune search --dtype bf16 of the decode suite at n = 1 (GEMV, 100 trials) and n = 8 (ring, split-K,
#   cuBLASLt; 24 trials) into results/nvidia-h200; search CSVs to move under searches/ afterwards.
# PART=bench: gemvtune bench --dtype bf16 --suite decode --batch 1,8 (BF16 against cuBLAS BF16 and Inductor, one
#   process), then the same in FP16 (the ratios the target compares with, measured in the same session).
# PART=hf: the Hugging Face bench of Llama-3-8B in BF16 (transformers with bfloat16 weights; ROUNDS).
set -uo pipefail
OUT=${OUT:-/tmp/out}; PARTS=${PART:-tests}
export PYTHONUNBUFFERED=1 GEMVTUNE_CACHE_DIR=/tmp/gemvtune-cache CI=true
R=results/nvidia-h200
SUITE="--shape 4096x4096 --shape 6144x4096 --shape 14336x4096 --shape 28672x4096 --shape 4096x14336 --shape 128256x4096 --shape 1024x16384"
touch $OUT/stamp; sleep 1
for PART in $PARTS; do
L=$OUT/issue21/$PART; mkdir -p $L
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > "$L/env.txt" 2>&1
if [ "$PART" = tests ]; then
  T=${TESTS:-"tests/test_dtype_gpu.py $(ls tests/test_bf16_*.py 2>/dev/null | tr '\n' ' ') tests/test_gpu_table.py tests/test_torch.py"}
  echo "command: python3 -m pytest -m gpu $T -rA" > $L/pytest.log
  timeout ${T_TESTS:-300} python3 -m pytest -m gpu -p no:cacheprovider -q $T -rA >> $L/pytest.log 2>&1; echo "pytest rc=$?" >> $L/pytest.log
  tail -3 $L/pytest.log; grep -E "^(FAILED|ERROR)" $L/pytest.log | head -20; grep -E "^E  " $L/pytest.log | head -12
fi
if [ "$PART" = san ]; then
  python3 -c "import json; c=[x for x in json.load(open('tests/data/sanitize_configs.json')) if x['family']!='cublaslt']; json.dump(c, open('/tmp/san.json','w'))"
  EDGE="--shape 1x8 --shape 7x72 --shape 129x4104"
  python3 -m gemvtune verify $EDGE --batch 1,3 --dtype bf16 --configs /tmp/san.json > $L/verify.log 2>&1; echo "verify rc=$?" >> $L/verify.log
  for tool in memcheck racecheck; do
    echo "command: GEMVTUNE_NO_POOL=1 compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 python3 -m gemvtune verify $EDGE --batch 1,3 --dtype bf16 --configs (the template configs of tests/data/sanitize_configs.json)" > $L/$tool.log
    GEMVTUNE_NO_POOL=1 timeout ${T_SAN:-200} compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 \
      python3 -m gemvtune verify $EDGE --batch 1,3 --dtype bf16 --configs /tmp/san.json >> $L/$tool.log 2>&1; echo "$tool rc=$?" >> $L/$tool.log
  done
  tail -3 $L/verify.log; for t in memcheck racecheck; do tail -2 $L/$t.log; done
fi
if [ "$PART" = search ]; then
  # as the FP16 entries were searched: n = 1 the GEMV family at the default budget (every FP16 n = 1 winner is a
  # GEMV), n = 8 the tensor-core and library families at the ring search's budget (the FP16 n = 8 winners)
  echo "command: gemvtune search $SUITE --dtype bf16 --batch 1 --family gemv --trials 100 --results $R" > $L/search.log
  timeout ${T_SEARCH1:-260} python3 -m gemvtune search $SUITE --dtype bf16 --batch 1 --family gemv --trials 100 \
    --results $R >> $L/search.log 2>&1; echo "search rc=$?" >> $L/search.log
  echo "command: gemvtune search $SUITE --dtype bf16 --batch 8 --family ring,splitk,cublaslt --trials 24 --top-k 2 --rounds 2 --results $R" >> $L/search.log
  timeout ${T_SEARCH8:-300} python3 -m gemvtune search $SUITE --dtype bf16 --batch 8 --family ring,splitk,cublaslt --trials 24 \
    --top-k 2 --rounds 2 --results $R >> $L/search.log 2>&1; echo "search rc=$?" >> $L/search.log
  python3 -m gemvtune report --table $R/table.json --csv $R/table.csv > $L/report.log 2>&1
  grep -E "µs|rc=" $L/search.log | cut -c1-220 | tail -20
fi
if [ "$PART" = bench ]; then
  for dt in bf16 fp16; do
    echo "command: gemvtune bench --suite decode --dtype $dt --batch 1,8 --rounds ${ROUNDS:-2} --out $R/bench" > $L/bench-$dt.log
    timeout ${T_BENCH:-280} python3 -m gemvtune bench --suite decode --dtype $dt --batch 1,8 --rounds ${ROUNDS:-2} \
      --out $R/bench >> $L/bench-$dt.log 2>&1; echo "bench rc=$?" >> $L/bench-$dt.log
    grep -v "triton_mm\|AUTOTUNE\|^  " $L/bench-$dt.log | grep -E "Geometric|rc=" | cut -c1-200 | tail -8
  done
fi
if [ "$PART" = hf ]; then
  echo "command: gemvtune bench --hf-config gemvtune/kernels/hf_configs/llama-3-8b.json --layers 32 --tokens 128 --rounds ${ROUNDS:-4} --dtype bf16 --out $R/bench" > $L/hf.log
  timeout ${T_HF:-400} python3 -m gemvtune bench --hf-config gemvtune/kernels/hf_configs/llama-3-8b.json --layers 32 --tokens 128 \
    --rounds ${ROUNDS:-4} --dtype bf16 --out $R/bench >> $L/hf.log 2>&1; echo "hf rc=$?" >> $L/hf.log
  tail -6 $L/hf.log | cut -c1-250
fi
done
tar czf $OUT/results-${PARTS// /-}.tgz $(find $R -newer $OUT/stamp -type f ! -name "optuna-journal*" ! -name "*.lock") 2>/dev/null
# the device tool brings back a few files only: every log in one archive (logs-<part>.tgz), the results in another
( cd $OUT && tar czf logs-${PARTS// /-}.tgz issue21 && rm -rf issue21 )
