"""The report's pictures and text: what each draws and says."""

from __future__ import annotations

import io
import sys

import numpy as np
import pytest

import hybridplan
import hybridplan.testing
from hybridplan import report


@pytest.fixture(scope="module")
def swap_plan():
    gd = hybridplan.testing.synthetic_graphdef(300, "residual", batch=4, size=16)
    a = hybridplan.analyze(gd, device="v100-nvlink2")  # plan()'s device
    budget = a.budget_for(0.75)
    return hybridplan.plan(gd, budget, strategy="swap")


def test_measured_curve_has_its_own_time_axis_and_steps(swap_plan):
    """The measured curve runs on the CPU's clock, the predicted ones on the device
    model's: one picture each, memory drawn as steps (it changes at events)."""
    measured = (np.array([0.0, 0.01, 0.02, 0.05]), np.array([10, 2000, 500, 10]))
    fig = report.memory_figure(swap_plan, measured)
    predicted, meas = fig.axes
    assert all(line.get_drawstyle() == "steps-post" for line in predicted.get_lines()[:2])
    assert [line.get_label() for line in predicted.get_lines()[:2]] == [
        "original (predicted)",
        "planned (predicted)",
    ]
    assert "measured" not in " ".join(line.get_label() for line in predicted.get_lines())
    assert meas.get_lines()[0].get_drawstyle() == "steps-post"
    assert "measured" in meas.get_xlabel() and "predicted" in predicted.get_xlabel()
    assert len(report.memory_figure(swap_plan).axes) == 1


def test_streams_legend_names_only_what_is_drawn(swap_plan):
    assert swap_plan.planned["clones"] == 0 and swap_plan.planned["swaps"] > 0
    ax = report.streams_figure(swap_plan).axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "recompute clone" not in labels and "swap-out copy" in labels
    assert "orange" not in ax.get_title()


def test_summary_table_without_any_plan_keeps_the_original(swap_plan):
    text = report.summary_table(
        {"swap": None, "hybrid": None},
        1000,
        original=swap_plan.report["original"],
        best=(123456, "hybrid"),
    )
    head = text.splitlines()[1]
    assert head.split()[:1] == ["original"] and "hybrid" in head
    assert "smallest peak reached is 120.6 KiB (123456 bytes, strategy 'hybrid')" in text


def test_progress_bars_stay_out_of_logs(monkeypatch):
    """In a log file (stderr not a terminal) the demo draws no bar: its carriage
    returns ran into the printed lines."""
    from hybridplan import demo

    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    bar = demo._progress(3, "tracing")
    if bar is not None:
        bar.update()
        bar.close()
    assert log.getvalue() == ""
