"""hybridplan.rewrite + verify: plans written as real ops train bit for bit like the original.

Plans are built by hand from the graph's structure: the forward pass is the set of data
ancestors of the loss; a tensor worth swapping or recomputing is a forward tensor read
both by forward ops and by ops outside the forward pass (the gradient). Op types pick
candidates (a Relu, a MaxPool); no layer name is matched.
"""

from __future__ import annotations

import re
import time

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import graph_pb2, types_pb2

from hybridplan.errors import InvalidArgumentError, UnsupportedGraphError
from hybridplan.models import small_cnn
from hybridplan.rewriting import DO_NOT_REMOVE, rewrite, rewrite_with_summary
from hybridplan.runner import compile_step
from hybridplan.testing import relu_chain
from hybridplan.verification import NodesRemovedError, verify, verify_run_metadata

STEPS = 3


# --------------------------------------------------------------------------- structure


def _source(text: str) -> tuple[str, int]:
    text = text.lstrip("^")
    name, sep, k = text.rpartition(":")
    return (name, int(k)) if sep and k.isdigit() else (text, 0)


class Structure:
    """Forward set, consumers and triggers of a training-step GraphDef (tests only)."""

    def __init__(self, gd: graph_pb2.GraphDef, loss: str):
        self.gd = gd
        self.idx = {n.name: i for i, n in enumerate(gd.node)}
        self.readers: dict[tuple[int, int], list[int]] = {}
        self.succ: dict[int, set[int]] = {}
        for i, n in enumerate(gd.node):
            for text in n.input:
                name, k = _source(text)
                j = self.idx[name]
                self.succ.setdefault(j, set()).add(i)
                if not text.startswith("^"):
                    self.readers.setdefault((j, k), []).append(i)
        node = gd.node[self.idx[_source(loss)[0]]]
        while node.op == "Identity":  # the step's output Identity (control input: updates)
            node = gd.node[self.idx[_source(node.input[0])[0]]]
        self.forward = self._closure([self.idx[node.name]], self.data_inputs)

    def data_inputs(self, i: int) -> list[int]:
        return [self.idx[_source(t)[0]] for t in self.gd.node[i].input if not t.startswith("^")]

    @staticmethod
    def _closure(roots, step) -> set[int]:
        seen, stack = set(), list(roots)
        while stack:
            i = stack.pop()
            if i not in seen:
                seen.add(i)
                stack.extend(step(i))
        return seen

    def split(self, i: int, k: int = 0) -> tuple[list[int], list[int]]:
        """Readers of ``i:k`` in the forward pass, and outside it."""
        readers = self.readers.get((i, k), [])
        return [c for c in readers if c in self.forward], [
            c for c in readers if c not in self.forward
        ]

    def candidates(self, op: str) -> list[int]:
        """Forward nodes of type ``op`` whose output 0 is read forward and backward."""
        return [i for i in sorted(self.forward) if self.gd.node[i].op == op and all(self.split(i))]

    def trigger(self, consumers: list[int]) -> int:
        """A non-forward input producer of the consumers that none of them precedes.

        Among those, the latest (most ancestors), so that swap-ins and clones run late.
        """
        after = self._closure(consumers, lambda i: self.succ.get(i, ()))
        found = {
            j
            for c in consumers
            for j in self.data_inputs(c)
            if j not in self.forward and j not in after and self.gd.node[j].input
        }
        assert found, f"no trigger for consumers {consumers}"
        return max(sorted(found), key=lambda j: len(self._closure([j], self.data_inputs)))


def swap_plan(s: Structure, nodes: list[int]) -> dict:
    swaps = []
    for i in nodes:
        fwd, bwd = s.split(i)
        ins = [{"trigger": s.trigger(bwd), "consumers": bwd}]
        swaps.append({"node": i, "output": 0, "after": max(fwd), "ins": ins})
    return {"swaps": swaps, "recomputes": []}


def plans_for(s: Structure) -> dict[str, dict]:
    """Three plans for the small CNN: swap-only, recompute-only, mixed."""
    relu1, relu2 = s.candidates("Relu")[:2]
    (pool,) = s.candidates("MaxPool")[:1]
    conv2 = next(i for i in s.candidates("Conv2D") if pool in s.data_inputs(i))
    relu1_bwd, pool_bwd, conv2_bwd = s.split(relu1)[1], s.split(pool)[1], s.split(conv2)[1]
    relu2_bwd = s.split(relu2)[1]
    late = s.trigger(sorted({*relu1_bwd, *pool_bwd, *conv2_bwd}))
    return {
        "swap": swap_plan(s, [relu1, relu2]),
        "recompute": {
            "swaps": [],
            "recomputes": [
                # relu1 alone; its clone feeds the MaxPool clone of the next recompute
                {
                    "nodes": [relu1],
                    "trigger": late,
                    "consumers": relu1_bwd,
                    "clone_consumers": [pool],
                },
                {"nodes": [pool], "trigger": late, "consumers": pool_bwd},
                {"nodes": [relu2], "trigger": s.trigger(relu2_bwd), "consumers": relu2_bwd},
            ],
        },
        "mixed": {
            "swaps": [
                {
                    "node": relu1,
                    "output": 0,
                    "after": max(s.split(relu1)[0]),
                    "ins": [{"trigger": late, "consumers": relu1_bwd, "clone_consumers": [pool]}],
                },
            ],
            "recomputes": [
                # two nodes: the Conv2D clone reads the MaxPool clone
                {
                    "nodes": [pool, conv2],
                    "trigger": late,
                    "consumers": sorted({*pool_bwd, *conv2_bwd} - {conv2}),
                },
            ],
        },
    }


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module", autouse=True)
def op_determinism():
    from tensorflow.python.framework import config

    was = config.is_op_determinism_enabled()
    tf.config.experimental.enable_op_determinism()
    yield
    if not was:
        config.disable_op_determinism()


class Case:
    """A traced small CNN, its initial state and the original step's 3-step result."""

    def __init__(self, optimizer: str):
        self.w = small_cnn(optimizer=optimizer)
        self.traced = self.w.trace()
        self.start = self.state()
        self.structure = Structure(self.traced.graph_def, self.traced.loss)
        self.plans = plans_for(self.structure)
        self.reference = self.train(compile_step(self.traced))

    def state(self) -> list[np.ndarray]:
        return [v.numpy() for v in self.traced.variables]

    def restore(self) -> None:
        for var, value in zip(self.traced.variables, self.start, strict=True):
            var.assign(value)

    def train(self, step, first_loss=None) -> tuple[list[bytes], list[bytes]]:
        """Losses and final variables (bytes) of STEPS steps; with ``first_loss``, step 0
        already ran (by verify) and returned it."""
        if first_loss is None:
            self.restore()
        losses = [] if first_loss is None else [np.asarray(first_loss).tobytes()]
        for seed in range(len(losses), STEPS):
            losses.append(np.asarray(step(*self.w.batch(seed))).tobytes())
        return losses, [a.tobytes() for a in self.state()]


@pytest.fixture(scope="module", params=["sgd", "adam"])
def case(request) -> Case:
    return Case(request.param)


# --------------------------------------------------------------------------- the graph


@pytest.mark.parametrize("kind", ["swap", "recompute", "mixed"])
def test_inserted_nodes_and_input_untouched(case, kind):
    gd = case.traced.graph_def
    before = gd.SerializeToString(deterministic=True)
    plan = case.plans[kind]
    out = rewrite_with_summary(gd, plan, target="cpu-emulation")
    assert gd.SerializeToString(deterministic=True) == before, "rewrite mutated its input"
    new, summary = out.graph_def, out.summary
    n_in = sum(len(s["ins"]) for s in plan["swaps"])
    n_clones = sum(len(r["nodes"]) for r in plan["recomputes"])
    counts = summary.counts
    assert counts["swap_out"] == len(plan["swaps"]) and counts["swap_in"] == n_in
    assert counts["clones"] == n_clones
    assert counts["gates"] == len(summary.gates) and counts["keepers"] == len(summary.keepers)
    assert len(new.node) == len(gd.node) + len(summary.inserted)
    assert new.versions == gd.versions and new.library == gd.library
    by_name = {n.name: n for n in new.node[len(gd.node) :]}
    assert sorted(by_name) == sorted(summary.inserted)
    for name, node in by_name.items():
        # Clones may be fused like their originals (they are kept distinct by reading
        # gates); every other inserted node must survive Grappler as it is.
        assert node.attr[DO_NOT_REMOVE].b or name in summary.clones, name
        assert node.attr["T"].type == types_pb2.DT_FLOAT
        assert len(node.attr["_output_shapes"].list.shape) >= 1
    for name in summary.swap_out:
        assert (by_name[name].op, by_name[name].device) == ("DeepCopy", "/device:CPU:1")
    for name in (*summary.swap_in, *summary.clones):
        assert by_name[name].device == "/device:CPU:0"
    triggers = {gd.node[r["trigger"]].name for r in plan["recomputes"]}
    for name in summary.gates:  # Identity(tensor, ^trigger[, ^keepers])
        gate = by_name[name]
        assert gate.op == "Identity" and not gate.input[0].startswith("^"), gate
        assert gate.input[1].startswith("^") and gate.input[1][1:] in triggers
        assert all(i[1:] in summary.keepers for i in gate.input[2:])
    late = set(summary.gates) | set(summary.clones)
    for name in summary.clones:
        clone = by_name[name]
        original = gd.node[case.structure.idx[summary.clone_of[name]]]
        assert clone.op == original.op
        # Held back until its trigger: through a gate or another clone, or by a control
        # input of its own when it reads neither.
        data = [i.split(":")[0] for i in clone.input if not i.startswith("^")]
        assert any(d in late for d in data) or clone.input[-1][1:] in triggers, name
    for name in summary.keepers:  # read an original tensor, wait-for edge into an inserted node
        keeper = by_name[name]
        assert keeper.op == "Identity" and keeper.input[0].split(":")[0] in case.structure.idx
        assert any(f"^{name}" in n.input for n in by_name.values())
    untouched = set(range(len(gd.node))) - _touched(plan)
    for i in sorted(untouched)[::7]:
        assert new.node[i] == gd.node[i]


def _touched(plan: dict) -> set[int]:
    out = set()
    for s in plan["swaps"]:
        for entry in s["ins"]:
            out.update(entry["consumers"])
    for r in plan["recomputes"]:
        out.update(r["consumers"])
    return out


def test_swap_rewires_every_slot_and_shapes_follow_the_source(case):
    s = case.structure
    relu = s.candidates("Relu")[0]
    plan = swap_plan(s, [relu])
    new = rewrite(case.traced.graph_def, plan, target="cpu-emulation")
    swap_in = new.node[-1]
    relu_name = case.traced.graph_def.node[relu].name
    for c in plan["swaps"][0]["ins"][0]["consumers"]:
        assert swap_in.name in new.node[c].input
        assert relu_name not in new.node[c].input and f"{relu_name}:0" not in new.node[c].input
    for c in s.split(relu)[0]:  # forward readers still read the original
        assert new.node[c] == case.traced.graph_def.node[c]
    shape = case.traced.graph_def.node[relu].attr["_output_shapes"].list.shape[0]
    assert swap_in.attr["_output_shapes"].list.shape[0] == shape
    assert new.node[-2].input[:] == [relu_name, f"^{new.node[max(s.split(relu)[0])].name}"]


# --------------------------------------------------------------------------- training


@pytest.mark.parametrize(
    ("kind", "target"),
    [
        ("swap", "cpu-emulation"),
        ("recompute", "cpu-emulation"),
        ("mixed", "cpu-emulation"),
        ("mixed", "gpu"),
    ],
)
def test_rewritten_step_trains_bit_identically_and_keeps_its_nodes(case, kind, target):
    out = rewrite_with_summary(case.traced.graph_def, case.plans[kind], target=target)
    step = compile_step(case.traced, out.graph_def)
    case.restore()
    report = verify(step, out.summary, *case.w.batch(0))  # the first training step
    assert report.ok, report.describe()
    assert set(report.present) == set(out.summary.inserted)
    losses, weights = case.train(step, first_loss=report.outputs)
    ref_losses, ref_weights = case.reference
    assert losses == ref_losses
    assert weights == ref_weights
    assert weights != [a.tobytes() for a in case.start], "the steps must train"
    status = report.by_name()
    host, device = ("CPU:1", "CPU:0") if target == "cpu-emulation" else ("CPU:0", "CPU:0")
    for name in out.summary.swap_out:
        assert status[name].device.endswith(host)
    for name in (*out.summary.swap_in, *out.summary.clones):
        assert status[name].device.endswith(device)  # GPU:0 soft-placed on a CPU machine
    for name in out.summary.clones:
        assert status[name].distinct


def test_verify_reports_nodes_grappler_removed(case):
    """Without _grappler_do_not_remove, Grappler deletes the swap Identity nodes."""
    s = case.structure
    out = rewrite_with_summary(case.traced.graph_def, swap_plan(s, s.candidates("Relu")[:1]))
    naked = graph_pb2.GraphDef()
    naked.CopyFrom(out.graph_def)
    for node in naked.node[len(case.traced.graph_def.node) :]:
        del node.attr[DO_NOT_REMOVE]
    case.restore()
    step = compile_step(case.traced, naked)
    with pytest.warns(RuntimeWarning, match="did not run the rewritten step as planned"):
        report = verify(step, out.summary, *case.w.batch(0), on_missing="warn")
    assert report.missing and not report.ok
    with pytest.raises(NodesRemovedError) as info:
        verify_run_metadata(_metadata_of(report), out.summary)
    assert info.value.report.missing == report.missing
    with pytest.raises(InvalidArgumentError, match="FIRST call"):
        verify(step, out.summary, *case.w.batch(1))


def _metadata_of(report):
    """A RunMetadata whose one partition graph holds the nodes the report found."""
    from tensorflow.core.protobuf import config_pb2

    md = config_pb2.RunMetadata()
    graph = md.partition_graphs.add()
    for n in report.nodes:
        if n.executed_name:
            graph.node.add(name=n.executed_name, op=n.op, device=n.device)
    return md


# --------------------------------------------------------------------------- errors, cost


def test_plan_errors_are_clear(case):
    gd = case.traced.graph_def
    s = case.structure
    relu = s.candidates("Relu")[0]
    fwd, bwd = s.split(relu)
    read_variable = next(i for i, n in enumerate(gd.node) if n.op == "ReadVariableOp")
    handle = next(
        i
        for i, n in enumerate(gd.node)
        if n.op == "Placeholder" and n.attr["dtype"].type == types_pb2.DT_RESOURCE
    )
    good = {"node": relu, "output": 0, "after": fwd[0], "ins": [{"trigger": 0, "consumers": bwd}]}
    bad_plans = [
        ({"swaps": [{**good, "node": len(gd.node)}]}, InvalidArgumentError, "not a node index"),
        ({"swaps": [{**good, "output": 3}]}, InvalidArgumentError, "no output 3"),
        (
            {"swaps": [{**good, "ins": [{"trigger": 0, "consumers": [0]}]}]},
            InvalidArgumentError,
            "reads none of",
        ),
        (
            {"swaps": [{**good, "ins": [{"trigger": 0, "consumers": [], "clone_consumers": [5]}]}]},
            InvalidArgumentError,
            "not cloned by any later recompute",
        ),
        (
            {"recomputes": [{"nodes": [relu, relu], "trigger": 0, "consumers": bwd}]},
            InvalidArgumentError,
            "listed twice",
        ),
        (
            {"recomputes": [{"nodes": [read_variable], "trigger": 0, "consumers": []}]},
            UnsupportedGraphError,
            "stateful",
        ),
        ({"swaps": [{**good, "node": handle}]}, UnsupportedGraphError, "resource"),
    ]
    for plan, error, message in bad_plans:
        with pytest.raises(error, match=message):
            rewrite(gd, plan, target="cpu-emulation")
    with pytest.raises(InvalidArgumentError, match="unknown target"):
        rewrite(gd, {}, target="tpu")


def test_an_edited_plan_of_the_core_is_an_invalid_argument():
    """A plan's recomputes carry what their clones read from outside (``inputs``) and
    the reads of their outputs (``readers``), which the rewrite takes as written: an
    edited or another graph's plan is refused by name, never a KeyError or IndexError
    from inside the rewrite."""
    import copy

    import hybridplan
    import hybridplan.testing

    gd = graph_pb2.GraphDef.FromString(
        hybridplan.testing.synthetic_graphdef(400, "mixed", batch=2, size=8, channels=8)
    )
    # The peak of the device plan() plans for (its default), not of this CPU's kernels
    # (with oneDNN off their scratch would make 0.8 of it a budget the step fits).
    a = hybridplan.analyze(gd, device="v100-nvlink2")
    report = hybridplan.plan(gd, a.budget_for(0.8), strategy="recompute", min_bytes=1024).report
    assert report["recomputes"] and all(r["inputs"] for r in report["recomputes"])
    rewrite(gd, report, target="cpu-emulation")  # as planned: taken
    edits = [
        (lambda r: r["recomputes"][0]["inputs"][0].update(node=10**9), "not a node index"),
        (lambda r: r["recomputes"][0]["inputs"][0].update(output=77), "not an output of node"),
        (lambda r: r["recomputes"][0]["inputs"].pop(0), "inputs does not list"),
        (lambda r: r["recomputes"][0]["inputs"].append({"node": 0, "output": 0}), "inputs does"),
        (lambda r: r["recomputes"][0]["nodes"].pop(0), "does not list"),
        (lambda r: r["recomputes"][0]["readers"][0].pop("output"), "dict with node and output"),
        (lambda r: r["recomputes"][0]["readers"][0].update(reads="x"), "count of reads"),
        (lambda r: r["recomputes"][0]["readers"].pop(), "readers does not list"),
        (lambda r: r["recomputes"][0].update(inputs=5), "inputs must be a list"),
        (lambda r: r["recomputes"][0].update(consumers=5), "consumers must be a list"),
        (lambda r: r.update(hosted_accumulators=[5]), "hosted_accumulators"),
    ]
    edits.append((lambda r: r.update(swaps=[{"node": 0, "ins": 5}]), "ins must be a list"))
    for edit, message in edits:
        edited = copy.deepcopy(report)
        edit(edited)
        with pytest.raises(InvalidArgumentError, match=message):
            rewrite(gd, edited, target="cpu-emulation")


def test_plan_values_are_taken_as_python_took_them(case):
    """The core writes the swaps (rust/core/src/writeback.rs): indices may be numpy
    integers; a value that is no index, or an output that is no integer, is a typed
    error that names the field."""
    gd = case.traced.graph_def
    s = case.structure
    relu = s.candidates("Relu")[0]
    fwd, bwd = s.split(relu)
    good = {"node": relu, "output": 0, "after": fwd[0], "ins": [{"trigger": 0, "consumers": bwd}]}
    want = rewrite(gd, {"swaps": [good]}, target="cpu-emulation")
    as_numpy = {
        **good,
        "node": np.int64(relu),
        "ins": [{"trigger": np.int32(0), "consumers": [np.int64(c) for c in bwd]}],
    }
    assert rewrite(gd, {"swaps": [as_numpy]}, target="cpu-emulation") == want
    bad = [
        ({**good, "node": "Relu"}, "swaps[0].node must be a node index, got 'Relu'"),
        ({**good, "node": [relu]}, "swaps[0].node must be a node index, got ["),
        ({**good, "after": 2**70}, "swaps[0].after = 1180591620717411303424 is not a node"),
        ({**good, "output": "first"}, "swaps[0].output must be an output index"),
        (
            {**good, "ins": [{"trigger": 0, "consumers": [None]}]},
            "swaps[0].ins[0] must be a node index, got None",
        ),
        (
            {**good, "ins": [{"trigger": 0, "consumers": 5}]},
            "swaps[0].ins[0].consumers must be a list of node indices, got 5",
        ),
    ]
    for swap, message in bad:
        with pytest.raises(InvalidArgumentError, match=re.escape(message)):
            rewrite(gd, {"swaps": [swap]}, target="cpu-emulation")


def test_multi_output_dtype_and_output_index():
    """Swapping output 1 of a Split: the dtype comes from the OpDef, the shape from slot 1."""
    gd = graph_pb2.GraphDef()
    x = gd.node.add(name="x", op="Placeholder")
    x.attr["dtype"].type = types_pb2.DT_HALF
    axis = gd.node.add(name="axis", op="Const")
    axis.attr["dtype"].type = types_pb2.DT_INT32
    split = gd.node.add(name="split", op="Split", input=["axis", "x"])
    split.attr["num_split"].i = 2
    split.attr["T"].type = types_pb2.DT_HALF
    for d in (3, 5):
        split.attr["_output_shapes"].list.shape.add().dim.add().size = d
    reader = gd.node.add(name="reader", op="Neg", input=["split:1", "split", "split:1"])
    reader.attr["T"].type = types_pb2.DT_HALF
    plan = {
        "swaps": [{"node": 2, "output": 1, "after": 2, "ins": [{"trigger": 1, "consumers": [3]}]}]
    }
    out = rewrite_with_summary(gd, plan, target="gpu")
    swap_out, swap_in = out.graph_def.node[4], out.graph_def.node[5]
    assert (swap_out.op, swap_out.device) == ("Identity", "/device:CPU:0")
    assert (swap_in.op, swap_in.device) == ("Identity", "/device:GPU:0")
    assert swap_out.input[:] == ["split:1"]  # after == producer: no control input
    assert swap_in.input[:] == [swap_out.name, "^axis"]
    assert swap_out.attr["T"].type == types_pb2.DT_HALF
    assert swap_in.attr["_output_shapes"].list.shape[0].dim[0].size == 5
    assert out.graph_def.node[3].input[:] == [swap_in.name, "split", swap_in.name]
    assert out.summary.rewired == 2


def test_python_cost_follows_the_plan_not_the_graph():
    """A one-swap plan on a 100k-node graph costs about one C++ copy, not a Python loop."""
    big = relu_chain(50_000)
    t0 = time.perf_counter()
    copy = graph_pb2.GraphDef()
    copy.CopyFrom(big)
    copy_s = time.perf_counter() - t0
    at = {n.name: i for i, n in enumerate(big.node)}
    # f50 is read by f51 (forward) and by g50 (backward), which g51 precedes
    ins = [{"trigger": at["g51"], "consumers": [at["g50"]]}]
    plan = {"swaps": [{"node": at["f50"], "output": 0, "after": at["f51"], "ins": ins}]}
    t0 = time.perf_counter()
    out = rewrite_with_summary(big, plan, target="cpu-emulation")
    rewrite_s = time.perf_counter() - t0
    assert out.summary.counts == {
        "swap_out": 1,
        "swap_in": 1,
        "clones": 0,
        "gates": 0,
        "keepers": 0,
    }
    assert rewrite_s < 10 * copy_s + 0.05, (rewrite_s, copy_s)


def test_rewrite_reads_a_path_as_plan_reads_it(tmp_path):
    """``rewrite("step.pb", plan)``, as ``analyze``, ``plan`` and ``apply`` take a path:
    the same graph as from the parsed GraphDef."""
    import hybridplan
    import hybridplan.testing

    data = hybridplan.testing.synthetic_graphdef(400, "mixed", batch=2, size=8, channels=8)
    path = tmp_path / "step.pb"
    path.write_bytes(data)
    budget = hybridplan.analyze(path, device="v100-nvlink2").budget_for(0.8)  # plan's device
    p = hybridplan.plan(path, budget, min_bytes=1024)
    assert p.swaps or p.recomputes
    by_path = rewrite(str(path), p, target="cpu-emulation")
    by_graph = rewrite(graph_pb2.GraphDef.FromString(data), p, target="cpu-emulation")
    assert by_path.SerializeToString(deterministic=True) == by_graph.SerializeToString(
        deterministic=True
    )
