"""The one Python writer of GraphDef bytes for tests and experiments (protobuf wire format).

Writes a ``NodeDef`` as TensorFlow would serialize it: name, op, inputs, attributes
(a dtype, ``_output_shapes`` and any others given as encoded ``AttrValue`` bytes). A
``GraphDef`` is its nodes, each as field 1. No TensorFlow needed: the families in
:mod:`hybridplan.testing.families` are planned without it, and :func:`node` appends the
same bytes to a TensorFlow ``GraphDef`` message for tests that edit one.

Complexity: O(bytes written).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "FLOAT",
    "INT32",
    "RESOURCE",
    "attr",
    "graph_def",
    "int_field",
    "len_field",
    "node",
    "node_def",
    "shape",
    "varint",
]

#: ``DataType`` codes (``types.proto``) the helpers write.
FLOAT, INT32, RESOURCE = 1, 3, 20


def varint(n: int) -> bytes:
    """A base-128 varint; a negative ``n`` as its 64-bit two's complement (as int64)."""
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def len_field(num: int, payload: bytes) -> bytes:
    """Field ``num`` of wire type 2 (bytes, string or message)."""
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def int_field(num: int, value: int) -> bytes:
    """Field ``num`` of wire type 0 (varint), written even when 0."""
    return varint(num << 3) + varint(value)


def shape(dims: Sequence[int] | None) -> bytes:
    """A ``TensorShapeProto``: one ``dim`` per size, or ``unknown_rank`` for None."""
    if dims is None:
        return int_field(3, 1)
    return b"".join(len_field(2, int_field(1, d)) for d in dims)


def attr(key: str, value: bytes) -> bytes:
    """One ``NodeDef.attr`` map entry (field 5); ``value``: the ``AttrValue`` bytes."""
    return len_field(5, len_field(1, key.encode()) + len_field(2, value))


def node_def(
    name: str,
    op: str,
    inputs: Iterable[str] = (),
    shapes: Iterable[Sequence[int] | None] = ((),),
    dtype: int = FLOAT,
    *,
    dtype_key: str = "T",
    attrs: Iterable[tuple[str, bytes]] = (),
) -> bytes:
    """A ``NodeDef``: ``dtype`` under ``dtype_key``, then ``attrs``, then
    ``_output_shapes`` with one shape per output (None: unknown rank)."""
    body = len_field(1, name.encode()) + len_field(2, op.encode())
    body += b"".join(len_field(3, i.encode()) for i in inputs)
    body += attr(dtype_key, int_field(6, dtype))
    for k, v in attrs:
        body += attr(k, v)
    shape_list = b"".join(len_field(7, shape(s)) for s in shapes)
    return body + attr("_output_shapes", len_field(1, shape_list))


def graph_def(nodes: Iterable[bytes]) -> bytes:
    """A ``GraphDef`` of the given ``NodeDef`` bytes."""
    return b"".join(len_field(1, n) for n in nodes)


def node(
    gd: Any,
    name: str,
    op: str,
    inputs: Sequence[str] = (),
    shapes: Sequence[Sequence[int] | None] = ((),),
    dtype: int = FLOAT,
) -> None:
    """Appends :func:`node_def`'s node to ``gd``, a TensorFlow ``GraphDef`` message
    (its ``T`` attribute set to ``dtype``; one output per shape, None: unknown rank)."""
    gd.node.add().MergeFromString(node_def(name, op, inputs, shapes, dtype))
