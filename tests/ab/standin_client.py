"""A stand-in for `vllm bench serve` in the fast tests of `tuner ab`: it writes a result JSON with
the keys `tuner.ab.workloads` reads, its values set per server port by a JSON file, with a small
jitter by seed (the real client and server run in tests/ab/test_real_server.py).

    python standin_client.py SETTINGS.json <the client arguments tuner ab passes>

SETTINGS: {"ports": {"<port>": {"ttft_ms": .., "tok_s": ..}}, "fail_seeds": [..],
"calls": "<file each call appends its seed to>", "hold_seeds": [seeds whose call hangs until
killed], "mute_seeds": [seeds whose call writes no result]}.
"""

import argparse
import json
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

settings = json.loads(Path(sys.argv[1]).read_text())
parser = argparse.ArgumentParser()
for name in ("--base-url", "--result-dir", "--result-filename"):
    parser.add_argument(name)
parser.add_argument("--seed", type=int)
parser.add_argument("--num-prompts", type=int)
args, _ = parser.parse_known_args(sys.argv[2:])
with open(settings["calls"], "a") as calls:
    calls.write(f"{args.seed}\n")
if args.seed in settings.get("fail_seeds", []):
    sys.exit(3)
if args.seed in settings.get("hold_seeds", []):  # a run in flight when Ctrl-C comes
    time.sleep(600)
if args.seed in settings.get("mute_seeds", []):  # exits 0 with no result written
    sys.exit(0)
port = str(urlsplit(args.base_url).port)
arm = settings["ports"][port]
jitter = 1 + 0.005 * ((args.seed * 7) % 5 - 2)  # within +-1%
ttft, tok_s = arm["ttft_ms"] * jitter, arm["tok_s"] / jitter
result = {
    "completed": args.num_prompts,
    "failed": 0,
    "duration": 1.0,
    "total_input_tokens": 1000 * args.num_prompts,
    "median_ttft_ms": ttft,
    "median_tpot_ms": 1000 / tok_s,
    "output_throughput": tok_s,
    "p50_e2el_ms": ttft * 2,
    "p95_e2el_ms": ttft * 3,
}
Path(args.result_dir, args.result_filename).write_text(json.dumps(result))
