#!/usr/bin/env bash
# The tuner inside a full vLLM 0.33.0 install: run it whenever code that faces vLLM changes.
#
#   bash bench/real_vllm.sh [VENV]        # or REAL_VLLM_VENV=/path bash bench/real_vllm.sh
#
# VENV is a virtual environment holding the full `pip install vllm==0.33.0` (about 9.5 GB and
# 15 minutes to build); it is reused when it has vLLM 0.33.0, else built there. Default:
# $XDG_CACHE_HOME/blockfp8-tuner/vllm-0.33.0 (~/.cache/... without XDG_CACHE_HOME).
# The tuner is installed into it editable (`--no-deps`), then only the requirements of the
# tuner that are not installed at all, under a constraints file of the venv's own versions,
# so no pin of vLLM's moves; `pip check` then says whether the two agree.
#
# Steps, each under its own time limit (STEP_S, default 900 s; the build 3600 s), one line per
# failure, exit 1 when a step fails:
#   pip_check; facts (bench/real_vllm_facts.py: the stand-in's and the table's facts against
#   the installed vLLM); doctor_sm89, doctor_sm90, doctor_sm100 (`tuner doctor --arch`, exit 0
#   or 1 are both answers), doctor_sm90_real_triton (with CUDA_VISIBLE_DEVICES="", under which
#   vLLM keeps the real Triton, so doctor names vLLM's kernels as those a sweep would time);
#   interpreter sweeps of tiny (dense) and tiny-moe (MoE) with --kernel vllm (on a host without
#   an active GPU driver: its refusal, exit 2, is the answer), --kernel vllm under
#   CUDA_VISIBLE_DEVICES="", --kernel auto and --kernel builtin (each must publish its files);
#   `tuner compare` on the builtin sweep's store; bench/vllm_equivalence.py and
#   bench/moe_fidelity.py against the venv's vLLM files (a step fails unless every compiled
#   pair is the same code).
# Writes bench/results/real_vllm_<date>.json: versions, date, and per step its command, exit
# code, seconds and key lines. WORK (default a fresh temporary folder) keeps the logs and
# stores; CONFIGS (default 4) and MOE_SHAPES (default 2) size the fidelity benches.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${1:-${REAL_VLLM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/blockfp8-tuner/vllm-0.33.0}}
VLLM_VERSION=0.33.0
STEP_S=${STEP_S:-900}
BUILD_S=${BUILD_S:-3600}
CONFIGS=${CONFIGS:-4}
MOE_SHAPES=${MOE_SHAPES:-2}
WORK=${WORK:-$(mktemp -d /tmp/real_vllm.XXXXXX)}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RESULT=bench/results/real_vllm_$STAMP.json
mkdir -p "$WORK/logs" bench/results
STEPS="$WORK/steps.jsonl"
: > "$STEPS"
FAILURES=0
export VLLM_CONFIGURE_LOGGING=0   # vLLM's INFO lines stay out of the logs' key lines

# record NAME RC SECONDS KEY_REGEX LOG COMMAND...: one JSON line per step.
record() {
    local name=$1 rc=$2 seconds=$3 keys=$4 log=$5; shift 5
    python3 - "$name" "$rc" "$seconds" "$keys" "$log" "$*" >> "$STEPS" <<'EOF'
import json, re, sys
name, rc, seconds, keys, log, command = sys.argv[1:]
lines = [l.rstrip() for l in open(log, errors="replace")
         if l.strip() and not re.match(r"^[WI]\d{4} |.*(UserWarning|warn_once|_C')", l)]
key = [l for l in lines if keys and re.search(keys, l)][:20]
print(json.dumps({"step": name, "command": command, "rc": int(rc), "seconds": float(seconds),
                  "key_lines": key, "tail": lines[-5:]}))
EOF
}

# fail NAME WHY: one line on stderr, counted.
fail() {
    echo "FAIL $1: $2" >&2
    FAILURES=$((FAILURES + 1))
    python3 - "$STEPS" "$1" "$2" <<'EOF'
import json, sys
path, name, why = sys.argv[1:]
rows = [json.loads(l) for l in open(path)]
for row in rows:
    if row["step"] == name:
        row["failure"] = why
open(path, "w").write("".join(json.dumps(r) + "\n" for r in rows))
EOF
}

# step NAME LIMIT_S OK_CODES KEY_REGEX -- COMMAND...: run it under its limit; RC and LOG set.
step() {
    local name=$1 limit=$2 ok=$3 keys=$4; shift 5
    LOG="$WORK/logs/$name.log"
    local start=$SECONDS
    echo "== $name: $*" >&2
    timeout --kill-after=10 "$limit" "$@" > "$LOG" 2>&1
    RC=$?
    record "$name" "$RC" "$((SECONDS - start))" "$keys" "$LOG" "$@"
    if [ "$RC" = 124 ] || [ "$RC" = 137 ]; then
        fail "$name" "ran past its ${limit} s limit"
        return 1
    fi
    case " $ok " in
        *" $RC "*) return 0 ;;
    esac
    local why
    why=$(grep -v '^W[0-9]\{4\} ' "$LOG" | grep -E 'error|Error|FAIL' | tail -1)
    [ -n "$why" ] || why=$(grep -v '^W[0-9]\{4\} ' "$LOG" | grep -v '^\s*$' | tail -1)
    fail "$name" "exit $RC: $(echo "$why" | cut -c1-300)"
    return 1
}

# --- the venv -------------------------------------------------------------------------------
PY="$VENV/bin/python"
if [ -x "$PY" ] && [ "$("$PY" -c 'import importlib.metadata as m; print(m.version("vllm"))' 2>/dev/null)" = "$VLLM_VERSION" ]; then
    echo "reusing $VENV (vLLM $VLLM_VERSION)" >&2
else
    step build_venv "$BUILD_S" 0 "Successfully installed|ERROR" -- bash -c \
        "python3 -m venv '$VENV' && '$VENV/bin/pip' install -q 'vllm==$VLLM_VERSION'" \
        || { echo "FAIL: no vLLM $VLLM_VERSION venv at $VENV" >&2; exit 1; }
fi
SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
TUNER="$VENV/bin/tuner"

# The tuner beside vLLM: editable, no dependencies; then the tuner's requirements that are not
# installed at all, each held to the venv's versions of everything else (a constraints file),
# so nothing of vLLM's moves. A requirement installed at another version than the tuner asks
# is left for pip check to report.
"$VENV/bin/pip" freeze --exclude-editable > "$WORK/constraints.txt"
cat > "$WORK/missing.py" <<'EOF'
import importlib.metadata as m, re, sys
missing = []
for line in m.requires("blockfp8-tuner") or ():
    if ";" in line:  # an extra's requirement
        continue
    name = re.match(r"[A-Za-z0-9_.-]+", line).group(0)
    try:
        m.version(name)
    except m.PackageNotFoundError:
        missing.append(line)
open(sys.argv[1], "w").write("".join(f"{line}\n" for line in missing))
print(f"missing: {', '.join(missing) or 'none'}")
EOF
step install_tuner "$STEP_S" 0 "^(missing|Successfully installed|ERROR)" -- bash -c "
    '$VENV/bin/pip' install -q --no-deps -e '$ROOT' &&
    '$PY' '$WORK/missing.py' '$WORK/missing.txt' &&
    if [ -s '$WORK/missing.txt' ]; then
        '$VENV/bin/pip' install -c '$WORK/constraints.txt' -r '$WORK/missing.txt'; fi"
"$VENV/bin/pip" freeze --exclude-editable > "$WORK/after.txt"
moved=$(diff "$WORK/constraints.txt" "$WORK/after.txt" | grep '^<' | cut -c3- | tr '\n' ' ')
[ -z "$moved" ] || fail install_tuner "moved installed packages: $moved"

step pip_check "$STEP_S" 0 "." -- "$VENV/bin/pip" check
step facts "$STEP_S" 0 "^(ok|FAIL|skip|all facts|[0-9]+ fact)" -- "$PY" bench/real_vllm_facts.py

# --- doctor ---------------------------------------------------------------------------------
DOCTOR_KEYS="^(vLLM |dense block-FP8|fused-MoE|  passed over|  other shapes|  [a-z0-9.-]+ TP [0-9]+:|builtin vs|no --model|model type|vLLM's own|tuning here)"
for arch in sm89 sm90 sm100; do
    step "doctor_$arch" "$STEP_S" "0 1" "$DOCTOR_KEYS" -- "$TUNER" doctor --arch "$arch" \
        --model deepseek-v3 --tp 8
done
step doctor_sm90_real_triton "$STEP_S" "0 1" "$DOCTOR_KEYS" -- env CUDA_VISIBLE_DEVICES= \
    "$TUNER" doctor --arch sm90

# --- sweeps on the interpreter ----------------------------------------------------------------
SWEEP_KEYS="^(error|note|published|sweep [0-9]+ \(new\)|sweep [0-9]+: [0-9]+/|[0-9]+ trials run)"
for model in tiny tiny-moe; do
    common=(sweep --device interpreter --model "$model" --m 1 --trials 4 --interpreter-reps 1)
    if step "sweep_${model}_vllm" "$STEP_S" "0 2" "$SWEEP_KEYS" -- "$TUNER" "${common[@]}" \
            --kernel vllm --db "sqlite:///$WORK/${model}_vllm.db" && [ "$RC" = 2 ]; then
        grep -q "replaces triton with a placeholder" "$LOG" \
            || fail "sweep_${model}_vllm" "exit 2 without the driverless-host line"
    fi
    step "sweep_${model}_vllm_real_triton" "$STEP_S" 0 "$SWEEP_KEYS" -- env \
        CUDA_VISIBLE_DEVICES= "$TUNER" "${common[@]}" --kernel vllm \
        --db "sqlite:///$WORK/${model}_vllm_real.db"
    for kernel in auto builtin; do
        if step "sweep_${model}_$kernel" "$STEP_S" 0 "$SWEEP_KEYS" -- "$TUNER" "${common[@]}" \
                --kernel "$kernel" --db "sqlite:///$WORK/${model}_$kernel.db"; then
            grep -q "^published " "$LOG" || fail "sweep_${model}_$kernel" "published nothing"
        fi
    done
done

step compare "$STEP_S" 0 "^(note|tuned|\* vLLM|vLLM's|not timed|--linear-backend|  M=|stored)" \
    -- "$TUNER" compare --device interpreter --model tiny --m 1 --rounds 2 \
    --db "sqlite:///$WORK/tiny_builtin.db"

# --- the fidelity benches against the venv's vLLM files -----------------------------------------
if step vllm_equivalence "$STEP_S" 0 "same code|hashes|wrote" -- "$PY" bench/vllm_equivalence.py \
        --vllm-root "$SITE" --arch 89 --arch 90 --configs "$CONFIGS" --out-dir "$WORK/fidelity"; then
    line=$(grep "dense same code" "$LOG")
    python3 - "$line" <<'EOF' || fail vllm_equivalence "not the same code everywhere: $line"
import re, sys
pairs = re.findall(r"(\d+)/(\d+)", sys.argv[1])
sys.exit(0 if pairs and all(a == b for a, b in pairs) else 1)
EOF
fi
if step moe_fidelity "$STEP_S" 0 "^\| sm|interpreter|wrote" -- "$PY" bench/moe_fidelity.py \
        --vllm-file "$SITE/vllm/model_executor/layers/fused_moe/fused_moe.py" \
        --vllm-source "vllm $VLLM_VERSION" --configs "$CONFIGS" --shapes "$MOE_SHAPES" \
        --out-dir "$WORK/fidelity"; then
    python3 - "$LOG" <<'EOF' || fail moe_fidelity "not the same PTX mix in every row (see its table)"
import sys
rows = [l.split("|")[1:-1] for l in open(sys.argv[1]) if l.startswith("| sm")]
interp = [l for l in open(sys.argv[1]) if l.startswith("interpreter:")]
same = all(int(r[3]) == int(r[6]) for r in rows)
bitwise = all(l.split()[1] == l.split()[3] for l in interp)
sys.exit(0 if rows and same and bitwise else 1)
EOF
fi

# --- the result ---------------------------------------------------------------------------------
"$PY" - "$STEPS" "$RESULT" "$VENV" "$STAMP" "$FAILURES" "$WORK" "$SITE" "$ROOT" <<'EOF'
import importlib.metadata as m, json, platform, subprocess, sys
steps_path, result, venv, stamp, failures, work, site, root = sys.argv[1:]
# The result names no path of this machine: $SITE, $VENV, $WORK, the repository's "."
# and the base Python's $PYTHON_HOME.
text = open(steps_path).read()
for path, name in ((site, "$SITE"), (venv, "$VENV"), (work, "$WORK"), (root, "."),
                   (sys.base_prefix, "$PYTHON_HOME")):
    text = text.replace(json.dumps(path)[1:-1], name)
steps = [json.loads(l) for l in text.splitlines()]
def version(name):
    try:
        return m.version(name)
    except m.PackageNotFoundError:
        return None
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                        text=True).stdout.strip()
changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                         capture_output=True, text=True).stdout.split("\n")
changed = sorted(line[3:] for line in changed if line.strip())  # what differs from the commit
report = {"benchmark": "real_vllm", "date": stamp,
          "tuner_commit": commit, "tuner_changed_files": changed,
          "python": platform.python_version(),
          "versions": {n: version(n) for n in ("vllm", "torch", "triton", "fastapi",
                                               "flashinfer-python", "blockfp8-tuner")},
          "failed": [s["step"] for s in steps if "failure" in s], "steps": steps}
open(result, "w").write(json.dumps(report, indent=1) + "\n")
print(f"wrote {result}: {len(steps)} steps, {int(failures)} failed"
      + (f" ({', '.join(report['failed'])})" if report["failed"] else ""))
EOF
[ "$FAILURES" = 0 ]
