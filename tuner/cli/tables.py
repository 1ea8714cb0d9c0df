"""Tables that stay readable on an 80-column terminal: a number or a header word is never split
or cut; text cells wrap between words; optional columns are left out (with a line saying so)
when the terminal is too narrow for all of them, and then a word too long for its text column
folds onto the next line, so no column is pushed off the edge."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text


@dataclass(frozen=True)
class Column:
    """One column of a `print_table`.

    Attributes:
        header: its title; split only between words.
        text: its cells wrap between words (configs, reasons); numeric cells never wrap.
        optional: left out first, last optional column first, when the table does not fit.
    """

    header: str
    text: bool = False
    optional: bool = False


# Characters between two columns: one padding space each side and the (blank) divider.
GAP = 3


def _longest_word(text: str) -> int:
    return max((len(word) for word in text.split()), default=0)


def min_width(column: Column, cells: Sequence[str]) -> int:
    """The narrowest the column can be without splitting a number or a word: a numeric cell
    whole, a text cell's longest word, the header's longest word."""
    plain = [Text.from_markup(cell).plain for cell in cells]
    widths = [_longest_word(cell) if column.text else len(cell) for cell in plain]
    return max([_longest_word(column.header), *widths])


def _table(
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    title: str | None,
    caption: str | None,
    width: int,
) -> Table:
    table = Table(
        title=title, caption=caption, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False
    )
    narrowest = [min_width(column, [row[i] for row in rows]) for i, column in enumerate(columns)]
    # A numeric column is exactly as wide as its widest number, or as its header when the
    # table fits that way; else its header wraps between words. Text columns share the rest,
    # each at least as wide as its longest word.
    whole = [
        n if c.text else max(n, len(c.header)) for c, n in zip(columns, narrowest, strict=True)
    ]
    if sum(whole) + GAP * (len(columns) - 1) <= width:
        narrowest = whole
    folded = _folded(columns, narrowest, width)
    fixed_text = folded != narrowest  # rich's own collapse can overshoot by a column or two
    narrowest = folded
    for index, column in enumerate(columns):
        table.add_column(
            column.header,
            overflow="fold",
            justify="left" if column.text else "right",
            min_width=narrowest[index],
            width=None if column.text and not fixed_text else narrowest[index],
        )
    for row in rows:
        table.add_row(*row)
    return table


def _folded(columns: Sequence[Column], widths: list[int], width: int) -> list[int]:
    """The widths with the widest text columns narrowed, one character at a time, until the
    table fits `width`: their long words (a device name such as
    Intel(R)_Data_Center_GPU_Max_1550) then fold onto the next line instead of pushing the last
    columns off the edge. Numeric columns keep their widths; no text column gets narrower than
    its header's longest word or 4."""
    room = (
        width
        - GAP * (len(columns) - 1)
        - sum(w for c, w in zip(columns, widths, strict=True) if not c.text)
    )
    text = {i: w for i, (c, w) in enumerate(zip(columns, widths, strict=True)) if c.text}
    floor = {i: max(4, _longest_word(columns[i].header)) for i in text}
    while sum(text.values()) > room:
        narrowable = [i for i in text if text[i] > floor[i]]
        if not narrowable:
            break
        widest = max(narrowable, key=lambda i: text[i])
        text[widest] -= 1
    return [text.get(i, w) for i, w in enumerate(widths)]


def fitted_columns(
    width: int, columns: Sequence[Column], rows: Sequence[Sequence[str]]
) -> list[int]:
    """The indices of the columns to show: all of them when the table fits `width` without
    splitting a number or a word, else without the optional columns, the last first, until
    it fits (or none is left to drop)."""
    keep = list(range(len(columns)))
    while True:
        needed = sum(min_width(columns[i], [row[i] for row in rows]) for i in keep)
        needed += GAP * (len(keep) - 1)
        optional = [i for i in keep if columns[i].optional]
        if needed <= width or not optional:
            return keep
        keep.remove(optional[-1])


def print_table(
    console: Console,
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    *,
    title: str | None = None,
    caption: str | None = None,
) -> None:
    """Print the rows under the columns that fit the console (`fitted_columns`); when some were
    left out, a line names them.

    Args:
        console: where to print; its width decides.
        columns: the columns, in order.
        rows: one cell text per column.
        title: above the table.
        caption: below the table.
    """
    keep = fitted_columns(console.width, columns, rows)
    table = _table(
        [columns[i] for i in keep],
        [[row[i] for i in keep] for row in rows],
        title,
        caption,
        console.width,
    )
    console.print(table)
    dropped = [columns[i].header for i in range(len(columns)) if i not in keep]
    if dropped:
        console.print(
            f"({', '.join(dropped)} left out at {console.width} columns; a wider "
            "terminal shows them)",
            markup=False,
            highlight=False,
        )
