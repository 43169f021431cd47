"""Tables and messages for people: readable on a terminal and in a log, and safe with any user text.

Two problems this module exists for:

* **Markup injection.** rich parses ``[...]`` in every string it prints as markup, so stored text such as
  an agent label ``[/]x`` crashes ``console.print`` (``MarkupError``) or restyles the output. Every cell
  here is a :class:`rich.text.Text` (never parsed), and :func:`esc` escapes user text inside messages.
* **Piped output.** Without a terminal rich assumes 80 columns, truncates ids (``strat…``) and wraps a
  cell over several lines. When the console is not a terminal, :func:`print_table` prints a plain table
  instead: one line per row, columns padded with spaces, nothing cut, no colours. ``grep`` and ``cut``
  work on it and a CI log shows every id whole.
"""

from __future__ import annotations

from typing import Any, Sequence

from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape as _escape
from rich.table import Table
from rich.text import Text

__all__ = ["esc", "print_table", "plain_table"]


def esc(value: Any) -> str:
    """``value`` as text that rich prints literally inside a markup string (``[`` escaped)."""
    text = str(value)
    # lone surrogates cannot reach a UTF-8 terminal: show them as escapes instead of crashing the print
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return _escape(text)


def _cell(value: Any) -> str:
    text = "-" if value is None else str(value)
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def plain_table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table: a title line, a header, a dashed rule and one line per row, columns padded
    to their widest cell (display width, so wide characters line up). Newlines in cells become spaces."""
    head = [_cell(c) for c in columns]
    body = [[_cell(v).replace("\r", " ").replace("\n", " ") for v in r] for r in rows]
    widths = [max([cell_len(h)] + [cell_len(r[i]) for r in body if i < len(r)]) for i, h in enumerate(head)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c + " " * (w - cell_len(c)) for c, w in zip(cells, widths)).rstrip()

    out = [title] if title else []
    out += [line(head), line(["-" * w for w in widths]), *(line(r) for r in body)]
    return "\n".join(out)


def print_table(console: Console, title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print a table: a rich table on a terminal (cells folded, never truncated), a plain one otherwise.

    Cells are shown literally (no markup), ``None`` as ``-``.
    """
    if not console.is_terminal:
        console.print(Text(plain_table(title, columns, rows)), soft_wrap=True, highlight=False)
        return
    table = Table(title=Text(title) if title else None)
    for col in columns:
        table.add_column(Text(str(col)), overflow="fold")
    for r in rows:
        table.add_row(*(Text(_cell(v)) for v in r))
    console.print(table)
