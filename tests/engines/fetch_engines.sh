#!/usr/bin/env bash
# Fetch the engine releases the real-engine lane (tests/engines) reads: the vLLM 0.33.0 and
# SGLang 0.5.23 wheels alone, without their dependencies (`pip download --no-deps`).
#
#   bash tests/engines/fetch_engines.sh      # then: export TUNER_ENGINE_WHEELS=<the folder printed>
#
# The folder is $TUNER_ENGINE_WHEELS when set, else ${XDG_CACHE_HOME:-$HOME/.cache}/
# blockfp8-tuner/engines, kept between runs: a wheel already there is not fetched again (no
# network then). Prints the folder on success; on a failed download, one line on stderr and
# exit 1. PYTHON names the interpreter whose pip downloads (default python3).
set -uo pipefail
DIR="${TUNER_ENGINE_WHEELS:-${XDG_CACHE_HOME:-$HOME/.cache}/blockfp8-tuner/engines}"
PYTHON="${PYTHON:-python3}"
RELEASES=(vllm==0.33.0 sglang==0.5.23)
# The lane reads only their Python sources, so the same wheel is fetched on any host: CPython
# 3.11 on x86-64 Linux picks vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl and
# sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl (the tags each release has on PyPI).
TAGS=(--only-binary=:all: --implementation cp --python-version 3.11
      --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64)

mkdir -p "$DIR" 2> /dev/null || { echo "fetch_engines: cannot create $DIR" >&2; exit 1; }
for release in "${RELEASES[@]}"; do
  name=${release%%==*} version=${release##*==}
  if compgen -G "$DIR/$name-$version-*.whl" > /dev/null; then
    continue
  fi
  # Into a scratch folder first, then renamed: an interrupted download leaves no half wheel.
  scratch=$(mktemp -d "$DIR/.download-XXXXXX") && log="$scratch/pip.log"
  if ! "$PYTHON" -m pip download --no-deps "${TAGS[@]}" --dest "$scratch" --quiet "$release" \
      > "$log" 2>&1 || ! compgen -G "$scratch/$name-$version-*.whl" > /dev/null; then
    why=$(grep -v '^WARNING' "$log" | grep . | tail -n 1)
    rm -rf "$scratch"
    echo "fetch_engines: cannot download $release into $DIR: ${why:-pip saved no wheel}" >&2
    exit 1
  fi
  mv "$scratch/$name-$version-"*.whl "$DIR/" && rm -rf "$scratch"
done
echo "$DIR"
