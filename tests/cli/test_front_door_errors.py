"""One-line errors with the fix for a newcomer's usual mistakes: a mistyped model or
device gets the closest known name, a busy port, --out naming a file, a JSON that is no model's
config."""

import socket

from typer.testing import CliRunner

from tuner.cli.app import app

runner = CliRunner()


def error_line(args):
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    return result.stderr.strip().splitlines()


def test_a_model_in_the_wrong_case_gets_its_name():
    assert error_line(["shapes", "show", "qwen3.8-27B"]) == [
        "error: unknown model 'qwen3.8-27B' (did you mean 'qwen3.8-27b'?); known: deepseek-v3, "
        "qwen3-30b-a3b-fp8, qwen3.8-27b, tiny, tiny-moe"
    ]


def test_a_mistyped_device_gets_the_closest_gpu(tmp_path, no_visible_gpu):
    assert error_line(["sweep", "--device", "L2O", "--model", "tiny"]) == [
        "error: no visible GPU matches --device L2O (did you mean 'L20'?); visible: no CUDA GPU"
    ]
    assert error_line(
        [
            "sweep",
            "--device",
            "L2O",
            "--model",
            "tiny",
            "--no-run",
            "--db",
            f"sqlite:///{tmp_path}/t.db",
        ]
    ) == [
        "error: --device 'L2O' is not a GPU model name such as L20 or NVIDIA_H200 (did you "
        "mean 'L20'?)"
    ]
    assert not (tmp_path / "t.db").exists()


def test_a_device_missing_from_the_store_gets_the_closest_one(tmp_path):
    from db.connection import open_store

    open_store(f"sqlite:///{tmp_path}/t.db").dispose()
    assert error_line(
        ["winners", "--device", "interpeter", "--db", f"sqlite:///{tmp_path}/t.db"]
    ) == [
        "error: no device in the store matches 'interpeter' (did you mean 'interpreter'?); "
        "known: none; `tuner sweep --device interpeter` on that GPU, or `tuner import` of its "
        "files, adds it"
    ]


def test_out_naming_a_file(tmp_path):
    taken = tmp_path / "configs"
    taken.write_text("x")
    assert error_line(
        ["export", "--device", "L20", "--out", str(taken), "--db", f"sqlite:///{tmp_path}/none.db"]
    ) == [f"error: --out {taken} is a file, not a folder: name a folder (created if absent)"]
    assert error_line(
        ["pull", "--server", "http://127.0.0.1:9", "--device", "L20", "--out", str(taken)]
    ) == [f"error: --out {taken} is a file, not a folder: name a folder (created if absent)"]


def test_a_json_that_is_no_models_config(tmp_path):
    other = tmp_path / "package.json"
    other.write_text('{"name": "web", "version": "1.0.0"}')
    assert error_line(["shapes", "from-config", str(other), "--tp", "1"]) == [
        f"error: {other}: not a model's config.json (no architectures, model_type or "
        "hidden_size): pass the config.json of a Hugging Face checkpoint"
    ]


def test_serve_on_a_busy_port(tmp_path):
    from db.connection import open_store

    open_store(f"sqlite:///{tmp_path}/t.db").dispose()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        assert error_line(["serve", "--port", str(port), "--db", f"sqlite:///{tmp_path}/t.db"]) == [
            f"error: port {port} on 127.0.0.1 is in use (another tuner serve?): pass a free "
            "--port, or stop the server that holds it"
        ]
