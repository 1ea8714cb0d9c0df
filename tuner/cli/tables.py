"""Tables that stay readable on an 80-column terminal: a number or a numeric column's header word
is never split or cut; text cells wrap (a word too long folds); optional columns are left out
(with a line saying so) when the terminal is too narrow for all of them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text


@dataclass(frozen=True)
class Column:
    """One column of a `print_table`: `text` cells wrap (numeric cells never do); `optional`
    columns are left out first, the last first, when the table does not fit."""

    header: str
    text: bool = False
    optional: bool = False


# Characters between two columns: one padding space each side and the (blank) divider.
GAP = 3


def _word(text: str) -> int:
    return max((len(word) for word in text.split()), default=0)


def min_width(column: Column, cells: Sequence[str]) -> int:
    """The narrowest the column can be without splitting a number or a word: a numeric cell
    whole, a text cell's longest word, the header's longest word."""
    plain = [Text.from_markup(cell).plain for cell in cells]
    return max([_word(column.header), *(_word(c) if column.text else len(c) for c in plain)])


def fitted_columns(
    width: int, columns: Sequence[Column], rows: Sequence[Sequence[str]]
) -> list[int]:
    """The indices of the columns to show: all when the table fits `width` without splitting a
    number or a word, else without the optional columns, the last first, until it fits."""
    keep = list(range(len(columns)))
    while True:
        needed = sum(min_width(columns[i], [row[i] for row in rows]) for i in keep)
        optional = [i for i in keep if columns[i].optional]
        if needed + GAP * (len(keep) - 1) <= width or not optional:
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
    """Print the rows under the columns that fit the console's width (`fitted_columns`); when
    some were left out, a line names them."""
    keep = fitted_columns(console.width, columns, rows)
    table = Table(
        title=title, caption=caption, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False
    )
    for i in keep:
        column = columns[i]
        if column.text:  # rich narrows it to what is left, wrapping between words
            table.add_column(column.header, overflow="fold")
        else:  # fixed at its widest number and longest header word
            width = min_width(column, [row[i] for row in rows])
            table.add_column(column.header, justify="right", width=width)
    for row in rows:
        table.add_row(*(row[i] for i in keep))
    console.print(table)
    dropped = [c.header for i, c in enumerate(columns) if i not in keep]
    if dropped:
        console.print(
            f"({', '.join(dropped)} left out at {console.width} columns; a wider terminal "
            "shows them)",
            markup=False,
            highlight=False,
        )
