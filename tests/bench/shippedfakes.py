"""Stand-ins for bench/vs_shipped.py tests: shipped files, winners and a
runner whose checks and timings are known."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tuner.core import TrialStatus
from tuner.files.format import dump_config_file
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.naming import config_file_name
from tuner.kernels.dense.space import default_config
from tuner.measure.trial import TrialResult

D = default_config()  # 64x128x128 g32 w4 s2
FAST = KernelConfig(16, 64, 128, 1, 4, 3)
SLOW = KernelConfig(128, 256, 128, 64, 8, 5)
S1 = KernelConfig(16, 32, 128, 64, 4, 4)
S64 = KernelConfig(32, 128, 128, 1, 4, 3)
S4096 = KernelConfig(128, 128, 128, 32, 8, 3)
WRONG = KernelConfig(16, 128, 128, 1, 4, 2)  # the fake runner says its output is wrong
A, B = (7168, 2048), (576, 7168)
SHIPPED = {A: {1: S1, 16: FAST, 64: S64}, B: {1: WRONG, 4096: S4096}}
# Fake base latency_us per (N, K, M, config); samples are base, base + 1, base + 2 repeating,
# so with 3 rounds every config's median is base + 1, p20 base + 0.4, p80 base + 1.6.
BASE = {
    (*A, 1, FAST): 10,
    (*A, 1, S1): 15,
    (*A, 1, D): 20,
    (*A, 16, FAST): 12,
    (*A, 16, D): 18,
    (*A, 64, S64): 25,
    (*A, 64, D): 30,
    (*B, 1, D): 40,
    (*B, 4096, S4096): 300,
    (*B, 4096, D): 200,
}
CEILINGS = {"copy_gbps": 4000.0, "fp8_mm_tflops": 1000.0}


@dataclass(frozen=True)
class Winner:
    """A db.repo.WinnerRow stand-in."""

    N: int
    K: int
    M: int
    config: dict
    latency_us: float
    default_latency_us: float | None
    is_default: bool = False
    block_shape: tuple[int, int] = (128, 128)
    device_name: str = "NVIDIA_H200"


# M=1: FAST beats the default; M=64: SLOW is slower than the default, so the file has the default.
WINNERS = [Winner(*A, 1, FAST.as_dict(), 10.0, 20.0), Winner(*A, 64, SLOW.as_dict(), 35.0, 30.0)]


class FakeRunner:
    """check() fails WRONG; sample_us() answers the BASE timings; every call is logged."""

    def __init__(self, problem, log):
        self.problem, self.log, self.count = problem, log, {}

    def check(self, config):
        self.log.append(("check", self.problem.M, config))
        if config == WRONG:
            return TrialResult(
                TrialStatus.WRONG_RESULT, rel_error=0.5, error="relative error 0.5 >= 0.01"
            )
        return TrialResult(TrialStatus.OK, rel_error=1e-3)

    def sample_us(self, config):
        self.log.append(("sample", self.problem.M, config))
        n = self.count[config] = self.count.get(config, -1) + 1
        p = self.problem
        return BASE[(p.N, p.K, p.M, config)] + n % 3


def write_shipped(folder: Path) -> Path:
    """Two H200 files of SHIPPED, one of another block_shape, and an empty L20 folder."""
    where = folder / "NVIDIA_H200"
    where.mkdir(parents=True)
    for (N, K), configs in SHIPPED.items():
        body = dump_config_file({M: c.as_dict() for M, c in configs.items()})
        (where / config_file_name(N, K, "NVIDIA_H200")).write_text(body)
    other = config_file_name(4096, 512, "NVIDIA_H200", (64, 64))  # another block_shape: left out
    (where / other).write_text(dump_config_file({1: D.as_dict()}))
    (folder / "NVIDIA_L20").mkdir()
    return folder
