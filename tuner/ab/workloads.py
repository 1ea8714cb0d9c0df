"""The serving workloads of `tuner ab`, as the arguments of vLLM's own load client (`vllm bench
serve`), and the metrics each one reads back from the client's result JSON.

Facts about `vllm bench serve` (vllm/benchmarks/serve.py and datasets/datasets.py, vLLM 0.32.0
and 0.33.0):
- `--dataset-name random` draws `--random-prefix-len` prefix tokens first from a generator seeded
  with `--seed`, then each prompt's own `--input-len` tokens: one seed gives one prefix
  shared by every prompt of the run, and another seed another prefix. `--random-range-ratio`
  defaults to 0 (every prompt the set length). `--input-len` and `--output-len` set the lengths
  of any dataset (`--output-len` also ShareGPT's).
- `--num-warmups N` sends the run's first prompt N times before the timed requests.
- `--save-result --result-dir D --result-filename F` writes D/F: `completed`, `failed`,
  `duration` (s), `total_input_tokens`, `output_throughput` (tok/s), `median_ttft_ms`,
  `median_tpot_ms` ((latency - TTFT) / (output tokens - 1) per request) and, for each metric of
  `--percentile-metrics` and each `--metric-percentiles` P, `p{P}_{metric}_ms`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ClientError(Exception):
    """A client run that did not finish every request, or whose result file is unreadable."""


def metric_value(metric: str, result: Mapping[str, Any]) -> float:
    """One metric from a client result JSON. One request's decode rate is (output tokens - 1) /
    (last token time - first token time), the inverse of its TPOT; the median over requests of
    the inverse is the inverse of the median."""
    if metric == "input_tok_s":
        return float(result["total_input_tokens"] / result["duration"])
    if metric == "decode_tok_s":
        return 1000.0 / result["median_tpot_ms"]
    key = {"ttft_ms": "median_ttft_ms", "output_tok_s": "output_throughput"}.get(metric, metric)
    return float(result[key])


@dataclass(frozen=True)
class Load:
    """The sizes every workload takes its own from (settable on the command line).

    Attributes:
        input_len: prompt tokens (prefill prompts; the stable prefix of the others).
        output_len: output tokens of `decode` and `concurrent`.
        prompts: timed requests per client run.
        streams: concurrent requests of `concurrent`.
        dataset: a ShareGPT-format JSON file to take prompts from instead of random tokens
            (then prompts and output lengths come from the file).
    """

    input_len: int = 3500
    output_len: int = 512
    prompts: int = 16
    streams: int = 4
    dataset: Path | None = None


# Tokens that follow a stable prefix: short, so that the prefix dominates the prompt.
TAIL_LEN = 64


@dataclass(frozen=True)
class Workload:
    """A named load ("prefill-cold", "prefill-cached", "decode" or "concurrent"), the metrics
    compared on it (`metric_value`) and one line for `--help` and the docs."""

    name: str
    metrics: tuple[str, ...]
    about: str

    def client_args(self, load: Load, seed: int) -> list[str]:
        """The client's dataset, length and concurrency arguments for one run.

        Args:
            load: the sizes.
            seed: the run's seed; a new seed is a new prefix and new prompts, so no run reuses
                another's prefix cache.
        """
        args = ["--num-prompts", str(load.prompts), "--seed", str(seed)]
        if load.dataset is not None:
            args += ["--dataset-name", "sharegpt", "--dataset-path", str(load.dataset)]
        elif self.name == "prefill-cold":
            args += ["--dataset-name", "random", "--input-len", str(load.input_len)]
        else:
            args += ["--dataset-name", "random", "--random-prefix-len", str(load.input_len)]
            args += ["--input-len", str(TAIL_LEN)]
        prefill = self.name.startswith("prefill")
        args += ["--output-len", "1" if prefill else str(load.output_len)]
        if self.name == "prefill-cached":
            args += ["--num-warmups", "1"]
        streams = load.streams if self.name == "concurrent" else 1
        return [*args, "--max-concurrency", str(streams), "--ignore-eos", "--temperature", "0"]

    def read(self, result: Mapping[str, Any], load: Load) -> dict[str, float]:
        """This workload's metrics from a client result JSON.

        Raises:
            ClientError: a request failed or did not complete, or a key is missing.
        """
        if result.get("failed") or result.get("completed") != load.prompts:
            raise ClientError(
                f"{self.name}: {result.get('completed')} of {load.prompts} requests completed, "
                f"{result.get('failed')} failed"
            )
        try:
            return {m: metric_value(m, result) for m in self.metrics}
        except (KeyError, TypeError, ZeroDivisionError) as exc:
            raise ClientError(f"{self.name}: the client's result lacks {exc}") from None


_WORKLOADS = {
    "prefill-cold": (
        ("ttft_ms", "input_tok_s"),
        "prompts of --input-len tokens sharing no prefix, 1 output token, one at a time",
    ),
    "prefill-cached": (
        ("ttft_ms",),
        "a stable --input-len-token prefix with a varying tail, warmed once, 1 output token",
    ),
    "decode": (
        ("decode_tok_s",),
        "a stable prefix, --output-len output tokens (ignore_eos, temperature 0), one stream",
    ),
    "concurrent": (
        ("output_tok_s", "p50_e2el_ms", "p95_e2el_ms"),
        "--streams concurrent requests of --output-len tokens: output tok/s, P50/P95 latency",
    ),
}
WORKLOADS = {name: Workload(name, *data) for name, data in _WORKLOADS.items()}


def client_argv(
    client: Sequence[str],
    workload: Workload,
    load: Load,
    base_url: str,
    seed: int,
    result: Path,
    tokenizer: str | None = None,
) -> list[str]:
    """The whole command line of one client run of `client` (e.g. ["vllm", "bench", "serve"])
    against the server at `base_url`: what to send (`Workload.client_args`), the result JSON
    file it writes, and the tokenizer's name or folder when the served model's name is not one.
    """
    argv = [*client, "--backend", "openai", "--base-url", base_url]
    argv += workload.client_args(load, seed)
    argv += ["--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,95"]
    argv += ["--save-result", "--result-dir", str(result.parent), "--result-filename", result.name]
    argv += ["--disable-tqdm"]
    return argv + (["--tokenizer", tokenizer] if tokenizer else [])
