"""`tuner sweep --kernel` inside a (stand-in) vLLM environment: auto times vLLM's kernels, the
trials record the source, vLLM's version and the hash of the kernel text they timed, and the
winners of two sources never mix in an export."""

from __future__ import annotations

import contextlib
import json

import pytest

from tests.cli.common import invoke, query
from tests.standin_vllm import NO_DRIVER_VARIABLE, build_standin, importable
from tuner.files.provenance import family_kernel_hash, installed_triton_minor
from tuner.kernels.dense.space import default_config
from tuner.kernels.source import source_hash

DENSE_FILE = "N=256,K=128,device_name=TRITON_INTERPRETER,dtype=fp8_w8a8,block_shape=[128,128].json"
MOE_FILE = "E=4,N=64,device_name=TRITON_INTERPRETER,dtype=fp8_w8a8,block_shape=[128,128].json"
FAST = dict(default_config().as_dict(), GROUP_SIZE_M=1)
SLOW = dict(default_config().as_dict(), GROUP_SIZE_M=16)


def tuner(*args, vllm=None, extra=None, code=0):
    """`tuner` in this process, with the stand-in vLLM importable when given (dropped from
    sys.modules afterwards) and the environment variables `extra`, asserting its exit code. Its
    kernels are timed in spawned workers and its placeholder is asked of a child, as from the
    command line."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        for key, value in (extra or {}).items():
            patch.setenv(key, value)
        with importable(vllm, patch) if vllm else contextlib.nullcontext():
            result = invoke(*args)
    assert result.exit_code == code, result.output
    return result


def _tiny(home, db: str, *flags: str, model: str = "tiny", configs=(FAST, SLOW)) -> tuple:
    """A sweep of `configs` (and vLLM's default) of `model` at M = 1 on the interpreter."""
    (home / "configs.json").write_text(json.dumps(list(configs)))
    sweep = f"sweep --device interpreter --model {model} --m 1 --strategy grid --configs"
    configs_path = str(home / "configs.json")
    return (*sweep.split(), configs_path, "--interpreter-reps", "1", "--db", db, *flags)


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """One store with the same sweep run twice: --kernel auto beside the stand-in vLLM (no
    publish), then --kernel builtin (publishes); two configs per task, and vLLM's default
    (GROUP_SIZE_M 32) as baseline."""
    home = tmp_path_factory.mktemp("vllm_source")
    vllm = build_standin(home / "site")
    db = f"sqlite:///{home}/tuner.db"
    common = _tiny(home, db, model="tiny-moe")
    runs = [
        tuner(*common, "--no-publish", vllm=vllm),
        tuner(*common, "--kernel", "builtin", vllm=vllm),
    ]
    return home, vllm, db, runs


def test_auto_times_vllms_kernels_records_them_and_a_builtin_sweep_publishes_its_own(swept):
    """Finding 6: `tuner sweep --kernel builtin` where vLLM is importable publishes the builtin's
    files (publish used to read auto, i.e. vLLM's trials, which this store has too)."""
    home, vllm, _, (auto, builtin) = swept
    for run, kernel in ((auto, "vllm-0.33.0"), (builtin, "builtin")):
        lines = [line for line in run.stdout.splitlines() if line.startswith("sweep ")]
        heads = [line.rsplit(", kernel ", 1)[1] for line in lines if "(new)" in line]
        assert heads == [kernel, kernel]
    spaces = query(home / "tuner.db", "SELECT space FROM sweeps ORDER BY sweep_id")
    kernels = [["kernel:vllm-0.33.0"]] * 2 + [[]] * 2  # the builtin's space names no kernel
    assert [space.split("@", 1)[1:] for (space,) in spaces] == kernels
    published = [line for line in builtin.stdout.splitlines() if line.startswith("published ")]
    assert len(published) == 1, builtin.stdout
    assert published[0].startswith("published TRITON_INTERPRETER release 1: 2 file(s), ")
    assert published[0].endswith(", kernels of builtin"), published
    [(summary,)] = query(home / "tuner.db", "SELECT summary FROM releases")
    assert json.loads(summary)["scope"]["kernel_source"] == "builtin"
    # Every trial records its source, vLLM's version and the hash of what it timed.
    found = query(
        home / "tuner.db",
        "SELECT DISTINCT tasks.family, environments.kernel_source, environments.vllm, "
        "environments.kernel_hash, COUNT(*) FROM trials "
        "JOIN tasks ON trials.task_id = tasks.task_id JOIN environments ON "
        "trials.environment_id = environments.environment_id "
        "GROUP BY 1, 2, 3, 4 ORDER BY 1, 2",
    )
    dense_path = vllm / "vllm/model_executor/layers/quantization/utils/fp8_utils.py"
    moe_path = vllm / "vllm/model_executor/layers/fused_moe/fused_moe.py"
    assert found == [
        ("dense", "builtin", "", family_kernel_hash("dense"), 3),
        ("dense", "vllm", "0.33.0", source_hash(dense_path, "_w8a8_triton_block_scaled_mm"), 3),
        ("moe", "builtin", "", family_kernel_hash("moe"), 3),
        ("moe", "vllm", "0.33.0", source_hash(moe_path, "fused_moe_kernel"), 3),
    ]
    assert query(home / "tuner.db", "SELECT DISTINCT status FROM trials") == [("ok",)]


def test_winners_of_two_sources_never_mix_in_export_or_mounts(swept) -> None:
    """vLLM's trials make FAST the winner, the builtin's SLOW: each export takes one side."""
    home, vllm, db, _ = swept
    # Winners from the trials alone (no task's re-timed decision); vLLM's default
    # (GROUP_SIZE_M 32) is slowest for both sources, so a tuned config wins.
    query(home / "tuner.db", "DELETE FROM decisions")
    for source, fast_us, slow_us in (("vllm", 10.0, 20.0), ("builtin", 30.0, 5.0)):
        for group, us in ((1, fast_us), (16, slow_us), (32, 100.0)):
            query(
                home / "tuner.db",
                "UPDATE trials SET latency_us = ?, p20_us = ?, p80_us = ? WHERE GROUP_SIZE_M = ? "
                "AND environment_id IN (SELECT environment_id FROM environments WHERE "
                "kernel_source = ?)",
                *(us, us, us, group, source),
            )

    def exported(out, *flags, vllm_path=None):
        out = home / out
        export = f"export --device interpreter --out {out} --db {db}".split()
        run = tuner(*export, *flags, vllm=vllm_path)
        dense = json.loads((out / DENSE_FILE).read_text())["1"]["GROUP_SIZE_M"]
        moe = json.loads((out / MOE_FILE).read_text())["1"]["GROUP_SIZE_M"]
        said = [line for line in run.stderr.splitlines() if line.startswith("winners of ")]
        return dense, moe, said

    vllm_said = ["winners of vllm 0.33.0 kernel trials, triton " + installed_triton_minor()]
    builtin_said = ["winners of builtin kernel trials, triton " + installed_triton_minor()]
    # Beside vLLM, auto reads vLLM's trials; without it too (the store has vLLM's trials).
    assert exported("a", vllm_path=vllm) == (1, 1, vllm_said)
    assert exported("b") == (1, 1, vllm_said)
    assert exported("c", "--kernel", "builtin", vllm_path=vllm) == (16, 16, builtin_said)
    assert exported("d", "--kernel", "vllm") == (1, 1, vllm_said)

    # --kernel picks whose trials' files are mounted; the header says which, as export does.
    def tuned_line(*flags, vllm_path=None):
        run = tuner("mounts", "--device", "interpreter", "--db", db, *flags, vllm=vllm_path)
        return [line for line in run.stdout.splitlines() if line.startswith("# Tuned with")]

    [auto] = tuned_line(vllm_path=vllm)
    assert auto.endswith(", vLLM 0.33.0, kernels of vllm.")
    assert tuned_line("--kernel", "vllm") == [auto]
    [builtin] = tuned_line("--kernel", "builtin", vllm_path=vllm)
    assert builtin.endswith(", kernels of builtin.") and "vLLM" not in builtin


def test_on_a_driverless_host_vllm_is_refused_unless_cuda_visible_devices_is_empty(
    tmp_path, db, monkeypatch
) -> None:
    """Finding 4: where vLLM's triton is its placeholder, every trial of vLLM's kernel would
    crash: --kernel vllm is one line and exit 2 (auto's choice of the builtin there:
    tests/tuner/kernels/test_source.py); with CUDA_VISIBLE_DEVICES="" vLLM keeps the real
    Triton and its kernel runs."""
    monkeypatch.chdir(tmp_path)
    vllm = build_standin(tmp_path / "site")
    driverless = {NO_DRIVER_VARIABLE: "1"}
    sweep = (*_tiny(tmp_path, db, configs=[default_config().as_dict()]), "--kernel", "vllm")
    refused = tuner(*sweep, vllm=vllm, extra=driverless, code=2)
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith("error: --kernel vllm: vLLM 0.33.0 replaces triton with a placeholder")
    tuner(*sweep, vllm=vllm, extra={**driverless, "CUDA_VISIBLE_DEVICES": ""})
    assert query(
        tmp_path / "tuner.db",
        "SELECT DISTINCT environments.kernel_source, trials.status FROM trials JOIN "
        "environments USING (environment_id)",
    ) == [("vllm", "ok")]
