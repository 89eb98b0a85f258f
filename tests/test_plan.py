"""hybridplan.plan: budgets, devices, strategies, the plan format (no TensorFlow run)."""

from __future__ import annotations

import json
import math
import pathlib

import pytest

import hybridplan
import hybridplan.testing
from hybridplan.planning import parse_bytes

FIXTURE = pathlib.Path(__file__).parents[1] / "rust/core/tests/fixtures/small_cnn.pb"


@pytest.fixture(scope="module")
def synth():
    data = hybridplan.testing.synthetic_graphdef(10_000, "mixed", batch=4, size=16)
    a = hybridplan.analyze(data)
    return data, a


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("16GiB", 16 * 2**30),
        ("32GB", 32 * 10**9),
        ("1.5 GiB", int(1.5 * 2**30)),
        ("500MiB", 500 * 2**20),
        ("123", 123),
        (4096, 4096),
        (1e9, 10**9),
    ],
)
def test_parse_bytes(text, value):
    assert parse_bytes(text) == value


@pytest.mark.parametrize(
    "bad", [0, -5, "0GiB", math.nan, math.inf, "lots", "16 parsecs", True, None, [1], 2.0**70]
)
def test_bad_budgets_are_invalid_arguments(bad):
    with pytest.raises(hybridplan.InvalidArgumentError):
        hybridplan.plan(FIXTURE, bad, device="v100-nvlink2")


def test_a_step_that_fits_gets_an_empty_plan():
    p = hybridplan.plan(FIXTURE, "auto", device="v100-nvlink2")
    assert p.is_empty and p.strategy == "none"
    assert p.planned["peak_bytes"] == p.original["peak_bytes"] <= p.budget


def test_budget_below_the_variables_says_so():
    a = hybridplan.analyze(FIXTURE)
    with pytest.raises(hybridplan.BudgetError, match="variables") as e:
        hybridplan.plan(FIXTURE, a.persistent_bytes - 1)
    assert a.persistent_bytes <= e.value.best_peak <= a.peak_bytes


def test_unreachable_budget_names_the_smallest_peak(synth):
    data, a = synth
    budget = a.persistent_bytes + 1024
    with pytest.raises(hybridplan.BudgetError) as e:
        hybridplan.plan(data, budget, device="v100-nvlink2")
    err = e.value
    assert err.budget == budget and budget < err.best_peak <= a.peak_bytes
    assert str(err.best_peak) in str(err) and err.strategy


def test_unknown_device_and_strategy():
    with pytest.raises(hybridplan.InvalidArgumentError, match="v100-nvlink2"):
        hybridplan.plan(FIXTURE, "1GiB", device="tpu-v9")
    with pytest.raises(hybridplan.InvalidArgumentError, match="strategy"):
        hybridplan.plan(FIXTURE, "1GiB", strategy="magic")


def test_device_from_a_dict_and_a_file(tmp_path):
    dev = json.loads(hybridplan._core.device_preset("a100-pcie4"))
    p = hybridplan.plan(FIXTURE, "auto", device=dev)
    assert p.report["device"] == "a100-pcie4"
    f = tmp_path / "dev.json"
    f.write_text(json.dumps(dev))
    assert hybridplan.plan(FIXTURE, "auto", device=f).report["device"] == "a100-pcie4"
    del dev["h2d_bandwidth"]
    with pytest.raises(hybridplan.InvalidArgumentError, match="h2d_bandwidth"):
        hybridplan.plan(FIXTURE, "auto", device=dev)


_RATES = ("flops_f32", "flops_f16", "flops_f64", "flops_int", "mem_bandwidth")
_LINK = ("h2d_bandwidth", "d2h_bandwidth")


@pytest.mark.parametrize(
    ("field", "value", "valid"),
    [(f, 1e-300, "at least 1 per second") for f in _RATES + _LINK]
    + [(f, 1e300, r"in \[0, 1e6\]") for f in ("launch_overhead_s", "link_latency_s")]
    + [("duplex_factor", 1e-300, r"in \[0.01, 1\]")],
)
def test_a_device_that_makes_the_step_time_infinite_is_refused(synth, field, value, valid):
    # Each value passed validation before. On this graph flops_f32 and mem_bandwidth made
    # both step times infinite (JSON null, repr(plan) a TypeError); flops_int and
    # launch_overhead_s made them above 1e300 s (infinite with more ops); the others do
    # on a graph that computes in that dtype or swaps, and the planner avoided them here.
    data, a = synth
    budget = a.persistent_bytes + (a.peak_bytes - a.persistent_bytes) * 3 // 4
    dev = hybridplan.device_model("a100-pcie4", **{field: value})
    with pytest.raises(hybridplan.InvalidArgumentError, match=rf"field {field} is .*{valid}"):
        hybridplan.plan(data, budget, device=dev, min_bytes=1024)


def test_the_slowest_valid_device_gives_finite_times(synth):
    data, a = synth
    budget = a.persistent_bytes + (a.peak_bytes - a.persistent_bytes) * 3 // 4
    slowest = {f: 1.0 for f in _RATES + _LINK}
    dev = hybridplan.device_model(
        "a100-pcie4",
        name="slowest",
        launch_overhead_s=1e6,
        link_latency_s=1e6,
        duplex_factor=0.01,
        **slowest,
    )
    p = hybridplan.plan(data, budget, device=dev, min_bytes=1024)
    json.dumps(p.report, allow_nan=False)  # every figure finite
    assert math.isfinite(p.planned["step_time_s"]) and math.isfinite(p.original["step_time_s"])
    assert "step " in repr(p)


def test_presets_exist():
    names = hybridplan.device_presets()
    for required in ("v100-nvlink2", "a100-pcie4", "h100-pcie5", "h200-pcie5", "gh200-c2c", "cpu"):
        assert required in names


@pytest.mark.parametrize("strategy", hybridplan.STRATEGIES)
def test_every_strategy_fits_its_budget(synth, strategy):
    data, a = synth
    budget = a.persistent_bytes + (a.peak_bytes - a.persistent_bytes) * 3 // 4
    p = hybridplan.plan(data, budget, strategy=strategy, device="h100-pcie5", min_bytes=1024)
    assert not p.is_empty
    assert p.planned["peak_bytes"] <= budget < p.original["peak_bytes"]
    t, b = p.timeline("planned")
    assert b.max() == p.planned["peak_bytes"] and t[-1] <= p.planned["step_time_s"] * (1 + 1e-9)
    for s in p.swaps:
        assert s["bytes"] > 0 and s["ins"] and s["reason"]
    for r in p.recomputes:
        assert r["nodes"] and r["consumers"]


def test_hybrid_is_never_slower_than_swap_or_recompute(synth):
    data, a = synth
    for fraction in (0.9, 0.75, 0.6):
        budget = a.persistent_bytes + int((a.peak_bytes - a.persistent_bytes) * fraction)
        times = {}
        for s in hybridplan.STRATEGIES:
            try:
                times[s] = hybridplan.plan(
                    data, budget, strategy=s, device="a100-pcie4", min_bytes=1024
                ).planned["step_time_s"]
            except hybridplan.BudgetError:
                times[s] = math.inf
        assert times["hybrid"] <= min(times.values())


def test_plans_are_deterministic_and_round_trip(synth, tmp_path):
    data, a = synth
    budget = a.persistent_bytes + (a.peak_bytes - a.persistent_bytes) // 2
    p1 = hybridplan.plan(data, budget, device="a100-pcie4", min_bytes=1024)
    p2 = hybridplan.plan(data, budget, device="a100-pcie4", min_bytes=1024)
    assert p1.to_json() == p2.to_json()
    path = tmp_path / "plan.json"
    p1.save(path)
    back = hybridplan.Plan.load(path)
    assert back.report == p1.report
    with pytest.raises(hybridplan.InvalidArgumentError):
        back.timeline()
    (tmp_path / "junk.json").write_text("{not json")
    with pytest.raises(hybridplan.InvalidArgumentError):
        hybridplan.Plan.load(tmp_path / "junk.json")


def _as_unversioned(report: dict) -> dict:
    """A report in the shape plans were saved in before the schema had a version:
    swap-ins, release and gate nodes, inputs, readers and the host timeline as arrays."""
    old = {k: v for k, v in report.items() if k != "schema_version"}
    old["swaps"] = [
        {
            **s,
            "ins": [
                [i["trigger"], i["trigger_name"], i["consumers"], i["clone_consumers"]]
                for i in s["ins"]
            ],
            "release": s["release"] and [s["release"]["node"], s["release"]["name"]],
            "gate": s["gate"] and [s["gate"]["node"], s["gate"]["name"]],
        }
        for s in report["swaps"]
    ]
    old["recomputes"] = [
        {
            **r,
            "inputs": [[t["node"], t["output"]] for t in r["inputs"]],
            "readers": [[t["node"], t["output"], t["reads"]] for t in r["readers"]],
        }
        for r in report["recomputes"]
    ]
    tl = report["host_timeline"]
    old["host_timeline"] = [list(x) for x in zip(tl["time_s"], tl["bytes"], strict=True)]
    return old


def test_the_plan_schema_is_versioned_and_an_older_plan_asks_for_a_new_one(synth, tmp_path):
    data, a = synth
    budget = a.persistent_bytes + (a.peak_bytes - a.persistent_bytes) // 2
    p = hybridplan.plan(data, budget, device="a100-pcie4", min_bytes=1024)
    assert p.report["schema_version"] == hybridplan._core.PLAN_SCHEMA_VERSION
    assert p.swaps and all(isinstance(i, dict) for s in p.swaps for i in s["ins"])
    old = tmp_path / "old.json"
    old.write_text(json.dumps(_as_unversioned(p.report)))
    with pytest.raises(hybridplan.PlanVersionError, match=r"version 1 \(unversioned\).*re-plan"):
        hybridplan.Plan.load(old)
    future = tmp_path / "future.json"
    future.write_text(json.dumps({**p.report, "schema_version": 3}))
    with pytest.raises(hybridplan.PlanVersionError, match=r"version 3.*re-plan"):
        hybridplan.Plan.load(future)
    # The replay reads saved plans through the same schema.
    with pytest.raises(hybridplan.PlanVersionError):
        hybridplan._core.replay(data, old.read_text(), device="a100-pcie4")


def test_an_analysis_is_planned_as_its_bytes(synth):
    data, a = synth
    budget = a.persistent_bytes + (a.peak_bytes - a.persistent_bytes) // 2
    analysed = hybridplan.analyze(data, workspace="none")
    for strategy in ("swap", "hybrid"):
        once = hybridplan.plan(analysed, budget, strategy=strategy, device="a100-pcie4")
        each = hybridplan.plan(
            data, budget, strategy=strategy, device="a100-pcie4", workspace="none"
        )
        assert once.report == each.report and not once.is_empty
    with pytest.raises(hybridplan.InvalidArgumentError, match="holds its build options"):
        hybridplan.plan(a, budget, loss="x:0")


def test_plan_points_at_graphdef_nodes(synth):
    from tensorflow.core.framework import graph_pb2

    data, a = synth
    gd = graph_pb2.GraphDef.FromString(data)
    budget = a.persistent_bytes + (a.peak_bytes - a.persistent_bytes) // 2
    spec = hybridplan.plan(data, budget, device="a100-pcie4", min_bytes=1024).report
    for s in spec["swaps"]:
        producer = gd.node[s["node"]].name
        for i in s["ins"]:
            for c in i["consumers"]:
                assert any(x.split(":")[0] == producer for x in gd.node[c].input)
    for r in spec["recomputes"]:
        assert all(0 <= v < len(gd.node) for v in r["nodes"])


def test_profile_replaces_estimates(synth):
    data, a = synth
    budget = a.persistent_bytes + (a.peak_bytes - a.persistent_bytes) // 2
    base = hybridplan.plan(data, budget, device="cpu", min_bytes=1024)
    slow = {int(i): 1.0 for i in a.order[:10]}
    p = hybridplan.plan(data, budget, device="cpu", min_bytes=1024, profile=slow)
    assert p.original["step_time_s"] > base.original["step_time_s"] + 9.0


def test_bad_profile_entries_are_invalid_arguments(synth):
    data, a = synth
    with pytest.raises(hybridplan.InvalidArgumentError, match="profile"):
        hybridplan.plan(data, a.peak_bytes, profile={10**8: 1.0})
    with pytest.raises(hybridplan.InvalidArgumentError, match="profile"):
        hybridplan.plan(data, a.peak_bytes, profile={0: -1.0})


def _toml(fields: dict) -> str:
    return "\n".join(
        f"{k} = {json.dumps(v) if isinstance(v, str) else repr(v)}" for k, v in fields.items()
    )


def test_device_from_a_toml_file_and_keywords(tmp_path):
    dev = json.loads(hybridplan._core.device_preset("a100-pcie4"))
    dev["name"] = "a100-gen3"
    dev["h2d_bandwidth"] = dev["d2h_bandwidth"] = 12e9
    f = tmp_path / "dev.toml"
    f.write_text(_toml(dev))
    from_toml = hybridplan.plan(FIXTURE, "auto", device=f)
    assert from_toml.report["device"] == "a100-gen3"
    kw = hybridplan.device_model(
        "a100-pcie4", name="a100-gen3", h2d_bandwidth=12e9, d2h_bandwidth=12e9
    )
    assert kw == dev
    assert hybridplan.plan(FIXTURE, "auto", device=kw).report == from_toml.report
    with pytest.raises(hybridplan.InvalidArgumentError, match="h2d_bandwith"):
        hybridplan.device_model("a100-pcie4", h2d_bandwith=1e9)
    del dev["duplex_factor"]
    f.write_text(_toml(dev))
    with pytest.raises(hybridplan.InvalidArgumentError, match="duplex_factor"):
        hybridplan.plan(FIXTURE, "auto", device=f)
    f.write_text("name = [unclosed")
    with pytest.raises(hybridplan.InvalidArgumentError, match="not valid"):
        hybridplan.plan(FIXTURE, "auto", device=f)


def _touched(p) -> list[str]:
    """Producer node of every swap and every recomputed node of a plan."""
    return [s["tensor"].rsplit(":", 1)[0] for s in p.swaps] + [
        n for r in p.recomputes for n in r["names"]
    ]


def test_include_and_exclude_by_scope_and_type(synth):
    from hybridplan._backend import workspace_rule

    data, _ = synth
    # Budgets from the peak under the workspace rule of the device planned for (the
    # default v100-nvlink2), not the CPU kernels' (their scratch, oneDNN off, would
    # leave these budgets above the GPU plan's whole peak).
    rule = workspace_rule("auto", hybridplan.device_model("v100-nvlink2"))
    a = hybridplan.analyze(data, workspace=rule)
    budget = a.persistent_bytes + int(a.activation_peak_bytes * 0.7)
    free = hybridplan.plan(data, budget)
    touched = _touched(free)
    scopes = sorted({n.split("/")[1] for n in touched if n.count("/") > 1})
    assert len(scopes) >= 2, touched  # the test needs decisions in several blocks
    banned = f"model/{scopes[0]}"
    p = hybridplan.plan(data, budget, exclude_scopes=[banned])
    assert p.planned["peak_bytes"] <= budget
    assert _touched(p) and not any(n == banned or n.startswith(banned + "/") for n in _touched(p))
    from tensorflow.core.framework import graph_pb2

    ops = {n.name: n.op for n in graph_pb2.GraphDef.FromString(data).node}
    loose = a.persistent_bytes + int(a.activation_peak_bytes * 0.9)
    unfiltered = {ops[n] for n in _touched(hybridplan.plan(data, loose, strategy="swap"))}
    assert unfiltered - {"Relu"}  # so the include list below changes the plan
    p = hybridplan.plan(data, loose, strategy="swap", include_types=["Relu"])
    assert p.planned["peak_bytes"] <= loose
    assert p.swaps and {ops[n] for n in _touched(p)} == {"Relu"}
    with pytest.raises(hybridplan.BudgetError):
        # Recomputing Relu ops alone frees nothing a budget this tight needs.
        hybridplan.plan(data, budget, strategy="recompute", include_types=["Relu"])


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"include_scopes": ["no/such/scope"]}, "matches no node"),
        ({"exclude_types": ["NoSuchOp"]}, "matches no node"),
        ({"include_types": ["Relu"], "exclude_types": ["Relu"]}, "both included and excluded"),
        ({"include_scopes": ["model/"], "exclude_scopes": ["model"]}, "both included"),
        ({"include_scopes": [""]}, "empty entry"),
        ({"include_types": [3]}, "list of strings"),
        ({"strategy": "recompute", "tflms": {"threshold": 4}}, "swaps nothing"),
    ],
)
def test_conflicting_or_bad_options(synth, kw, message):
    data, a = synth
    with pytest.raises(hybridplan.InvalidArgumentError, match=message):
        hybridplan.plan(data, a.peak_bytes // 2, **kw)


def test_chen_recomputes_disjoint_spans_about_sqrt_many(synth):
    data, a = synth
    budget = a.persistent_bytes + (a.peak_bytes - a.persistent_bytes) * 3 // 4
    p = hybridplan.plan(data, budget, strategy="chen", device="a100-pcie4", min_bytes=1024)
    assert p.strategy == "chen" and not p.swaps and p.recomputes
    nodes = [v for r in p.recomputes for v in r["nodes"]]
    assert len(nodes) == len(set(nodes))  # spans do not overlap
    # Chen: about sqrt(M) spans of about sqrt(M) segments each; the synthetic
    # graph has at least one segment per block, so several spans.
    assert 3 <= len(p.recomputes) <= len(nodes)
    assert p.planned["recompute_time_s"] > 0


def test_a_forward_only_graph_has_nothing_to_plan():
    from tensorflow.core.framework import graph_pb2

    from hybridplan.testing import node

    gd = graph_pb2.GraphDef()
    node(gd, "x", "Placeholder", shapes=[[1000]])
    node(gd, "y", "Relu", ["x"], [[1000]])
    node(gd, "z", "Relu", ["y"], [[1000]])
    data = gd.SerializeToString()
    # It fits: an empty plan, the graph unchanged.
    p = hybridplan.plan(data, "1MiB")
    assert p.is_empty and p.strategy == "none"
    # It does not: there is nothing to swap or recompute, and the error says so.
    with pytest.raises(hybridplan.UnsupportedGraphError, match="no backward pass"):
        hybridplan.plan(data, 4096)


@pytest.mark.parametrize("op", ["If", "StatelessWhile", "StatefulPartitionedCall"])
def test_control_flow_in_the_update_is_planned_around(op):
    """A function call or control flow after the gradients (an optimizer's
    conditional update) hides no activation from the planner: the step is
    planned, the op is never cloned or swapped. In the forward pass the same
    op is refused, naming the node."""
    from tensorflow.core.framework import graph_pb2

    from hybridplan.testing import RESOURCE, node, relu_chain

    gd = relu_chain(8, size=100_000)
    node(gd, "v", "VarHandleOp", shapes=[[]], dtype=RESOURCE)
    node(gd, "cond_update", op, ["g1"], [[100_000]])
    node(gd, "assign", "AssignVariableOp", ["v", "cond_update"], [])
    data = gd.SerializeToString()
    a = hybridplan.analyze(data)
    budget = a.persistent_bytes + int(a.activation_peak_bytes * 0.6)
    p = hybridplan.plan(data, budget, device="cpu", min_bytes=1024)
    assert p.planned["peak_bytes"] <= budget and not p.is_empty
    index = {n.name: i for i, n in enumerate(gd.node)}
    touched = {s["node"] for s in p.swaps} | {v for r in p.recomputes for v in r["nodes"]}
    assert index["cond_update"] not in touched

    fwd = graph_pb2.GraphDef()
    fwd.CopyFrom(gd)
    fwd.node[index["f3"]].op = op  # now in the forward pass
    with pytest.raises(hybridplan.UnsupportedGraphError, match=rf"'f3' \(op {op}\)"):
        hybridplan.plan(fwd.SerializeToString(), budget, device="cpu", min_bytes=1024)
