"""Plain-text tables for the command line: columns padded to their widest cell, the last one wrapped to the terminal."""

from __future__ import annotations

import re
import shutil
import textwrap
from collections.abc import Sequence

__all__ = ["MIN_LAST_COLUMN", "format_table", "plain", "terminal_width"]

MIN_LAST_COLUMN = 30  # narrower than this, the last column goes on lines of its own below the row
INDENT = "    "


def terminal_width(default: int = 100) -> int:
    """The terminal's width (``COLUMNS`` when set); ``default`` when the output is no terminal."""
    return shutil.get_terminal_size((default, 24)).columns


def plain(text: str) -> str:
    """Docstring markup made readable in a terminal: reST's ````code```` becomes ```code```."""
    return re.sub(r"``(.+?)``", r"`\1`", text)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int | None = None) -> str:
    """A table whose lines fit in ``width`` columns (unlimited when None) as long as the columns before the last fit.

    The last column is wrapped at word boundaries in its own column; when fewer than
    :data:`MIN_LAST_COLUMN` columns are left for it, it goes below its row, indented.
    """
    lines = [headers, *rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(headers) - 1)]
    left = sum(widths) + 2 * len(widths)
    room = None if width is None else width - left
    below = room is not None and room < MIN_LAST_COLUMN
    out = []
    for line in lines:
        head = "  ".join(cell.ljust(w) for cell, w in zip(line[:-1], widths, strict=True))
        last = line[-1]
        if below:  # the last header goes below the others too, as every row's last cell
            out.append(head.rstrip())
            if last:
                out += textwrap.wrap(
                    last, width=max(width - len(INDENT), MIN_LAST_COLUMN), initial_indent=INDENT, subsequent_indent=INDENT, break_on_hyphens=False
                )  # type: ignore[operator]
            continue
        wrapped = textwrap.wrap(last, width=room, break_on_hyphens=False) if room is not None and line is not headers else [last]
        out.append(f"{head}  {wrapped[0] if wrapped else ''}".rstrip())
        out += [f"{' ' * left}{more}" for more in wrapped[1:]]
    return "\n".join(out)
