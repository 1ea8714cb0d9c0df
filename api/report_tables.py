"""Two tables of the HTML report (`api.report`): the device's imported files, and the cells of
the versions table (pure; no store access)."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from db.repo import ImportInfo


def imports_section(imports: Sequence[ImportInfo]) -> str:
    """The device's imported files: label, name, M keys, launch check and entries left out."""
    if not imports:
        return ""
    rows = []
    for item in imports:
        checked = f"sm{item.checked_arch}" if item.checked_arch is not None else "not checked"
        left_out = (
            "; ".join(f"M={M}: {reason}" for M, reason in sorted(item.cannot_launch.items()))
            or "none"
        )
        rows.append(
            f"<tr><td class=l>{escape(item.label)}</td><td class=l>{escape(item.file_name)}</td>"
            f"<td>{item.N}</td><td>{item.K}</td>"
            f"<td class=l>{', '.join(map(str, item.m_keys))}</td>"
            f"<td class=l>{escape(checked)}</td><td class=l>{escape(left_out)}</td></tr>"
        )
    return (
        '<section id="imports"><h2>Imported files</h2><p class="note">Entries kept from '
        "existing files (<code>tuner import</code>), never measured here: they fill M "
        "without a measured winner; entries that cannot launch on the device are left "
        "out.</p><table><tr><th class=l>label</th><th class=l>file</th><th>N</th><th>K</th>"
        "<th class=l>M keys</th><th class=l>launch check</th>"
        f"<th class=l>entries left out</th></tr>{''.join(rows)}</table></section>"
    )


# A kernel hash is shown by its first 12 hex digits (as the scope note names it); the cell's
# title holds the whole 64, so the versions table fits the page.
HASH_SHOWN = 12


def env_cell(column: str, value: str) -> str:
    """One cell of the versions table; the kernel hash shortened, whole in its title."""
    if column == "kernel_hash" and len(value) > HASH_SHOWN:
        return (
            f'<td class="l hash" title="{escape(value)}"><code>{escape(value[:HASH_SHOWN])}'
            "</code></td>"
        )
    return f"<td class=l>{escape(value)}</td>"
