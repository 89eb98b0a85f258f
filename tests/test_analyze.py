"""hybridplan.analyze: the graph model, liveness and the errors of bad input."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
from tensorflow.core.framework import graph_pb2

import hybridplan
import hybridplan.testing
from hybridplan.testing import node, relu_chain

FIXTURE = pathlib.Path(__file__).parents[1] / "rust/core/tests/fixtures/small_cnn.pb"


def test_accepts_graphdef_bytes_path_and_text(tmp_path):
    gd = graph_pb2.GraphDef.FromString(FIXTURE.read_bytes())
    a = hybridplan.analyze(gd)
    assert hybridplan.analyze(gd.SerializeToString()).peak_bytes == a.peak_bytes
    assert hybridplan.analyze(FIXTURE).peak_bytes == a.peak_bytes
    txt = tmp_path / "g.pbtxt"
    txt.write_text(str(gd))
    assert hybridplan.analyze(txt).peak_bytes == a.peak_bytes
    assert a.loss == "sparse_categorical_crossentropy/div_no_nan:0"
    assert a.num_nodes == len(gd.node)
    assert set(a.phases) == {"forward", "backward", "update", "other"}
    assert sum(a.phases.values()) == a.num_nodes
    assert isinstance(a.timeline, np.ndarray) and a.timeline.max() == a.peak_bytes


def test_input_is_not_modified():
    gd = graph_pb2.GraphDef.FromString(FIXTURE.read_bytes())
    before = gd.SerializeToString()
    hybridplan.analyze(gd)
    assert gd.SerializeToString() == before


def _reference_peak(gd: graph_pb2.GraphDef, sizes: dict[str, int]) -> int:
    """Independent liveness: GraphDef order, buffers freed after the last reader; a
    ``Relu``/``ReluGrad`` that is the last reader of an input's buffer of its size
    (not a fed input's or a constant's, read once) writes its output into it."""
    pos = {n.name: i for i, n in enumerate(gd.node)}
    ops = {n.name: n.op for n in gd.node}
    reads = {n.name: [i.split(":")[0] for i in n.input if not i.startswith("^")] for n in gd.node}
    buf = {name: name for name in sizes}

    def last(b: str) -> int:
        mine = {name for name in buf if buf[name] == b}
        return max([pos[b]] + [pos[r] for r in reads if mine.intersection(reads[r])])

    for n in gd.node:
        if n.op not in ("Relu", "ReluGrad"):
            continue
        for src in reads[n.name]:
            b = buf[src]
            if (
                ops[b] not in ("Placeholder", "Const")
                and sizes[b] == sizes[n.name]
                and last(b) == pos[n.name]
                and [buf[r] for r in reads[n.name]].count(b) == 1
            ):
                buf[n.name] = b
                break
    owners = [name for name in sizes if buf[name] == name]
    ends = {b: last(b) for b in owners}
    peak = 0
    for i in range(len(gd.node)):
        live = sum(sizes[b] for b in owners if pos[b] <= i <= ends[b])
        peak = max(peak, live)
    return peak


def test_peak_matches_an_independent_computation():
    gd = relu_chain(6, size=250)
    sizes = {n.name: 4 * 250 for n in gd.node if n.name not in ("loss", "out")}
    sizes["loss"] = 4
    sizes["out"] = 0  # an Identity shares its input's buffer
    a = hybridplan.analyze(gd)
    assert a.loss == "loss:0"
    assert a.persistent_bytes == 0
    assert a.peak_bytes == _reference_peak(gd, sizes)
    # All six activations plus x and the seed are live when the backward starts.
    top = a.live_at_peak(3)
    assert [t.bytes for t in top] == [1000, 1000, 1000]


def test_sizes_of_every_common_dtype():
    from tensorflow.core.framework import types_pb2 as t

    expected = {
        t.DT_BFLOAT16: 2,
        t.DT_HALF: 2,
        t.DT_FLOAT: 4,
        t.DT_DOUBLE: 8,
        t.DT_INT8: 1,
        t.DT_INT16: 2,
        t.DT_INT32: 4,
        t.DT_INT64: 8,
        t.DT_BOOL: 1,
        t.DT_COMPLEX64: 8,
        t.DT_COMPLEX128: 16,
        t.DT_UINT8: 1,
    }
    for dtype, size in expected.items():
        gd = graph_pb2.GraphDef()
        node(gd, "x", "Placeholder", shapes=[[10, 10]], dtype=dtype)
        node(gd, "y", "Neg", ["x"], [[10, 10]], dtype=dtype)
        a = hybridplan.analyze(gd)
        assert a.peak_bytes == 2 * 100 * size, t.DataType.Name(dtype)


def test_huge_tensor_sizes_are_exact():
    gd = graph_pb2.GraphDef()
    node(gd, "x", "Placeholder", shapes=[[1, 8000, 8000, 64]])
    a = hybridplan.analyze(gd)
    assert a.peak_bytes == 8000 * 8000 * 64 * 4  # 16 GB, past 32 bits


@pytest.mark.parametrize(
    "data",
    [b"", b"\xff\xff\xff", b"\x0a\xff\xff\xff\xff\x0f", b"\x0a\x05abc"],
    ids=["empty", "garbage", "huge-length", "truncated"],
)
def test_malformed_bytes(data):
    with pytest.raises(hybridplan.InvalidGraphError) as e:
        hybridplan.analyze(data)
    assert "GraphDef" in str(e.value) or "no nodes" in str(e.value)


def test_cycle_is_named():
    gd = graph_pb2.GraphDef()
    node(gd, "a", "Relu", ["c"], [[4]])
    node(gd, "b", "Relu", ["a"], [[4]])
    node(gd, "c", "Relu", ["b"], [[4]])
    with pytest.raises(
        hybridplan.InvalidGraphError,
        match=r"cycle through .*a.*b.*c|cycle through .*b.*c.*a|cycle through .*c.*a.*b",
    ):
        hybridplan.analyze(gd)


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda gd: gd.node[1].input.append("nowhere"), "not in the graph"),
        (lambda gd: gd.node[1].input.__setitem__(0, "x:3"), "output 3"),
        (lambda gd: setattr(gd.node[2], "name", "f1"), "two nodes are named"),
        (lambda gd: gd.node[1].input.__setitem__(0, "x:a"), "not of the form"),
    ],
    ids=["missing-node", "missing-output", "duplicate", "bad-ref"],
)
def test_invalid_graphs(mutate, match):
    gd = relu_chain(3)
    mutate(gd)
    with pytest.raises(hybridplan.InvalidGraphError, match=match):
        hybridplan.analyze(gd)


def test_unknown_shape_names_the_tensor_and_the_fix():
    gd = graph_pb2.GraphDef()
    node(gd, "x", "Placeholder", shapes=[[2, -1]])
    with pytest.raises(hybridplan.ShapeError, match=r"'x:0'.*concrete input shapes"):
        hybridplan.analyze(gd)
    gd = graph_pb2.GraphDef()
    node(gd, "x", "Placeholder", shapes=[None])
    with pytest.raises(hybridplan.ShapeError, match="unknown rank"):
        hybridplan.analyze(gd)


def test_negative_dims_and_overflow():
    gd = graph_pb2.GraphDef()
    node(gd, "x", "Placeholder", shapes=[[2, -5]])
    with pytest.raises(hybridplan.InvalidGraphError, match="negative"):
        hybridplan.analyze(gd)
    gd = graph_pb2.GraphDef()
    node(gd, "x", "Placeholder", shapes=[[2**40, 2**40]])
    with pytest.raises(hybridplan.InvalidGraphError, match="overflows"):
        hybridplan.analyze(gd)


def test_a_sum_of_sizes_past_64_bits_is_an_error_not_a_saturated_peak():
    """Each tensor fits 64 bits, their sum does not: no budget, not even 2^64-1, fits."""
    gd = graph_pb2.GraphDef()
    for i in range(5):
        node(gd, f"x{i}", "Placeholder", shapes=[[2**59]])  # 2^61 bytes each
    node(gd, "y", "AddN", [f"x{i}" for i in range(5)], [[2**59]])
    with pytest.raises(hybridplan.InvalidGraphError, match=r"past the 2\^63 bytes"):
        hybridplan.analyze(gd)
    with pytest.raises(hybridplan.InvalidGraphError, match=r"past the 2\^63 bytes"):
        hybridplan.plan(gd, 2**64 - 1, strategy="swap")


@pytest.mark.parametrize("op", ["ReadVariableOp", "AssignSubVariableOp", "ResourceApplyAdam"])
def test_a_variable_op_without_a_resource_handle_is_refused(op):
    """A handle edited to float would be planned as data (reads cloned past the update)."""
    gd = relu_chain(2)
    node(gd, "v", "Placeholder", shapes=[[]])  # DT_FLOAT, where a DT_RESOURCE belongs
    node(gd, "r", op, ["v", "f1"], [[1000]])
    with pytest.raises(hybridplan.InvalidGraphError, match=rf"'r' \(op {op}\).*'v:0' is float32"):
        hybridplan.analyze(gd)


def test_bad_arguments():
    with pytest.raises(hybridplan.InvalidArgumentError):
        hybridplan.analyze(12345)
    with pytest.raises(hybridplan.InvalidArgumentError, match="no such file"):
        hybridplan.analyze("/nonexistent/graph.pb")
    with pytest.raises(hybridplan.InvalidArgumentError, match="loss"):
        hybridplan.analyze(relu_chain(2), loss="nope:0")


FIXTURE = pathlib.Path(__file__).parents[1] / "rust/core/tests/fixtures/small_cnn.pb"


def test_a_device_models_the_scratch_of_its_kernels(monkeypatch):
    """``device=`` picks the workspace rule as :func:`hybridplan.plan` does for that
    device: a GPU preset gets cuDNN's rule under ``TF_CUDNN_WORKSPACE_LIMIT_IN_MB`` (and
    none without it), the ``cpu`` preset and no device this TensorFlow's CPU kernels."""
    monkeypatch.setenv("TF_CUDNN_WORKSPACE_LIMIT_IN_MB", "64")
    gpu = hybridplan.analyze(FIXTURE, device="v100-nvlink2")
    rule = hybridplan.plan(FIXTURE, gpu.peak_bytes, device="v100-nvlink2").report["workspace"]
    assert rule == "gpu-cudnn:64"
    assert gpu.workspace_peak_bytes > 0
    assert np.array_equal(gpu.workspace, hybridplan.analyze(FIXTURE, workspace=rule).workspace)
    monkeypatch.delenv("TF_CUDNN_WORKSPACE_LIMIT_IN_MB")
    assert hybridplan.analyze(FIXTURE, device="a100-pcie4").workspace_peak_bytes == 0
    cpu = hybridplan.analyze(FIXTURE, device="cpu").workspace
    assert np.array_equal(cpu, hybridplan.analyze(FIXTURE).workspace)
    with pytest.raises(hybridplan.InvalidArgumentError, match="nope"):
        hybridplan.analyze(FIXTURE, device="nope")


def test_budget_for_a_fraction_runs_from_the_scratch_to_the_peak():
    """``budget_for(f)``: the variables and the largest scratch (which no plan removes)
    plus ``f`` of the rest of the activation peak; 1 is the original's peak."""
    a = hybridplan.analyze(FIXTURE, workspace="gpu-cudnn:64")
    scratch, act = a.workspace_peak_bytes, a.activation_peak_bytes
    assert 0 < scratch < act
    assert a.budget_for(1) == a.peak_bytes
    assert a.budget_for(0) == a.persistent_bytes + scratch
    assert a.budget_for(0.6) == a.persistent_bytes + scratch + int(0.6 * (act - scratch))
    assert abs(a.fraction_of(a.budget_for(0.25)) - 0.25) < 1e-6
    for bad in (1.5, -0.1, "0.5", True):
        with pytest.raises(hybridplan.InvalidArgumentError, match="fraction"):
            a.budget_for(bad)


def test_analyze_a_traced_keras_cnn_step():
    from hybridplan import models

    traced = models.small_cnn(size=32, batch=4).trace()
    a = hybridplan.analyze(traced)
    assert a.loss == traced.loss_source
    assert a.phases["forward"] > 10 and a.phases["backward"] > 10 and a.phases["update"] > 10
    weights = sum(int(np.prod(v.shape)) * v.dtype.size for v in traced.variables)
    assert a.persistent_bytes >= weights * 0.9
    # The peak holds at least the largest activation: a 32x32x8 float map per image.
    assert a.activation_peak_bytes >= 4 * 32 * 32 * 8 * 4


@pytest.mark.slow
def test_analyze_resnet50_at_224():
    from hybridplan import models

    traced = models.resnet50(size=224, batch=2).trace()
    a = hybridplan.analyze(traced)
    assert a.num_nodes == len(traced.graph_def.node) > 8000
    assert a.phases["backward"] > 2000
    # 25.6 M parameters + 25.6 M momentum slots, float32.
    assert 190e6 < a.persistent_bytes < 230e6
    top = a.live_at_peak(5)
    assert len(top) == 5 and top[0].bytes >= top[-1].bytes > 0


@pytest.mark.parametrize("kind", ["residual", "transformer", "mixed", "dag", "narrow"])
def test_synthetic_steps_are_graphs_tensorflow_accepts(kind):
    """The generator's GraphDefs import into TensorFlow and analyse as training
    steps: forward, backward and update parts, a loss, a peak above the variables."""
    import tensorflow as tf
    from tensorflow.core.framework import graph_pb2

    data = hybridplan.testing.synthetic_graphdef(3000, kind, batch=2, size=8, channels=16)
    gd = graph_pb2.GraphDef.FromString(data)
    assert 2000 < len(gd.node) < 4000
    with tf.Graph().as_default():
        tf.graph_util.import_graph_def(gd, name="")
    a = hybridplan.analyze(data)
    assert a.loss is not None and a.peak_bytes > a.persistent_bytes > 0
    assert all(a.phases[p] > 0 for p in ("forward", "backward", "update"))


@pytest.mark.parametrize("how", ["absent", "empty list"])
def test_an_unread_matmul_without_shapes_is_a_shape_error(how):
    """An op that computes an output (MatMul) whose node lists no output shape and that
    nothing reads: its output's bytes are unknown, not 0 (the peak would miss them)."""
    g = graph_pb2.GraphDef()
    for name, op, inputs, dims in (
        ("x", "Placeholder", [], (1024,)),
        ("r", "Relu", ["x"], (1024,)),
        ("m", "MatMul", ["r", "r"], (1024, 1024)),
    ):
        n = g.node.add(name=name, op=op, input=inputs)
        n.attr["dtype" if op == "Placeholder" else "T"].type = 1
        shape = n.attr["_output_shapes"].list.shape.add()
        for d in dims:
            shape.dim.add(size=d)
    assert hybridplan.analyze(g.SerializeToString()).peak_bytes >= 4 << 20
    if how == "absent":
        del g.node[2].attr["_output_shapes"]
    else:
        g.node[2].attr["_output_shapes"].list.ClearField("shape")
    with pytest.raises(hybridplan.ShapeError, match="'m:0' has no shape"):
        hybridplan.analyze(g.SerializeToString())
