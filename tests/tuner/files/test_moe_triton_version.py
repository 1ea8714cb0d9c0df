"""Fused-MoE files carry "triton_version" first, as vLLM's benchmark_moe.py writes them; readers
drop it as vLLM's get_moe_configs does; dense files never carry it."""

from __future__ import annotations

from tuner.files.format import dump_config_file, parse_config_file
from tuner.files.merge import _file_triton

ENTRY = {
    "BLOCK_SIZE_M": 16,
    "BLOCK_SIZE_N": 64,
    "BLOCK_SIZE_K": 128,
    "GROUP_SIZE_M": 1,
    "num_warps": 4,
    "num_stages": 3,
}


def test_a_moe_file_carries_triton_version_first_and_reading_drops_it() -> None:
    text = dump_config_file({16: ENTRY, 1: ENTRY}, "3.8.0")
    assert text.startswith('{\n    "triton_version": "3.8.0",\n    "1": {\n')
    assert list(parse_config_file(text)) == [1, 16]
    assert '"triton_version"' not in dump_config_file({1: ENTRY})


class _Row:
    def __init__(self, environment_id: int) -> None:
        self.environment_id = environment_id


def test_the_file_names_the_triton_most_winners_ran_with_the_newer_on_a_tie() -> None:
    triton_of = {1: "3.8.0", 2: "3.10.0", 3: "3.9.1"}
    assert _file_triton([_Row(1), _Row(1), _Row(2)], triton_of) == "3.8.0"
    assert _file_triton([_Row(1), _Row(2)], triton_of) == "3.10.0"
    assert _file_triton([_Row(7)], triton_of) is None
    assert _file_triton([_Row(1)], None) is None
