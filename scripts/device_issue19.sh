#!/usr/bin/env bash
# Issue 19 on the H200. Full outputs under $OUT/issue19/<part>; a short table last.
# PART=probe: the mma family's GPU tests, scripts/probe_mma.py (table winner vs sampled mma configs vs cuBLAS per
#   (shape, n)), whether nvmath's cuBLASLt bindings load, and how long Inductor's max-autotune takes per shape.
# PART=check: the GPU tests of every new part (mma, cuBLASLt, the Inductor and seed baselines, transition), a
#   probe of the mma levers at n = 16, and a one-shape bench with every baseline.
# PART=search: gemvtune search of the mma and cublaslt families over the decode suite at n = 2, 4, 8, 16 into
#   results/nvidia-h200 (the table's gemv and splitk bests re-measured in each confirmation), compute-sanitizer
#   memcheck and racecheck of the mma family on edge shapes, ncu of the n = 16 mma best against the read
#   kernel, and gemvtune transition on 4096x4096; the changed results come back as results.tgz.
# PART=bench: gemvtune bench --suite decode --batch 1,2,4,8,16 (tuned = the table's winner, own kernels and
#   cuBLASLt algorithms counting; the llama.cpp config, the seed kernel as written, cuBLAS both ways and Inductor
#   max-autotune interleaved per round), then gemvtune transition on more suite shapes as time allows.
# PART=final: gemvtune transition (tuned, cuBLAS, cuBLASLt's best) on every suite shape, per-call cost at n = 1 and 4
#   (gemvtune percall), then the GPU tests of the transition command and of the table's run-time path.
set -uo pipefail
OUT=${OUT:-/tmp/out}; PART=${PART:-probe}; L=$OUT/issue19/$PART; mkdir -p $L
export PYTHONUNBUFFERED=1 GEMVTUNE_CACHE_DIR=/tmp/gemvtune-cache CI=true
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > "$L/env.txt" 2>&1
if [ "$PART" = probe ]; then
  echo "command: python3 -m pytest -m gpu tests/test_mma.py -rA" > $L/pytest-mma.log
  timeout ${T_TESTS:-150} python3 -m pytest -m gpu -p no:cacheprovider -q tests/test_mma.py -rA >> $L/pytest-mma.log 2>&1; echo "pytest rc=$?" >> $L/pytest-mma.log
  python3 - > $L/nvmath.log 2>&1 <<'PY'
import time
t = time.time()
import nvmath
from nvmath.bindings import cublasLt as L
h = L.create()
print("nvmath", nvmath.__version__, "cublasLt version", L.get_version(), "load+create", round(time.time() - t, 2), "s")
L.destroy(h)
PY
  echo "nvmath rc=$?" >> $L/nvmath.log
  python3 - > $L/inductor.log 2>&1 <<'PY'
import time, torch
import torch.nn.functional as F
torch._dynamo.config.recompile_limit = 64
for M, d, n in ((4096, 4096, 1), (14336, 4096, 16)):
    W = torch.randn(M, d, device="cuda", dtype=torch.half); x = torch.randn(n, d, device="cuda", dtype=torch.half)
    f = torch.compile(F.linear, mode="max-autotune-no-cudagraphs", dynamic=False)
    t = time.time(); y = f(x, W); torch.cuda.synchronize()
    print(f"{M}x{d} n={n}: first call (compile + autotune) {time.time() - t:.1f} s, max err {(y.float() - F.linear(x, W).float()).abs().max().item():.3g}", flush=True)
PY
  echo "inductor rc=$?" >> $L/inductor.log
  timeout ${T_PROBE:-300} python3 scripts/probe_mma.py --shape 4096x4096 --shape 14336x4096 --shape 4096x14336 \
    --shape 1024x16384 --shape 28672x4096 --batch ${BATCH:-1,8,16} --sample ${SAMPLE:-24} --out $L > $L/probe.log 2>&1
  echo "probe rc=$?" >> $L/probe.log
  tail -3 $L/pytest-mma.log; grep -E "^(FAILED|ERROR)" $L/pytest-mma.log | head; cat $L/nvmath.log $L/inductor.log | tail -8
  grep -v "^    " $L/probe.log | cut -c1-250
fi
if [ "$PART" = check ]; then
  T="tests/test_mma.py tests/test_cublaslt_gpu.py tests/test_bench_baselines_gpu.py tests/test_transition_gpu.py"
  echo "command: python3 -m pytest -m gpu $T -rA" > $L/pytest.log
  timeout ${T_TESTS:-240} python3 -m pytest -m gpu -p no:cacheprovider -q $T -rA >> $L/pytest.log 2>&1; echo "pytest rc=$?" >> $L/pytest.log
  timeout ${T_PROBE:-120} python3 scripts/probe_mma.py --shape 14336x4096 --shape 1024x16384 --batch 1,16 --sample ${SAMPLE:-40} --seed 1 \
    --out $L > $L/probe.log 2>&1; echo "probe rc=$?" >> $L/probe.log
  timeout ${T_BENCH:-120} python3 -m gemvtune bench --shape 4096x4096 --batch 1,8 --rounds 2 --out $L > $L/bench.log 2>&1; echo "bench rc=$?" >> $L/bench.log
  tail -3 $L/pytest.log; grep -E "^(FAILED|ERROR)" $L/pytest.log | head -20; grep -E "^E  " $L/pytest.log | head -20
  grep "table" $L/probe.log | cut -c1-250; tail -1 $L/probe.log
  tail -25 $L/bench.log
fi
if [ "$PART" = search ]; then
  R=results/nvidia-h200; SH=""; for s in 4096x4096 6144x4096 14336x4096 28672x4096 4096x14336 1024x16384 128256x4096; do SH="$SH --shape $s"; done
  touch $L/stamp; sleep 1
  echo "command: gemvtune search$SH --batch ${BATCH:-2,4,8,16} --family mma,cublaslt --trials ${TRIALS:-20} --top-k 2 --rounds 2 --results $R" > $L/search.log
  timeout ${T_SEARCH:-280} python3 -m gemvtune search $SH --batch ${BATCH:-2,4,8,16} --family mma,cublaslt --trials ${TRIALS:-20} \
    --top-k 2 --rounds 2 --results $R >> $L/search.log 2>&1; echo "search rc=$?" >> $L/search.log
  python3 -m gemvtune report --table $R/table.json --csv $R/table.csv > $L/report.log 2>&1
  python3 -c "import json; c=[x for x in json.load(open('tests/data/sanitize_configs.json')) if x['family']=='mma']; json.dump(c, open('/tmp/mma_san.json','w'))"
  EDGE="--shape 1x8 --shape 7x72 --shape 129x4104"
  for tool in memcheck racecheck; do
    echo "command: GEMVTUNE_NO_POOL=1 compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 python3 -m gemvtune verify $EDGE --batch 1,3 --configs (the mma configs of tests/data/sanitize_configs.json)" > $L/$tool.log
    GEMVTUNE_NO_POOL=1 timeout ${T_SAN:-45} compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 \
      python3 -m gemvtune verify $EDGE --batch 1,3 --configs /tmp/mma_san.json >> $L/$tool.log 2>&1; echo "$tool rc=$?" >> $L/$tool.log
  done
  timeout ${T_NCU:-45} ncu --clock-control none --kernel-name regex:"mma_gemv|read_stream" --launch-skip 2 --launch-count 4 \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum,l1tex__t_bytes.sum,launch__grid_size,launch__block_size,launch__waves_per_multiprocessor,sm__warps_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,launch__registers_per_thread \
    --csv python3 scripts/ncu_small.py --table $R/table.json --shape 14336x4096 --batch 16 --family mma > $L/ncu-14336x4096x16.csv 2>&1
  echo "ncu rc=$?" >> $L/ncu-14336x4096x16.csv
  timeout ${T_TRANS:-75} python3 -m gemvtune transition --shape 4096x4096 --batch 1..256 --out $R/transition > $L/transition.log 2>&1; echo "transition rc=$?" >> $L/transition.log
  tar czf $OUT/results.tgz $(find $R -newer $L/stamp -type f) 2>/dev/null
  tar czf $OUT/issue19-search.tgz -C $OUT/issue19 search
  grep -E "µs|rc=" $L/search.log | cut -c1-220 | tail -32
  for t in memcheck racecheck; do tail -2 $L/$t.log; done; grep -c "gpu__time_duration" $L/ncu-14336x4096x16.csv; tail -14 $L/transition.log
fi
if [ "$PART" = bench ]; then
  R=results/nvidia-h200; touch $L/stamp; sleep 1
  echo "command: gemvtune bench --suite decode --batch 1,2,4,8,16 --rounds ${ROUNDS:-2} --out $R/bench" > $L/bench.log
  timeout ${T_BENCH:-500} python3 -m gemvtune bench --suite decode --batch 1,2,4,8,16 --rounds ${ROUNDS:-2} --out $R/bench >> $L/bench.log 2>&1
  echo "bench rc=$?" >> $L/bench.log
  for s in ${TRANS_SHAPES:-}; do
    timeout ${T_TRANS:-45} python3 -m gemvtune transition --shape $s --batch 1..256 --out $R/transition > $L/transition-$s.log 2>&1; echo "transition rc=$?" >> $L/transition-$s.log
  done
  tar czf $OUT/results.tgz $(find $R -newer $L/stamp -type f) 2>/dev/null
  tar czf $OUT/issue19-bench.tgz -C $OUT/issue19 bench
  grep -v "triton_mm\|AUTOTUNE\|^  " $L/bench.log | grep -E "µs|Geometric|^\|" | cut -c1-200 | tail -60
  for s in ${TRANS_SHAPES:-}; do tail -1 $L/transition-$s.log; done
fi
if [ "$PART" = final ]; then
  R=results/nvidia-h200; touch $L/stamp; sleep 1
  SH=""; for s in 4096x4096 6144x4096 14336x4096 28672x4096 4096x14336 128256x4096 1024x16384; do SH="$SH --shape $s"; done
  echo "command: gemvtune transition$SH --batch 1..256 --out $R/transition" > $L/transition.log
  timeout ${T_TRANS:-240} python3 -m gemvtune transition $SH --batch 1..256 --out $R/transition >> $L/transition.log 2>&1; echo "transition rc=$?" >> $L/transition.log
  for b in 1 4; do
    echo "command: gemvtune percall --batch $b --out $R/bench" > $L/percall-$b.log
    timeout 60 python3 -m gemvtune percall --batch $b --out $R/bench >> $L/percall-$b.log 2>&1; echo "percall rc=$?" >> $L/percall-$b.log
  done
  echo "command: python3 -m pytest -m gpu tests/test_transition_gpu.py tests/test_gpu_table.py tests/test_torch.py" > $L/pytest.log
  timeout ${T_TESTS:-100} python3 -m pytest -m gpu -p no:cacheprovider -q tests/test_transition_gpu.py tests/test_gpu_table.py tests/test_torch.py -rA >> $L/pytest.log 2>&1; echo "pytest rc=$?" >> $L/pytest.log
  tar czf $OUT/results.tgz $(find $R -newer $L/stamp -type f) 2>/dev/null
  tar czf $OUT/issue19-final.tgz -C $OUT/issue19 final
  grep -E "ridge|rc=" $L/transition.log; grep -A12 "^| n | read floor" $L/transition.log | head -60 | cut -c1-200
  for b in 1 4; do grep -E "GemvLinear / F.linear|rc=" $L/percall-$b.log | cut -c1-200; done
  tail -2 $L/pytest.log; grep -E "^(FAILED|ERROR)" $L/pytest.log | head
fi
