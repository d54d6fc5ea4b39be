#!/usr/bin/env bash
# Issue 19, item 1 (second session) on the H200: the ring family (W through a cp.async shared-memory ring).
# Full outputs under $OUT/issue19/<part>; a short table last.
# PART=ring: the GPU tests of the ring family and of the launch plan (dynamic shared memory), scripts/probe_mma.py
#   --family ring (the table's winner, cuBLAS, the ring seed, every one-at-a-time change of it and a seeded random
#   sample, per (shape, n)), and ncu of the n = 16 ring best on 14336x4096 against the read kernel over the same bytes.
# PART=search: the ring family's GPU tests, then gemvtune search of the ring family over the decode suite at
#   n = 2, 4, 8, 16 into results/nvidia-h200 (the table's bests of the other families re-measured in each
#   confirmation); the changed results come back as results.tgz.
# PART=bench: gemvtune bench --suite decode --batch 1,2,4,8,16 (every baseline interleaved per round), then the
#   per-call cost (gemvtune percall --batch 1 and 4).
# PART=hf: the Hugging Face bench (Llama-3-8B, 32 layers, eager and compiled; ROUNDS, default 2) and the GPU tests
#   of the run-time path.
# PART=issue20: the cost model on the GPU: the zero-trial and check GPU tests, scripts/zero_trial_eval.py on shapes in
#   no entry and no training data (the pick against cuBLAS and a fresh search's winner, one process), then
#   gemvtune check --table (every winner and cuBLAS re-measured).
# PART=san: compute-sanitizer memcheck and racecheck of the ring configs of tests/data/sanitize_configs.json on the
#   edge shapes (1x8, 7x72, 129x4104 at n = 1 and 3).
# PART=check: gemvtune check --table (every winner and cuBLAS re-measured, drift and losses flagged).
# PART=percall: gemvtune percall --batch 1 and 4 (the per-call cost of each launch path).
# PART=ncu: ncu of the table's winner for NCU_SHAPE (default 4096x4096) at NCU_BATCH (default 8) against the read
#   kernel over the same bytes (the same-size read ceiling).
# PART=retune: the table's n = 1 entries searched with less than the default budget (RETUNE shapes), searched again
#   (their studies resumed to the default 100 trials of the family, FAMILY, default gemv; warm-started by the cost
#   model) into results/nvidia-h200.
# PART may name several parts, run in order: PART="san hf".
set -uo pipefail
OUT=${OUT:-/tmp/out}; PARTS=${PART:-ring}
export PYTHONUNBUFFERED=1 GEMVTUNE_CACHE_DIR=/tmp/gemvtune-cache CI=true
R=results/nvidia-h200
touch $OUT/stamp; sleep 1
for PART in $PARTS; do
L=$OUT/issue19/$PART; mkdir -p $L
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > "$L/env.txt" 2>&1
if [ "$PART" = ring ]; then
  T="tests/test_ring.py tests/test_plan.py"
  echo "command: python3 -m pytest -m gpu $T -rA" > $L/pytest.log
  timeout ${T_TESTS:-150} python3 -m pytest -m gpu -p no:cacheprovider -q $T -rA >> $L/pytest.log 2>&1; echo "pytest rc=$?" >> $L/pytest.log
  SH=""; for s in ${SHAPES:-4096x4096 14336x4096 4096x14336 1024x16384 28672x4096}; do SH="$SH --shape $s"; done
  echo "command: python3 scripts/probe_mma.py --family ring --oat$SH --batch ${BATCH:-1,2,8,16} --sample ${SAMPLE:-12}" > $L/probe.log
  timeout ${T_PROBE:-330} python3 scripts/probe_mma.py --family ring --oat $SH --batch ${BATCH:-1,2,8,16} --sample ${SAMPLE:-12} \
    --out $L >> $L/probe.log 2>&1; echo "probe rc=$?" >> $L/probe.log
  CFG=$(python3 scripts/best_config.py $L/probe-ring.csv --family ring --shape 14336x4096 --batch 16 2>>$L/probe.log)
  echo "command: ncu ... python3 scripts/ncu_small.py --table $R/table.json --shape 14336x4096 --batch 16 --config '$CFG'" > $L/ncu-14336x4096x16.csv
  [ -n "$CFG" ] && timeout ${T_NCU:-50} ncu --clock-control none --kernel-name regex:"ring_gemv|read_stream" --launch-skip 2 --launch-count 4 \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum,launch__grid_size,launch__block_size,launch__waves_per_multiprocessor,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__shared_mem_per_block_dynamic,launch__occupancy_limit_shared_mem,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_barrier_per_warp_active.pct \
    --csv python3 scripts/ncu_small.py --table $R/table.json --shape 14336x4096 --batch 16 --config "$CFG" >> $L/ncu-14336x4096x16.csv 2>&1
  echo "ncu rc=$?" >> $L/ncu-14336x4096x16.csv
  tail -3 $L/pytest.log; grep -E "^(FAILED|ERROR)" $L/pytest.log | head -20; grep -E "^E  " $L/pytest.log | head -12
  grep -v "^    " $L/probe.log | cut -c1-330 | tail -24
  python3 scripts/ncu_summary.py $L/ncu-14336x4096x16.csv
fi
if [ "$PART" = search ]; then
  T="tests/test_ring.py tests/test_plan.py"
  echo "command: python3 -m pytest -m gpu $T -rA" > $L/pytest.log
  timeout ${T_TESTS:-100} python3 -m pytest -m gpu -p no:cacheprovider -q $T -rA >> $L/pytest.log 2>&1; echo "pytest rc=$?" >> $L/pytest.log
  SH=""; for s in 4096x4096 6144x4096 14336x4096 28672x4096 4096x14336 1024x16384 128256x4096; do SH="$SH --shape $s"; done
  echo "command: gemvtune search$SH --batch ${BATCH:-2,4,8,16} --family ring --trials ${TRIALS:-24} --top-k 2 --rounds 2 --results $R" > $L/search.log
  timeout ${T_SEARCH:-330} python3 -m gemvtune search $SH --batch ${BATCH:-2,4,8,16} --family ring --trials ${TRIALS:-24} \
    --top-k 2 --rounds 2 --results $R >> $L/search.log 2>&1; echo "search rc=$?" >> $L/search.log
  python3 -m gemvtune report --table $R/table.json --csv $R/table.csv > $L/report.log 2>&1
  tail -3 $L/pytest.log; grep -E "^(FAILED|ERROR)" $L/pytest.log | head -20; grep -E "^E  " $L/pytest.log | head -8
  grep -E "µs|rc=" $L/search.log | cut -c1-220 | tail -34
fi
if [ "$PART" = bench ]; then
  echo "command: gemvtune bench --suite decode --batch 1,2,4,8,16 --rounds ${ROUNDS:-2} --out $R/bench" > $L/bench.log
  timeout ${T_BENCH:-400} python3 -m gemvtune bench --suite decode --batch 1,2,4,8,16 --rounds ${ROUNDS:-2} --out $R/bench >> $L/bench.log 2>&1
  echo "bench rc=$?" >> $L/bench.log
  grep -v "triton_mm\|AUTOTUNE\|^  " $L/bench.log | grep -E "µs|Geometric|^\|" | cut -c1-200 | tail -60
fi
if [ "$PART" = percall ]; then
  for b in 1 4; do
    echo "command: gemvtune percall --batch $b --out $R/bench" > $L/percall-$b.log
    timeout ${T_PERCALL:-60} python3 -m gemvtune percall --batch $b --out $R/bench >> $L/percall-$b.log 2>&1; echo "percall rc=$?" >> $L/percall-$b.log
  done
  for b in 1 4; do grep -E "GemvLinear|rc=" $L/percall-$b.log | cut -c1-200; done
fi
if [ "$PART" = hf ]; then
  echo "command: gemvtune bench --hf-config gemvtune/kernels/hf_configs/llama-3-8b.json --layers 32 --tokens 128 --rounds ${ROUNDS:-2} --out $R/bench" > $L/hf.log
  timeout ${T_HF:-330} python3 -m gemvtune bench --hf-config gemvtune/kernels/hf_configs/llama-3-8b.json --layers 32 --tokens 128 \
    --rounds ${ROUNDS:-2} --out $R/bench >> $L/hf.log 2>&1; echo "hf rc=$?" >> $L/hf.log
  T="tests/test_gpu_table.py tests/test_torch.py"
  echo "command: python3 -m pytest -m gpu $T -rA" > $L/pytest.log
  timeout ${T_TESTS:-150} python3 -m pytest -m gpu -p no:cacheprovider -q $T -rA >> $L/pytest.log 2>&1; echo "pytest rc=$?" >> $L/pytest.log
  tail -22 $L/hf.log | cut -c1-250; tail -2 $L/pytest.log; grep -E "^(FAILED|ERROR)" $L/pytest.log | head
fi
if [ "$PART" = san ]; then
  python3 -c "import json; c=[x for x in json.load(open('tests/data/sanitize_configs.json')) if x['family']=='ring']; json.dump(c, open('/tmp/ring_san.json','w'))"
  EDGE="--shape 1x8 --shape 7x72 --shape 129x4104"
  python3 -m gemvtune verify $EDGE --batch 1,3 --configs /tmp/ring_san.json > $L/verify.log 2>&1; echo "verify rc=$?" >> $L/verify.log
  for tool in memcheck racecheck; do
    echo "command: GEMVTUNE_NO_POOL=1 compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 python3 -m gemvtune verify $EDGE --batch 1,3 --configs (the ring configs of tests/data/sanitize_configs.json)" > $L/$tool.log
    GEMVTUNE_NO_POOL=1 timeout ${T_SAN:-120} compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 \
      python3 -m gemvtune verify $EDGE --batch 1,3 --configs /tmp/ring_san.json >> $L/$tool.log 2>&1; echo "$tool rc=$?" >> $L/$tool.log
  done
  tail -4 $L/verify.log; for t in memcheck racecheck; do tail -2 $L/$t.log; done
fi
if [ "$PART" = issue20 ]; then
  T="tests/test_zerotrial.py tests/test_gpu_table.py"
  echo "command: python3 -m pytest -m gpu $T -rA" > $L/pytest.log
  timeout ${T_TESTS:-120} python3 -m pytest -m gpu -p no:cacheprovider -q $T -rA >> $L/pytest.log 2>&1; echo "pytest rc=$?" >> $L/pytest.log
  SH=""; for s in ${SHAPES:-11008x4096 4096x11008 13824x5120 2048x8192}; do SH="$SH --shape $s"; done
  echo "command: python3 scripts/zero_trial_eval.py$SH --batch ${BATCH:-1} --trials ${TRIALS:-100} --out $L" > $L/zero-trial.log
  timeout ${T_ZT:-420} python3 scripts/zero_trial_eval.py $SH --batch ${BATCH:-1} --trials ${TRIALS:-100} --out $L >> $L/zero-trial.log 2>&1
  echo "zero-trial rc=$?" >> $L/zero-trial.log
  tail -2 $L/pytest.log; grep -E "^(FAILED|ERROR)" $L/pytest.log | head; tail -8 $L/zero-trial.log | cut -c1-250
fi
if [ "$PART" = check ]; then
  echo "command: gemvtune check --table $R/table.json --rounds 2 --out $L" > $L/check.log
  timeout ${T_CHECK:-150} python3 -m gemvtune check --table $R/table.json --rounds 2 --out $L >> $L/check.log 2>&1; echo "check rc=$?" >> $L/check.log
  tail -12 $L/check.log | cut -c1-250
fi
if [ "$PART" = retune ]; then
  SH=""; for x in ${RETUNE:-152064x3584 131072x5120 37888x3584 8192x28672 3584x18944 4608x3584 3584x3584 10240x8192 1024x16384 5120x4096 5120x14336 6144x5120 8192x8192 28672x5120}; do SH="$SH --shape $x"; done
  echo "command: gemvtune search$SH --family ${FAMILY:-gemv} --trials 100 --results $R" > $L/search.log
  timeout ${T_SEARCH:-450} python3 -m gemvtune search $SH --family ${FAMILY:-gemv} --trials 100 --results $R >> $L/search.log 2>&1
  echo "search rc=$?" >> $L/search.log
  python3 -m gemvtune report --table $R/table.json --csv $R/table.csv > $L/report.log 2>&1
  grep -E "µs|rc=" $L/search.log | cut -c1-200 | tail -16
fi
if [ "$PART" = ncu ]; then
  S=${NCU_SHAPE:-4096x4096}; B=${NCU_BATCH:-8}
  echo "command: ncu ... python3 scripts/ncu_small.py --table $R/table.json --shape $S --batch $B" > $L/ncu-${S}x$B.csv
  timeout ${T_NCU:-60} ncu --clock-control none --kernel-name regex:"gemv|splitk|ring_gemv|mma_gemv|read_stream" --launch-skip 2 --launch-count 4 \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__block_size,launch__waves_per_multiprocessor,sm__warps_active.avg.pct_of_peak_sustained_active,launch__shared_mem_per_block_dynamic,launch__occupancy_limit_shared_mem,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_barrier_per_warp_active.pct \
    --csv python3 scripts/ncu_small.py --table $R/table.json --shape $S --batch $B >> $L/ncu-${S}x$B.csv 2>&1
  echo "ncu rc=$?" >> $L/ncu-${S}x$B.csv
  python3 scripts/ncu_summary.py $L/ncu-${S}x$B.csv
fi
done
tar czf $OUT/results.tgz $(find $R -newer $OUT/stamp -type f) 2>/dev/null

