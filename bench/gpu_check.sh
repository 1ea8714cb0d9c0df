#!/usr/bin/env bash
# GPU check of issues 2-4, run on a lent GPU machine through the device tool:
#   kernel tests on CUDA; a sweep of the Qwen3.8-27B TP2 shapes with the default strategy (the
#   closing line gives trials run/pruned, compile vs measure seconds, wall); export and the
#   per-M speedup table; `tuner verify` (vLLM's pick vs the default, on and off the grid); a
#   `tuner compare` of the same shapes (issue 13); a fused-MoE sweep of Qwen3-30B-A3B-FP8 TP1
#   (E=128, N=768) with the per-M speedup over vLLM's get_default_config (issue 11, MOE=0 skips
#   it); a DeepSeek-V3 sweep at a few M and
#   `bench/vs_shipped.py` (ours vs vLLM 0.33.0's shipped file vs
#   the default, interleaved), with roofline ratios.
# The machine has torch and triton preinstalled; the rest travels as wheels in .whl/, made here by
# bench/fetch_wheels.sh (then call the device tool with carry [".whl"]). vs_shipped reads the
# shipped files from shared/fixtures/vllm-0.33.0 (copy them into an ignored folder that travels,
# and pass SHIPPED_DIR). Every step has its own time limit, so one slow step cannot eat the rest,
# and all of them together stay inside TOTAL_S (a step gets what is left when that is less), so
# the script ends before the device tool's 600 s per command: call it with timeout_s 600. Results
# land in $OUT (the device tool's output folder).
set -uo pipefail
M_VALUES=${M_VALUES:-1,16,32,256,2048,4096}
TRIALS=${TRIALS:-128}
OUT=${OUT:-out}
SWEEP_S=${SWEEP_S:-180}
TOTAL_S=${TOTAL_S:-540}  # the whole script, wheels' install included
DEADLINE=$((SECONDS + TOTAL_S))
SHIPPED_DIR=${SHIPPED_DIR:-../shared/fixtures/vllm-0.33.0}
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1 TUNER_DB_URL=${TUNER_DB_URL:-sqlite:///$OUT/gpu_check.db}
mkdir -p "$OUT"
# step NAME LIMIT_S COMMAND...: run under the smaller of LIMIT_S and the time left before DEADLINE.
step() {
  local name=$1 limit=$2 left=$((DEADLINE - SECONDS)); shift 2
  if [ "$left" -lt 15 ]; then echo; echo "== $name: skipped, ${left} s left of TOTAL_S"; return; fi
  [ "$left" -lt "$limit" ] && limit=$left
  echo; echo "== $name (limit $limit s)"; timeout "$limit" "$@" || echo "step exited $?"
}
DEVICE=$(python3 -c "import torch; from tuner.inputs.devices import vllm_device_name; print(vllm_device_name(torch.cuda.get_device_name()))")
python3 -c "import torch, triton; print('gpu', torch.cuda.get_device_name(), 'torch', torch.__version__, 'triton', triton.__version__)"
# The kernel on the real GPU against the float64 reference (the same cases as under the interpreter),
# and the timing method's tests.
step "kernel and timing tests on CUDA" 150 env TRITON_INTERPRET=0 python3 -m pytest -q -x \
  -p no:cacheprovider tests/tuner/kernels/test_kernel.py tests/tuner/kernels/test_target.py tests/tuner/measure/test_timing.py \
  "tests/tuner/measure/test_measure.py::test_graph_replays_on_a_gpu_write_the_right_result_into_every_copy"
step "sweep qwen3.8-27b TP2, M=$M_VALUES, $TRIALS trials" "$SWEEP_S" \
  python3 -m tuner.cli sweep --device "$DEVICE" --model qwen3.8-27b --tp 2 --m "$M_VALUES" \
  --trials "$TRIALS"
step "export and winners" 60 bash -c "python3 -m tuner.cli export --device '$DEVICE' \
  --out '$OUT/configs' --allow-partial && python3 -m tuner.cli winners --device '$DEVICE'"
step "verify qwen3.8-27b TP2" 90 python3 -m tuner.cli verify --device "$DEVICE" \
  --model qwen3.8-27b --tp 2 --m "$M_VALUES" --allow-partial
# Issue 13: tuned Triton vs vLLM's default config, torch's block-wise scaled_mm and vLLM's ops
# (when importable), at the decode and prefill M of the issue.
step "compare qwen3.8-27b TP2, M=${COMPARE_M:-1,16,32,2048,4096}" 120 python3 -m tuner.cli \
  compare --device "$DEVICE" --model qwen3.8-27b --tp 2 --m "${COMPARE_M:-1,16,32,2048,4096}"
# Issue 11: the fused-MoE experts of Qwen3-30B-A3B-FP8 at TP1; `tuner winners` prints each M's
# winner against vLLM's per-M default config (the speedup column), MoE rows only.
MOE_M=${MOE_M:-1,16,64,256,1024,4096}
if [ "${MOE:-1}" = 1 ]; then
  step "sweep qwen3-30b-a3b-fp8 TP1 (MoE E=128 N=768), M=$MOE_M" "${MOE_S:-150}" \
    python3 -m tuner.cli sweep --device "$DEVICE" --model qwen3-30b-a3b-fp8 --tp 1 --m "$MOE_M" \
    --trials "${MOE_TRIALS:-32}" --no-publish
  step "MoE winners: speedup over vLLM's default per M" 30 bash -c "COLUMNS=200 python3 -m \
    tuner.cli winners --device '$DEVICE' | grep -E '^ *kernel|^moe'"
fi
if [ "${DEEPSEEK:-1}" = 1 ]; then
  step "sweep deepseek-v3 TP8 at M=${DS_M:-1,64,4096}" 120 python3 -m tuner.cli sweep \
    --device "$DEVICE" --model deepseek-v3 --tp 8 --m "${DS_M:-1,64,4096}" --trials "${DS_TRIALS:-48}"
  step "vs_shipped deepseek-v3 TP8" 120 python3 bench/vs_shipped.py --device "$DEVICE" \
    --tp 8 --m "${DS_M:-1,64,4096}" --shipped-dir "$SHIPPED_DIR" --out "$OUT/vs_shipped_$DEVICE.json"
fi
cp -f "${TUNER_DB_URL#sqlite:///}" "$OUT/" 2>/dev/null || true
