"""figures/races.py: the cells heat map and the runs strip, tested on their figure objects."""

import numpy as np

from visualizer.analysis import races
from visualizer.figures.races import cells_heatmap, runs_strip

SRC = "simulated (CUDA simulator; SM ids and times modelled)"


def test_cells_heatmap_colours_each_cell_by_its_distinct_values():
    runs = {"C": np.array([[[1, 2], [3, 4]], [[1, 2], [3, 5]], [[1, 9], [3, 6]]], np.float32)}
    fig = cells_heatmap(races.cells(runs, "C", SRC))
    z = np.array(fig.data[0].z)
    np.testing.assert_array_equal(z, [[1, 2], [1, 3]])
    title = fig.layout.title.text
    assert title.startswith("C: 2 of 4 cells differ across runs") and "simulated" in title
    assert "C[3]: 3 distinct value(s)" in fig.data[0].text[1][1] and "highest 6" in fig.data[0].text[1][1]


def test_runs_strip_marks_each_run_right_or_wrong():
    runs = {"partial": np.array([[1, 2], [1, 2], [0, 2]], np.float32)}
    table = races.runs_table(runs, [True, True, False], None, SRC)
    fig = runs_strip(table, "partial", expected=3.0)
    assert list(fig.data[0].y) == [3.0, 3.0, 2.0]
    assert list(fig.data[0].marker.color) == ["#27ae60", "#27ae60", "#c0392b"]
    assert list(fig.data[0].text) == ["#0", "#0", "#1"]  # which distinct outcome
    assert "simulated" in fig.layout.title.text and fig.layout.shapes  # the reference line
    unknown = runs_strip(races.runs_table(runs, None, None, SRC), "partial")
    assert set(unknown.data[0].marker.color) == {"#7f8c8d"}  # no reference: grey, not right or wrong


def test_runs_strip_says_which_sites_a_runs_delays_waited_before():
    runs = {"out": np.array([[1], [2]], np.float32)}
    schedules = [
        {"seed": 1, "run": 0, "delay_kinds": ["load", "store"]},
        {"seed": 1, "run": 1, "delay_kinds": []},
    ]
    table = races.runs_table(runs, [True, False], schedules, "measured on GPU")
    assert table["delays"].tolist() == ["loads and stores", ""]
    fig = runs_strip(table, "out")
    assert fig.data[0].customdata[0][2] == "; warps delayed before loads and stores"
    assert fig.data[0].customdata[1][2] == "" and "%{customdata[2]}" in fig.data[0].hovertemplate
