"""Compiling the dense kernel for a GPU target without a GPU (tuner.kernels.dense.target): what
the compiler says, and the same specialization and cache key as Triton's own launcher."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tuner.kernels.dense.kernel import kernel_source_hash

REPO_ROOT = Path(__file__).resolve().parents[3]

COMPILE_SCRIPT = """
import json, torch, triton
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.kernel import kernel_source_hash, w8a8_block_fp8_matmul_kernel as fn
from tuner.kernels.dense.space import default_config
from tuner.kernels.dense.target import compile_for_target, launch_specialization

if "nvidia" not in triton.backends.backends:
    print(json.dumps({"skip": "this Triton has no NVIDIA backend"}))
    raise SystemExit
result = {"hash": kernel_source_hash(), "shared": {}, "parity": None}
big = KernelConfig(256, 256, 128, 1, 8, 5)
for arch in (89, 90):
    for name, config in (("default", default_config()), ("big", big)):
        kernel = compile_for_target(config.as_dict(), arch, M=64, N=576, K=7168)
        result["shared"][f"{name}-sm{arch}"] = kernel.metadata.shared

try:  # Triton's own launcher binding, private API: compare our specialization with it
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature
    backend = make_backend(GPUTarget("cuda", 90, 32))
    binder = create_function_from_signature(fn.signature, fn.params, backend)
except (ImportError, AttributeError, TypeError) as error:
    binder = None
    result["parity"] = f"unavailable: {error!r}"
if binder is not None:
    result["parity"] = []
    for M, N, K, dtype in ((1, 576, 7168, torch.bfloat16), (64, 2112, 7168, torch.float16),
                           (33, 100, 17, torch.bfloat16), (4096, 7168, 18432, torch.bfloat16)):
        kt, nt = -(-K // 128), -(-N // 128)
        A = torch.empty(M, K, dtype=torch.float8_e4m3fn)
        B = torch.empty(N, K, dtype=torch.float8_e4m3fn)
        C = torch.empty(M, N, dtype=dtype)
        As, Bs = torch.empty(M, kt), torch.empty(nt, kt)
        config = default_config()
        meta = dict(BLOCK_SIZE_M=64, BLOCK_SIZE_N=128, BLOCK_SIZE_K=128, GROUP_SIZE_M=32)
        bound, spec, options = binder(
            A, B, C, As, Bs, M, N, K, 128, 128, A.stride(0), A.stride(1), B.stride(1),
            B.stride(0), C.stride(0), C.stride(1), As.stride(0), As.stride(1), Bs.stride(1),
            Bs.stride(0), **meta)
        _, theirs_sig, theirs_const, theirs_attrs = fn._pack_args(backend, meta, bound, spec,
                                                                  options)
        ours = launch_specialization(config, M, N, K, 128, 128, dtype)
        result["parity"].append([ours == (theirs_sig, theirs_const, theirs_attrs),
                                 repr(ours), repr((theirs_sig, theirs_const, theirs_attrs))])
        # The whole compile cache key: the launch's options are num_warps, num_stages and what
        # JITFunction.run adds (debug, and the compilation knobs this Triton has).
        from triton import knobs
        from triton.compiler import ASTSource
        from triton.runtime.cache import get_cache_key
        launch = dict(meta, num_warps=4, num_stages=2, debug=knobs.runtime.debug)
        for knob in ("instrumentation_mode", "fpsan_homomorphic_casts"):
            if hasattr(knobs.compilation, knob):
                launch[knob] = getattr(knobs.compilation, knob)
        theirs_opts = backend.parse_options(launch)
        ours_opts = backend.parse_options({"num_warps": 4, "num_stages": 2})
        keys = [get_cache_key(ASTSource(fn, *spec3), backend, opts, env_vars={})
                for spec3, opts in ((ours, ours_opts),
                                    ((theirs_sig, theirs_const, theirs_attrs), theirs_opts))]
        result.setdefault("keys", []).append(keys[0] == keys[1])
print(json.dumps(result))
"""


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path_factory.mktemp("triton-cache"))
    env["TRITON_DEFAULT_FP_FUSION"] = "1"  # Triton 3.9 warns when unset; 1 is its default
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-c", COMPILE_SCRIPT],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if "skip" in result:
        pytest.skip(result["skip"])
    return result


def test_compiles_for_ada_and_hopper_without_gpu(compiled: dict[str, object]) -> None:
    shared = compiled["shared"]
    assert isinstance(shared, dict)
    # An A tile (64 x 128) plus a B tile (128 x 128) of fp8 is 24 KiB per pipeline stage.
    for arch in (89, 90):
        assert 24 * 1024 <= shared[f"default-sm{arch}"] < 100 * 1024
        # 256 x 128 + 128 x 256 fp8 is 64 KiB a stage; 5 stages exceed the 227 KiB an sm90
        # program may use (and the 99 KiB of sm89), so this config must be out of resources.
        assert shared[f"big-sm{arch}"] > 227 * 1024


def test_source_hash_is_the_same_with_and_without_interpreter(compiled: dict[str, object]) -> None:
    assert compiled["hash"] == kernel_source_hash()


def test_specialization_matches_tritons_launcher(compiled: dict[str, object]) -> None:
    parity = compiled["parity"]
    if isinstance(parity, str):
        pytest.skip(f"Triton's launcher binding is not importable here: {parity}")
    assert isinstance(parity, list) and len(parity) == 4
    for same, ours, theirs in parity:
        assert same, f"ours {ours}\ntheirs {theirs}"
    # Same specialization and options: a precompiled binary is found by the launch.
    assert compiled["keys"] == [True] * 4
