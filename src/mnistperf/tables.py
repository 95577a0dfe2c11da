"""Markdown tables, as every table the lab writes is: a header row, a rule, a row per line."""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]], right: Container[int] = ()) -> str:
    """``header`` over ``rows`` (each cell as ``str`` writes it), the columns numbered in ``right`` aligned right."""

    def line(cells: Sequence[object]) -> str:
        return "| " + " | ".join(map(str, cells)) + " |"

    rule = "|" + "|".join("---:" if column in right else "---" for column in range(len(header))) + "|"
    return "\n".join([line(header), rule, *map(line, rows)])
