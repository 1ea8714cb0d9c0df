#!/usr/bin/env bash
# Make what bench/gpu_check.sh needs on a GPU check host without a package registry, in the
# repo root; copy both folders to the host beside the repository:
#   .whl/      the wheels of the project's own dependencies (pyproject.toml [project]
#              dependencies, resolved with their dependencies by pip for Python 3.11, the oldest
#              the project supports, and downloaded for that machine's Python 3.12 on x86-64),
#              less numpy (the host has numpy 2.5.2;
#              torch and triton are there too and are not core dependencies); old wheels cleared
#              first, so there is one version of each (two abort the whole install).
#   .whl/pins.txt  name==version of every carried wheel: the resolution, kept with the wheels.
#   .shipped/vllm-0.33.0/<device_name>/  vLLM 0.33.0's shipped dense block-FP8 configs, one
#              folder per device, taken from its wheel (tests/engines/fetch_engines.sh downloads
#              it once, without dependencies), for bench/vs_shipped.py.
# WHEEL_PY=3.11 makes the same pinned set for Python 3.11 into $WHEEL_DIR (bench/gpu_dry_run.sh
# installs that here, where the Python is 3.11). Both folders are ignored by git.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEEL_PY=${WHEEL_PY:-3.12}    # the GPU check host's Python
WHEEL_DIR=${WHEEL_DIR:-.whl}  # where the wheels go
PINS=${PINS:-}                # an existing pins file to download (default: resolve afresh)
PROVIDED="numpy"              # on the GPU check host in a version that satisfies us
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
           --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
           --platform manylinux1_x86_64)
exclude=$(git rev-parse --git-path info/exclude)  # .git is a file in a worktree
mkdir -p "$(dirname "$exclude")"
for ignored in /.whl/ /.whl-py311/ /.shipped/; do
  grep -qx "$ignored" "$exclude" 2>/dev/null || echo "$ignored" >> "$exclude"
done
mkdir -p "$WHEEL_DIR"
rm -f "$WHEEL_DIR"/*.whl "$WHEEL_DIR"/pins.txt
download() {  # into folder $1 for Python $2, then pip's arguments
  local folder=$1 python=$2; shift 2
  python3 -m pip download -q --only-binary=:all: --python-version "$python" \
    --implementation cp "${PLATFORMS[@]}" -d "$folder" "$@"
}
pins() {  # name==version of each wheel in folder $1 (PEP 427: {name}-{version}-...)
  for wheel in "$1"/*.whl; do
    base=$(basename "$wheel"); echo "${base%%-*}==$(echo "$base" | cut -d- -f2)"
  done | sort
}
if [ -z "$PINS" ]; then
  # The project's own requirement list, read from its metadata (never a hand-kept list),
  # resolved for the oldest Python it supports (requires-python >= 3.11): a newer release may
  # drop that Python's wheels, and the pins must install on 3.11 and 3.12 alike.
  resolved=$(mktemp -d)
  python3 -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))\
['project']['dependencies']))" > "$resolved/requirements.txt"
  download "$resolved" 3.11 -r "$resolved/requirements.txt"
  PINS="$resolved/pins.txt"
  pins "$resolved" > "$PINS"
fi
download "$WHEEL_DIR" "$WHEEL_PY" --no-deps -r "$PINS"
rm -rf "${resolved:-}"
for name in $PROVIDED; do rm -f "$WHEEL_DIR/$name"-[0-9]*.whl; done
pins "$WHEEL_DIR" > "$WHEEL_DIR/pins.txt"
dupes=$(cut -d= -f1 "$WHEEL_DIR/pins.txt" | tr 'A-Z-' 'a-z_' | sort | uniq -d)
[ -z "$dupes" ] || { echo "error: two versions of $dupes in $WHEEL_DIR" >&2; exit 1; }
if [ "$WHEEL_DIR" = .whl ]; then
  engines=$(bash tests/engines/fetch_engines.sh)
  rm -rf .shipped && python3 - "$engines" <<'PY'
import re, sys, zipfile
from pathlib import Path
# vLLM 0.33.0 keeps its dense files in model_executor/layers/quantization/utils/configs/.
folder = "vllm/model_executor/layers/quantization/utils/configs/"
wheel = sorted(Path(sys.argv[1]).glob("vllm-0.33.0-*.whl"))[0]
with zipfile.ZipFile(wheel) as archive:
    for member in archive.namelist():
        name = member.removeprefix(folder)
        device = re.search(r",device_name=([^,]+),", name)
        if member.startswith(folder) and "/" not in name and device:
            out = Path(".shipped/vllm-0.33.0") / device[1] / name
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(archive.read(member))
PY
fi
echo "$(wc -l < "$WHEEL_DIR/pins.txt") wheels for Python $WHEEL_PY in $WHEEL_DIR" \
  "($(du -sh "$WHEEL_DIR" | cut -f1)): $(tr '\n' ' ' < "$WHEEL_DIR/pins.txt")"
