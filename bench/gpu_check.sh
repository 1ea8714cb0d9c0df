#!/usr/bin/env bash
# GPU check for the main job (issue 2), run on a lent GPU machine through the device tool:
#   installs the carried wheels (.whl/), sweeps the Qwen3.8-27B TP2 shapes, exports the files and
#   prints the per-M speedup of the winners over vLLM's default config.
# The machine has torch and triton preinstalled; the rest travels as wheels in .whl/, made here by
# bench/fetch_wheels.sh (then call the device tool with carry [".whl"]). Sized for ~10 minutes on
# one H200; override with env vars.
set -euo pipefail
M_VALUES=${M_VALUES:-1,16,32,2048,4096}
TRIALS=${TRIALS:-40}
MODEL=${MODEL:-qwen3.8-27b}
TP=${TP:-2}
OUT=${OUT:-out}
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1 TUNER_DB_URL=${TUNER_DB_URL:-sqlite:///$OUT/gpu_check.db}
mkdir -p "$OUT"
DEVICE=$(python3 -c "import torch; from tuner.devices import vllm_device_name; print(vllm_device_name(torch.cuda.get_device_name()))")
python3 -c "import torch, triton; print('gpu', torch.cuda.get_device_name(), 'torch', torch.__version__, 'triton', triton.__version__)"
# The kernel on the real GPU against the float64 reference (the same cases as under the interpreter).
TRITON_INTERPRET=0 timeout 300 python3 -m pytest -q -p no:cacheprovider tests/tuner/test_kernel.py \
  | tail -3
start=$(date +%s)
python3 -m tuner.cli sweep --device "$DEVICE" --model "$MODEL" --tp "$TP" --m "$M_VALUES" \
  --strategy "${STRATEGY:-local}" --trials "$TRIALS"
echo "sweep wall time: $(( $(date +%s) - start )) s"
python3 -m tuner.cli export --device "$DEVICE" --out "$OUT/configs"
python3 -m tuner.cli winners --device "$DEVICE"
# Compile-for-target pruning with this host's Triton (issue 3): configs of vLLM's space for this
# GPU's architecture, compile seconds per config on this host's cores; result in bench/results/.
if [ "${COMPILE_PRUNE:-1}" = 1 ]; then
  ARCH=$(python3 -c "import torch; major, minor = torch.cuda.get_device_capability(); print(major * 10 + minor)")
  TUNER_CACHE_DIR="$OUT/cache" timeout 300 python3 bench/compile_prune.py --arch "$ARCH" \
    --limit "${PRUNE_LIMIT:-1280}" --out-dir "$OUT" || echo "compile_prune did not finish within 300 s"
fi
