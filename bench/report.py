"""The results table, as plain text for the terminal and as Markdown for docs/benchmarks.md."""

from __future__ import annotations

import json
from pathlib import Path

from .measures import Row

COLUMNS = ("measure", "product", "baseline", "ratio", "target", "met", "p50/p99 ms: product; baseline", "note")


def _num(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}"
    return f"{text} {unit}".strip()


def _cells(row: Row) -> list[str]:
    lat = "-"
    if row.p50_ms is not None or row.p99_ms is not None:
        lat = f"{_num(row.p50_ms)}/{_num(row.p99_ms)}"
        if row.base_p50_ms is not None or row.base_p99_ms is not None:
            lat += f"; {_num(row.base_p50_ms)}/{_num(row.base_p99_ms)}"
    met = "-" if row.passed is None else "yes" if row.passed else "NO"
    return [row.name, _num(row.product, row.unit), _num(row.baseline, row.unit if row.baseline is not None else ""),
            "-" if row.ratio is None else f"{row.ratio:.2f}x", row.target, met, lat, row.note]


def table(rows: list[Row]) -> str:
    body = [list(COLUMNS)] + [_cells(r) for r in rows]
    widths = [max(len(line[i]) for line in body) for i in range(len(COLUMNS))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in body]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown(rows: list[Row]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(_cells(r)) + " |" for r in rows]
    return "\n".join(lines)


def save(logs: Path, header: str, rows: list[Row]) -> None:
    """Print the table and keep it, with every row, beside the run's logs."""
    print(header)
    print(table(rows))
    (logs / "table.md").write_text(header + "\n\n" + markdown(rows) + "\n")
    (logs / "results.json").write_text(json.dumps({"header": header, "rows": [r.__dict__ for r in rows]}, indent=2))
