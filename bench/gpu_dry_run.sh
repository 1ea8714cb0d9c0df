#!/usr/bin/env bash
# bench/gpu_check.sh proven on a CPU machine before it runs on a GPU host. In order:
#   1. bench/fetch_wheels.sh: the carried set for the GPU machine's Python 3.12 (.whl/, pins).
#   2. The same pins for Python 3.11 (.whl-py311/): every carried version has a 3.11 wheel too.
#   3. Python 3.12 (pyenv's, no torch): a venv with only numpy, as the GPU image has it; the
#      .whl/ set installed exactly as the GPU script does (--no-index --no-deps --target), then
#      `pip check` (no carried package lacks a dependency) and the imports of the store, the
#      service and the CLI's modules that need no torch.
#   4. A fresh Python 3.11 venv with only torch 2.13.0 (CPU), Triton 3.6.0, numpy and pytest
#      (what the GPU image has; the project is not installed), then
#      `bench/gpu_check.sh --dry-run` with the 3.11 wheels: the same install into a target
#      folder, every step up to the first that needs CUDA (`tuner doctor` with --arch sm90
#      in place of the visible GPU), the budget, the files that come back.
# Prints "gpu dry run passed" or the first failure; about 4 min on 2 cores (venv built afresh),
# 7.5 min with the 2 cores shared.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-/tmp/gpu-dry-venv}            # step 4's venv, rebuilt unless REUSE=1
VENV312=${VENV312:-/tmp/gpu-dry-py312}     # step 3's venv
# (pyenv's own binary first: its shim fails where 3.12 is not the selected version)
PY312=${PY312:-$(ls "$HOME"/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null | head -n 1)}
PY312=${PY312:-$(command -v python3.12)}
DRY=${DRY:-/tmp/gpu-dry}                   # OUT, WORK and SITE of the dry run
fail() { echo "gpu dry run FAILED: $*"; exit 1; }
pipq() { "$@" 2>&1 | grep -v '^WARNING: Location' ; return "${PIPESTATUS[0]}"; }

echo "== 1. wheels for Python 3.12"
pipq bash bench/fetch_wheels.sh || fail "bench/fetch_wheels.sh"
echo "== 2. the same pins for Python 3.11"
WHEEL_PY=3.11 WHEEL_DIR=.whl-py311 PINS=.whl/pins.txt pipq bash bench/fetch_wheels.sh \
  || fail "a pinned version has no Python 3.11 wheel"
cmp -s .whl/pins.txt .whl-py311/pins.txt || fail "the 3.11 set differs from the 3.12 pins"

echo "== 3. Python 3.12: the carried set installs and is complete"
[ -n "$PY312" ] && "$PY312" -c "" 2>/dev/null || fail "no Python 3.12 here (pyenv install 3.12, or set PY312)"
if [ ! -x "$VENV312/bin/python" ]; then
  "$PY312" -m venv "$VENV312" && pipq "$VENV312/bin/pip" install -q "numpy>=2.5" \
    || fail "a Python 3.12 venv with numpy"
fi
rm -rf "$DRY/site312" "$DRY/py312.db" "$DRY/py312.db-wal" "$DRY/py312.db-shm"  # a store left by an earlier run may be at an older schema
"$VENV312/bin/python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
  --upgrade --target "$DRY/site312" .whl/*.whl || fail "the .whl set does not install on 3.12"
PYTHONPATH=$DRY/site312:$PWD "$VENV312/bin/python" -m pip check \
  || fail "a carried package lacks a dependency on Python 3.12"
PYTHONPATH=$DRY/site312:$PWD "$VENV312/bin/python" -c "import sqlalchemy, alembic, fastapi, \
uvicorn, optuna, pydantic_core, pydantic_settings, typer, rich
import db.connection, db.repo, api.app, tuner.files.merge
from db.connection import open_store
open_store('sqlite:///$DRY/py312.db').dispose()
import sys; print('python', sys.version.split()[0], 'store and service import, schema created')" \
  || fail "the store or the service on Python 3.12"

echo "== 4. Python 3.11, torch + Triton 3.6 only: bench/gpu_check.sh --dry-run"
if [ "${REUSE:-0}" != 1 ] || [ ! -x "$VENV/bin/python" ]; then
  rm -rf "$VENV"
  python3 -m venv "$VENV" && pipq "$VENV/bin/pip" install -q torch==2.13.0 \
    && pipq "$VENV/bin/pip" install -q triton==3.6.0 "numpy>=2.4" pytest \
    || fail "the dry run's venv"
fi
rm -rf "$DRY/out" "$DRY/work" "$DRY/site"
PATH=$VENV/bin:$PATH OUT=$DRY/out WORK=$DRY/work SITE=$DRY/site WHEELS=.whl-py311 \
  bash bench/gpu_check.sh --dry-run || fail "bench/gpu_check.sh --dry-run (above; log in $DRY/out)"
echo "gpu dry run passed"
