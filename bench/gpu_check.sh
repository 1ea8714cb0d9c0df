#!/usr/bin/env bash
# The one script a GPU check host runs (one GPU, offline):
#   bash bench/fetch_wheels.sh        # on a machine with PyPI: .whl/ (wheels), .shipped/ (vLLM's files)
#   bash bench/gpu_check.sh           # on the GPU host, .whl/ and .shipped/ copied beside it; under 600 s
#   bash bench/gpu_check.sh --dry-run # on a CPU machine: bench/gpu_dry_run.sh sets it up
# Written for an offline H100/H200 host with Python 3.12, torch 2.11, Triton 3.6 and numpy 2.5
# preinstalled and 16 CPU cores.
#
# Its time budget: TOTAL_S (default 580 s) for the whole script; SETUP_S = 20 s for the wheels
# and the GPU probe and FINAL_S = 10 s for the files to $OUT are kept out of the steps; every step has its own limit (LIMIT_* below,
# 550 s together by default), runs under the smaller of that and what is left, and is sized to
# finish inside it (trials, M and shapes below, estimated from the per-unit costs at the
# top; `--dry-run` checks the sums). In order, what each step prints:
#   0. `tuner doctor` for the visible GPU: the kernels vLLM runs there by default and whether
#      it reads the tuned files; its exit 1 ("tuning here will not change what vLLM runs") is a
#      finding and never stops the script.
#   1. CUDA kernel and timing tests: the pytest summary line.
#   2. landscape: a grid sweep (all 1,280 of vLLM's configs) of one Qwen3.8-27B TP2 shape at
#      M = 1, 16, 256, 4096 (then more shapes while time is left), in a store of its own so no
#      later step starts from its optima; `bench/record_landscape.py --complete-only` writes
#      $OUT/landscape_<device>.json (the most durable result, first) and its line
#      "wrote ...: (N, K, M), trials (ok)"; the sweep's time line gives compile vs measure
#      seconds and the full-grid wall time per shape.
#   3. the product: `tuner sweep` (guided, TRIALS per task) of the 5 Qwen3.8-27B TP2 shapes over
#      M_VALUES, its time line (trials run/pruned, compile vs measure, wall); export to
#      $OUT/configs.zip and `tuner winners` (tuned vs default per M: the speedup column);
#      `tuner verify` (vLLM's pick vs the default, on and off the grid); `tuner compare`
#      (tuned Triton vs default vs torch's block-wise scaled_mm, with GB/s and TFLOP/s).
#   4. MoE: a fused-MoE sweep of Qwen3-30B-A3B-FP8 TP1 (E=128, N=768) and its winners against
#      vLLM's per-M default.
#   DeepSeek-V3 and bench/vs_shipped.py (DEEPSEEK=1) do not fit beside the landscape: run them
#   in a second call with DOCTOR=0 LANDSCAPE=0 TESTS=0 MOE=0 (the budget check says what fits).
# Everything printed is also in $OUT/gpu_check.log (a remote runner may show only the end of
# the output); the store of steps 3-4 is copied to $OUT/gpu_check.db after each sweep. At most
# 5 files are written, one folder deep, each well under 16 MiB.
set -uo pipefail
cd "$(dirname "$0")/.."
DRY_RUN=0; [ "${1:-}" = --dry-run ] && DRY_RUN=1
OUT=${OUT:-out}                      # the folder whose files come back from the host
WORK=${WORK:-/tmp/gpu_check}         # stores and scratch (not $OUT: SQLite's -wal/-shm files)
WHEELS=${WHEELS:-.whl}               # carried wheels (bench/fetch_wheels.sh)
SITE=${SITE:-/tmp/site}              # where they are installed (a writable folder on PYTHONPATH)
SHIPPED_DIR=${SHIPPED_DIR:-.shipped/vllm-0.33.0}  # must travel: inside the repo
TOTAL_S=${TOTAL_S:-580}; SETUP_S=20; FINAL_S=10
GPU_CPUS=${GPU_CPUS:-16}             # the H200 machine's cores: the compile pool is GPU_CPUS - 1
# Per-unit costs behind the sizes (estimates until the first GPU run replaces them):
COMPILE_S=0.5      # one config for sm90, one core (bench/README: 0.42 s median, 0.53 s mean)
GRID_TRIAL_S=0.035 # one trial of the search rung (5 ms warmup + 20 ms of samples, task.py) plus
                   # its correctness check, graph capture and store write: not yet measured
SEARCH_TRIAL_S=0.030
TEST_S=0.9         # one CUDA test case: a compile and a few launches
START_S=15         # a sweep's start: spawn, imports, references
RECORD_S=30        # `bench/record_landscape.py`: start-up, the store read, the file
DOCTOR_S=10        # `tuner doctor`: start-up, torch import, the GPU query (4 s on this 2-core
                   # CPU); no vLLM among the carried wheels, so it compiles nothing
# What each step does, and its limit in seconds.
DOCTOR=${DOCTOR:-1}; LIMIT_DOCTOR=20  # the 10 s no step had, and 10 s of the sweep's
TESTS=${TESTS:-1}; LIMIT_TESTS=75
CUDA_TESTS="tests/tuner/kernels/test_kernel.py tests/tuner/measure/test_noise.py
  tests/tuner/measure/test_measure.py::test_graph_replays_on_a_gpu_write_the_right_result_into_every_copy"
LANDSCAPE=${LANDSCAPE:-1}; LIMIT_LANDSCAPE=235
LANDSCAPE_SHAPES=${LANDSCAPE_SHAPES:-5120,3072 17408,5120 8192,5120}  # first must fit
LANDSCAPE_M=${LANDSCAPE_M:-1,16,256,4096}
SWEEP=${SWEEP:-1}; LIMIT_SWEEP=85; LIMIT_EXPORT=15; LIMIT_VERIFY=35; LIMIT_COMPARE=35
M_VALUES=${M_VALUES:-1,16,32,256,2048,4096}; TRIALS=${TRIALS:-64}
COMPARE_M=${COMPARE_M:-1,16,32,2048,4096}
MOE=${MOE:-1}; LIMIT_MOE=40; LIMIT_MOE_WINNERS=10
MOE_M=${MOE_M:-1,16,256,4096}; MOE_TRIALS=${MOE_TRIALS:-32}
DEEPSEEK=${DEEPSEEK:-0}; LIMIT_DEEPSEEK=120; LIMIT_VS_SHIPPED=120; DS_M=${DS_M:-1,64,4096}

mkdir -p "$OUT" "$WORK"
exec > >(tee "$OUT/gpu_check.log") 2>&1
LOG_PID=$!
DEADLINE=$((SECONDS + TOTAL_S))
die() { echo "error: $*"; exec >&- 2>&-; wait "$LOG_PID"; exit 1; }
count() { tr ',' ' ' <<< "$1" | wc -w; }
# specializations M: 1, M % 16 == 0 and other M compile to different binaries (Triton specializes integer arguments)
specs() { tr ',' '\n' <<< "$1" | awk '{print ($1 == 1) ? "one" : ($1 % 16 ? "odd" : "16")}' \
  | sort -u | wc -l; }
est() { awk "BEGIN {printf \"%.0f\", $1}"; }
max() { awk "BEGIN {print ($1 > $2) ? $1 : $2}"; }

# budget_table: each enabled step's limit and estimate (from the costs above); fails when an
# estimate is over its limit or the limits add up to more than TOTAL_S - SETUP_S - FINAL_S.
N_CUDA_TESTS=42  # what CUDA_TESTS collects (the dry run checks it)
budget_table() {
  local pool=$((GPU_CPUS - 1)) sum=0 bad=0 tasks compile measure first
  row() {  # NAME ENABLED LIMIT ESTIMATE BASIS
    [ "$2" = 1 ] || return 0
    sum=$((sum + $3)); printf '  %-40s %5s %5s  %s\n' "$1" "$3" "$4" "$5"
    [ "$4" -le "$3" ] || { echo "  ^ its estimate is over its limit"; bad=1; }
  }
  echo "budget (s): step, limit, estimate, basis; setup $SETUP_S, files $FINAL_S, total $TOTAL_S"
  row "tuner doctor" "$DOCTOR" "$LIMIT_DOCTOR" "$DOCTOR_S" "start-up and the GPU query; \
no vLLM here, nothing compiled"
  row "CUDA tests" "$TESTS" "$LIMIT_TESTS" "$(est "$N_CUDA_TESTS * $TEST_S")" \
    "$N_CUDA_TESTS cases x $TEST_S s"
  compile=$(est "1280 * $(specs "$LANDSCAPE_M") * $COMPILE_S / $pool")
  measure=$(est "$(count "$LANDSCAPE_M") * 1280 * $GRID_TRIAL_S")
  first=$(est "$START_S + $(max "$compile" "$measure") + $RECORD_S")
  row "landscape, first shape" "$LANDSCAPE" "$LIMIT_LANDSCAPE" "$first" "compile $compile s on \
$pool processes vs measure $measure s ($(count "$LANDSCAPE_M") x 1,280 trials), + record $RECORD_S s"
  tasks=$((5 * $(count "$M_VALUES")))
  row "sweep qwen3.8-27b" "$SWEEP" "$LIMIT_SWEEP" \
    "$(est "$START_S + $tasks * $TRIALS * $SEARCH_TRIAL_S")" "$tasks tasks x $TRIALS trials \
(binaries cached by the landscape)"
  row "export and winners" "$SWEEP" "$LIMIT_EXPORT" 5 "store reads"
  row "verify" "$SWEEP" "$LIMIT_VERIFY" "$(est "10 + $tasks * 0.6")" \
    "$tasks (N, K, M) x (a reference, 3 configs x 12 rounds)"
  row "compare" "$SWEEP" "$LIMIT_COMPARE" "$(est "10 + 5 * $(count "$COMPARE_M") * 0.8")" \
    "$((5 * $(count "$COMPARE_M"))) (N, K, M) x 4 backends"
  row "MoE sweep" "$MOE" "$LIMIT_MOE" "$(est "$START_S + $(count "$MOE_M") * $MOE_TRIALS * \
(2 * $SEARCH_TRIAL_S + 2 * $COMPILE_S / $pool)")" "$(count "$MOE_M") tasks x $MOE_TRIALS \
trials, 2 GEMMs each"
  row "MoE winners" "$MOE" "$LIMIT_MOE_WINNERS" 5 "store reads"
  row "DeepSeek-V3 TP8 sweep" "$DEEPSEEK" "$LIMIT_DEEPSEEK" "$(est "$START_S + 9 * \
$(count "$DS_M") * ${DS_TRIALS:-48} * $SEARCH_TRIAL_S + 9 * 48 * 2 * $COMPILE_S / $pool")" \
    "9 shapes x $(count "$DS_M") M x ${DS_TRIALS:-48} trials, uncached compiles"
  row "vs_shipped" "$DEEPSEEK" "$LIMIT_VS_SHIPPED" "$(est "10 + 9 * $(count "$DS_M") * 1.5")" \
    "(N, K, M) x (reference, 3 compiles, 36 samples)"
  echo "  steps' limits: $sum s of $((TOTAL_S - SETUP_S - FINAL_S)) s"
  [ "$sum" -le $((TOTAL_S - SETUP_S - FINAL_S)) ] && [ "$bad" = 0 ]
}
# check_out DIR [PLANNED...]: what the host's file transfer would not return: over 8
# files, deeper than two folders, a file over 16 MiB, over 64 MiB in all, an odd name.
check_out() {
  local dir=$1 problems=0 files size total=0; shift
  files=$( (cd "$dir" && find . -type f | sed 's|^\./||'; printf '%s\n' "$@") | sort -u \
    | grep -v '^$')
  [ "$(wc -l <<< "$files")" -le 8 ] || { echo "out: $(wc -l <<< "$files") files, over 8"; problems=1; }
  while read -r file; do
    [ "$(tr -cd / <<< "$file" | wc -c)" -le 2 ] || { echo "out: $file is too deep"; problems=1; }
    grep -qE '^[A-Za-z0-9._/-]+$' <<< "$file" || { echo "out: odd name $file"; problems=1; }
    [ -f "$dir/$file" ] || continue
    size=$(stat -c %s "$dir/$file"); total=$((total + size))
    [ "$size" -le $((16 << 20)) ] || { echo "out: $file is over 16 MiB"; problems=1; }
  done <<< "$files"
  [ "$total" -le $((64 << 20)) ] || { echo "out: over 64 MiB in all"; problems=1; }
  echo "out: $(wc -l <<< "$files") file(s), $total bytes now: $(tr '\n' ' ' <<< "$files")"
  return $problems
}

# --- setup: the carried wheels into $SITE (no registry there); the GPU probe ---
[ -d "$WHEELS" ] && ls "$WHEELS"/*.whl > /dev/null 2>&1 || die "no wheels in $WHEELS: run bench/fetch_wheels.sh here and carry .whl"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target "$SITE" "$WHEELS"/*.whl || die "installing the wheels of $WHEELS into $SITE failed"
export PYTHONPATH=$SITE:$PWD PYTHONUNBUFFERED=1 COLUMNS=200
export TUNER_DB_URL=sqlite:///$WORK/gpu_check.db TUNER_SHAPES_DIR=$WORK/shapes
mkdir -p "$TUNER_SHAPES_DIR"
case "$(realpath -m "$SHIPPED_DIR")/" in
  "$(realpath "$PWD")"/*) ;;
  *) die "SHIPPED_DIR $SHIPPED_DIR is outside the repo, so it would not travel" ;;
esac
if [ "$DRY_RUN" = 1 ]; then
  DEVICE=${DRY_DEVICE:-NVIDIA_H200}
  python3 -c "import torch, triton; print('dry run: no GPU; torch', torch.__version__, \
'triton', triton.__version__)" || die "torch and triton do not import"
else
  DEVICE=$(python3 -c "import torch; from tuner.inputs.devices import vllm_device_name; \
print(vllm_device_name(torch.cuda.get_device_name()))") && [ -n "$DEVICE" ] \
    || die "no CUDA device visible (torch.cuda.get_device_name failed)"
  python3 -c "import torch, triton; print('gpu', torch.cuda.get_device_name(), 'torch', \
torch.__version__, 'triton', triton.__version__)"
fi
budget_table || die "the steps do not fit TOTAL_S=$TOTAL_S (table above)"

# step NAME LIMIT_S COMMAND...: run under the smaller of LIMIT_S and the time left for steps.
step() {
  local name=$1 limit=$2 left=$((DEADLINE - FINAL_S - SECONDS)); shift 2
  if [ "$left" -lt 10 ]; then echo; echo "== $name: skipped, ${left} s left"; return 1; fi
  [ "$left" -lt "$limit" ] && limit=$left
  echo; echo "== $name (limit $limit s, $((DEADLINE - SECONDS)) s left in all)"
  local start=$SECONDS
  timeout -k 5 "$limit" "$@"; local rc=$?
  echo "== $name: exit $rc after $((SECONDS - start)) s"
  return $rc
}
save_store() {  # a consistent copy of a live SQLite store (the backup API), into $OUT
  python3 -c "import sqlite3, sys; src = sqlite3.connect(sys.argv[1]); dst = \
sqlite3.connect(sys.argv[2]); src.backup(dst); dst.close()" "$WORK/gpu_check.db" \
    "$OUT/gpu_check.db" 2>/dev/null || echo "note: no store to copy yet"
}
# shapes_file KEY N,K: a one-shape model file, so that a sweep covers exactly that shape.
shapes_file() {
  printf 'model = "%s"\ndescription = "Qwen3.8-27B-FP8 TP2, one shape, for a landscape"\n%s\n' \
    "$1" 'block_shape = [128, 128]' > "$TUNER_SHAPES_DIR/$1.toml"
  printf '[tp.2]\nsource = "shapes/qwen3.8-27b.toml TP 2"\nshapes = [[%s]]\n' "$2" \
    >> "$TUNER_SHAPES_DIR/$1.toml"
}
landscape() {  # DEVICE_ARG [sweep options...]: grid sweeps, one shape each, then the record
  local device=$1 left; shift
  local db=sqlite:///$WORK/landscape.db i=0
  local stop=$((SECONDS + LIMIT_LANDSCAPE - RECORD_S)) last=$((DEADLINE - FINAL_S - RECORD_S))
  [ "$stop" -le "$last" ] || stop=$last
  for shape in $LANDSCAPE_SHAPES; do
    i=$((i + 1)); left=$((stop - SECONDS))
    [ "$left" -ge 20 ] || { echo "landscape: no time for shape $shape"; break; }
    shapes_file "landscape-$i" "$shape"
    echo "-- grid over vLLM's space: ($shape), M=$LANDSCAPE_M, ${left} s left"
    timeout -k 5 "$left" python3 -m tuner.cli sweep --device "$device" --model "landscape-$i" \
      --tp 2 --m "$LANDSCAPE_M" --strategy grid --no-publish --db "$db" "$@" \
      || echo "-- shape $shape: exit $? (its finished (N, K, M) are kept)"
  done
  timeout -k 5 "$RECORD_S" python3 bench/record_landscape.py --device "$device" \
    --complete-only --db "$db" --out "$OUT/landscape_${DEVICE}.json" \
    || { echo "-- record_landscape.py: exit $?"; return 1; }
}
# dry_checks: on the CPU, everything up to the first step that needs CUDA, and what can be
# checked of the rest: the imports of every module the steps use, the options each command is
# given, the service, the CUDA tests' ids, a landscape rehearsed on the interpreter, the files.
dry_checks() {
  local bad=0 command options help collected
  echo; echo "== dry run: pip check (the carried set and what is installed lack nothing)"
  python3 -m pip check || bad=1
  echo "== dry run: imports (TRITON_INTERPRET unset, as on the GPU)"
  env -u TRITON_INTERPRET python3 -c "import sqlalchemy, alembic, fastapi, uvicorn, optuna, \
pydantic, pydantic_settings, typer, rich, numpy, threadpoolctl, prometheus_client, pytest
import db.connection, db.repo, api.app, tuner.cli.app, tuner.run.worker, tuner.run.supervisor
import tuner.measure.runner, tuner.measure.compile, tuner.measure.roofline, tuner.compare.versus
import tuner.compare.backends, tuner.kernels.dense.kernel, tuner.kernels.dense.workload
import tuner.kernels.moe.kernel, tuner.kernels.moe.workload, tuner.search.guided
print('imports ok: sqlalchemy', sqlalchemy.__version__, 'fastapi', fastapi.__version__, \
'optuna', optuna.__version__)" || bad=1
  python3 bench/vs_shipped.py --help > /dev/null || { echo "bench/vs_shipped.py fails"; bad=1; }
  python3 bench/record_landscape.py --help > /dev/null || { echo "bench/record_landscape.py fails"; bad=1; }
  echo "== dry run: tuner doctor (no GPU: --arch sm90; exit 1 is a finding)"
  timeout -k 5 "$LIMIT_DOCTOR" python3 -m tuner.cli doctor --arch sm90
  [ $? -le 1 ] || { echo "tuner doctor failed (exit above 1)"; bad=1; }
  echo "== dry run: each command knows the options this script gives it"
  while IFS=: read -r command options; do
    help=$(python3 -m tuner.cli $command --help 2>&1) || { echo "tuner $command: no such command"; bad=1; continue; }
    for option in $options; do
      grep -q -- "$option" <<< "$help" || { echo "tuner $command: no $option"; bad=1; }
    done
  done <<'LIST'
sweep:--device --model --tp --m --strategy --trials --no-publish --db
export:--device --out --allow-partial
winners:--device
verify:--device --model --tp --allow-partial
compare:--device --model --tp --m
doctor:--arch
LIST
  for model_tp in qwen3.8-27b:2 qwen3-30b-a3b-fp8:1 deepseek-v3:8; do
    python3 -m tuner.cli shapes show "${model_tp%:*}" --tp "${model_tp#*:}" > /dev/null \
      || { echo "no model $model_tp"; bad=1; }
  done
  [ -d "$SHIPPED_DIR/$DEVICE" ] || { echo "no $SHIPPED_DIR/$DEVICE (bench/fetch_wheels.sh)"; bad=1; }
  echo "== dry run: the service answers /health"
  python3 -m tuner.cli serve --port 18427 --db "sqlite:///$WORK/dry_serve.db" --create-store > "$WORK/serve.log" 2>&1 &
  local serve_pid=$!
  python3 -c "import time, urllib.request
for _ in range(240):  # a loaded 2-core machine took over 30 s to start it
    try:
        print('health', urllib.request.urlopen('http://127.0.0.1:18427/health').status); break
    except OSError:
        time.sleep(0.5)
else:
    raise SystemExit('the service did not answer in 120 s')" || { cat "$WORK/serve.log"; bad=1; }
  kill "$serve_pid"; wait "$serve_pid" 2>/dev/null
  echo "== dry run: the CUDA tests' ids"
  collected=$(env TRITON_INTERPRET=0 python3 -m pytest -q --collect-only -p no:cacheprovider \
    $CUDA_TESTS 2>&1 | tail -n 1)
  echo "$collected"
  grep -q "^$N_CUDA_TESTS tests collected" <<< "$collected" \
    || { echo "N_CUDA_TESTS=$N_CUDA_TESTS does not match: update it and the budget"; bad=1; }
  echo "== dry run: the landscape step rehearsed on the interpreter (tiny shapes, 3 configs)"
  python3 -c "import json; from tuner.kernels.dense.space import default_config, vllm_space
print(json.dumps([c.as_dict() for c in (default_config(), *vllm_space()[:2])]))" \
    > "$WORK/dry_configs.json"
  rm -f "$WORK/landscape.db"*
  # (a CPU interpreter trial takes seconds: the rehearsal gets more time than the GPU's step)
  DEVICE=TRITON_INTERPRETER LANDSCAPE_SHAPES="256,384 576,256" LANDSCAPE_M=1,16 \
    LIMIT_LANDSCAPE=400 DEADLINE=$((SECONDS + 600)) landscape interpreter --configs "$WORK/dry_configs.json" || bad=1
  # The real landscape's size, from the rehearsal's bytes per row.
  python3 -c "import json, os, sys
path, problems = sys.argv[1], int(sys.argv[2]) * int(sys.argv[3])
rows = sum(len(p['rows']) for p in json.load(open(path))['problems'])
size = os.path.getsize(path) / rows * 1280 * problems
print(f'landscape: {problems} (N, K, M) x 1,280 configs would be {size / 2**20:.1f} MiB')
sys.exit(size > 16 * 2**20)" "$OUT/landscape_TRITON_INTERPRETER.json" \
    "$(wc -w <<< "$LANDSCAPE_SHAPES")" "$(count "$LANDSCAPE_M")" || bad=1
  echo "== dry run: the files that would come back"
  check_out "$OUT" gpu_check.db configs.zip "landscape_$DEVICE.json" \
    $([ "$DEEPSEEK" = 1 ] && echo "vs_shipped_$DEVICE.json") || bad=1
  [ "$bad" = 0 ] && echo "dry run passed" || echo "dry run FAILED (lines above)"
  return $bad
}

if [ "$DRY_RUN" = 1 ]; then
  dry_checks; rc=$?
  exec >&- 2>&-; wait "$LOG_PID"; exit $rc
fi

if [ "$DOCTOR" = 1 ]; then  # whatever its exit, the steps go on
  step "tuner doctor (the visible GPU)" "$LIMIT_DOCTOR" python3 -m tuner.cli doctor
  [ $? = 1 ] && echo "(exit 1 is doctor's finding, not a failure: the steps go on)"
fi
[ "$TESTS" = 1 ] && step "CUDA kernel and timing tests" "$LIMIT_TESTS" env TRITON_INTERPRET=0 \
  python3 -m pytest -q -x -p no:cacheprovider $CUDA_TESTS
if [ "$LANDSCAPE" = 1 ]; then  # its sweeps and record keep to LIMIT_LANDSCAPE themselves
  echo; echo "== landscape ($LANDSCAPE_SHAPES), M=$LANDSCAPE_M (limit $LIMIT_LANDSCAPE s)"
  landscape "$DEVICE"
fi
if [ "$SWEEP" = 1 ]; then
  step "sweep qwen3.8-27b TP2, M=$M_VALUES, $TRIALS trials" "$LIMIT_SWEEP" python3 -m tuner.cli \
    sweep --device "$DEVICE" --model qwen3.8-27b --tp 2 --m "$M_VALUES" --trials "$TRIALS"
  save_store
  step "export and winners" "$LIMIT_EXPORT" bash -c "python3 -m tuner.cli export --device \
'$DEVICE' --out '$WORK/configs' --allow-partial && python3 -m zipfile -c '$OUT/configs.zip' \
'$WORK/configs' && python3 -m tuner.cli winners --device '$DEVICE'"
  step "verify qwen3.8-27b TP2" "$LIMIT_VERIFY" python3 -m tuner.cli verify --device "$DEVICE" \
    --model qwen3.8-27b --tp 2 --allow-partial
  step "compare qwen3.8-27b TP2, M=$COMPARE_M" "$LIMIT_COMPARE" python3 -m tuner.cli compare \
    --device "$DEVICE" --model qwen3.8-27b --tp 2 --m "$COMPARE_M"
fi
if [ "$MOE" = 1 ]; then
  step "sweep qwen3-30b-a3b-fp8 TP1 (MoE E=128 N=768), M=$MOE_M" "$LIMIT_MOE" python3 -m \
    tuner.cli sweep --device "$DEVICE" --model qwen3-30b-a3b-fp8 --tp 1 --m "$MOE_M" \
    --trials "$MOE_TRIALS" --no-publish
  save_store
  step "MoE winners: speedup over vLLM's default per M" "$LIMIT_MOE_WINNERS" bash -c \
    "python3 -m tuner.cli winners --device '$DEVICE' | grep -E '^ *kernel|^moe'"
fi
if [ "$DEEPSEEK" = 1 ]; then
  step "sweep deepseek-v3 TP8 at M=$DS_M" "$LIMIT_DEEPSEEK" python3 -m tuner.cli sweep \
    --device "$DEVICE" --model deepseek-v3 --tp 8 --m "$DS_M" --trials "${DS_TRIALS:-48}"
  save_store
  step "vs_shipped deepseek-v3 TP8" "$LIMIT_VS_SHIPPED" python3 bench/vs_shipped.py --device \
    "$DEVICE" --tp 8 --m "$DS_M" --shipped-dir "$SHIPPED_DIR" --out "$OUT/vs_shipped_$DEVICE.json"
fi
save_store
check_out "$OUT"
echo "gpu_check done in $SECONDS s"
exec >&- 2>&-; wait "$LOG_PID"
