"""Reading a graph argument: a GraphDef, its bytes, a path, or a traced step."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .errors import InvalidArgumentError, InvalidGraphError
from .inlining import maybe_inline

__all__ = ["GraphLike", "graph_bytes"]

GraphLike = Any  # GraphDef | bytes | str | os.PathLike | Traced


def graph_bytes(graph: GraphLike) -> tuple[bytes, str | None]:
    """Returns the serialized GraphDef and the loss name when the argument knows it.

    Accepts a ``GraphDef`` (anything with ``SerializeToString``), ``bytes``,
    a path to a binary ``.pb`` or a text ``.pbtxt`` file, or a
    :class:`hybridplan.tracing.Traced`. Function calls (``PartitionedCall``,
    ``StatefulPartitionedCall``) are inlined from the GraphDef's library, as TensorFlow
    inlines them before it runs the step (:mod:`hybridplan.inlining`): the bytes are
    those of the graph that is planned and rewritten.
    """
    data, loss = _raw_bytes(graph)
    return maybe_inline(data), loss


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


def _read_file(path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InvalidArgumentError(f"no such file: {path}") from None
    except OSError as e:
        raise InvalidArgumentError(f"cannot read {path}: {e.strerror}") from None
    if path.suffix in (".pbtxt", ".txt") or _looks_like_text(data):
        return _text_to_binary(data, path)
    return data


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
