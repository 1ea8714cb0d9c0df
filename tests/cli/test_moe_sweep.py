"""`tuner sweep --model tiny-moe` on the interpreter tunes the model's dense and MoE shapes (one
sweep each), publishes, and `tuner export` writes vLLM's E=... file, which downloads over HTTP
byte for byte as exported; winners, verify, mounts and the report take it; MoE shapes in shapes
files."""

import importlib.metadata
import json

import pytest

from tests.cli.common import ok, query, service
from tuner.inputs.shapes import ShapesFileError, _load_text, load_shapes
from tuner.kernels.moe.family import expert_shape
from tuner.kernels.moe.space import default_config
from tuner.kernels.registry import get_family


def test_one_sweep_command_tunes_dense_and_moe_shapes(tmp_path, db, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs.json").write_text(json.dumps([default_config(1).as_dict()]))
    sweep = "sweep --device interpreter --model tiny-moe --m 1 --strategy grid --configs"
    run = ok(*sweep.split(), "configs.json", "--interpreter-reps", "1", "--db", db)
    heads = [
        line.split(", store")[0]
        for line in run.stdout.splitlines()
        if line.startswith("sweep ") and "(new)" in line
    ]
    assert heads == [
        "sweep 1 (new): TRITON_INTERPRETER, tiny-moe TP 1, 1 shapes x 1 M, grid, 1 worker(s)",
        "sweep 2 (new): TRITON_INTERPRETER, tiny-moe TP 1, MoE E=4 N=64 K=128 top_k=2 x 1 M, "
        "grid, 1 worker(s)",
    ]
    store = tmp_path / "tuner.db"
    tasks = query(store, "SELECT family, shape_params, N, K, M, state FROM tasks ORDER BY task_id")
    assert tasks == [("dense", "", 256, 128, 1, "done"), ("moe", "E=4,top_k=2", 64, 128, 1, "done")]
    assert query(store, "SELECT DISTINCT status FROM trials") == [("ok",)]
    ok("export", "--device", "interpreter", "--out", "out", "--db", db)
    name = "E=4,N=64,device_name=TRITON_INTERPRETER,dtype=fp8_w8a8,block_shape=[128,128].json"
    assert json.loads((tmp_path / "out" / name).read_text()) == {
        "triton_version": importlib.metadata.version("triton"),
        "1": default_config(1).as_dict(),
    }
    dense_name = (
        "N=256,K=128,device_name=TRITON_INTERPRETER,dtype=fp8_w8a8,block_shape=[128,128].json"
    )
    assert (tmp_path / "out" / dense_name).is_file()
    assert run.stdout.splitlines()[-1].startswith(
        "published TRITON_INTERPRETER release 1: 2 file(s), content "
    )
    exported = (tmp_path / "out" / name).read_bytes()
    MOE, DENSE = name, dense_name
    with service(db) as client:
        listing = client.get("/devices/TRITON_INTERPRETER/configs")
        assert listing.status_code == 200, listing.text
        assert [f["file_name"] for f in listing.json()["files"]] == [MOE, DENSE]
        download = client.get(f"/devices/TRITON_INTERPRETER/configs/{MOE}")
        assert download.status_code == 200, download.text
        assert download.content == exported
        assert download.headers["X-Tuner-Release"] == "1"
        # by an alias of the device: the release's files are found by their family's parser
        by_alias = client.get(f"/devices/interpreter/configs/{MOE}")
        assert (by_alias.status_code, by_alias.content) == (200, exported), by_alias.text
        preview = client.get(f"/devices/TRITON_INTERPRETER/preview/configs/{MOE}")
        assert (preview.status_code, preview.content) == (200, exported)
        report = client.get("/devices/TRITON_INTERPRETER/report").text
        assert (
            "<h2>MoE E=4, N=64, K=128 (top_k=2), block_shape [128, 128] (tiny-moe)</h2>" in report
        )
        mounts = client.get("/devices/TRITON_INTERPRETER/mounts").text
        assert mounts.splitlines()[-2:] == [
            '  -v "$PWD/configs:/opt/blockfp8-tuner/moe-configs:ro" \\',
            "  -e VLLM_TUNED_CONFIG_FOLDER=/opt/blockfp8-tuner/moe-configs \\",
        ]
    winners = ok("winners", "--device", "interpreter", "--db", db, env={"COLUMNS": "200"})
    kernels = [
        line.split()[:4]
        for line in winners.stdout.splitlines()
        if line.startswith(("dense", "moe"))
    ]
    assert kernels == [["dense", "256", "128", "1"], ["moe", "E=4,top_k=2", "64", "128"]]
    verify = ok("verify", "--device", "interpreter", "--model", "tiny-moe", "--db", db)
    assert verify.stdout.splitlines()[0] == (
        "note: MoE files are not verified yet (tiny-moe TP 1: E=4 N=64)"
    )

    # SGLang's get_moe_configs int()s every key: its files carry no "triton_version".
    ok(*"export --device interpreter --out sgl --engine sglang --db".split(), db)
    assert (tmp_path / "sgl" / name.replace("[128,128]", "[128, 128]")).read_text() == (
        json.dumps({"1": default_config(1).as_dict()}, indent=4) + "\n"
    )
    # Each family's trials carry the hash of its own kernel ...
    hashes = query(
        store,
        "SELECT DISTINCT tasks.family, environments.kernel_hash FROM trials "
        "JOIN tasks ON trials.task_id = tasks.task_id JOIN environments "
        "ON trials.environment_id = environments.environment_id ORDER BY tasks.family",
    )
    assert hashes == [
        ("dense", get_family("dense").source("builtin").kernel_hash),
        ("moe", get_family("moe").source("builtin").kernel_hash),
    ]
    # ... so an MoE kernel change leaves the MoE trials stale and the dense ones current.
    query(
        store,
        "UPDATE environments SET kernel_hash = 'an older moe kernel' WHERE kernel_hash = ?",
        get_family("moe").source("builtin").kernel_hash,
    )
    ok("export", "--device", "interpreter", "--out", "out2", "--db", db)
    assert sorted(p.name for p in (tmp_path / "out2").glob("*.json")) == [dense_name]


def test_moe_shapes_are_read_and_checked() -> None:
    assert load_shapes("qwen3-30b-a3b-fp8", 2).of("moe") == (expert_shape(128, 384, 2048, 8),)
    assert load_shapes("deepseek-v3", 8).of("moe") == (expert_shape(256, 256, 7168, 8),)
    head = 'model = "x"\nblock_shape = [128, 128]\n[tp.1]\nsource = "s"\n'
    doc = _load_text(head + "moe = [[8, 64, 128, 2]]\n", "x.toml", "x")
    assert doc[1].of("moe") == (expert_shape(8, 64, 128, 2),)
    with pytest.raises(ShapesFileError, match=r"x.toml, TP 1: moe top_k = 9 is more than E = 8"):
        _load_text(head + "moe = [[8, 64, 128, 9]]\n", "x.toml", "x")
    with pytest.raises(ShapesFileError, match=r"moe shape \[8, 64\] is not \[E, N, K, top_k\]"):
        _load_text(head + "moe = [[8, 64]]\n", "x.toml", "x")
    with pytest.raises(ShapesFileError, match="shapes must be a non-empty list of"):
        _load_text(head, "x.toml", "x")
