"""docs/benchmarks.md, section 2, on the floor: the blocked write is faster than the floor's multiply (the ``least:`` row
against ``floor + reward sum``), and the floor's peak memory is the cast temporary and the output, as the stored results say."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the benchmarks package lives at the repository root

from benchmarks import docs  # noqa: E402
from benchmarks.verl_advantage import FLOOR, FLOOR_SUM, LEAST  # noqa: E402

UNITS = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "ns": 1e-9, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
CLAIMS = (
    "as `mul(out=)` does (the floor rows' peak memory is that temporary\n  and the output)",
    "the blocked write is faster than the multiply the floor itself uses (the `least:` row\n  against the `floor + reward sum` row)",
)


def amount(cell: str) -> float:
    value, unit = cell.split()
    return float(value) * UNITS[unit]


def test_the_stored_verl_table_bears_out_what_the_page_says_of_the_floor():
    page = docs.DOCS.read_text(encoding="utf-8")
    assert all(claim in page for claim in CLAIMS)
    table = docs.load()["reports"]["verl"]["tables"][0]
    column = {name: i for i, name in enumerate(table["columns"])}
    rows = {(row[0], row[1]): row for row in table["rows"]}
    shapes = sorted({shape for shape, _ in rows})
    assert shapes
    for shape in shapes:
        least, floor_sum = rows[(shape, LEAST)], rows[(shape, FLOOR_SUM)]
        assert amount(least[column["time"]]) < amount(floor_sum[column["time"]]), shape
        for name in (FLOOR, FLOOR_SUM):
            row = rows[(shape, name)]
            both = 2 * amount(row[column["(B,T) float32 output"]])  # the output and a float temporary of its size
            assert abs(amount(row[column["peak extra memory"]]) - both) <= 0.02 * both, (shape, name)  # plus (B,) vectors
