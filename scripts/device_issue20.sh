#!/usr/bin/env bash
# Issue 20 on the H200 (fourth session): keep the table fresh, and the refitted cost model on unseen shapes.
# Full outputs under $OUT/issue20/<part>, packed into logs-<parts>.tgz at the end; the changed results come back as results-<parts>.tgz (search CSVs to move under
# searches/ afterwards); a short table last. PART may name several parts, run in order: PART="rest zt".
# PART=ring: the entries `gemvtune check --stale-only` lists (searched with 24 trials a family, or beaten by the
#   cost model's predicted best) that the ring family won, searched again at the default budget (100 trials;
#   warm-started by the cost model; the held winner and every family's best re-measured in each confirmation).
# PART=rest: the same for the entries cuBLASLt or split-K won, the GEMV family where the cost model predicts a GEMV
#   config faster (n = 2) or the entry is n = 1 (8192x28672; and 5120x14336, 3584x3584, 6144x5120, whose earlier
#   winners were put back so that the fixed confirmation compares them with the re-tune's in one process).
# PART=stale: the entries `gemvtune check --stale-only` lists after the re-tune (STALE, default 512x3584 1024x4096:
#   the cost model predicts a config faster than their recorded winners), searched again (GEMV, default budget).
# PART=zt: the zero-trial GPU tests, then scripts/zero_trial_eval.py on the four unseen shapes with the refitted
#   model, against the tuned winners of the last session's fresh searches re-measured here (--tuned-from) and cuBLAS.
set -uo pipefail
OUT=${OUT:-/tmp/out}; PARTS=${PART:-ring}
export PYTHONUNBUFFERED=1 GEMVTUNE_CACHE_DIR=/tmp/gemvtune-cache CI=true
R=results/nvidia-h200
touch $OUT/stamp; sleep 1
search() {   # search LOG TIMEOUT ARGS...: one gemvtune search into $R, its command and rc in LOG
  local log=$1 t=$2; shift 2
  echo "command: gemvtune search $* --results $R" >> $log
  timeout $t python3 -m gemvtune search "$@" --results $R >> $log 2>&1; echo "search rc=$?" >> $log
}
for PART in $PARTS; do
L=$OUT/issue20/$PART; mkdir -p $L
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > "$L/env.txt" 2>&1
if [ "$PART" = ring ]; then
  search $L/search.log ${T1:-300} --shape 4096x4096 --shape 4096x14336 --shape 6144x4096 --shape 128256x4096 --batch 2,4,8 --family ring
  search $L/search.log ${T2:-100} --shape 14336x4096 --batch 2,4 --family ring
  search $L/search.log ${T3:-120} --shape 1024x16384 --shape 4096x4096 --shape 4096x14336 --batch 16 --family ring
fi
if [ "$PART" = rest ]; then
  search $L/search.log ${T1:-100} --shape 28672x4096 --batch 2,4,8,16 --family cublaslt
  search $L/search.log ${T2:-60} --shape 14336x4096 --batch 8,16 --family cublaslt
  search $L/search.log ${T3:-60} --shape 6144x4096 --shape 128256x4096 --batch 16 --family cublaslt
  search $L/search.log ${T4:-100} --shape 1024x16384 --shape 4096x4096 --shape 6144x4096 --batch 2 --family gemv
  search $L/search.log ${T5:-130} --shape 8192x28672 --shape 5120x14336 --shape 3584x3584 --shape 6144x5120 --batch 1 --family gemv
  search $L/search.log ${T6:-60} --shape 1024x16384 --batch 4,8 --family splitk
fi
if [ "$PART" = stale ]; then
  SH=""; for x in ${STALE:-512x3584 1024x4096}; do SH="$SH --shape $x"; done
  search $L/search.log ${T1:-90} $SH --batch 1 --family gemv
fi
if [ "$PART" = ring ] || [ "$PART" = rest ] || [ "$PART" = stale ]; then
  python3 -m gemvtune report --table $R/table.json --csv $R/table.csv > $L/report.log 2>&1
  grep -E "trials\)|rc=" $L/search.log | cut -c1-200 | tail -40
fi
if [ "$PART" = zt ]; then
  T="tests/test_zerotrial.py"
  echo "command: python3 -m pytest -m gpu $T -rA" > $L/pytest.log
  timeout ${T_TESTS:-90} python3 -m pytest -m gpu -p no:cacheprovider -q $T -rA >> $L/pytest.log 2>&1; echo "pytest rc=$?" >> $L/pytest.log
  P=$R/runs/issue19c/issue20/zero-trial.csv
  echo "command: python3 scripts/zero_trial_eval.py --shape 11008x4096 --shape 4096x11008 --shape 13824x5120 --shape 2048x8192 --tuned-from $P --rounds 5 --out $L" > $L/zero-trial.log
  timeout ${T_ZT:-150} python3 scripts/zero_trial_eval.py --shape 11008x4096 --shape 4096x11008 --shape 13824x5120 --shape 2048x8192 \
    --tuned-from $P --rounds 5 --out $L >> $L/zero-trial.log 2>&1; echo "zero-trial rc=$?" >> $L/zero-trial.log
  tail -2 $L/pytest.log; grep -E "^(FAILED|ERROR)" $L/pytest.log | head; tail -7 $L/zero-trial.log | cut -c1-250
fi
done
tar czf $OUT/results-${PARTS// /-}.tgz $(find $R -newer $OUT/stamp -type f ! -name 'optuna-journal*' ! -name '*.lock') 2>/dev/null
# the device tool brings back a few files only: every log in one archive (logs-<part>.tgz), the results in another
( cd $OUT && tar czf logs-${PARTS// /-}.tgz issue20 && rm -rf issue20 )
