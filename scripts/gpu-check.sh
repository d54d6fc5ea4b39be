#!/usr/bin/env bash
# The GPU verification entry point: run from the repository root on a machine with an NVIDIA GPU, with
# gemvtune importable by python3 (installed, or the checkout on PYTHONPATH beside its dependencies).
#   usage: bash scripts/gpu-check.sh PART [PART...]      bash scripts/gpu-check.sh --help
# Each part writes its full log to OUT/PART.log (OUT: $OUT if set, else ./gpu-check-out) and its other files
# under OUT/PART/; every command in a log is preceded by one header line (date -u, GPU name and driver, git
# commit, the exact command) and followed by its rc. Each part is bounded by `timeout` (T_<PART>). At the
# end a table: part, exit code, wall seconds, the log's last summary line (also OUT/summary.txt).
# Exit 0 if every part passed, 1 if any failed, 2 on a usage error.
set -uo pipefail

PARTS="suite tests slow-tests sanitizer bench hf percall search group guard tune unseen fp8"
SAN_CONFIGS=tests/data/sanitize_configs.json
HF_CONFIG_DEFAULT=gemvtune/kernels/hf_configs/llama-3-8b.json

usage() {
  cat <<EOF
usage: bash scripts/gpu-check.sh PART [PART...]   (from the repository root, on a machine with an NVIDIA GPU)

parts (run in the order given):
  suite       the whole GPU suite, both tiers, in one call: SUITE_SHARDS pytest processes at once on the one GPU
              (pytest --shard I/K: whole test files balanced by tests/data/gpu_seconds.json), then the tests marked
              timing (they assert on speed) in one process alone, within SUITE_TIMING_T; the summary sums them;
              suite/gpu_seconds.json: this run's seconds per file (commit it there for the next run's balance)
  tests       python3 -m pytest -q -m gpu (the GPU tests; the slow-marked ones skip: CI is unset for it;
              the log ends with the 30 slowest, as both test parts do)
  slow-tests  python3 -m pytest -q -m "gpu and slow" (pytest's exit 5, no test selected, counts as a pass)
  sanitizer   compute-sanitizer memcheck and racecheck (--report-api-errors no) over gemvtune verify of
              $SAN_CONFIGS on the edge shapes at n = 1 and 3, fp16 and bf16; a sample of the FP8 family in
              both scale layouts (SAN_FP8);
              then memcheck of gemvtune percall ops in fp16 and bf16
  bench       gemvtune bench kernels --suite decode (tuned table against cuBLAS, llama.cpp config, seed kernel),
              fp16 then bf16, in one process each
  hf          gemvtune bench hf CONFIG (Llama-3-8B, 32 layers, 128 tokens; stock against gemvtune, eager
              and compiled), fp16 then bf16
  percall     gemvtune percall ops (per-call cost of each launch path), fp16 and bf16 at n = 1 and 4
  search      a short gemvtune search of one shape into a temporary results folder, then its report
  group       gemvtune bench group (a model's sibling linears in one grouped launch against the members one by
              one), per dtype; then compute-sanitizer memcheck and racecheck over the GPU tests of the grouped
              variants (the 129+33+7x4104 groups, n = 1 and 3), the residual and PDL-chain variants (129x4104) and
              the SwiGLU groups (72+72x4104): each tool takes minutes (under memcheck 2 of these 5 tests ran
              in 60 s on the H200, 2026-12-05)
  guard       gemvtune bench guard (the never-slower check: stock nn.Linear against swap_linears in torch CUDA
              graphs over cold weight copies; the decode suite, n = 1..16, fp16 and bf16, in one process);
              fails when a row is slower than stock by more than 1% beyond the paired noise, or wrong
  tune        gemvtune tune of a whole model from an empty results folder under a wall-time budget (TUNE_ARGS),
              re-measured at the end beside the committed table (TUNE_AGAINST) in the same process (--against)
              and in bench guard's harness; the summary: shapes tuned, seconds spent, predicted/measured step gain

  unseen      gemvtune tune --budget 0 (the zero-trial picks: nothing searched) of each UNSEEN_MODELS entry, models the
              table never saw, at UNSEEN_BATCH, each measured in bench guard's harness, on a copy (OUT/unseen/) of
              UNSEEN_TABLE with the cost models beside it; fails where no cost model loads (no picks: nothing tested)
              or a row is slower than stock beyond the noise (bench guard's FAIL) or wrong
              and is not run on a GPU other than the table's; the summary: each model's routes and its step
  fp8         FP8 weights: gemvtune tune of FP8_SHAPES (--weights FP8_WEIGHTS, under FP8_BUDGET, --retune) into a
              copy of this GPU's committed table (results/<gpu>/table.json), else (none, or FP8_FRESH=1) a new one
              (OUT/fp8/table.json), then gemvtune bench fp8 of them (the FP8 kernel against the 16-bit tuned
              kernel, cuBLAS on 16-bit weights, dequantize + F.linear and gemlite's A16W8_FP8, carried in
              .peers/gemlite: the device's carry list names it); the summary: the targets' lines

output: OUT/PART.log, OUT/PART/, OUT/summary.txt   (OUT: \$OUT if set, else ./gpu-check-out); GPU_CHECK_PACK=1: the
        logs and folders of the parts run packed into OUT/gpu-check.tgz, beside summary.txt

environment (defaults in brackets):
  SUITE_SHARDS     [6]   SUITE_SHARD_T [440] (each shard's own timeout)   SUITE_TIMING_T [120] (the timing
                   tests, after the shards; both inside T_SUITE [580])
  timeouts, seconds per part: T_TESTS [540] T_SLOW_TESTS [540] T_SANITIZER [570] T_BENCH [560] T_HF [570]
    T_PERCALL [240] T_SEARCH [300]
  TESTS            extra pytest arguments for tests and slow-tests, e.g. test files []
  SAN_SHAPES       sanitizer edge shapes [1x8 1x72 1x4104 7x8 7x72 7x4104 129x8 129x72 129x4104]
                   (the H200 took 179 s for the whole part on 1x8 7x72 129x4104; split by SAN_DTYPES to fit a limit)
  SAN_DTYPES       [fp16 bf16]       SAN_PERCALL_ARGS [--calls 20 --repeats 1]   SAN_FP8 [e4m3-row e4m3-b128]
  BENCH_DTYPES     [fp16 bf16]       BENCH_BATCH [1,8]   BENCH_ROUNDS [3]
  BENCH_OPTS       [--no-inductor]   (set but empty: the Inductor baseline too)
  HF_CONFIG        [$HF_CONFIG_DEFAULT]   HF_DTYPES [fp16 bf16]
  HF_ARGS          [--layers 32 --tokens 128 --rounds 2]
  PERCALL_DTYPES   [fp16 bf16]       PERCALL_BATCHES [1 4]
  GROUP_MODEL      [llama-3-8b]      GROUP_BATCH [1,8]   GROUP_DTYPES [fp16 bf16]   T_GROUP [580]
  GUARD_ARGS       []  (e.g. --dtype fp16 --batch 1,8; --weights e4m3-row: FP8 layers against dequantize +
                   F.linear; default: the whole suite, 16-bit)   T_GUARD [300]
  TUNE_ARGS        [--model llama-3-8b --batch 1,2,4,8,16 --budget 5m]   T_TUNE [580]
  TUNE_AGAINST     [results/<this GPU>/table.json where committed, else results/nvidia-h200/table.json]
  UNSEEN_MODELS    [--model mistral-nemo-12b --tp 2; --hf-config tests/data/hf/qwen2.5-72b-instruct.json --tp 4;
                   --hf-config tests/data/hf/qwen3-30b-a3b.json] (';'-separated tune arguments)
  UNSEEN_BATCH     [1,8]   UNSEEN_TABLE [results/nvidia-h200/table.json]   T_UNSEEN [300]
  FP8_SHAPES       [4096x4096 1024x4096 14336x4096 4096x14336 128256x4096]   FP8_WEIGHTS [e4m3-row]
  FP8_BATCH        [1,8]   FP8_DTYPE [fp16]   FP8_BUDGET [3m]   FP8_ROUNDS [3]   T_FP8 [580]
  FP8_BENCH_BATCH  [FP8_BATCH] (the benchmark's n: about 16 s a row with gemlite on an H100)   FP8_FRESH [0]
  SEARCH_SHAPE     [4096x4096]       SEARCH_BATCH [1]   SEARCH_TRIALS [12]   SEARCH_FAMILY [all]
  GEMVTUNE_CACHE_DIR [\${TMPDIR:-/tmp}/gemvtune-cache]   GPU_CHECK_COMMIT (when the checkout has no .git)

exit: 0 every part passed, 1 a part failed or timed out, 2 usage error
EOF
}

# ---- helpers used inside a part ------------------------------------------------------------------

shown() {   # the command as one copy-pasteable line (arguments quoted only where needed)
  local a out=()
  for a in "$@"; do
    if [[ $a =~ ^[][A-Za-z0-9_./:=,@%+^-]+$ ]]; then out+=("$a"); else out+=("'${a//\'/\'\\\'\'}'"); fi
  done
  echo "${out[*]}"
}

header() {  # header line: date, GPU, commit, command
  echo "== $(date -u +%Y-%m-%dT%H:%M:%SZ) | gpu: $GPU | commit: $COMMIT | command: $1"
}

RCS=()      # label=rc of each command of the part
FIRST_RC=0  # the part's exit code: the first non-zero rc of its commands
LAST=""     # output of the last command (for its summary)
LAST_RC=0   # and its rc

run() {     # run LABEL CMD...: header, the command (output to the log and to $LAST), its rc
  local label=$1 rc; shift
  header "$(shown "$@")"
  "$@" 2>&1 | tee "$LAST"
  rc=${PIPESTATUS[0]}
  LAST_RC=$rc
  echo "rc=$rc ($label)"
  RCS+=("$label=$rc")
  if [ "$rc" -ne 0 ] && [ "$FIRST_RC" -eq 0 ]; then FIRST_RC=$rc; fi
  return 0
}

finish() {  # finish TEXT: the part's summary line; returns the part's exit code
  local bad=() x
  for x in "${RCS[@]}"; do [ "${x##*=}" = 0 ] || bad+=("$x"); done
  rm -f "$LAST"
  if [ ${#bad[@]} -eq 0 ]; then
    echo "summary: ${1:+$1; }${#RCS[@]} of ${#RCS[@]} commands rc=0"
  else
    echo "summary: ${#bad[@]} of ${#RCS[@]} commands failed (${bad[*]})${1:+; $1}"
  fi
  return "$FIRST_RC"
}

joined() {  # joined ITEM...: the items separated by ", "
  local text="" x
  for x in "$@"; do text+="${text:+, }$x"; done
  echo "$text"
}

squeeze() { tr -s ' \t' ' ' | tr -d '*' | sed 's/^ //; s/ $//'; }

pytest_summary() { grep -E '(passed|failed|errors?|skipped|deselected|no tests ran).* in [0-9.]+s' "$LAST" | tail -1 | tr -d '=' | squeeze; }

sanitizer_clean() {  # 1 if the last command was a clean compute-sanitizer run, else 0
  if [ "$LAST_RC" -eq 0 ] && grep -Eq "SUMMARY: 0 (errors|hazards)" "$LAST"; then echo 1; else echo 0; fi
}

# ---- the parts -----------------------------------------------------------------------------------

part_tests() {
  local extra=()
  read -r -a extra <<< "${TESTS:-}"
  run pytest env -u CI python3 -m pytest -q -m gpu -p no:cacheprovider -rA --durations=30 "${extra[@]}"
  finish "$(pytest_summary)"
}

part_slow_tests() {
  local extra=()
  read -r -a extra <<< "${TESTS:-}"
  run pytest python3 -m pytest -q -m "gpu and slow" -p no:cacheprovider -rA --durations=30 "${extra[@]}"
  if [ "$LAST_RC" -eq 5 ]; then   # pytest's "no tests collected": no test is marked both gpu and slow (yet)
    echo "pytest exit 5 (no test selected) counts as a pass here"
    RCS=(pytest=0); FIRST_RC=0
  fi
  finish "$(pytest_summary)"
}

part_suite() {
  # The whole GPU suite, both tiers (-m gpu, slow tests included), in one call: SUITE_SHARDS pytest processes at once
  # on the one GPU, each whole test files balanced by their recorded seconds (tests/shard.py,
  # tests/data/gpu_seconds.json); then the tests marked timing (they assert on measured speed) in one process alone,
  # after the shards (2026-12-05 on an H100: two of them failed beside five other shards and passed alone).
  # This run's seconds per file go to suite/gpu_seconds.json (the next run's weights).
  local k=${SUITE_SHARDS:-6} i rc pids=() extra=() cmd totals logs=()
  read -r -a extra <<< "${TESTS:-}"
  # one compile cache for the shards of this run (a kernel two files compile is compiled once), fresh
  GEMVTUNE_TEST_CACHE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-suite.XXXXXX") || return 1
  export GEMVTUNE_TEST_CACHE_DIR
  trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$GEMVTUNE_TEST_CACHE_DIR"; exit 143' TERM
  pytest_to() {   # pytest_to NAME LIMIT MARKEXPR LABEL [ARGS...]: one pytest process into D/NAME.log (and .xml), rc last
    local name=$1 lim=$2 mark=$3 label=$4; shift 4
    cmd=(timeout --kill-after=10 "$lim" python3 -m pytest -q -m "$mark" --runslow -p no:cacheprovider -rfEs
         --durations=10 "$@" --junitxml="$D/$name.xml" "${extra[@]}")
    { header "$(shown "${cmd[@]}")"; "${cmd[@]}"; echo "rc=$? ($label)"; } > "$D/$name.log" 2>&1
  }
  for ((i = 0; i < k; i++)); do
    pytest_to "shard-$i" "${SUITE_SHARD_T:-440}" "gpu and not timing" "shard $i/$k" --shard "$i/$k" &
    pids+=($!)
    logs+=("$D/shard-$i.log")
  done
  wait "${pids[@]}"
  pids=()
  pytest_to timing "${SUITE_TIMING_T:-120}" "gpu and timing" "timing, alone"
  logs+=("$D/timing.log")
  for f in "${logs[@]}"; do
    cat "$f"
    rc=$(sed -n 's/^rc=\([0-9]*\) (.*/\1/p' "$f" | tail -1)
    [ "${rc:-1}" != 5 ] || rc=0   # pytest's "no tests collected": a shard with no file of the selection
    i=$(basename "$f" .log)
    RCS+=("${i/-/}=${rc:-1}")
    if [ "${rc:-1}" -ne 0 ] && [ "$FIRST_RC" -eq 0 ]; then FIRST_RC=${rc:-1}; fi
  done
  trap - TERM
  rm -rf "$GEMVTUNE_TEST_CACHE_DIR"
  python3 tests/shard.py --seconds "$D"/shard-*.xml "$D"/timing.xml > "$D/gpu_seconds.json" 2>/dev/null \
    || rm -f "$D/gpu_seconds.json"
  totals=$(for f in "${logs[@]}"; do
             grep -E '(passed|failed|errors?|skipped|deselected|no tests ran).* in [0-9.]+s' "$f" | tail -1
           done | awk '{ for (j = 1; j < NF; j++) if ($(j + 1) ~ /^(passed|failed|skipped|error|errors),?$/) {
                         w = $(j + 1); sub(/,$/, "", w); sub(/^errors$/, "error", w); n[w] += $j }
                         for (j = 1; j <= NF; j++) if ($j == "in") { t = $(j + 1) + 0; if (t > m) m = t } }
                     END { printf "%d passed, %d failed, %d error, %d skipped; the longest process %.0f s",
                           n["passed"], n["failed"], n["error"], n["skipped"], m }')
  finish "$k shards, then the timing tests alone: $totals"
}

part_sanitizer() {
  # GEMVTUNE_NO_POOL=1: every array of the runner is its own allocation, so memcheck sees each one's bounds.
  # --report-api-errors no: cuda-bindings resolves every driver symbol through cuGetProcAddress at cuInit, and
  # those the driver lacks come back CUDA_ERROR_INVALID_VALUE, which the sanitizer would count as errors
  # (gemvtune checks its own API calls).
  local edge=() s dt w tool pc=() clean=0 total=0
  for s in ${SAN_SHAPES:-1x8 1x72 1x4104 7x8 7x72 7x4104 129x8 129x72 129x4104}; do edge+=(--shape "$s"); done
  read -r -a pc <<< "${SAN_PERCALL_ARGS:---calls 20 --repeats 1}"
  local san=(env GEMVTUNE_NO_POOL=1 compute-sanitizer --report-api-errors no --error-exitcode 9)
  for dt in ${SAN_DTYPES-fp16 bf16}; do
    # without the sanitizer first: the results, and the compile cache filled for the runs under it
    run "verify $dt" python3 -m gemvtune verify "${edge[@]}" --batch 1,3 --dtype "$dt" --configs "$SAN_CONFIGS"
    for tool in memcheck racecheck; do
      run "$tool verify $dt" "${san[@]}" --tool "$tool" \
        python3 -m gemvtune verify "${edge[@]}" --batch 1,3 --dtype "$dt" --configs "$SAN_CONFIGS"
      total=$((total + 1)); clean=$((clean + $(sanitizer_clean)))
    done
  done
  # FP8 weights (W8A16): a sample of the FP8 family on the edge shapes, both scale layouts, under both tools
  for w in ${SAN_FP8:-e4m3-row e4m3-b128}; do
    run "verify $w" python3 -m gemvtune verify "${edge[@]}" --batch 1,3 --weights "$w" --configs sample:6
    for tool in memcheck racecheck; do
      run "$tool verify $w" "${san[@]}" --tool "$tool" \
        python3 -m gemvtune verify "${edge[@]}" --batch 1,3 --weights "$w" --configs sample:6
      total=$((total + 1)); clean=$((clean + $(sanitizer_clean)))
    done
  done
  for dt in ${SAN_DTYPES-fp16 bf16}; do
    run "memcheck percall $dt" "${san[@]}" --tool memcheck \
      python3 -m gemvtune percall ops --dtype "$dt" "${pc[@]}" --out "$D/percall-$dt"
    total=$((total + 1)); clean=$((clean + $(sanitizer_clean)))
  done
  finish "$clean of $total sanitizer runs clean (rc 0, 0 errors or hazards)"
}

part_bench() {
  local dt opts=() got=()
  read -r -a opts <<< "${BENCH_OPTS---no-inductor}"
  for dt in ${BENCH_DTYPES:-fp16 bf16}; do
    run "bench $dt" python3 -m gemvtune bench kernels --suite decode --dtype "$dt" --batch "${BENCH_BATCH:-1,8}" \
      --rounds "${BENCH_ROUNDS:-3}" "${opts[@]}" --out "$D"
    got+=("$dt $(grep -m1 '^Geometric means' "$LAST" | grep -o '×cuBLAS [0-9.]* (lowest [0-9.]*)' || echo '-')")
  done
  finish "geomean $(joined "${got[@]}")"
}

part_hf() {
  local dt args=() got=() e c
  read -r -a args <<< "${HF_ARGS:---layers 32 --tokens 128 --rounds 2}"
  for dt in ${HF_DTYPES:-fp16 bf16}; do
    run "hf $dt" python3 -m gemvtune bench hf "${HF_CONFIG:-$HF_CONFIG_DEFAULT}" "${args[@]}" --dtype "$dt" \
      --out "$D"
    # the closing table: mode, stock tok/s, gemvtune tok/s, ratio (gemvtune / stock), ...
    e=$(awk '$1 == "eager" && $2 ~ /^[0-9.]+$/ && $4 ~ /^[0-9.]+$/ {r = $4} END {print r}' "$LAST")
    c=$(awk '$1 == "compiled" && $2 ~ /^[0-9.]+$/ && $4 ~ /^[0-9.]+$/ {r = $4} END {print r}' "$LAST")
    got+=("$dt eager ×${e:--} compiled ×${c:--}")
  done
  finish "gemvtune/stock tok/s: $(joined "${got[@]}")"
}

part_percall() {
  local dt b got=() r
  for dt in ${PERCALL_DTYPES:-fp16 bf16}; do
    for b in ${PERCALL_BATCHES:-1 4}; do
      run "percall $dt n=$b" python3 -m gemvtune percall ops --dtype "$dt" --batch "$b" --out "$D"
      r=$(grep -m1 'GemvLinear / F.linear' "$LAST" | tr '|' ' ' | squeeze | sed 's/^GemvLinear \/ F.linear //')
      got+=("$dt n=$b ${r:--}")
    done
  done
  finish "GemvLinear/F.linear: $(joined "${got[@]}")"
}

part_search() {
  local tmp fam=() w
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-search.XXXXXX") || return 1
  trap 'rm -rf "$tmp"; exit 143' TERM   # the temporary folder goes on a timeout too (its files stay under OUT/search only after a full run)
  [ -n "${SEARCH_FAMILY:-}" ] && fam=(--family "$SEARCH_FAMILY")
  run search python3 -m gemvtune search --shape "${SEARCH_SHAPE:-4096x4096}" --batch "${SEARCH_BATCH:-1}" \
    --trials "${SEARCH_TRIALS:-12}" "${fam[@]}" --results "$tmp"
  w=$(grep -E ' µs .*cuBLAS' "$LAST" | tail -1 | squeeze)
  run report python3 -m gemvtune report --table "$tmp/table.json"
  cp -r "$tmp"/. "$D"/ 2>/dev/null
  rm -rf "$tmp"
  finish "${w:-no winner line}"
}

part_group() {
  local dt got=() r tool clean=0 total=0
  for dt in ${GROUP_DTYPES:-fp16 bf16}; do
    run "bench group $dt" python3 -m gemvtune bench group --model "${GROUP_MODEL:-llama-3-8b}" \
      --batch "${GROUP_BATCH:-1,8}" --dtype "$dt" --out "$D"
    r=$(grep -m1 '^Geometric mean separate / grouped' "$LAST" | grep -o '[0-9.]* over [0-9]* groups')
    got+=("$dt ${r:--}")
  done
  local san=(env GEMVTUNE_NO_POOL=1 compute-sanitizer --report-api-errors no --error-exitcode 9)
  for tool in memcheck racecheck; do
    run "$tool group tests" "${san[@]}" --tool "$tool" env -u CI python3 -m pytest -q -m gpu -p no:cacheprovider \
      tests/test_group_kernels.py tests/test_fusions.py \
      -k "(odd_members and 129) or (residual_and_chain and 129) or (swiglu_groups_verify and 72)"
    total=$((total + 1)); clean=$((clean + $(sanitizer_clean)))
  done
  finish "separate/grouped geomean: $(joined "${got[@]}"); $clean of $total sanitizer runs clean"
}

part_guard() {
  local args=() got
  read -r -a args <<< "${GUARD_ARGS:-}"
  run "bench guard" python3 -m gemvtune bench guard "${args[@]}" --out "$D"
  # per dtype, from the summary: the tuned rows' geomean speed-up and worst ratio
  got=$(awk '/^## (fp16|bf16)/ {dt = $0; sub(/^## /, "", dt)}
             /routed to a tuned kernel: geomean/ {
               match($0, /×[0-9.]+/); g = substr($0, RSTART, RLENGTH)
               match($0, /worst ratio [0-9.]+/); w = substr($0, RSTART + 12, RLENGTH - 12)
               printf "%s%s %s worst %s", sep, dt, g, w; sep = ", "}' "$LAST")
  finish "$(grep -m1 '^\*\*Verdict' "$LAST" | squeeze || echo 'no verdict'); tuned rows: ${got:--}"
}

part_tune() {
  local tmp args=() got against
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-tune.XXXXXX") || return 1
  trap 'cp -r "$tmp"/. "$D"/ 2>/dev/null; rm -rf "$tmp"; exit 143' TERM
  read -r -a args <<< "${TUNE_ARGS:---model llama-3-8b --batch 1,2,4,8,16 --budget 5m}"
  # against the table load_table() loads on this GPU (the checkout's results/<gpu>/), else the H200's
  against=$(python3 -c 'import sys; from gemvtune.runtime.tables import find_table; print(find_table(sys.argv[1]).path)' \
    "${GPU%%,*}" 2>/dev/null) || against=results/nvidia-h200/table.json
  run tune python3 -m gemvtune tune "${args[@]}" --results "$tmp" --against "${TUNE_AGAINST:-$against}"
  got=$(grep -E '^(tuned [0-9]+ shapes|decode step|against .* µs against )' "$LAST" | squeeze | paste -sd ';' -)
  cp -r "$tmp"/. "$D"/ 2>/dev/null
  rm -rf "$tmp"
  finish "${got:-no tune summary}"
}

part_unseen() {
  local spec args=() specs=() got="" src gpu
  # a copy of the table and the cost models beside it, in OUT (the measurement writes its files beside the table)
  src=${UNSEEN_TABLE:-results/nvidia-h200/table.json}
  gpu=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["gpu"]["name"])' "$src" 2>/dev/null)
  if [ "${GPU%%,*}" != "$gpu" ]; then   # another GPU's table runs no kernel here: nothing to measure
    echo "summary: not run: $src was made on ${gpu:-an unknown GPU}, this is ${GPU%%,*} (UNSEEN_TABLE: this GPU's table)"
    return 2
  fi
  cp "$src" "$D/table.json" || return 1
  cp "$(dirname "$src")"/costmodel*.json* "$D/" 2>/dev/null
  IFS=';' read -r -a specs <<< "${UNSEEN_MODELS:---model mistral-nemo-12b --tp 2;--hf-config tests/data/hf/qwen2.5-72b-instruct.json --tp 4;--hf-config tests/data/hf/qwen3-30b-a3b.json}"
  for spec in "${specs[@]}"; do
    read -r -a args <<< "$spec"
    [ ${#args[@]} -gt 0 ] || continue
    run "unseen ${args[*]}" python3 -m gemvtune tune "${args[@]}" --batch "${UNSEEN_BATCH:-1,8}" --budget 0 \
      --table "$D/table.json"
    if grep -q "no cost model loaded" "$LAST"; then   # no zero-trial picks: the check would test nothing
      RCS+=("zero-trial picks=1"); [ "$FIRST_RC" -ne 0 ] || FIRST_RC=1
    fi
    if grep -qE ' (FAIL|ERROR)$' "$LAST"; then   # a routed row slower than stock beyond the noise (or wrong)
      RCS+=("slower than stock=1"); [ "$FIRST_RC" -ne 0 ] || FIRST_RC=1
    fi
    got+="${got:+; }${args[*]}: $(grep -E '^routes' "$LAST" | squeeze), $(grep -E '^decode step' "$LAST" \
      | sed 's/^decode step (linears) against //' | squeeze)"
  done
  finish "${got:-no unseen summary}"
}

part_fp8() {
  local shapes=() s got
  for s in ${FP8_SHAPES:-4096x4096 1024x4096 14336x4096 4096x14336 128256x4096}; do shapes+=(--shape "$s"); done
  # into a copy of this GPU's committed table (results/<gpu>/table.json: the new FP8 entries beside its others);
  # on a GPU with none (or FP8_FRESH=1) into a new table: another GPU's table is not this one's to write
  local mine
  mine=$(python3 -c 'import sys; from gemvtune.runtime.tables import find_table; print(find_table(sys.argv[1]).path)' \
    "${GPU%%,*}" 2>/dev/null)
  if [ "${FP8_FRESH:-0}" != 1 ] && [ -n "$mine" ]; then
    cp "$mine" "$D/table.json" || return 1
  fi
  # a budgeted tune (not a fixed number of trials): its wall time is known before it starts
  run "tune fp8" python3 -m gemvtune tune "${shapes[@]}" --weights "${FP8_WEIGHTS:-e4m3-row}" \
    --batch "${FP8_BATCH:-1,8}" --dtype "${FP8_DTYPE:-fp16}" --budget "${FP8_BUDGET:-3m}" --retune --no-measure \
    --results "$D/search" --table "$D/table.json"
  got=$(grep -E '^(tuned [0-9]+ shapes|decode step|the FP8 step)' "$LAST" | squeeze | paste -sd ';' -)
  run "bench fp8" python3 -m gemvtune bench fp8 "${shapes[@]}" --weights "${FP8_WEIGHTS:-e4m3-row}" \
    --batch "${FP8_BENCH_BATCH:-${FP8_BATCH:-1,8}}" --dtype "${FP8_DTYPE:-fp16}" --rounds "${FP8_ROUNDS:-3}" --table "$D/table.json" \
    --out "$D"
  got+="${got:+;}$(grep -E '^(n = 1, shapes|x gemlite|x dequantize)' "$LAST" | squeeze | paste -sd ';' -)"
  finish "${got:-no fp8 summary}"
}

# ---- one part, in its own process (under timeout) ------------------------------------------------

if [ "${1:-}" = __part ]; then
  part=$2
  D=$OUTDIR/$part; mkdir -p "$D"
  LAST=$D/.last-command.out
  echo "== gpu-check $part | $(date -u +%Y-%m-%dT%H:%M:%SZ) | gpu: $GPU | commit: $COMMIT | cwd: $PWD"
  case $part in
    suite) part_suite ;;
    tests) part_tests ;;
    slow-tests) part_slow_tests ;;
    sanitizer) part_sanitizer ;;
    bench) part_bench ;;
    hf) part_hf ;;
    percall) part_percall ;;
    search) part_search ;;
    group) part_group ;;
    guard) part_guard ;;
    tune) part_tune ;;
    unseen) part_unseen ;;
    fp8) part_fp8 ;;
    *) echo "gpu-check.sh: unknown part '$part'"; exit 2 ;;
  esac
  exit $?
fi

# ---- main ----------------------------------------------------------------------------------------

case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  "") echo "gpu-check.sh: no part given (parts: $PARTS; --help)" >&2; exit 2 ;;
esac
for p in "$@"; do
  case " $PARTS " in
    *" $p "*) ;;
    *) echo "gpu-check.sh: unknown part '$p' (parts: $PARTS)" >&2; exit 2 ;;
  esac
done

SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
OUTDIR=${OUT:-./gpu-check-out}
mkdir -p "$OUTDIR" || exit 2
OUTDIR=$(cd "$OUTDIR" && pwd)
cd "$(dirname "$SELF")/.." || exit 2   # the repository root: tests/ and gemvtune/ paths are relative to it
# gemlite (the gemlite-fp8 baseline, gemvtune.bench.gemlite): its source carried in the git-ignored .peers/gemlite
if [ -d .peers/gemlite/gemlite ]; then
  export GEMVTUNE_GEMLITE="$PWD/.peers/gemlite"
fi
if ! command -v compute-sanitizer > /dev/null && [ -x /usr/local/cuda/bin/compute-sanitizer ]; then
  PATH=$PATH:/usr/local/cuda/bin
fi
GPU=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | paste -sd ';' -)
GPU=${GPU:-no nvidia-smi answer}
COMMIT=${GPU_CHECK_COMMIT:-$(git describe --always --dirty 2>/dev/null || echo "unknown (no git)")}
export OUTDIR GPU COMMIT PATH PYTHONUNBUFFERED=1 GEMVTUNE_CACHE_DIR="${GEMVTUNE_CACHE_DIR:-${TMPDIR:-/tmp}/gemvtune-cache}"

declare -A LIMIT=([suite]=580 [tests]=540 [slow-tests]=540 [sanitizer]=570 [bench]=560 [hf]=570 [percall]=240 [search]=300 [group]=580 [guard]=300 [tune]=580 [unseen]=300 [fp8]=580)
rows=() failed=0
for p in "$@"; do
  var=T_$(echo "${p//-/_}" | tr '[:lower:]' '[:upper:]')
  limit=${!var:-${LIMIT[$p]}}
  log=$OUTDIR/$p.log
  echo "gpu-check: $p (timeout ${limit}s, log $log)" >&2
  t0=$(date +%s)
  timeout --kill-after=30 "$limit" "$BASH" "$SELF" __part "$p" > "$log" 2>&1
  rc=$?
  wall=$(( $(date +%s) - t0 ))
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    [ -z "$(tail -c1 "$log")" ] || echo >> "$log"   # the killed command's last line may lack its newline
    echo "summary: timed out after ${limit}s ($var)" >> "$log"
  fi
  summary=$(grep '^summary: ' "$log" | tail -1 | sed 's/^summary: //')
  [ -n "$summary" ] || summary=$(grep -v '^[[:space:]]*$' "$log" | tail -1)
  [ "$rc" -eq 0 ] || failed=1
  rows+=("$(printf '%-10s %4s %7s  %s' "$p" "$rc" "$wall" "${summary:0:160}")")
done
{
  echo "gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ) | gpu: $GPU | commit: $COMMIT | logs: $OUTDIR"
  printf '%-10s %4s %7s  %s\n' part rc wall_s summary
  printf '%s\n' "${rows[@]}"
} | tee "$OUTDIR/summary.txt"
# GPU_CHECK_PACK=1: every part's log and folder into one archive beside summary.txt (the device tool brings back at
# most 8 files from OUT: on 2026-12-06 a tune's table.json was among the files left behind)
if [ "${GPU_CHECK_PACK:-0}" = 1 ]; then
  ( cd "$OUTDIR" && names=() && for p in "$@"; do
      for f in "$p.log" "$p"; do [ -e "$f" ] && names+=("$f"); done
    done
    [ "${#names[@]}" -eq 0 ] || { tar czf gpu-check.tgz "${names[@]}" && rm -rf "${names[@]}"; } ) \
    || echo "gpu-check: packing $OUTDIR/gpu-check.tgz failed: the files stay as they are" >&2
fi
exit "$failed"
