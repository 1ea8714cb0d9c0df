"""The report's section on which kernel vLLM runs: the per-architecture facts
(tuner.inputs.backends) and the latest `tuner compare` run of the device, if any."""

from __future__ import annotations

import re
from collections.abc import Sequence
from html import escape

from db.repo import ComparisonInfo
from tuner.inputs.backends import backend_lines, device_advice


def _table(run: ComparisonInfo, N: int, K: int) -> str:
    points = [p for p in run.points if (p.N, p.K) == (N, K)]
    backends = list(dict.fromkeys(p.backend for p in points if p.status != "unavailable"))
    ms = sorted({p.M for p in points})
    by = {(p.M, p.backend): p for p in points}
    head = "<tr><th>M</th>" + "".join(f"<th>{escape(b)}</th>" for b in backends) + "</tr>"
    rows = []
    for M in ms:
        cells = []
        for backend in backends:
            point = by.get((M, backend))
            if point is None:
                cells.append("<td>-</td>")
            elif point.status == "ok":
                cells.append(f'<td title="{escape(point.note)}">{point.latency_us:.1f}</td>')
            else:
                cells.append(f'<td title="{escape(point.note)}">{escape(point.status)}</td>')
        rows.append(f"<tr><td>{M}</td>{''.join(cells)}</tr>")
    return f"<h3>N={N}, K={K}: latency_us</h3><table>{head}{''.join(rows)}</table>"


def _html(text: str) -> str:
    """Escaped text with its `code` spans as <code> (the facts are written for plain text)."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escape(text, quote=False))


def backends_section(
    device_name: str, compute_capability: str | None, comparisons: Sequence[ComparisonInfo]
) -> str:
    """HTML: whether vLLM 0.33.0 reads this device's files (`device_advice`), then which
    kernel it runs per architecture (this device's marked when its compute capability is
    known), then the newest comparison's verdicts and tables.

    Args:
        device_name: vLLM's device key.
        compute_capability: e.g. "8.9", from the device's newest environment; None if unknown.
        comparisons: the device's comparisons, newest first (db.repo.list_comparisons).
    """
    advice = device_advice(device_name, [compute_capability or ""]).lines()
    facts = backend_lines(compute_capability)
    parts = [
        '<section id="backends"><h2>Which kernel vLLM runs</h2>'
        + "".join(f"<p>{_html(line)}</p>" for line in advice)
        + f"<p>{_html(facts[0])}</p><ul>"
        + "".join(f"<li>{_html(line[2:])}</li>" for line in facts[1:])
        + "</ul>"
    ]
    if not comparisons:
        parts.append("<p>No <code>tuner compare</code> run for this device yet.</p>")
    else:
        run = comparisons[0]
        kernel = "vLLM " + run.vllm + "'s" if run.kernel_source == "vllm" else "the builtin"
        parts.append(
            f"<p>Latest <code>tuner compare</code>: {escape(run.model)} TP {run.tp} on "
            f"{escape(run.gpu_name)}, {escape(run.created_at.isoformat())}; the "
            f"Triton columns timed {escape(kernel)} Triton kernel.</p><ul>"
            + "".join(f"<li>{escape(line)}</li>" for line in run.verdicts)
            + "</ul>"
        )
        for N, K in dict.fromkeys((p.N, p.K) for p in run.points):
            parts.append(_table(run, N, K))
    parts.append("</section>")
    return "".join(parts)
