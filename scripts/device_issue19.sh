#!/usr/bin/env bash
# Issue 19 on the H200. Full outputs under $OUT/issue19/<part>; a short table last.
# PART=probe: the mma family's GPU tests, scripts/probe_mma.py (table winner vs sampled mma configs vs cuBLAS per
#   (shape, n)), whether nvmath's cuBLASLt bindings load, and how long Inductor's max-autotune takes per shape.
# PART=check: the GPU tests of every new part (mma, cuBLASLt, the Inductor and seed baselines, transition), a
#   probe of the mma levers at n = 16, and a one-shape bench with every baseline.
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
