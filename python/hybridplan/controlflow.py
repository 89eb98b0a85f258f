"""Control flow in the step: the memory of a functional ``If``'s branches, for the planner.

**The rule.** TensorFlow runs a functional ``If`` / ``StatelessIf`` (``tf.cond`` in a
``tf.function``) by lowering it before placement (``LowerFunctionalOpsPass``,
``common_runtime/lower_if_op.cc``): ``Switch`` nodes route the inputs, the two branches
become calls that are inlined, ``Merge`` nodes join their outputs, and an ``IdentityN``
keeps the node's name, so every reader of ``If:k`` finds its tensor. Only the taken
branch runs. hybridplan plans such a node as **one op of the schedule** (the core's
``body.rs``): it is never cloned, and its memory is stated here from the GraphDef's
library, per node:

- **scratch**: the largest, over the two branches, of the branch body's peak as the core
  computes it (the body as a GraphDef, TensorFlow's ``function_def_to_graph_def``,
  analysed with the same workspace rule, its own ``If`` nodes stated the same way), less
  the bytes of the body's arguments live at that peak (they are the node's inputs,
  already live outside);
- **held**: an output of type ``variant`` that a branch returns from
  ``OptionalFromValue`` (``cond_v2`` wraps the intermediates the gradient ``If`` reads in
  optionals) holds the optional's components: their dtypes and shapes, per branch; the
  core counts the larger branch. Such outputs stay on the device (``DeepCopy`` has no
  ``variant`` kernel: no swap can copy them).

A node whose memory cannot be stated (a branch missing from the library, a branch with
a node that runs a function other than a stated ``If``: a loop, a call, a ``Case``; an
unknown shape) is left out; the planner then refuses it in the forward
or backward pass with :class:`~hybridplan.errors.UnsupportedGraphError`.

**Complexity.** O(N) to find the nodes, plus one analysis per branch body: O(B log B)
for B body nodes; nested ``If`` bodies are visited once per enclosing branch.

Example::

    bodies = body_memory(graph_bytes, workspace="cpu-onednn")
    # [(node name, scratch bytes, [(output, branch, dtype enum, dims, count)])]
"""

from __future__ import annotations

from typing import Any

__all__ = ["IF_OPS", "body_memory"]

#: The functional conditionals planned as one op: the ops of ``opkind::runs_as_one_op`` in
#: the core, which refuses any other control flow in the forward or backward pass.
IF_OPS = ("If", "StatelessIf")

_MARKERS = tuple(b"\x12" + bytes([len(op)]) + op.encode() for op in IF_OPS)

Body = tuple[str, int, list[tuple[int, int, int, list[int], int]]]


def body_memory(data: bytes, workspace: str | None = None) -> list[Body]:
    """The stated memory of every ``If`` / ``StatelessIf`` node of a serialized GraphDef.

    Returns ``[(node name, scratch bytes, [(output, branch, dtype, dims, count)])]``,
    sorted by name; empty (and TensorFlow not imported) when the graph holds no such
    node, and without TensorFlow. ``workspace`` is the core's workspace rule for the
    branch bodies' kernels.
    """
    if not any(m in data for m in _MARKERS):
        return []
    try:
        from tensorflow.core.framework import graph_pb2
    except ImportError:  # without TensorFlow no body is read: the planner refuses the node
        return []
    try:
        gd = graph_pb2.GraphDef.FromString(data)
    except Exception:  # the core reports malformed bytes with its own typed error
        return []
    lib = {f.signature.name: f for f in gd.library.function}
    return _bodies(gd.node, lib, workspace, depth=0)


def _bodies(nodes: Any, lib: dict[str, Any], workspace: str | None, depth: int) -> list[Body]:
    out = []
    for node in nodes:
        if node.op not in IF_OPS:
            continue
        stated = _stated(node, lib, workspace, depth)
        if stated is not None:
            out.append(stated)
    return sorted(out, key=lambda b: b[0])


def _stated(node: Any, lib: dict[str, Any], workspace: str | None, depth: int) -> Body | None:
    """The memory of one ``If`` node, or ``None`` when it cannot be stated."""
    from tensorflow.python.framework.function_def_to_graph import function_def_to_graph_def

    if depth > 16:  # nesting deeper than any step holds: leave it to the refusal
        return None
    scratch = 0
    held: list[tuple[int, int, int, list[int], int]] = []
    for branch, attr in enumerate(("then_branch", "else_branch")):
        fdef = lib.get(node.attr[attr].func.name) if attr in node.attr else None
        if fdef is None:
            return None
        bgd, flat_names = function_def_to_graph_def(fdef)
        del bgd.library.function[:]  # the body's own If nodes are stated below
        inner = _bodies(bgd.node, lib, workspace, depth + 1)
        runs_functions = {n.name for n in bgd.node if _runs_function(n, lib)}
        if runs_functions - {name for name, _, _ in inner}:
            return None  # a loop, a call, a Case, an If not stated: memory unseen
        peak = _peak(bgd, inner, workspace)
        if peak is None:
            return None
        scratch = max(scratch, peak)
        by_name = {n.name: n for n in bgd.node}
        for k, arg in enumerate(fdef.signature.output_arg):
            ret = flat_names.get(fdef.ret.get(arg.name, ""), "")
            producer = by_name.get(ret.split(":")[0])
            if producer is None or producer.op != "OptionalFromValue":
                continue
            components = _components(producer, by_name)
            if components is None:
                return None
            held.extend((k, branch, dtype, dims, 1) for dtype, dims in components)
    return node.name, scratch, held


def _runs_function(node: Any, lib: dict[str, Any]) -> bool:
    """Whether a node runs a function of the library (as its op, or one its attributes
    name): its memory is the function's, which the body's analysis does not see."""
    if node.op in lib:
        return True
    return any(v.HasField("func") or len(v.list.func) > 0 for v in node.attr.values())


def _components(optional: Any, by_name: dict[str, Any]) -> list[tuple[int, list[int]]] | None:
    """``(dtype, dims)`` of each component of an ``OptionalFromValue`` in a body."""
    types = list(optional.attr["Toutput_types"].list.type)
    found = []
    for dtype, ref in zip(
        types, [i for i in optional.input if not i.startswith("^")], strict=False
    ):
        name, _, index = ref.partition(":")
        src = by_name.get(name)
        if src is None or "_output_shapes" not in src.attr:
            return None
        shapes = src.attr["_output_shapes"].list.shape
        k = int(index or 0)
        if k >= len(shapes) or shapes[k].unknown_rank:
            return None
        dims = [d.size for d in shapes[k].dim]
        if any(d < 0 for d in dims):
            return None
        found.append((int(dtype), dims))
    return found


def _peak(bgd: Any, bodies: list[Body], workspace: str | None) -> int | None:
    """The body's peak as the core computes it, less its arguments live at the peak."""
    from . import _core
    from .errors import HybridplanError

    try:
        a = _core.analyze(
            bgd.SerializeToString(), persistent_bytes=0, workspace=workspace, bodies=bodies
        )
    except HybridplanError:
        return None
    args = {n.name for n in bgd.node if n.op == "Placeholder"}
    live = a.live_at_peak(a.num_tensors)
    held_args = sum(nbytes for name, nbytes, _, _, _ in live if name.split(":")[0] in args)
    return max(0, a.peak_bytes - held_args)
