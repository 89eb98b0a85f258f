"""Reading a graph argument: a GraphDef, its bytes, a path, or a traced step."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import _core
from .controlflow import IF_OPS, WHILE_OPS
from .errors import InvalidArgumentError, InvalidGraphError
from .inlining import CALL_OPS, maybe_inline

__all__ = ["GraphLike", "Inlined", "graph_bytes", "graph_source"]

GraphLike = Any  # GraphDef | bytes | str | os.PathLike | Traced | Inlined


@dataclass(frozen=True)
class Inlined:
    """What :func:`graph_bytes` returned, handed on as it is: the serialized GraphDef with
    its function calls already inlined, and the loss name the argument knew.

    ``apply`` passes it to ``plan`` and to the rewrite, so that neither scans the bytes for
    function calls again: each scan reads the whole serialization (about 200 MB at 10^6
    nodes, 0.1-0.25 s per op name looked for).
    """

    data: bytes
    loss: str | None = None
    #: Whether a node of the graph may be an ``If`` or ``While`` (``controlflow``), found
    #: in the same walk of the bytes as the calls; None: not looked for.
    control_flow: bool | None = None


def graph_source(graph: GraphLike) -> Inlined:
    """:func:`graph_bytes`, and whether the graph may have a control-flow node, from the
    same walk of the bytes (``_core.has_node_ops``) when it has no call to inline."""
    if isinstance(graph, Inlined):
        return graph
    data, loss = _raw_bytes(graph)
    calls, control_flow = _core.has_node_ops(data, [list(CALL_OPS), [*IF_OPS, *WHILE_OPS]])
    if calls:  # inlined bodies may hold control flow: looked for again (body_memory)
        return Inlined(maybe_inline(data), loss)
    return Inlined(data, loss, control_flow)


def parse_graph_def(data: bytes) -> Any:
    """``data`` parsed by TensorFlow's protobuf parser (TensorFlow needed).

    Raises:
        InvalidGraphError: the parser refuses the bytes. The core reads only the fields it
            plans with, so bytes malformed elsewhere (an attribute it skips) pass the
            analysis and fail here, where the whole message is read.
    """
    from google.protobuf.message import DecodeError
    from tensorflow.core.framework import graph_pb2

    try:
        return graph_pb2.GraphDef.FromString(data)
    except DecodeError as e:
        raise InvalidGraphError(
            f"the GraphDef's bytes are malformed where the planner does not read them "
            f"(TensorFlow's parser: {e}): export the step again "
            "(as_graph_def().SerializeToString())"
        ) from None


def graph_bytes(graph: GraphLike) -> tuple[bytes, str | None]:
    """Returns the serialized GraphDef and the loss name when the argument knows it.

    Accepts a ``GraphDef`` (anything with ``SerializeToString``), ``bytes``,
    a path to a binary ``.pb`` or a text ``.pbtxt`` file, or a
    :class:`hybridplan.tracing.Traced`. Function calls (``PartitionedCall``,
    ``StatefulPartitionedCall``) are inlined from the GraphDef's library, as TensorFlow
    inlines them before it runs the step (:mod:`hybridplan.inlining`): the bytes are
    those of the graph that is planned and rewritten.
    """
    given = graph_source(graph)
    return given.data, given.loss


def _raw_bytes(graph: GraphLike) -> tuple[bytes, str | None]:
    loss = None
    if hasattr(graph, "graph_def"):
        # A traced step returns its loss through an Identity that runs after
        # the updates; the planner wants the forward value behind it.
        loss = getattr(graph, "loss_source", None) or getattr(graph, "loss", None)
    if hasattr(graph, "graph_def"):
        graph = graph.graph_def
    if isinstance(graph, (bytes, bytearray, memoryview)):
        return bytes(graph), loss
    if hasattr(graph, "SerializeToString"):
        return graph.SerializeToString(), loss
    if isinstance(graph, (str, os.PathLike)):
        return _read_file(Path(graph)), loss
    raise InvalidArgumentError(
        f"cannot read a graph from {type(graph).__name__}: pass a GraphDef, its serialized "
        "bytes, a path to a .pb/.pbtxt file, or the result of hybridplan.trace()"
    )


#: Largest graph file read: protobuf's limit on one message (2 GiB). Reading
#: stops there, so a device or a pipe that never ends (``/dev/zero``) gets an
#: error instead of filling memory.
MAX_GRAPH_BYTES = 2**31


def _read_file(path: Path) -> bytes:
    if path.is_dir():
        if (path / "saved_model.pb").exists() or (path / "saved_model.pbtxt").exists():
            raise InvalidArgumentError(
                f"{path} is a SavedModel, whose graphs serve inference, not a training "
                "step: trace the step (hybridplan.trace_keras or hybridplan.trace, or "
                "`hybridplan trace` for a reference model) and pass its .pb"
            )
        raise InvalidArgumentError(f"{path} is a directory: pass a .pb or .pbtxt file")
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size  # 0 for a device or a pipe: read to the limit
            data = b"" if size > MAX_GRAPH_BYTES else _read_bounded(f, MAX_GRAPH_BYTES + 1)
    except FileNotFoundError:
        raise InvalidArgumentError(f"no such file: {path}") from None
    except OSError as e:
        raise InvalidArgumentError(f"cannot read {path}: {e.strerror}") from None
    except ValueError as e:  # a path no file can have (a NUL byte in it)
        raise InvalidArgumentError(f"cannot read {str(path)!r}: {e}") from None
    if size > MAX_GRAPH_BYTES or len(data) > MAX_GRAPH_BYTES:
        raise InvalidGraphError(
            f"{path} holds more than {MAX_GRAPH_BYTES} bytes, protobuf's limit for a "
            "GraphDef: pass a binary .pb or text .pbtxt file of one training step"
        )
    if path.suffix in (".pbtxt", ".txt") or _looks_like_text(data):
        return _text_to_binary(data, path)
    return data


def _read_bounded(f: Any, limit: int) -> bytes:
    """At most ``limit`` bytes of ``f``, in 16 MiB chunks (no allocation of ``limit``)."""
    chunks, n = [], 0
    while n < limit:
        chunk = f.read(min(1 << 24, limit - n))
        if not chunk:
            break
        chunks.append(chunk)
        n += len(chunk)
    return b"".join(chunks)


def _looks_like_text(data: bytes) -> bool:
    head = data[:64].lstrip()
    return head.startswith((b"node {", b"node{", b"versions {", b"library {"))


def _text_to_binary(data: bytes, path: Path) -> bytes:
    try:
        from google.protobuf import text_format
        from tensorflow.core.framework import graph_pb2
    except ImportError:
        raise InvalidArgumentError(
            f"{path} is a text GraphDef: reading .pbtxt needs TensorFlow "
            "(pip install 'hybridplan[tf]'), or convert it to a binary .pb"
        ) from None
    gd = graph_pb2.GraphDef()
    try:
        text_format.Parse(data.decode("utf-8"), gd)
    except (text_format.ParseError, UnicodeDecodeError) as e:
        raise InvalidGraphError(f"{path} is not a valid text GraphDef: {e}") from None
    return gd.SerializeToString()
