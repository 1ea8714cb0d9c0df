#!/usr/bin/env bash
# Download the wheels the lent GPU machine lacks (it has torch, triton, typer, rich, click and
# prometheus-client, and no package registry) into .whl/, for bench/gpu_check.sh to install.
# Run here, in the repo root, before calling the device tool with carry [".whl"].
# Target: that machine's Python 3.12 on x86-64 (/work/.library/device/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
  sqlalchemy alembic mako fastapi starlette uvicorn pydantic pydantic-core pydantic-settings \
  python-dotenv annotated-types typing-inspection optuna colorlog greenlet typing-extensions \
  opentelemetry-api importlib-metadata threadpoolctl
ls .whl
