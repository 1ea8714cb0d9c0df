"""`tuner import`: a folder laid out like vLLM's configs folder (config files imported, the rest
skipped with one line each, of one file in two spellings the one vLLM reads); bad files store
nothing; the launch check (entries compiled for the device's architecture, from its trials,
else the table of known GPUs; those that cannot launch left out of every merge with the
reason); fused-MoE files kept with their E; AMD keys and device names with parentheses kept.

A device whose vLLM key holds '(' and ')' is exported, published and served over HTTP under
its own name, named as a user types the GPU's name (the name rule: tests/tuner/inputs).

A device whose files were imported and never swept: its files are exported, published,
listed, reported and downloaded like any other, every entry marked imported, not measured, and
an entry that cannot launch there left out of every output."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import quote

import pytest
import yaml

from db.files import list_imports, record_import
from tests.cli.common import PLAN, invoke, ok, service, session_on
from tests.storefill import DEFAULT, FAST, SLOW, fill, row_counts
from tuner.files.format import dump_config_file
from tuner.files.merge import build_device_files, dense_key, import_targets
from tuner.kernels.dense.family import config_file_name, engine_file_name
from tuner.kernels.gpus import gpu_model
from tuner.kernels.moe.family import MOE, expert_shape
from tuner.kernels.shape import FamilyShape, Shape
from tuner.measure.compile import device_arch

VLLM_NAME = config_file_name(576, 7168, "NVIDIA_L20")
SGLANG_NAME = engine_file_name(VLLM_NAME, "sglang")
OTHER_NAME = config_file_name(1536, 7168, "NVIDIA_L20")
INT8_NAME = config_file_name(576, 7168, "NVIDIA_L20", dtype="int8_w8a8")
MOE_NAME = "E=256,N=256,device_name=NVIDIA_L20,dtype=fp8_w8a8,block_shape=[128,128].json"
# A fused-MoE file without block scales (bf16 weights): no registered family reads it.
UNQUANTIZED_MOE_NAME = "E=8,N=14336,device_name=NVIDIA_L20.json"
# Tuned on sm90: 128x256x128 tiles, 4 stages, about 145 KiB of shared memory (too much on sm89).
HOPPER = {**FAST, "BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 256, "num_warps": 8, "num_stages": 4}
REASON = (
    "config 128x256x128 g1 w8 s4 needs 148480 bytes of shared memory; NVIDIA_L20 (sm89) "
    "has 101376 per block"
)


def stored(db: str, *fields: str) -> list[tuple]:
    """The imports' `fields` (`db.files.ImportInfo`), in the store's order (by N, K)."""
    with session_on(db) as session:
        return [tuple(getattr(i, f) for f in fields) for i in list_imports(session)]


def vllm_folder(root: Path) -> Path:
    """A folder like vLLM's configs folder: one shape in both spellings, another shape, and
    what else such a folder holds."""
    folder = root / "configs"
    (folder / "sub").mkdir(parents=True)
    files = {VLLM_NAME: {1: FAST}, SGLANG_NAME: {1: SLOW}, OTHER_NAME: {16: SLOW}}
    files |= {INT8_NAME: {1: FAST}, MOE_NAME: {1: SLOW, 64: FAST}, UNQUANTIZED_MOE_NAME: {1: FAST}}
    for name, configs in files.items():
        (folder / name).write_text(dump_config_file(configs))
    (folder / "README").write_text("Configs of the block-scaled GEMM.\n")
    (folder / "__init__.py").write_text("")
    return folder


ONLY = "only fp8_w8a8 config files are imported"


def test_folder_imports_what_vllm_reads_and_says_what_it_skipped(tmp_path: Path, db) -> None:
    folder = vllm_folder(tmp_path)
    result = invoke("import", folder, "--label", "vllm-0.33.0", "--db", db, "--no-check")
    lines = result.stdout.strip().splitlines()
    # The fused-MoE block-FP8 file is imported as its family's (by name: E=... first).
    assert [line.split(":", 1)[0] for line in lines[:3]] == [
        f"imported {name} for NVIDIA_L20 as 'vllm-0.33.0'"
        for name in (MOE_NAME, OTHER_NAME, VLLM_NAME)
    ], result.output
    assert lines[-1].startswith("published NVIDIA_L20 release 1: 3 file(s), content ")
    assert lines[3:-1] == [
        "not checked: --no-check",
        f"skipped {SGLANG_NAME}: SGLang's spelling; imported {VLLM_NAME}",
        f"skipped {UNQUANTIZED_MOE_NAME}: not a config file name: {ONLY}",
        f"skipped {INT8_NAME}: int8_w8a8: {ONLY}",
        f"skipped README: not a config file name: {ONLY}",
        f"skipped __init__.py: not a config file name: {ONLY}",
        f"skipped sub: not a file: {ONLY}",
    ]
    # The vLLM spelling's entries are stored (FAST at M=1), not the SGLang file's (SLOW).
    assert stored(db, "file_name", "configs") == [
        (MOE_NAME, {1: SLOW, 64: FAST}),
        (VLLM_NAME, {1: FAST}),
        (OTHER_NAME, {16: SLOW}),
    ]  # by N (a fused-MoE name has no K: 0)
    # Alone, without the vLLM spelling beside it, the SGLang spelling is imported.
    lone = f"sqlite:///{tmp_path / 'lone.db'}"
    ok("import", folder / SGLANG_NAME, "--db", lone, "--no-check")
    assert stored(lone, "file_name", "configs") == [(SGLANG_NAME, {1: SLOW})]


@pytest.mark.parametrize(
    "mistake", ["bad entry", "bad name", "empty folder", "two files for one shape"]
)
def test_a_bad_input_is_one_line_and_stores_nothing(tmp_path: Path, db, mistake: str) -> None:
    folder = vllm_folder(tmp_path)
    if mistake == "bad entry":
        (folder / OTHER_NAME).write_text('{"16": {"BLOCK_SIZE_M": "16"}}')
        paths = [folder]
        line = f"{folder / OTHER_NAME}: M=16: missing key(s) BLOCK_SIZE_N, BLOCK_SIZE_K, "
        line += "GROUP_SIZE_M, num_warps, num_stages"
    elif mistake == "bad name":
        (tmp_path / "config.json").write_text(dump_config_file({1: FAST}))
        paths = [folder / VLLM_NAME, tmp_path / "config.json"]
        line = f"{paths[1]}: 'config.json' is not a config file name like 'N=1024,K=512,"
        line += "device_name=NVIDIA_L20,dtype=fp8_w8a8,block_shape=[128,128].json'"
    elif mistake == "empty folder":
        (tmp_path / "empty").mkdir()
        (tmp_path / "empty" / "README").write_text("nothing\n")
        paths = [tmp_path / "empty"]
        line = f"{tmp_path / 'empty'}: no fp8_w8a8 config files in this folder"
    else:
        (tmp_path / "b").mkdir()
        (tmp_path / "b" / VLLM_NAME).write_text(dump_config_file({1: SLOW}))
        paths = [folder / VLLM_NAME, tmp_path / "b" / VLLM_NAME]
        line = f"{paths[1]}: same device and shape as {paths[0]}; import one per shape and label"
    result = invoke("import", *paths, "--db", db, "--no-check")
    assert (result.exit_code, result.stderr.splitlines()) == (2, [f"error: {line}"])
    assert not (tmp_path / "tuner.db").exists() or row_counts(db)["imports"] == 0


def test_import_says_which_entry_vllm_runs_in_the_files_order(tmp_path, db) -> None:
    # What vLLM runs of a file's keys: tests/tuner/files/test_format_merge.py.
    amd = tmp_path / engine_file_name(config_file_name(576, 7168, "AMD_Instinct_MI300X"), "sglang")
    # Keys descending: vLLM's min() keeps 5120 at the M=4096 tie, read in the file's order.
    amd.write_text(json.dumps({"5120": FAST, "3072": {**FAST, "BLOCK_SIZE_K": 64}}))
    args = ["import", amd, "--db", db, "--no-publish", "--no-check"]
    assert "M=4096 runs the M=5120 entry" in invoke(*args).stdout


def test_gpu_models_and_architectures() -> None:
    names = ["NVIDIA_H100_80GB_HBM3", "NVIDIA_A100-SXM4-80GB", "NVIDIA_GeForce_RTX_4090"]
    names += ["NVIDIA_L40S", "AMD_Instinct_MI300X"]
    assert [gpu_model(n) for n in names] == ["H100", "A100", "RTX_4090", "L40S", "AMD"]
    found = {name: device_arch(name, []) for name in ("NVIDIA_L20", "NVIDIA_H20", names[1])}
    shared = [(f.arch, f.shared_bytes) for f in found.values()]
    assert shared == [(89, 101376), (90, 232448), (80, 166912)]
    # The store's trials win over the table; the interpreter's "" says nothing.
    found = device_arch("NVIDIA_L20", ["", "9.0"])
    assert found.source == "from its trials in the store, compute capability 9.0"
    assert found.arch == 90
    assert device_arch("NVIDIA_Foo", [""]) is None and device_arch(names[-1], []) is None


def test_an_sm90_entry_is_left_out_on_an_l20_everywhere(tmp_path: Path, db, monkeypatch) -> None:
    # One import, one compile pool: an L20 with trials (sm89 from them), an H20 without (sm90
    # from the table of known GPUs) and a GPU neither knows (imported unchecked).
    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path / "launch-cache"))
    plan = {(576, 7168, 1): [(DEFAULT, True, "ok", 10.0), (FAST, False, "ok", 6.0)]}
    fill(db, plan | {(576, 7168, 16): [(DEFAULT, True, "ok", 10.0)]}, m_values=(1, 16))
    (tmp_path / VLLM_NAME).write_text(dump_config_file({1: FAST, 2048: HOPPER}))
    h20, foo = (tmp_path / config_file_name(576, 7168, d) for d in ("NVIDIA_H20", "NVIDIA_Foo"))
    for other in (h20, foo):
        other.write_text(dump_config_file({2048: HOPPER}))
    result = invoke(
        "import", tmp_path / VLLM_NAME, h20, foo, "--db", db, "--no-publish", "--label", "vllm-h100"
    )
    assert result.stdout.strip().splitlines()[3:] == [
        f"left out {VLLM_NAME} M=2048: {REASON}; vLLM would fail with OutOfResources there",
        "checked the entries for NVIDIA_L20 on sm89 (from its trials in the store, compute "
        "capability 8.9; 101376 bytes of shared memory per block): 2 distinct config(s) "
        "compiled, 1 entry left out",
        "checked the entries for NVIDIA_H20 on sm90 (from the table of known GPUs, H20; 232448 "
        "bytes of shared memory per block): 1 distinct config(s) compiled, 0 entries left out",
        "not checked: NVIDIA_Foo's architecture or its shared memory per block is not known "
        "(no trial in the store names it, not a known GPU); imported unchecked",
    ], result.output
    assert sorted(stored(db, "device_name", "checked_arch", "cannot_launch")) == [
        ("NVIDIA_Foo", None, {}),
        ("NVIDIA_H20", 90, {}),
        ("NVIDIA_L20", 89, {2048: REASON}),
    ]
    out = tmp_path / "out"
    exported = invoke("export", "--device", "L20", "--out", out, "--db", db)
    assert (out / VLLM_NAME).read_text() == dump_config_file({1: FAST, 16: DEFAULT})
    note = (
        "M=2048: entry imported from 'vllm-h100' left out, it cannot launch on this device: "
        + REASON
    )
    assert note in " ".join(exported.stdout.split())
    # The routes and the report on an entry left out: the imported-only tests below.


def test_an_moe_file_is_imported_with_its_e_once_checked_without_top_k_and_exported_as_it_was(
    tmp_path: Path, db, monkeypatch
) -> None:
    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path / "launch-cache"))
    name = MOE.files.file_name(Shape(64, 0, (128, 128), (("E", 4),)), "NVIDIA_L20", "vllm")
    assert name == "E=4,N=64,device_name=NVIDIA_L20,dtype=fp8_w8a8,block_shape=[128,128].json"
    data = dump_config_file({1: SLOW, 64: FAST}).encode()
    (tmp_path / name).write_bytes(data)
    for _ in range(2):  # importing the same file again replaces its row
        result = invoke("import", tmp_path / name, "--label", "vllm", "--db", db, "--no-publish")
        # A fused-MoE name gives E and N; the kernel compiles for K and top_k too.
        assert result.stdout.splitlines() == [
            f"imported {name} for NVIDIA_L20 as 'vllm': 2 of vLLM's 18 M values: 1, 64; "
            "missing 2, 4, 8, 16, 24, 32, 48, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096; "
            "M=4096 runs the M=64 entry",
            f"not checked {name}: compiling failed: the file's name does not give top_k",
            "checked the entries for NVIDIA_L20 on sm89 (from the table of known GPUs, L20; "
            "101376 bytes of shared memory per block): 0 distinct config(s) compiled, 0 entries "
            "left out",
        ], result.output
    columns = ("family", "shape_params", "N", "K", "block_shape", "label", "file_name")
    assert stored(db, *columns, "configs", "checked_arch") == [
        ("moe", "E=4", 64, 0, (128, 128), "vllm", name, {1: SLOW, 64: FAST}, None)
    ]
    result = invoke("export", "--device", "NVIDIA_L20", "--out", tmp_path / "out", "--db", db)
    assert [p.name for p in (tmp_path / "out").iterdir()] == [name], result.output
    assert (tmp_path / "out" / name).read_bytes() == data


def test_an_imported_moe_file_fills_the_swept_file_of_its_name_only() -> None:
    swept = FamilyShape("moe", expert_shape(4, 64, 128, 2))
    e4, e8 = (FamilyShape("moe", Shape(64, 0, (128, 128), (("E", e),))) for e in (4, 8))
    dense = dense_key(64, 128, (128, 128))
    imported = {
        key: SimpleNamespace(configs=configs, labels=dict.fromkeys(configs, "vllm"))
        for key, configs in ((e4, {1: SLOW, 3: SLOW}), (e8, {1: FAST}), (dense, {1: DEFAULT}))
    }
    # A measured winner of the MoE shape E=4, N=64, K=128, top_k=2 (`db.views.WinnerRow`).
    fields = dict(M=3, config=FAST, latency_us=1.0, default_latency_us=10.0, is_default=False)
    fields |= dict(device_name="NVIDIA_L20", N=64, K=128, block_shape=(128, 128))
    winner = SimpleNamespace(
        **fields, spread_us=None, decided=False, family="moe", shape_params="E=4,top_k=2"
    )
    targets = import_targets([swept], imported, "NVIDIA_L20")
    assert targets == {swept: imported[e4], e8: imported[e8], dense: imported[dense]}
    files = build_device_files([winner], [], imported=imported, device_name="NVIDIA_L20")
    assert files.skipped == []
    assert {f.file_name: (f.key, f.merged.configs) for f in files.files} == {
        # The measured winner at M=3 beats the import; M=1 comes from the E=4 file only.
        MOE.files.file_name(e4.shape, "NVIDIA_L20", "vllm"): (swept, {1: SLOW, 3: FAST}),
        MOE.files.file_name(e8.shape, "NVIDIA_L20", "vllm"): (e8, {1: FAST}),
        "N=64,K=128,device_name=NVIDIA_L20,dtype=fp8_w8a8,block_shape=[128,128].json": (
            dense,
            {1: DEFAULT},
        ),
    }


def test_amd_keys_and_an_intel_device_name_are_kept(tmp_path: Path, db) -> None:
    # vLLM's MI300X files: kpack and matrix_instr_nonkdim, no num_stages; SGLang's MI325X and
    # vLLM's AMD_Radeon_Graphics files: num_stages and waves_per_eu 0 (tuner.files.format).
    mi300x = {k: v for k, v in FAST.items() if k != "num_stages"}
    mi300x |= {"kpack": 2, "matrix_instr_nonkdim": 16}
    mi325x = {**FAST, "waves_per_eu": 0, "matrix_instr_nonkdim": 16, "kpack": 2}
    files = {
        "AMD_Instinct_MI300X": {1: mi300x},
        "AMD_Instinct_MI325X": {1: mi325x, 64: mi325x},
        "Intel(R)_Data_Center_GPU_Max_1550": {1: FAST, 4096: SLOW},
    }
    for device, configs in files.items():
        (tmp_path / config_file_name(576, 7168, device)).write_text(
            json.dumps({str(m): c for m, c in configs.items()})
        )
    result = invoke(
        "import", *(tmp_path / config_file_name(576, 7168, d) for d in files), "--db", db
    )
    assert "for Intel(R)_Data_Center_GPU_Max_1550 as 'imported'" in result.stdout, result.output
    imported = dict(stored(db, "device_name", "configs"))
    assert imported == files
    assert list(imported["AMD_Instinct_MI325X"][1]) == list(mi325x)  # the file's key order


INTEL = "Intel(R)_Data_Center_GPU_Max_1550"
TYPED = "Intel(R) Data Center GPU Max 1550"  # the GPU's own name, as a user would type it


def test_a_device_with_parentheses_exports_and_serves(tmp_path: Path, db) -> None:
    fill(db, PLAN, device_name=INTEL, m_values=(1, 16))
    out = tmp_path / "out"
    ok("export", "--device", TYPED, "--out", out, "--db", db)
    name = config_file_name(576, 7168, INTEL)
    assert [p.name for p in out.iterdir()] == [name]
    exported = (out / name).read_bytes()
    assert json.loads(exported) == {"1": FAST, "16": DEFAULT}
    ok("publish", "--device", TYPED, "--db", db)
    with service(db) as client:
        listed = client.get(f"/devices/{quote(INTEL)}/configs")
        assert [f["file_name"] for f in listed.json()["files"]] == [name], listed.text
        assert client.get(f"/devices/{quote(INTEL)}/configs/{quote(name)}").content == exported
        assert client.get(f"/devices/{quote(TYPED)}/configs").status_code == 200


NAME = config_file_name(576, 7168, "NVIDIA_L20")
NAME_B = config_file_name(1536, 7168, "NVIDIA_L20")
SHIPPED = dump_config_file({1: SLOW, 4096: FAST})
LEFT_OUT = "config 128x256x128 g64 w8 s5 needs 197632 bytes of shared memory"
SOURCES = "2 file(s) from 'shipped L20', 'vllm-0.33.0'; 1 entry left out, cannot launch there"


def import_shipped(tmp_path: Path, *flags: str) -> str:
    """A store holding NAME imported by `tuner import` as 'vllm-0.33.0', unchecked."""
    db = f"sqlite:///{tmp_path / 'tuner.db'}"
    (tmp_path / NAME).write_text(SHIPPED)
    ok("import", str(tmp_path / NAME), "--label", "vllm-0.33.0", "--db", db, "--no-check", *flags)
    return db


def import_two_sources(tmp_path: Path) -> str:
    """An L20 store with imports only: NAME (unchecked), and NAME_B recorded as `tuner
    import`'s launch check stores it on sm89 (M=1 left out)."""
    db = import_shipped(tmp_path, "--no-publish")
    with session_on(db) as session:
        shape = {"device_name": "NVIDIA_L20", "N": 1536, "K": 7168, "block_shape": (128, 128)}
        shape |= {"family": "dense", "shape_params": ""}
        record_import(
            session,
            **shape,
            label="shipped L20",
            file_name=NAME_B,
            sha256="ab" * 32,
            configs={1: SLOW, 64: FAST},
            checked_arch=89,
            cannot_launch={1: LEFT_OUT},
        )
    return db


def test_imported_only_device_is_exported_published_and_served(tmp_path: Path) -> None:
    db = import_shipped(tmp_path)
    out = tmp_path / "out"
    exported = ok("export", "--device", "NVIDIA_L20", "--out", str(out), "--db", db)
    assert (out / NAME).read_text() == SHIPPED
    note = "M=1: imported from 'vllm-0.33.0', not measured here (no comparison with the default)"
    assert note in " ".join(exported.stdout.split())
    with service(db) as client:
        (item,) = client.get("/devices/NVIDIA_L20/configs").json()["files"]
        assert (item["file_name"], item["m_keys"]) == (NAME, [1, 4096])
        assert client.get(f"/devices/NVIDIA_L20/configs/{NAME}").content == SHIPPED.encode()
        assert client.get("/devices/NVIDIA_L20/preview/configs").status_code == 200
        assert client.get("/devices/NVIDIA_L20/imports").status_code == 200
        (release,) = client.get("/devices/NVIDIA_L20/releases").json()
    assert release["number"] == 1  # `tuner import` published it


def test_imported_only_device_is_listed_reported_and_named_by_winners(tmp_path: Path) -> None:
    db = import_two_sources(tmp_path)
    with service(db) as client:
        (device,) = client.get("/devices").json()
        html = client.get("/devices/L20/report").text
    assert (device["device_name"], device["shapes"], device["tuned_with"]) == ("NVIDIA_L20", [], [])
    imported = [
        (i["label"], i["file_name"], i["N"], i["m_keys"], i["m_left_out"])
        for i in device["imported"]
    ]
    assert imported == [
        ("vllm-0.33.0", NAME, 576, [1, 4096], []),
        ("shipped L20", NAME_B, 1536, [1, 64], [1]),
    ]
    assert device["imported"][0]["block_shape"] == [128, 128]
    note = f"only imported files ({SOURCES}), no sweeps: nothing was measured here"
    assert device["note"] == note
    html_sources = SOURCES.replace("'", "&#39;")
    assert "No shapes in the store" not in html and "; 2 shape(s)." in html
    assert (
        f'<p class="note" id="imported-only">only imported files ({html_sources}), no sweeps: '
        "nothing was measured here.</p>"
    ) in html
    assert (
        f"<tr><td class=l>vllm-0.33.0</td><td class=l>{NAME}</td><td>576</td><td>7168</td>"
        "<td class=l>1, 4096</td><td class=l>not checked</td><td class=l>none</td></tr>"
    ) in html
    assert (
        f"<tr><td class=l>shipped L20</td><td class=l>{NAME_B}</td><td>1536</td><td>7168</td>"
        f"<td class=l>1, 64</td><td class=l>sm89</td><td class=l>M=1: {LEFT_OUT}</td></tr>"
    ) in html
    section = html[html.index('id="shape-1536x7168"') :]
    section = section[: section.index("</section>")]
    assert (
        "M grid requested: none; measured winners for 0 M; imported entries, not measured, "
        "for 1 M (from &#39;shipped L20&#39;)."
    ) in section
    assert (
        "<tr><td>1</td><td class=l>-</td>" + "<td>-</td>" * 5 + "<td class=l>left out: imported "
        "from &#39;shipped L20&#39;, cannot launch here</td><td>-</td><td class=l>-</td></tr>"
    ) in section
    # An imported row's cells: tests/api/test_report.py (test_rooflines).
    winners = invoke("winners", "--device", "L20", "--db", db)
    assert winners.stdout.splitlines() == [
        f"NVIDIA_L20: no winners, only imported files ({SOURCES})"
    ], winners.output


def test_swept_device_lists_its_imports_without_the_imported_only_note(tmp_path: Path) -> None:
    db = import_two_sources(tmp_path)
    fill(
        db,
        {(576, 7168, 1): [(DEFAULT, True, "ok", 20.0), (FAST, False, "ok", 10.0)]},
        m_values=(1,),
    )
    with service(db) as client:
        (device,) = client.get("/devices").json()
        html = client.get("/devices/NVIDIA_L20/report").text
    assert device["note"] is None
    left_out = [(i["label"], i["m_left_out"]) for i in device["imported"]]
    assert left_out == [("vllm-0.33.0", []), ("shipped L20", [1])]
    assert [s["N"] for s in device["shapes"]] == [576]
    assert 'id="imported-only"' not in html and '<section id="imports">' in html
    winners = invoke("winners", "--device", "L20", "--db", db)
    assert "only imported files" not in winners.output
    assert winners.stdout.splitlines()[3].split() == (
        "576 7168 1 16x64x128 g1 w4 10.0 20.0 2.00x -".split()
    ), winners.output


def test_an_entry_that_cannot_launch_is_left_out_of_every_output(tmp_path: Path) -> None:
    db = import_two_sources(tmp_path)
    line = f"left out {NAME_B} M=1 (imported from 'shipped L20'): {LEFT_OUT}"
    exported = ok("export", "--device", "L20", "--out", str(tmp_path), "--db", db)
    assert json.loads((tmp_path / NAME_B).read_text()) == {"64": FAST}
    assert exported.stderr.splitlines() == [
        "NVIDIA_L20: imported entries only (`tuner import`), never measured here",
        line,
    ]
    published = invoke("publish", "--device", "L20", "--db", db)
    assert published.stdout.strip().endswith("; 1 entry left out, cannot launch there")
    mounts = invoke("mounts", "--device", "L20", "--format", "k8s", "--db", db)
    assert f"# {line}" in mounts.stdout.splitlines()
    data = [doc for doc in yaml.safe_load_all(mounts.stdout) if doc and "data" in doc][0]["data"]
    assert {"64": FAST} in [json.loads(text) for text in data.values()]
    with service(db) as client:
        text = client.get("/devices/L20/mounts", params={"format": "k8s"}).text
        (release,) = client.get("/devices/L20/releases").json()
        archive = client.get("/devices/L20/configs.zip").content
    assert text == mounts.stdout
    assert release["summary"]["left_out"] == [line]
    with zipfile.ZipFile(io.BytesIO(archive)) as zipped:
        assert json.loads(zipped.read(NAME_B)) == {"64": FAST}
        assert f"- {line}" in zipped.read("README.txt").decode().splitlines()
