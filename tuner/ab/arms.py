"""The two arms of an A/B: a running OpenAI-compatible server (its URL), or a command that starts
one (`vllm serve ...`, a `docker run ...`), started and stopped here with its log kept; and what
an arm's log proves about the config files it read.

Facts about vLLM 0.33.0's log (`get_w8a8_block_fp8_configs` in
model_executor/layers/quantization/utils/fp8_utils.py, `get_moe_configs` in
model_executor/layers/fused_moe/fused_moe.py): a file read is logged once per process as
`Using configuration from <path> for W8A8 Block FP8 kernel.` (`... for MoE layer.`), a file
missed as `... Config file not found at <path>` (`tuner.inputs.logs`).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tuner.inputs.logs import scan_lines

_READ_RE = re.compile(r"Using configuration from (?P<path>.+?) for (?:W8A8 Block FP8 kernel|MoE)")


class ArmError(Exception):
    """An arm that never became healthy, exited, or did not read what it should."""


@dataclass(frozen=True)
class Arm:
    """One side of the A/B.

    Attributes:
        name: "baseline" or "candidate".
        url: the server's base URL, e.g. "http://127.0.0.1:8000"; its `/health` answers 200 when
            it is ready.
        command: the argv that starts it, or () for a server already running.
        env: variables added to the command's environment.
    """

    name: str
    url: str
    command: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)


def healthy(url: str) -> bool:
    """Whether GET `{url}/health` answers 200 within 5 s."""
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/health", timeout=5) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


class Server:
    """A command arm's server: started in its own process group, its output appended to a log.

    Args:
        arm: the arm (with a command).
        log: the log file, appended to by every start.
    """

    def __init__(self, arm: Arm, log: Path) -> None:
        self.arm, self.log = arm, log
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float) -> None:
        """Start the command and wait until `/health` answers.

        Raises:
            ArmError: the URL already answers before the start (another server holds it), the
                command cannot start, it exits, or `/health` does not answer within timeout_s.
        """
        name, url = self.arm.name, self.arm.url
        if healthy(url):
            raise ArmError(f"{name}: {url} already answers before its command started")
        with self.log.open("ab") as out:
            out.write(f"--- tuner ab: {' '.join(self.arm.command)}\n".encode())
            out.flush()
            try:
                self._process = subprocess.Popen(
                    self.arm.command,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, **self.arm.env},
                    start_new_session=True,
                )
            except OSError as exc:
                raise ArmError(f"{name}: cannot run {self.arm.command[0]}: {exc}") from None
        deadline = time.monotonic() + timeout_s
        while not healthy(url):
            code = self._process.poll()
            if code is not None:
                raise ArmError(f"{name}: the server exited with code {code}; its log: {self.log}")
            if time.monotonic() > deadline:
                self.stop()
                raise ArmError(f"{name}: {url}/health did not answer in {timeout_s:.0f} s")
            time.sleep(0.25)

    def stop(self, grace_s: float = 60) -> None:
        """Stop the server's process group: SIGTERM, then SIGKILL after grace_s."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(process.pid, sig)
                process.wait(wait_s)
                return
            except subprocess.TimeoutExpired:
                continue
            except ProcessLookupError:
                return


@dataclass(frozen=True)
class Proof:
    """What a server's log says about the tuned config files.

    Attributes:
        read: names of the config files it read, in order of first appearance.
        missing: names of the block-FP8 config files it looked for and did not find.
        kernel_line: which linear kernel it chose and whether that reads the files
            (`tuner.inputs.logs.LogScan.kernel_line`), or None when the log does not say.
    """

    read: tuple[str, ...]
    missing: tuple[str, ...]
    kernel_line: str | None


def proof(log: Path) -> Proof:
    """Read an arm's log (see the module's docstring for the lines)."""
    lines = log.read_text(errors="replace").splitlines()
    read = [Path(m["path"]).name for line in lines if (m := _READ_RE.search(line))]
    scan = scan_lines(lines)
    missing = [Path(f.path).name for files in scan.files.values() for f in files]
    return Proof(tuple(dict.fromkeys(read)), tuple(dict.fromkeys(missing)), scan.kernel_line)
