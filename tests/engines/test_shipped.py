"""The config files vLLM 0.33.0 ships, read from its wheel: the tuner's parser and writer give
each one back byte for byte, its name parses and is built again, and the merge with an
existing file works on them."""

from __future__ import annotations

import json

from db.repo import ImportedShape
from tests.engines.engine_code import wheel_folder
from tests.engines.vllm_host import DENSE_CONFIGS, MOE_CONFIGS
from tests.tuner.files.test_format_merge import DEFAULT, FAST, Winner
from tuner.core import VLLM_M_GRID
from tuner.files.format import dump_config_file, parse_config_file
from tuner.files.merge import merge_shape
from tuner.kernels.dense.family import DENSE, config_file_name
from tuner.kernels.moe.family import MOE, moe_config_file_name

AMD_FILE = "N=1536,K=7168,device_name=AMD_Instinct_MI300X,dtype=fp8_w8a8,block_shape=[128,128].json"
L20_576 = "N=576,K=7168,device_name=NVIDIA_L20,dtype=fp8_w8a8,block_shape=[128,128].json"


def _round_trip(files: dict[str, bytes]) -> tuple[list[str], list[str], list[str]]:
    """(files written back byte for byte, files that lack only the final newline, the rest).

    vLLM's tuning scripts end a file with a newline (benchmark_w8a8_block_fp8.py and
    benchmark_moe.py: json.dump(indent=4), then "\\n"), so the tuner always writes it; files
    shipped without it come back with one more byte."""
    same, newline, wrong = [], [], []
    for name, original in files.items():
        configs = parse_config_file(original.decode(), source=name)
        triton_version = json.loads(original).get("triton_version")
        again = dump_config_file(configs, triton_version).encode()
        if again == original:
            same.append(name)
        elif again == original + b"\n" and not original.endswith(b"\n"):
            newline.append(name)
        else:
            wrong.append(name)
    return same, newline, wrong


def test_vllms_dense_files_come_back_byte_for_byte(vllm_wheel) -> None:
    files = wheel_folder(vllm_wheel, DENSE_CONFIGS)
    same, newline, wrong = _round_trip(files)
    assert wrong == []
    assert (len(same), len(newline)) == (106, 138)  # vLLM 0.33.0's 244 files
    assert AMD_FILE in newline and L20_576 in same
    # An AMD file keeps its keys and their order.
    amd = parse_config_file(files[AMD_FILE].decode())
    assert list(amd) == list(VLLM_M_GRID) and amd[1]["matrix_instr_nonkdim"] == 16
    assert list(amd[1]) == [
        "BLOCK_SIZE_K",
        "BLOCK_SIZE_M",
        "BLOCK_SIZE_N",
        "GROUP_SIZE_M",
        "kpack",
        "matrix_instr_nonkdim",
        "num_warps",
    ]
    for name in files:
        configs = parse_config_file(files[name].decode())
        assert list(configs) == sorted(configs), name
        shape, device_name, dtype = DENSE.files.parse_file_name(name)
        assert config_file_name(shape.N, shape.K, device_name, shape.block_shape, dtype) == name


def test_vllms_block_fp8_moe_files_come_back_byte_for_byte(vllm_wheel) -> None:
    every = wheel_folder(vllm_wheel, MOE_CONFIGS)
    files = {}
    for name, data in every.items():
        try:
            shape, device_name, _ = MOE.files.parse_file_name(name)
        except ValueError:
            assert "dtype=fp8_w8a8,block_shape=" not in name, name
            continue
        block_shape = shape.block_pair("moe")
        assert moe_config_file_name(shape.param("E"), shape.N, device_name, block_shape) == name
        files[name] = data
    assert (len(every), len(files)) == (338, 66)  # 66 block-FP8 files of 338
    same, newline, wrong = _round_trip(files)
    assert wrong == [] and (len(same), len(newline)) == (62, 4)
    # 25 of them start with the Triton they were tuned with, as the tuner writes MoE files.
    firsts = [next(iter(json.loads(data))) for data in files.values()]
    assert firsts.count("triton_version") == 25 and "triton_version" not in {
        key for data in files.values() for key in list(json.loads(data))[1:]
    }


def test_the_merge_with_a_shipped_file_keeps_what_the_store_did_not_measure(vllm_wheel) -> None:
    existing = parse_config_file(wheel_folder(vllm_wheel, DENSE_CONFIGS)[L20_576].decode())
    assert list(existing) == [4, 8]
    merged = merge_shape(
        [Winner(8, FAST, 1.0), Winner(1, FAST, 1.0)],
        m_requested=[1, 8],
        default=DEFAULT,
        existing=ImportedShape(existing, dict.fromkeys(existing, "vllm")),
    )
    assert merged.configs == {1: FAST, 4: existing[4], 8: FAST}
    assert merged.notes == [
        "M=8: measured winner replaces the entry imported from 'vllm'",
        "M=4: imported from 'vllm', not measured here (no comparison with the default)",
    ]
    assert merged.m_imported == [4]
    assert merged.warnings[0] == "M=16 is not in the file: vLLM will use the M=8 entry"
