"""The write-back edits one copy of the graph in place (issue 18): the GraphDef it returns
is the one the writer before that change returned (tests/_rewriting_reference.py, main at
b0eef08), field for field, on real plans of every kind (swaps with several swap-ins,
recomputes with gates and keepers, clone consumers, both targets, plans without the
core's ``inputs``/``readers``), from a GraphDef and from its bytes.

Equal as messages and in deterministic serialization. The plain serialization may order
some ``attr`` map entries otherwise: the result is parsed from bytes (the core writes the
swaps into the bytes, ``rust/core/src/writeback.rs``; ``apply`` passes bytes), the old
writer copied messages, protobuf promises no order of map entries there, and TensorFlow
reads a NodeDef's attributes by key.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle
import threading

import pytest
from tensorflow.core.framework import graph_pb2

import _rewriting_reference as reference
import hybridplan
import hybridplan.applying
import hybridplan.testing
from hybridplan import models
from hybridplan.rewriting import rewrite_with_summary

# (kind, nodes, strategy, fraction of the activation peak, target)
CASES = [
    ("narrow", 10_000, "hybrid", 0.5, "gpu"),  # 634 swaps, release gates
    ("transformer", 10_000, "hybrid", 0.5, "gpu"),  # swaps with several swap-ins
    ("mixed", 10_000, "recompute", 0.5, "cpu-emulation"),  # clones, gates, keepers
    ("residual", 10_000, "chen", 0.9, "gpu"),  # 1,123 clones, 165 keepers
    ("mixed", 10_000, "hybrid-paper", 0.5, "cpu-emulation"),  # swaps and recomputes
]


def _same(data: bytes, plan: dict, target: str) -> None:
    source = graph_pb2.GraphDef.FromString(data)
    kept = source.SerializeToString(deterministic=True)
    old = reference.rewrite_with_summary(source, reference.spec_of(plan), target)
    new = rewrite_with_summary(source, plan, target)
    from_bytes = rewrite_with_summary(data, plan, target)
    assert source.SerializeToString(deterministic=True) == kept  # input untouched
    assert new.graph_def == old.graph_def
    assert from_bytes.graph_def == old.graph_def
    det = old.graph_def.SerializeToString(deterministic=True)
    assert new.graph_def.SerializeToString(deterministic=True) == det
    assert from_bytes.graph_def.SerializeToString(deterministic=True) == det
    assert vars(new.summary) == vars(old.summary) == vars(from_bytes.summary)


@pytest.mark.parametrize(("kind", "n", "strategy", "fraction", "target"), CASES)
def test_rewrite_equals_the_writer_before(kind, n, strategy, fraction, target):
    data = hybridplan.testing.synthetic_graphdef(n, kind)
    peak = hybridplan.analyze(data).peak_bytes
    plan = dict(hybridplan.plan(data, int(peak * fraction), strategy=strategy).report)
    assert plan["swaps"] or plan["recomputes"]
    _same(data, plan, target)
    if plan["recomputes"]:
        # A plan saved before the core wrote what gates and keepers need: the writer
        # finds it in the graph.
        bare = copy.deepcopy(plan)
        for rec in bare["recomputes"]:
            rec["inputs"] = rec["readers"] = None
        _same(data, bare, target)


def test_rewrite_of_a_traced_step_equals_the_writer_before():
    traced = models.build("small_resnet", optimizer="adam", size=32, batch=8, blocks=3).trace()
    data = traced.graph_def.SerializeToString()
    a = hybridplan.analyze(traced)
    for strategy in ("hybrid", "recompute", "swap"):
        plans = []
        for fraction in (0.8, 0.9, 0.97):
            budget = a.persistent_bytes + int(a.activation_peak_bytes * fraction)
            try:
                p = hybridplan.plan(traced, budget, strategy=strategy, device="cpu", min_bytes=256)
            except hybridplan.BudgetError:
                continue
            if not p.is_empty:
                plans.append(dict(p.report))
        assert plans, strategy
        for plan in plans:
            _same(data, plan, "cpu-emulation")


def _renamed(data: bytes, suffix: str) -> bytes:
    """``data`` with every node renamed ``name + suffix`` (inputs to match)."""
    gd = graph_pb2.GraphDef.FromString(data)
    for node in gd.node:
        node.name += suffix
        for k, text in enumerate(node.input):
            control, text = text.startswith("^"), text.lstrip("^")
            name, sep, index = text.rpartition(":")
            if not (sep and index.isdigit()):
                name, sep, index = text, "", ""
            node.input[k] = ("^" if control else "") + name + suffix + sep + index
    return gd.SerializeToString()


def test_rewrite_of_non_ascii_names_equals_the_writer_before():
    # The core hands the changed nodes' inputs to Python as one string with character
    # offsets (``_Writer.core_before``): names of several bytes per character must come
    # back whole where recomputes read nodes the swaps changed.
    data = _renamed(hybridplan.testing.synthetic_graphdef(10_000, "mixed"), "/größe-é")
    peak = hybridplan.analyze(data).peak_bytes
    plan = dict(hybridplan.plan(data, int(peak * 0.5), strategy="hybrid-paper").report)
    assert plan["swaps"] and plan["recomputes"]
    _same(data, plan, "cpu-emulation")


@pytest.mark.parametrize(("kind", "n", "strategy", "fraction", "target"), CASES)
def test_a_plan_is_written_from_the_core_as_from_its_report(kind, n, strategy, fraction, target):
    # A Plan whose report nobody has read is written from the core's decisions
    # (``write_swaps`` takes the ``CorePlan``, the recomputes come from ``CorePlan.rest``):
    # the same graph, byte for byte, as writing its report's dicts.
    data = hybridplan.testing.synthetic_graphdef(n, kind)
    peak = hybridplan.analyze(data).peak_bytes
    p = hybridplan.plan(data, int(peak * fraction), strategy=strategy)
    assert p._planned() is not None and not p.is_empty
    from_core = rewrite_with_summary(data, p, target)
    assert p._planned() is not None  # the rewrite did not build the report
    report = copy.deepcopy(p.report)
    assert p._planned() is None  # handed out: from now on the report is the plan
    from_dict = rewrite_with_summary(data, report, target)
    det = from_dict.graph_def.SerializeToString(deterministic=True)
    assert from_core.graph_def.SerializeToString(deterministic=True) == det
    assert vars(from_core.summary) == vars(from_dict.summary)
    assert from_core.summary.counts["swap_out"] == len(report["swaps"])


def test_a_read_report_is_the_plan_the_rewrite_writes():
    data = hybridplan.testing.synthetic_graphdef(10_000, "narrow")
    p = hybridplan.plan(data, hybridplan.analyze(data).peak_bytes // 2)
    assert len(p.swaps) > 1  # reads the report
    p.report["swaps"] = p.report["swaps"][:1]  # the caller's edit is what is written
    assert rewrite_with_summary(data, p).summary.counts["swap_out"] == 1


def test_apply_reports_without_building_the_report_first():
    data = hybridplan.testing.synthetic_graphdef(10_000, "narrow")
    r = hybridplan.apply(data, hybridplan.analyze(data).peak_bytes // 2)
    assert r.plan._planned() is not None  # planned, written, report not built
    assert r.report["inserted"] == r.summary.counts
    assert r.report["inserted"]["swap_out"] == len(r.report["swaps"]) > 0
    assert {k: v for k, v in r.report.items() if k != "inserted"} == r.plan.report
    again = pickle.loads(pickle.dumps(r.plan))  # the core's answer does not pickle
    assert again.report == r.plan.report and again._planned() is None


def test_result_report_is_the_report_of_what_was_written():
    data = hybridplan.testing.synthetic_graphdef(3_000, "narrow")
    budget = hybridplan.analyze(data).peak_bytes // 2
    r = hybridplan.apply(data, budget)
    written = r.summary.counts["swap_out"]
    assert written > 1
    r.plan.report["swaps"] = r.plan.report["swaps"][:1]  # edited after apply
    assert len(r.report["swaps"]) == written == r.report["inserted"]["swap_out"]
    # Read before the plan's: one report, shared (a shallow copy with "inserted").
    r = hybridplan.apply(data, budget)
    assert r.report["swaps"] is r.plan.report["swaps"]
    assert [f.name for f in dataclasses.fields(r)] == ["graph_def", "plan", "report", "summary"]
    given = hybridplan.applying.Result(r.graph_def, r.plan, {"x": 1}, r.summary)
    assert given.report == {"x": 1} and dataclasses.replace(given, summary=None).report == {"x": 1}


def test_one_report_for_every_thread():
    # 10^5 nodes: the report's decode takes several of the interpreter's switch intervals,
    # so threads reading a fresh plan's report at once would each build one unless the
    # Plan lets one build it (without the lock, 2 of 3 runs of one round saw two).
    data = hybridplan.testing.synthetic_graphdef(100_000, "narrow")
    budget = hybridplan.analyze(data).peak_bytes // 2
    for _ in range(4):
        assert _reports_seen(hybridplan.plan(data, budget), 8) == 1


def _reports_seen(p, k: int) -> int:
    """Distinct ``p.report`` objects that ``k`` threads reading it at once get."""
    seen: list[int] = []
    threads = [threading.Thread(target=lambda: seen.append(id(p.report))) for _ in range(k)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == k
    return len(set(seen))


def test_a_plan_pickled_with_its_report_as_an_attribute_loads():
    data = hybridplan.testing.synthetic_graphdef(3_000, "narrow")
    report = hybridplan.plan(data, hybridplan.analyze(data).peak_bytes // 2).report
    old = hybridplan.Plan.__new__(hybridplan.Plan)
    old.__setstate__({"report": report, "_timelines": None, "_events": None})
    assert old.report is report and not old.is_empty and old._planned() is None
