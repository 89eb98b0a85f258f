"""strategy='optimal': the exact solver agrees with the simulator and beats every heuristic.

Runs the real solver (HiGHS through scipy) on small training-shaped graphs
(``hybridplan.testing.families``); about 30 s in all. The comparisons run in the
formulation's memory model (``separate_buffers=True``: no in-place forwarding),
where the optimum is exact.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("scipy")

import hybridplan
import hybridplan.testing
from hybridplan import _core, optimal
from hybridplan.errors import BudgetError, InvalidArgumentError
from hybridplan.testing import families

DEVICE = "a100-pcie4"
HEURISTICS = ("swap", "recompute", "hybrid-paper", "hybrid")
CASES = [
    ("chain", 1, 0, 0.9),
    ("chain", 1, 0, 0.8),
    ("residual", 1, 0, 0.8),
    ("unet", 0, 0, 0.9),
    ("dag", 1, 0, 0.8),
    ("dag", 1, 1, 0.9),
]


def _graph(fam: str, size: int, seed: int) -> tuple[bytes, str, int]:
    _, data, loss = families.family(fam, size, seed)
    a = hybridplan.analyze(data, loss=loss, separate_buffers=True, device=DEVICE)
    return data, loss, a.peak_bytes


@pytest.mark.parametrize(("fam", "size", "seed", "frac"), CASES)
def test_optimum_is_what_the_simulator_predicts_and_no_heuristic_beats_it(fam, size, seed, frac):
    data, loss, peak = _graph(fam, size, seed)
    budget = int(peak * frac)
    p = hybridplan.plan(
        data, budget, strategy="optimal", device=DEVICE, loss=loss, separate_buffers=True
    )
    solver = p.report["optimal"]
    assert solver["status"] == "optimal"
    # The formulation and the simulator agree (within 1%).
    assert p.planned["step_time_s"] == pytest.approx(solver["objective_s"], rel=0.01)
    assert p.planned["peak_bytes"] <= budget < p.original["peak_bytes"]
    assert not p.is_empty
    for s in HEURISTICS:
        try:
            h = hybridplan.plan(
                data, budget, strategy=s, device=DEVICE, loss=loss, separate_buffers=True
            )
        except BudgetError:
            continue
        assert p.planned["step_time_s"] <= h.planned["step_time_s"] * (1 + 1e-6), s


def test_optimal_plan_round_trips_through_the_plan_format():
    data, loss, peak = _graph("dag", 1, 0)
    budget = int(peak * 0.8)
    p = hybridplan.plan(
        data, budget, strategy="optimal", device=DEVICE, loss=loss, separate_buffers=True
    )
    spec = p.report
    assert spec["swaps"] or spec["recomputes"]
    # The decisions, fed back to the simulator, predict the same figures.
    plan_json = json.dumps(
        {
            "swaps": [
                {"tensor": _tensor_id(data, loss, s["node"], s["output"]), **_ins(s)}
                for s in spec["swaps"]
            ],
            "recomputes": spec["recomputes"],
        }
    )
    again = _core.simulate_plan(
        data, plan_json, budget, "optimal", DEVICE, None, loss, separate_buffers=True
    )
    assert json.loads(again.report_json)["planned"] == p.report["planned"]


def _tensor_id(data: bytes, loss: str, node: int, output: int) -> int:
    problem = json.loads(_core.export_problem(data, DEVICE, None, loss))
    return problem["nodes"][node]["outputs"][output]


def _ins(s: dict) -> dict:
    return {"after": s["after"], "ins": s["ins"]}


def test_the_optimum_fits_the_default_memory_model_too():
    # In-place forwarding only ever shares buffers: the formulation's plan, judged with
    # it, peaks no higher than the formulation says.
    data, loss, peak = _graph("residual", 1, 0)
    budget = int(peak * 0.8)
    exact = hybridplan.plan(
        data, budget, strategy="optimal", device=DEVICE, loss=loss, separate_buffers=True
    )
    p = hybridplan.plan(data, budget, strategy="optimal", device=DEVICE, loss=loss)
    assert p.report["optimal"]["separate_buffers"] is True
    assert (p.swaps, p.recomputes) == (exact.swaps, exact.recomputes)
    assert p.planned["peak_bytes"] <= exact.planned["peak_bytes"] <= budget
    assert p.original["peak_bytes"] < exact.original["peak_bytes"]


def test_a_budget_below_reach_is_a_budget_error():
    data, loss, peak = _graph("chain", 0, 0)
    with pytest.raises(BudgetError) as e:
        hybridplan.plan(data, int(peak * 0.4), strategy="optimal", device=DEVICE, loss=loss)
    assert e.value.strategy and e.value.best_peak > int(peak * 0.4)


def test_a_graph_that_fits_needs_no_plan():
    data, loss, peak = _graph("chain", 0, 0)
    p = hybridplan.plan(data, peak, strategy="optimal", device=DEVICE, loss=loss)
    assert p.is_empty and p.strategy == "none"
    assert p.planned["step_time_s"] == p.original["step_time_s"]


def test_a_graph_too_big_is_refused_naming_the_limit():
    data = hybridplan.testing.synthetic_graphdef(2000, "residual")
    with pytest.raises(InvalidArgumentError, match=f"at most {optimal.MAX_NODES} nodes"):
        hybridplan.plan(data, 1 << 20, strategy="optimal")


def test_optimal_takes_no_heuristic_parameters():
    data, loss, peak = _graph("chain", 0, 0)
    with pytest.raises(InvalidArgumentError, match="optimal"):
        hybridplan.plan(data, peak, strategy="optimal", loss=loss, tflms={"threshold": 1})


@pytest.mark.parametrize(("separate", "frac"), [(True, 0.8), (False, 0.8), (False, 0.4)])
def test_the_solver_decodes_the_graph_once(monkeypatch, separate, frac):
    """Export, judgement and (when the formulation is infeasible) the heuristics' best
    peak all read one decoded graph: the caller's model is scheduled again from the
    formulation's, not decoded again."""
    data, loss, peak = _graph("chain", 1, 0)
    decoded: list[str] = []
    for name in ("analyze", "plan", "export_problem", "simulate_plan"):
        real = getattr(_core, name)

        def spy(graph, *args, _real=real, _name=name, **kwargs):
            if isinstance(graph, bytes):
                decoded.append(_name)
            return _real(graph, *args, **kwargs)

        monkeypatch.setattr(_core, name, spy)
    args = dict(strategy="optimal", device=DEVICE, loss=loss, separate_buffers=separate)
    try:
        p = hybridplan.plan(data, int(peak * frac), **args)
    except BudgetError as e:
        assert frac < 0.5 and e.best_peak > int(peak * frac)
    else:
        assert p.report["optimal"]["separate_buffers"] is True
    assert decoded == ["analyze"]
