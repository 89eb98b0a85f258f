"""Hand-built GraphDefs for tests (TensorFlow's protobuf classes, no tracing)."""

from __future__ import annotations

from collections.abc import Sequence

from tensorflow.core.framework import graph_pb2, types_pb2

FLOAT = types_pb2.DT_FLOAT
RESOURCE = types_pb2.DT_RESOURCE


def node(
    gd: graph_pb2.GraphDef,
    name: str,
    op: str,
    inputs: Sequence[str] = (),
    shapes: Sequence[Sequence[int] | None] = ((),),
    dtype: int = FLOAT,
) -> None:
    """Appends a node whose outputs have the given shapes (None: unknown rank)."""
    n = gd.node.add()
    n.name, n.op = name, op
    n.input.extend(inputs)
    n.attr["T"].type = dtype
    lst = n.attr["_output_shapes"].list
    for s in shapes:
        sh = lst.shape.add()
        if s is None:
            sh.unknown_rank = True
        else:
            for d in s:
                sh.dim.add().size = d


def chain(n: int, size: int = 1000) -> graph_pb2.GraphDef:
    """x -> f1 -> ... -> fn -> loss, with backward ops reading each fi."""
    gd = graph_pb2.GraphDef()
    node(gd, "x", "Placeholder", shapes=[[size]])
    prev = "x"
    for i in range(1, n + 1):
        node(gd, f"f{i}", "Relu", [prev], [[size]])
        prev = f"f{i}"
    node(gd, "loss", "Sum", [prev], [[]])
    node(gd, "seed", "Const", [], [[size]])
    grad = "seed"
    for i in range(n, 0, -1):
        node(gd, f"g{i}", "ReluGrad", [grad, f"f{i}"], [[size]])
        grad = f"g{i}"
    node(gd, "out", "Identity", ["loss"], [[]])
    return gd
