#!/usr/bin/env bash
# The kernel, measure and end-to-end tests on each supported Triton other than CI's:
# CI runs the default versions (torch 2.13.0 + the newest Triton the range allows); this runs
# the same tests on Triton 3.6 (the GPU check host's) and 3.8 (what vLLM 0.33.0's torch 2.14
# pins), each in its own venv outside the repo with torch 2.13.0 (CPU) and numpy >= 2.4 (the GPU
# machine has 2.5; Python 3.11 here gets 2.4, which already refuses what broke Triton 3.6).
# Prints one summary line per Triton. About 1 min per version on 2 cores (pytest -n auto) once
# its venv is built.
#   bash bench/triton_matrix.sh                 # 3.6.0 and 3.8.0
#   TRITONS="3.7.1" bash bench/triton_matrix.sh # any other release
set -uo pipefail
cd "$(dirname "$0")/.."
TRITONS=${TRITONS:-3.6.0 3.8.0}       # Triton releases to test
TORCH=${TORCH:-2.13.0}                # the CPU torch CI uses
VENV_ROOT=${VENV_ROOT:-/tmp}          # venvs go to $VENV_ROOT/venv-triton-<version>
TESTS=${TESTS:-tests/tuner/kernels tests/tuner/measure tests/cli/test_e2e.py tests/cli/test_moe_sweep.py}
status=0
summary=()
for version in $TRITONS; do
  venv=$VENV_ROOT/venv-triton-$version
  if ! "$venv/bin/python" -c "import triton, sys; sys.exit(triton.__version__ != '$version')" \
      2>/dev/null; then
    rm -rf "$venv"
    python3 -m venv "$venv" && "$venv/bin/pip" install -q "torch==$TORCH" \
      && "$venv/bin/pip" install -q "triton==$version" "numpy>=2.4" \
      && "$venv/bin/pip" install -q -e ".[kernel,dev,postgres]" \
      || { echo "triton $version: venv build failed"; status=1; continue; }
  fi
  versions=$("$venv/bin/python" -c "import numpy, torch, triton; print(f'torch {torch.__version__}, \
triton {triton.__version__}, numpy {numpy.__version__}')")
  echo "== $versions: $TESTS"
  log=$(mktemp)
  # shellcheck disable=SC2086  # TESTS is a list of paths
  "$venv/bin/python" -m pytest -q -n auto -p no:cacheprovider $TESTS 2>&1 | tee "$log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  summary+=("$versions: $(tail -n 1 "$log")")
  rm -f "$log"
done
echo
printf '%s\n' "${summary[@]}"
exit $status
