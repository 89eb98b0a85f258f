"""Per-node and per-tensor facts exported by the core (``Analysis.node_facts``,
``tensor_facts``): what Python reads instead of keeping op tables of its own. Each
test rebuilds a figure the planner computes from the exported facts alone and checks
it against the core's own figure, on a graph where the fact changes that figure."""

from __future__ import annotations

import pathlib

import numpy as np
from tensorflow.core.framework import graph_pb2

import hybridplan
from hybridplan.distributed import _collective_types
from hybridplan.testing import node

FIXTURE = pathlib.Path(__file__).parents[1] / "rust/core/tests/fixtures/small_cnn.pb"
NONE = 2**32 - 1


def _buffers_timeline(a: hybridplan.Analysis, in_place: bool = True) -> np.ndarray:
    """The tensor timeline (persistent and scratch left out) from ``tensor_facts``:
    every buffer's bytes from its producer to its end. ``in_place=False`` reads the
    same facts as if no op wrote into an input's buffer: each owner is a buffer of its
    own, live until its last use."""
    f = a.tensor_facts()
    delta = np.zeros(len(a.order) + 1, np.int64)
    for t in range(len(f["node"])):
        nbytes = int(f["bytes"][t])
        if not nbytes:
            continue
        if in_place and f["written_into"][t] != NONE:
            continue
        end = f["buffer_end"][t] if in_place else f["last_use"][t]
        delta[f["produce"][t]] += nbytes
        delta[end + 1] -= nbytes
    return np.cumsum(delta[:-1])


def _forwarding_graph() -> graph_pb2.GraphDef:
    """x -> Exp -> Relu -> Identity -> Mul(., x) -> Sum: the Relu is the Exp's only
    reader, so it writes its output into the Exp's buffer; the Identity shares the
    Relu's; the fed x stays live to the Mul."""
    gd = graph_pb2.GraphDef()
    node(gd, "x", "Placeholder", shapes=[[1000]])
    node(gd, "e", "Exp", ["x"], [[1000]])
    node(gd, "r", "Relu", ["e"], [[1000]])
    node(gd, "i", "Identity", ["r"], [[1000]])
    node(gd, "m", "Mul", ["i", "x"], [[1000]])
    node(gd, "loss", "Sum", ["m"], [[]])
    return gd


def test_a_forwarded_input_changes_the_peak_as_the_facts_say():
    gd = _forwarding_graph()
    a = hybridplan.analyze(gd, workspace="none")
    sep = hybridplan.analyze(gd, workspace="none", separate_buffers=True)
    index = {n.name: i for i, n in enumerate(gd.node)}
    nf, tf_ = a.node_facts(), a.tensor_facts()
    tensor = {
        (int(v), int(k)): t for t, (v, k) in enumerate(zip(tf_["node"], tf_["index"], strict=True))
    }
    e, r, i = (tensor[(index[n], 0)] for n in ("e", "r", "i"))
    # The op table: Relu may forward output 0 from input 0; Identity aliases input 0.
    assert nf["forward_output"][index["r"]] == 0
    assert (nf["forward_slot_start"][index["r"]], nf["forward_slot_end"][index["r"]]) == (0, 1)
    assert nf["forward_output"][index["loss"]] == -1
    assert nf["aliased_input"][index["i"]] == 0 and nf["aliased_input"][index["r"]] == -1
    # The liveness: the Relu went into the Exp's buffer; the Identity owns nothing.
    assert tf_["written_into"][r] == e and tf_["written_into"][e] == NONE
    assert tf_["owner"][i] == r and tf_["bytes"][i] == 0
    # The forwarding saves 4000 bytes at the peak (x with one buffer for e, r, m;
    # without it x, e and r, then x, r and m): the core's figures, and the same
    # figures rebuilt from the facts.
    assert sep.peak_bytes - a.peak_bytes == 4000
    assert np.array_equal(_buffers_timeline(a) + a.persistent_bytes, a.timeline)
    assert np.array_equal(_buffers_timeline(a, in_place=False) + a.persistent_bytes, sep.timeline)


def test_the_facts_rebuild_a_keras_steps_timeline_with_its_scratch():
    """small_cnn under TensorFlow's own CPU kernels: every position's bytes are the
    buffers' plus the running op's scratch (``node_facts()["workspace"]``)."""
    gd = graph_pb2.GraphDef.FromString(FIXTURE.read_bytes())
    a = hybridplan.analyze(gd, workspace="cpu-eigen:2")
    sep = hybridplan.analyze(gd, workspace="none", separate_buffers=True)
    ws = a.node_facts()["workspace"]
    assert ws.max() > 0 and np.array_equal(ws, a.workspace)
    tensors = _buffers_timeline(a)
    assert np.array_equal(tensors + a.persistent_bytes + ws[a.order], a.timeline)
    assert tensors.max() + a.persistent_bytes == a.tensor_peak_bytes
    assert (a.tensor_facts()["written_into"] != NONE).any()  # forwarding happened
    assert sep.peak_bytes > a.tensor_peak_bytes
    assert np.array_equal(_buffers_timeline(a, in_place=False) + a.persistent_bytes, sep.timeline)


def test_node_facts_of_a_keras_step():
    gd = graph_pb2.GraphDef.FromString(FIXTURE.read_bytes())
    a = hybridplan.analyze(gd, workspace="none")
    f = a.node_facts()
    ops = [n.op for n in gd.node]
    n = len(ops)
    assert all(len(f[k]) == n for k in f)
    for v, op in enumerate(ops):
        if op == "ReadVariableOp" or op.startswith("ResourceApply"):
            assert f["takes_handle"][v] and f["never_clone"][v], op
        if op == "Conv2D":
            assert f["kernel_class"][v] == "conv" and f["flops"][v] > 0
        if op in ("Placeholder", "Const"):
            assert f["flops"][v] == 0.0
    assert not f["collective"].any()


def test_collectives_of_a_replica_graph_come_from_the_op_table():
    gd = graph_pb2.GraphDef()
    for name, op in [
        ("a", "CollectiveReduceV2"),
        ("b", "NcclAllReduce"),
        ("c", "Relu"),
        ("d", "CollectiveBcastSendV2"),
    ]:
        gd.node.add(name=name, op=op)
    assert _collective_types(gd, "Foo") == [
        "CollectiveBcastSendV2",
        "CollectiveReduceV2",
        "Foo",
        "NcclAllReduce",
    ]
