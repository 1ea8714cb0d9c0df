"""Our winners vs vLLM's shipped config files vs vLLM's default config, timed side by side per M.

    python bench/vs_shipped.py --db sqlite:///tuner.db            # the visible GPU
    python bench/vs_shipped.py --dry-run --device NVIDIA_H200      # what would be timed; any host
    python bench/vs_shipped.py --shapes 7168,2048 --m 1,16,4096    # a shorter run

For each shape of the model (every TP size it lists) that vLLM ships a file for on the device,
and each M key of that file, three configs: ours (what our merged file would make vLLM run at
M: the store's winners with the no-regression rule of tuner.files.merge, looked up by vLLM's
nearest-key rule), the shipped file's entry for M, and vLLM's default config. Each distinct
config is checked against the float64 reference, then the ones that pass are re-timed
interleaved (A B C A B C ...) in one run (tuner.measure.noise.retime_interleaved), so drift
hits them alike. The copy and FP8-mm ceilings are measured once in the same run
(tuner.measure.roofline) and our latency is put against them. Writes
results/vs_shipped_<device_name>.json with device, versions, date and command.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tuner.compare.shipped import (
    BLOCK_SHAPE,
    OUT_DTYPE,
    ROUNDS,
    Entry,
    compare,
    format_table,
    our_files,
    plan,
    read_shipped,
    result_doc,
)

REPO = Path(__file__).resolve().parents[1]
# vLLM 0.33.0's shipped dense files, one folder per device: bench/fetch_wheels.sh lays them out
# there from the wheel.
SHIPPED_DIR = REPO / ".shipped" / "vllm-0.33.0"
MODEL = "deepseek-v3"  # shapes/<MODEL>.toml, all TP sizes unless --tp
OUT_DIR = REPO / "bench" / "results"  # where the JSON result goes


class UsageError(Exception):
    """Bad arguments or inputs: one line for the user, exit status 2."""


def _pair(text: str) -> tuple[int, int]:
    try:
        N, K = (int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N,K (two integers), got {text!r}") from None
    return N, K


def _ints(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected integers like 1,16,4096, got {text!r}"
        ) from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", help="device_name (default: the visible GPU's)")
    parser.add_argument(
        "--db", help="store URL with our winners (default: $TUNER_DB_URL or sqlite:///tuner.db)"
    )
    parser.add_argument(
        "--shipped-dir",
        type=Path,
        default=SHIPPED_DIR,
        help="folder of vLLM's files, one subfolder per device_name [default: "
        ".shipped/vllm-0.33.0, made by bench/fetch_wheels.sh]",
    )
    parser.add_argument("--model", default=MODEL, help="shapes/<model>.toml")
    parser.add_argument(
        "--tp",
        type=int,
        action="append",
        help="only this TP size's shapes (repeat); default every TP size",
    )
    parser.add_argument(
        "--shapes",
        type=_pair,
        action="append",
        metavar="N,K",
        help="only these shapes (repeat); default: the model's",
    )
    parser.add_argument("--m", type=_ints, help="only these M keys, e.g. 1,16,4096")
    parser.add_argument("--out-dtype", choices=("bfloat16", "float16"), default=OUT_DTYPE)
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="interleaved rounds per M")
    parser.add_argument(
        "--out", type=Path, help="JSON path (default: bench/results/vs_shipped_<device_name>.json)"
    )
    parser.add_argument(
        "--allow-stale",
        action="store_true",
        help="our winners from any kernel hash and Triton version (default: the current ones only)",
    )
    parser.add_argument("--dry-run", action="store_true", help="list what would be timed")
    return parser


def _model_shapes(model: str, tps: Sequence[int] | None) -> list[tuple[int, int]]:
    from tuner.inputs.shapes import ShapesFileError, UnknownModelError, load_shapes, tp_sizes

    try:
        seen = {}
        for tp in tps or tp_sizes(model):
            for shape in load_shapes(model, tp).pairs():
                seen.setdefault(tuple(shape), None)
    except (UnknownModelError, ShapesFileError) as exc:
        raise UsageError(str(exc)) from None
    return list(seen)


def _device_name(device: str | None, shipped_dir: Path, dry_run: bool) -> tuple[str, Any]:
    """(device_name, GpuInfo or None); a real run needs a visible GPU of that name."""
    from tuner.inputs.devices import matches, resolve
    from tuner.run.gpus import visible_gpus

    gpus = visible_gpus()
    if device is None:
        if not gpus:
            raise UsageError(
                "no CUDA GPU visible: pass --device NAME (with --dry-run to see "
                "the plan on this host)"
            )
        return gpus[0].device_name, gpus[0]
    gpu = next((g for g in gpus if matches(device, g.device_name)), None)
    if gpu is not None:
        return gpu.device_name, gpu
    if not dry_run:
        seen = ", ".join(g.device_name for g in gpus) or "none"
        raise UsageError(f"no visible GPU is {device} (visible: {seen}); timing needs one")
    known = [p.name for p in shipped_dir.iterdir() if p.is_dir()] if shipped_dir.is_dir() else []
    names = resolve(device, known)
    return (names[0] if names else device), None


def _winner_filter(allow_stale: bool) -> dict[str, str | None]:
    """db.repo.winners' provenance filter: this kernel's hash and the installed Triton's
    major.minor, or no filter with --allow-stale."""
    from tuner.files.provenance import current_kernel_hash, installed_triton_minor

    if allow_stale:
        return {"kernel_hash": None, "triton_minor": None}
    return {"kernel_hash": current_kernel_hash(), "triton_minor": installed_triton_minor()}


def _scope_text(scope: Mapping[str, str | None]) -> str:
    if scope["kernel_hash"] is None:
        return "any kernel and Triton: --allow-stale"
    return f"kernel {scope['kernel_hash'][:12]}, Triton {scope['triton_minor'] or 'any'}"


def _store_winners(
    url: str | None, device_name: str, out_dtype: str, scope: Mapping[str, str | None]
) -> list[Any]:
    """The store's winners of the device within `scope` (`_winner_filter`); none, with a
    warning, when no --db was given and the default SQLite file does not exist."""
    from sqlalchemy.engine import make_url

    from db import repo
    from db.connection import SchemaError, default_db_url, open_store, session_scope

    given = url is not None
    url = url or default_db_url()
    parsed = make_url(url)
    if (
        parsed.get_backend_name() == "sqlite"
        and parsed.database
        and not Path(parsed.database).exists()
    ):
        if given:
            raise UsageError(f"no store at {parsed.database}")
        print(
            f"vs_shipped: no store at {parsed.database} (pass --db URL): timing the shipped "
            "and default configs only",
            file=sys.stderr,
        )
        return []
    try:
        engine = open_store(url)
    except SchemaError as exc:
        raise UsageError(str(exc)) from None
    try:
        with session_scope(engine) as session:
            return repo.winners(session, device_name=device_name, out_dtype=out_dtype, **scope)
    finally:
        engine.dispose()


def _describe(entry: Entry) -> str:
    ours = "-" if entry.ours is None else f"{entry.ours.short()} (key {entry.ours_key})"
    return (
        f"N={entry.N} K={entry.K} M={entry.M}: ours {ours}; shipped {entry.shipped.short()}; "
        f"default {entry.default.short()}"
    )


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """The command: plan, then (unless --dry-run) time on the GPU and write the JSON."""
    if args.rounds < 2:
        raise UsageError(f"--rounds must be at least 2, got {args.rounds}")
    device_name, gpu = _device_name(args.device, args.shipped_dir, args.dry_run)
    try:
        shipped = read_shipped(args.shipped_dir, device_name)
    except (OSError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    shapes = args.shapes or _model_shapes(args.model, args.tp)
    missing = [f"{N},{K}" for N, K in shapes if (N, K) not in shipped]
    scope = _winner_filter(args.allow_stale)
    ours = our_files(_store_winners(args.db, device_name, args.out_dtype, scope))
    entries = plan(shipped, ours, shapes, m_values=args.m)
    print(
        f"{device_name}: {len(entries)} (shape, M) in {len({(e.N, e.K) for e in entries})} "
        f"shape(s) with shipped files; no shipped file for {', '.join(missing) or 'none'}; "
        f"our winners for {len(ours)} shape(s) ({_scope_text(scope)})",
        flush=True,
    )
    if args.dry_run:
        for entry in entries:
            print(_describe(entry))
        return 0
    if not entries:
        raise UsageError("nothing to time")
    import torch

    from tuner.measure.roofline import measure_ceilings
    from tuner.measure.runner import KernelRunner
    from tuner.measure.runners import GpuRunner
    from tuner.run.worker import collect_environment

    torch.cuda.set_device(gpu.index)
    env = collect_environment(GpuRunner(gpu.device_name))
    ceilings = measure_ceilings("cuda")
    print(
        f"ceilings: copy {ceilings['copy_gbps']:,.0f} GB/s, FP8 mm "
        f"{ceilings['fp8_mm_tflops']:,.1f} TFLOP/s",
        flush=True,
    )
    rows = compare(
        entries,
        lambda problem: KernelRunner(problem, device="cuda"),
        rounds=args.rounds,
        ceilings=ceilings,
        out_dtype=args.out_dtype,
        progress=lambda row: print(format_table([row]).splitlines()[1], flush=True),
    )
    meta = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join(["python", "bench/vs_shipped.py", *argv]),
        "device_name": device_name,
        "gpu_name": env["gpu_name"],
        "compute_capability": env["compute_capability"],
        "backend": "cuda",
        "versions": {
            k: env[k] for k in ("torch", "triton", "tuner", "cuda", "driver", "kernel_hash")
        },
        "shipped_files": args.shipped_dir.name,
        "model": args.model,
        "tp": args.tp,
        "shapes": [list(s) for s in shapes],
        "m": args.m,
        "out_dtype": args.out_dtype,
        "block_shape": list(BLOCK_SHAPE),
        "rounds": args.rounds,
        "ceilings": ceilings,
        "winners_from": scope,
    }
    print(format_table(rows))
    doc = result_doc(rows, meta)
    print(f"summary: {doc['summary']}")
    out = args.out or OUT_DIR / f"vs_shipped_{device_name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments and run; a usage problem is one line on stderr and exit status 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    try:
        return run(args, argv)
    except UsageError as exc:
        print(f"vs_shipped: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
