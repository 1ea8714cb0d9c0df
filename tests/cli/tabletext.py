"""Reading the CLI's borderless tables (tuner.cli.tables) back into cells."""

from __future__ import annotations

import re

# Cells are at least three spaces apart; a cell holds single spaces at most.
CELL_SPLIT = re.compile(r"\s{2,}")


def table_rows(text: str, first: str = r"\d+") -> list[list[str]]:
    """The body rows of a printed table whose first cell matches `first` (a regex), split into
    cells. Header, rule, title and note lines never start that way."""
    start = re.compile(rf"\s*(?:{first}) {{2,}}")
    return [CELL_SPLIT.split(line.strip()) for line in text.splitlines() if start.match(line)]
