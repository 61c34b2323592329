"""``Layout`` against plain loops: which rows form which unit and group, what a unit sums and what each row gets back."""

from __future__ import annotations

import numpy as np

from rllm_plugins.layout import Layout

# 7 rows: sessions s0 (rows 4, 1 in output order 0, 1), s1 (row 0), s2 (rows 6, 2, 5 in order 0, 1, 2), s3 (row 3)
SESSION_OF_ROW = np.array([1, 0, 2, 3, 0, 2, 2])
OUTPUT_INDEX = np.array([0, 1, 1, 0, 0, 2, 0])
FINAL_ROWS = np.array([1, 0, 5, 3])  # each session's highest output index
# groups: {s0, s2} then {s1, s3}
ORDER, OFFSETS = np.array([0, 2, 1, 3]), np.array([0, 2, 4])


def sessions() -> Layout:
    return Layout.from_sessions(SESSION_OF_ROW, OUTPUT_INDEX, FINAL_ROWS, ORDER, OFFSETS)


def test_sessions_lay_their_rows_out_by_group_unit_and_output_index():
    layout = sessions()
    units = [layout.rows[a:b].tolist() for a, b in zip(layout.row_offsets[:-1], layout.row_offsets[1:], strict=True)]
    assert units == [[4, 1], [6, 2, 5], [0], [3]]
    assert layout.final_rows.tolist() == [1, 5, 0, 3] and layout.unit_offsets.tolist() == [0, 2, 4] and layout.num_units == 4


def test_per_unit_sums_a_units_rows_and_to_rows_gives_every_row_its_units_value():
    layout = sessions()
    tokens = np.array([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0])
    want = [tokens[4] + tokens[1], tokens[6] + tokens[2] + tokens[5], tokens[0], tokens[3]]
    assert layout.per_unit(tokens).tolist() == want
    per_row = layout.to_rows(np.array([10.0, 20.0, 30.0, 40.0]))
    assert per_row.tolist() == [30.0, 10.0, 20.0, 40.0, 10.0, 20.0, 20.0]


def test_keeping_rows_drops_rows_then_empty_units_and_groups():
    layout = sessions().keeping_rows(np.array([True, False, True, False, False, True, True]))  # s0 and s3 lose every row
    assert layout.rows.tolist() == [6, 2, 5, 0] and layout.row_offsets.tolist() == [0, 3, 4]
    assert layout.final_rows.tolist() == [5, 0] and layout.unit_offsets.tolist() == [0, 1, 2]
    assert layout.to_rows(np.array([1.0, 2.0])).tolist() == [2.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0]


def test_a_group_without_a_live_unit_is_dropped_a_unit_without_one_beside_live_ones_stays():
    layout = sessions().keeping_live_groups(np.array([False, True, False, False]))  # group {s1, s3} has no live unit
    assert layout.final_rows.tolist() == [1, 5] and layout.unit_offsets.tolist() == [0, 2]
    assert layout.to_rows(np.array([1.0, 2.0])).tolist() == [0.0, 1.0, 2.0, 0.0, 1.0, 2.0, 2.0]


def test_one_row_each_in_the_rows_own_order_is_the_identity_and_reordering_regroups():
    layout = Layout.one_row_each(None, np.array([0, 2, 5]), 5)
    values = np.array([0.5, 1.5, 2.5, 3.5, 4.5])
    assert layout.identity and layout.per_unit(values) is values and layout.to_rows(values) is values
    moved = layout.reordered(np.array([4, 3, 2, 1, 0]), np.array([0, 3, 5]))
    assert not moved.identity and moved.rows.tolist() == [4, 3, 2, 1, 0] and moved.unit_offsets.tolist() == [0, 3, 5]
    assert moved.to_rows(np.array([1.0, 2.0, 3.0, 4.0, 5.0])).tolist() == [5.0, 4.0, 3.0, 2.0, 1.0]
    assert sessions().continuing_rows.tolist() == [1, 2, 5]
