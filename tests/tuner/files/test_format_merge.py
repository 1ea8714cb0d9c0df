"""Config files: exact bytes, names, vLLM's lookup rule, the merge (the byte-exact checks against
the files vLLM ships are in tests/engines/test_shipped.py, read from its wheel)."""

from __future__ import annotations

import hashlib
import json
import stat
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.storefill import FAST, SLOW
from tuner.core import CONFIG_KEYS, REQUIRED_M, VLLM_M_GRID
from tuner.files.format import coverage_summary, dump_config_file, parse_config_file, vllm_pick_key
from tuner.files.merge import (
    DeviceFile,
    PartialFileError,
    _file_triton,
    build_device_files,
    dense_key,
    merge_shape,
    runs_note,
    write_files_atomically,
)
from tuner.kernels.dense.family import DENSE, config_file_name
from tuner.kernels.dense.space import default_config

DEFAULT = default_config()


@dataclass
class Winner:
    M: int
    config: dict[str, int]
    latency_us: float
    default_latency_us: float | None = 10.0
    is_default: bool = False
    device_name: str = "NVIDIA_L20"
    N: int = 5120
    K: int = 3072
    block_shape: tuple[int, int] = (128, 128)
    spread_us: float | None = None
    decided: bool = False
    sweep_id: int | None = None
    other_sweeps: tuple[int, ...] = ()
    environment_id: int | None = None


@dataclass
class Bare:
    M: int = 256
    config: dict = field(default_factory=dict)
    latency_us: float = 1.0
    default_latency_us: float | None = 2.0
    is_default: bool = True


@dataclass
class Coverage:
    N: int
    K: int
    block_shape: tuple[int, int]
    m_requested: list[int] = field(default_factory=list)


def test_nvidia_entries_are_written_in_vllm_key_order() -> None:
    shuffled = dict(reversed(list(FAST.items())))
    text = dump_config_file({16: shuffled, 1: FAST})
    assert list(json.loads(text)) == ["1", "16"]
    assert list(json.loads(text)["16"]) == list(CONFIG_KEYS)
    assert text.endswith("}\n") and not text.endswith("\n\n")


@pytest.mark.parametrize(
    "name",
    [
        "E=256,N=7168,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json",
        "N=0128,K=512,device_name=NVIDIA_L20,dtype=fp8_w8a8,block_shape=[128,128].json",
        "N=128,K=512,device_name=NVIDIA_L20,dtype=fp8_w8a8,block_shape=[128,  128].json",
        "N=128,K=512,device_name=NVIDIA_L20,dtype=fp16,block_shape=[128,128].json",
        "",
    ],
)
def test_bad_names_are_rejected(name: str) -> None:
    with pytest.raises(ValueError, match="is not a config file name"):
        DENSE.files.parse_file_name(name)


def test_config_file_name_rejects_bad_parts() -> None:
    """A bad device part: tests/tuner/inputs/test_devices.py."""
    with pytest.raises(ValueError, match="N must be"):
        config_file_name(0, 512, "NVIDIA_L20")


@pytest.mark.parametrize(
    ("keys", "M", "expected"),
    [
        ([1, 3], 2, 1),  # tie: the smaller key, as vLLM's min() over an ascending file
        ([1, 3], 0, 1),  # below the first key
        ([1, 3], 10_000, 3),  # beyond the last key
        ([2048, 3072, 4096], 1, 2048),  # vLLM 0.33.0's L20 files: decode runs the M=2048 config
        (list(VLLM_M_GRID), 3000, 3072),
    ],
)
def test_vllm_pick_key(keys: list[int], M: int, expected: int) -> None:
    assert vllm_pick_key(keys, M) == expected


# A hand-written file, keys descending (the tuner writes ascending files).
DESCENDING = (
    "{\n" + ",\n".join(f'    "{M}": {json.dumps(FAST)}' for M in reversed(VLLM_M_GRID)) + "\n}\n"
)


EVERY_M = range(1, 4097)  # above the grid's last key, M=4096, every rule picks that key


def test_vllm_pick_key_follows_a_file_read_from_disk_as_vllm_does() -> None:
    configs = parse_config_file(DESCENDING)
    assert list(configs) == list(reversed(VLLM_M_GRID))  # parse keeps the file's order
    # vLLM 0.33.0, fp8_utils.py: configs[min(configs.keys(), key=lambda x: abs(x - M))]
    vllm = {M: min(configs.keys(), key=lambda x: abs(x - M)) for M in EVERY_M}
    assert {M: vllm_pick_key(configs, M, file_order=True) for M in EVERY_M} == vllm
    # Ties go to the smaller key only for the tuner's own (ascending) files: on this file that
    # is another entry than vLLM runs at exactly the 16 midpoints between neighbouring keys.
    differ = [M for M in EVERY_M if vllm_pick_key(configs, M) != vllm[M]]
    assert differ == [3, 6, 12, 20, 28, 40, 56, 80, 112, 192, 384, 768, 1280, 1792, 2560, 3584]
    assert [vllm[M] for M in differ[:3]] == [4, 8, 16]
    ascending = parse_config_file(dump_config_file(configs))
    assert all(
        vllm_pick_key(ascending, M, file_order=True)
        == vllm_pick_key(configs, M)
        == min(ascending.keys(), key=lambda x: abs(x - M))
        for M in EVERY_M
    )
    assert vllm_pick_key([5, 1, 5, 3], 2, file_order=True) == 1  # duplicates keep first place
    with pytest.raises(ValueError, match="no keys"):
        vllm_pick_key([], 1)


def test_import_describes_the_entry_vllm_runs_from_the_files_order() -> None:
    keys = [5120, 3072]  # M=4096 is a tie: vLLM's min keeps 5120, first in this file
    assert coverage_summary(keys, file_order=True).endswith(
        "M=1 runs the M=3072 entry; M=4096 runs the M=5120 entry"
    )
    assert coverage_summary(keys).endswith("M=4096 runs the M=3072 entry")


def _body(entry: object, key: str = "1") -> str:
    return json.dumps({key: entry})


BAD_FILES = [
    ('{"1": {"BLOCK_SIZE_M": 16', "invalid JSON"),
    ("[1, 2]", "expected a JSON object keyed by M, got list"),
    ("{}", "no M entries"),
    (_body("fast"), "expected an object of config keys, got str"),
    (_body({**FAST, "num_warps": True}), "num_warps must be an integer, got True"),
    (_body({**FAST, "num_warps": 0}), "num_warps=0 is outside"),
    (_body({**FAST, "waves_per_eu2": 2}), "unknown key(s) 'waves_per_eu2'"),
    (_body({**FAST, "waves_per_eu": -1}), "waves_per_eu=-1 is outside 0..65536"),
    (_body({**FAST, "kpack": 0}), "kpack=0 is outside 1..65536"),
    (_body({k: v for k, v in FAST.items() if k != "num_stages"}), "missing key(s) num_stages"),
    (_body(FAST, key="0"), "M key '0' is not a decimal integer"),
    (_body(FAST, key="99999999999"), "M key '99999999999'"),
    ('{"1": ' + json.dumps(FAST) + ', "1": ' + json.dumps(FAST) + "}", "duplicate key '1'"),
    (_body({**FAST, "BLOCK_SIZE_M": float("nan")}), "BLOCK_SIZE_M must be an integer, got nan"),
    (_body(FAST).replace(": 16", ": 1e400"), "BLOCK_SIZE_M must be an integer, got inf"),
    (_body(FAST).replace(": 16", ": " + "9" * 5000), "invalid JSON"),
    ("[" * 100_000, "JSON nested too deeply"),
    (_body({**FAST, "BLOCK_SIZE_K": 96}), "BLOCK_SIZE_K=96 is not a power of two"),
]


@pytest.mark.parametrize(("text", "problem"), BAD_FILES)
def test_parse_errors_are_one_line_and_name_the_source(text: str, problem: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_config_file(text, source="upload.json")
    message = str(info.value)
    assert message.startswith("upload.json: ")
    assert problem in message
    assert "\n" not in message and len(message) < 300


def test_amd_entry_without_num_stages_is_accepted() -> None:
    entry = {
        "BLOCK_SIZE_K": 128,
        "BLOCK_SIZE_M": 32,
        "BLOCK_SIZE_N": 32,
        "GROUP_SIZE_M": 1,
        "kpack": 2,
        "matrix_instr_nonkdim": 16,
        "num_warps": 4,
    }
    assert parse_config_file(_body(entry)) == {1: entry}
    assert dump_config_file({1: entry}) == json.dumps({"1": entry}, indent=4) + "\n"


def test_dump_rejects_what_parse_rejects() -> None:
    with pytest.raises(ValueError, match="M=0"):
        dump_config_file({0: FAST})
    with pytest.raises(ValueError, match="must be an integer"):
        dump_config_file({1: {**FAST, "num_warps": True}})
    with pytest.raises(ValueError, match="no M entries"):
        dump_config_file({})


def test_merge_emits_default_where_winner_is_not_faster_and_says_why() -> None:
    default = dict(DEFAULT.as_dict())
    winners = [
        Winner(1, FAST, 8.0),  # faster: kept
        Winner(16, SLOW, 12.5),  # slower: default emitted
        Winner(32, SLOW, 10.0),  # equal: default emitted
        Winner(64, default, 9.0, 9.0, True),  # the default itself won
        Winner(128, FAST, 5.0, None),  # no baseline: kept, noted
        # a decision kept the default: no config beat it by more than the spread
        Winner(256, default, 9.9, 9.9, True, spread_us=0.8, decided=True),
        Winner(512, FAST, 7.0, 9.0, spread_us=0.5, decided=True),  # decided, faster: no note
        Winner(1024, default, 9.0, 9.0, True, spread_us=None, decided=True),
        Winner(1536, default, 9.0, 9.0, True, spread_us=0.3),  # spread without a decision
        Bare(M=2048),  # a duck-typed winner without the decision fields (bench/vs_shipped.py's)
    ]
    merged = merge_shape(winners, m_requested=[w.M for w in winners], default=DEFAULT)
    kept = {1, 128, 512}
    assert merged.configs == {w.M: FAST if w.M in kept else default for w in winners}
    kept_noise = "default config kept after interleaved re-timing: no config beat it by more than "
    assert merged.notes == [
        "M=16: best config 128x256x128 g64 w8 s5 (12.50 us) is not faster than the default "
        "(10.00 us); emitting the default config",
        "M=32: best config 128x256x128 g64 w8 s5 (10.00 us) is not faster than the default "
        "(10.00 us); emitting the default config",
        "M=64: the default config was fastest",
        "M=128: no default-config baseline measured; winner kept unchecked",
        f"M=256: {kept_noise}the noise (spread 0.80 us)",
        f"M=1024: {kept_noise}the noise",
        "M=1536: the default config was fastest",
        "M=2048: the default config was fastest",
    ]
    assert merged.text == dump_config_file(merged.configs)
    assert merged.sha256 == hashlib.sha256(merged.text.encode()).hexdigest()
    assert not merged.partial and merged.m_missing == []


def test_the_standing_sweep_and_those_set_aside_are_named() -> None:
    def winner(M: int, other_sweeps: tuple[int, ...], decided: bool = True) -> Winner:
        return Winner(M, FAST, 5.0, 9.0, decided=decided, sweep_id=3, other_sweeps=other_sweeps)

    merged = merge_shape(
        [winner(1, ()), winner(16, (1,)), winner(32, (1, 2), False)],
        m_requested=[1, 16, 32],
        default=DEFAULT,
    )
    assert merged.notes == [
        "M=16: sweep 3's winner (decided last) stands; sweep 1 also tuned it, not compared by "
        "latency (another run)",
        "M=32: sweep 3's winner (the newest sweep) stands; sweeps 1, 2 also tuned it, not "
        "compared by latency (another run)",
    ]
    assert runs_note(winner(1, ())) is None


def test_a_moe_file_carries_triton_version_first_and_reading_drops_it() -> None:
    text = dump_config_file({16: FAST, 1: FAST}, "3.8.0")
    assert text.startswith('{\n    "triton_version": "3.8.0",\n    "1": {\n')
    assert list(parse_config_file(text)) == [1, 16]
    assert '"triton_version"' not in dump_config_file({1: FAST})
    # the Triton most winners ran with, the newer on a tie
    triton_of = {1: "3.8.0", 2: "3.10.0", 3: "3.9.1"}
    runs = [Winner(1, FAST, 1.0, environment_id=e) for e in (1, 1, 2)]
    assert _file_triton(runs, triton_of) == "3.8.0"
    assert _file_triton(runs[1:], triton_of) == "3.10.0"
    assert _file_triton([Winner(1, FAST, 1.0, environment_id=7)], triton_of) is None


def test_merge_refuses_a_partial_file_unless_asked_and_warns_of_the_m_vllm_falls_back_at():
    winners = [Winner(M, FAST, 1.0) for M in (16, 32)]
    with pytest.raises(PartialFileError, match=r"^no winner yet for M=1, 2048, 4096$"):
        merge_shape(winners, m_requested=REQUIRED_M, default=DEFAULT)
    merged = merge_shape(winners, m_requested=REQUIRED_M, default=DEFAULT, allow_partial=True)
    assert merged.partial and merged.m_missing == [1, 2048, 4096]
    assert list(merged.configs) == [16, 32]
    assert merged.warnings == [
        "M=1 is not in the file: vLLM will use the M=16 entry",
        "M=2048 is not in the file: vLLM will use the M=32 entry",
        "M=4096 is not in the file: vLLM will use the M=32 entry",
    ]
    short = merge_shape(winners, m_requested=[16, 32], default=DEFAULT)  # its grid is all there
    assert not short.partial and short.warnings == merged.warnings
    full = [Winner(M, FAST, 1.0) for M in VLLM_M_GRID]
    assert merge_shape(full, m_requested=VLLM_M_GRID, default=DEFAULT).warnings == []
    with pytest.raises(PartialFileError, match="nothing to write"):
        merge_shape([], m_requested=[1], default=DEFAULT, allow_partial=True)
    with pytest.raises(ValueError, match="two winners for M=16"):
        merge_shape([*winners, Winner(16, SLOW, 2.0)], m_requested=[16], default=DEFAULT)


def test_build_device_files_skips_partial_shapes() -> None:
    winners = [Winner(M, FAST, 1.0) for M in (1, 16)]
    winners += [Winner(1, FAST, 1.0, N=7168, K=5120), Winner(16, SLOW, 20.0, N=7168, K=5120)]
    coverage = [
        Coverage(5120, 3072, (128, 128), [1, 16]),
        Coverage(7168, 5120, (128, 128), [1, 16, 32]),
        Coverage(8192, 5120, (128, 128), [1]),
    ]
    result = build_device_files(winners, coverage)
    assert [(f.N, f.K) for f in result.files] == [(5120, 3072)]
    assert result.files[0].file_name == config_file_name(5120, 3072, "NVIDIA_L20")
    assert [(s.N, s.K, s.m_missing, s.reason) for s in result.skipped] == [
        (7168, 5120, [32], "no winner yet for M=32"),
        (8192, 5120, [1], "no M has a winner: nothing to write"),
    ]
    partial = build_device_files(winners, coverage, allow_partial=True)
    assert [(f.N, f.K) for f in partial.files] == [(5120, 3072), (7168, 5120)]
    assert partial.files[1].merged.configs == {1: FAST, 16: DEFAULT.as_dict()}
    assert [(s.N, s.K) for s in partial.skipped] == [(8192, 5120)]


def test_build_device_files_rejects_mixed_devices() -> None:
    winners = [Winner(1, FAST, 1.0), Winner(1, FAST, 1.0, device_name="NVIDIA_H200", N=1)]
    with pytest.raises(ValueError, match="several devices: NVIDIA_H200, NVIDIA_L20"):
        build_device_files(winners, [])


def test_write_files_atomically(tmp_path: Path) -> None:
    merged = merge_shape([Winner(1, FAST, 1.0)], m_requested=[1], default=DEFAULT)
    name = config_file_name(5120, 3072, "NVIDIA_L20")
    out = tmp_path / "configs"
    out.mkdir()
    (out / name).write_text("old")
    file = DeviceFile(name, dense_key(5120, 3072, (128, 128)), merged)
    paths = write_files_atomically([file], out)
    assert paths == [out / name]
    assert (out / name).read_text() == merged.text
    assert stat.S_IMODE((out / name).stat().st_mode) == 0o644
    assert sorted(p.name for p in out.iterdir()) == [name]
