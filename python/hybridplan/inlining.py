"""Inline the function calls of a GraphDef, as TensorFlow does before it runs a step.

**The rule.** Every ``PartitionedCall`` / ``StatefulPartitionedCall`` node ``C`` whose
function ``F`` is in the GraphDef's library is replaced by ``F``'s body, as TensorFlow's
runtime inliner (``common_runtime/inline_function_utils.cc``, which Grappler's function
optimizer and the placer's lowering pass call) replaces it:

- each body node ``n`` becomes ``C/n`` (same op, attributes and ``_output_shapes``; an
  empty device becomes ``C``'s device);
- each argument ``k`` becomes an ``Identity`` named ``Func/C/input/_k`` reading ``C``'s
  ``k``-th input; when ``C`` has control inputs, a ``NoOp`` named
  ``Func/C/input_control_node/_0`` carries them and gates every input ``Identity`` and
  every body node without inputs, so nothing of the body runs before them;
- ``C`` itself becomes an ``IdentityN`` of the function's return values (a ``NoOp`` when
  it returns nothing) under the same name, with control inputs from the function's
  control outputs (its stateful ops when it declares none): every reader of ``C:i`` and
  every ``^C`` still finds its tensor and waits, as for the call, until the body's side
  effects are done. ``IdentityN`` forwards its input buffers, so the memory is the body's.

Calls inside an inlined body are inlined in turn (nested ``tf.function``s). Functions
that no remaining node refers to are dropped from the library.

**Not inlined** (the node stays; the planner then refuses the step if the node is in its
forward or backward pass, :class:`~hybridplan.errors.UnsupportedGraphError`): a function
marked ``_noinline`` (``tf.function(experimental_attributes={"_noinline": True})``), one
compiled by XLA (``_XlaMustCompile``: inlining would change its arithmetic), a recursive
call (a function already being inlined on the path to it), a call of a function the
library lacks, and every other op that runs
a function: ``While``, ``If``, ``Case``, ``SymbolicGradient``, ``RemoteCall`` and legacy
calls by function name.

**Shapes.** Body nodes keep the ``_output_shapes`` TensorFlow wrote into the library; a
node left without them (a GraphDef written without shapes) gets the shapes TensorFlow's
shape inference gives when the inlined graph is imported (its ``_output_shapes`` read as
facts); with a recursive library (a function that runs itself, directly or through
others: TensorFlow's importer does not return from one) a node without them that is
read is an :class:`~hybridplan.errors.UnsupportedGraphError`, and where TensorFlow
refuses the graph, an :class:`~hybridplan.errors.InvalidGraphError` with its reason.

**Complexity.** O(N + B) time and memory for N graph nodes and B inlined body nodes,
times the nesting depth for the output-name maps; bounded by the library: a function is
never inlined inside itself.

Example::

    flat, kept = inline_calls(graph_def)   # a new GraphDef; graph_def is untouched
    kept                                   # [(node name, op, why it stays)]
"""

from __future__ import annotations

from typing import Any

from . import _core
from .errors import InvalidGraphError, UnsupportedGraphError

__all__ = ["CALL_OPS", "inline_calls", "inlined", "maybe_inline", "recursive_function"]

#: The ops that call one function of the library with the node's inputs and return its
#: outputs (the inlinable calls; the other function-running ops are control flow): the
#: core's op table (``opkind::FUNCTION_CALLS``).
CALL_OPS = tuple(_core.function_call_ops())


def _may_call(data: bytes) -> bool:
    """Whether a node of the serialized GraphDef ``data`` may be a call: the core reads
    the nodes' op fields only (``opscan.rs``; true for bytes it cannot read), a cheap test
    that spares a flat graph the import of TensorFlow and a parse (about 40 ms at 10^6
    nodes, against 0.1-0.25 s for one search of the bytes per op name)."""
    return _core.has_node_op(data, list(CALL_OPS))


def maybe_inline(data: bytes) -> bytes:
    """``data`` with its function calls inlined, or ``data`` itself when it has none.

    Needs TensorFlow only when a call is present (a NodeDef's op field holds a call op);
    without TensorFlow the bytes come back unchanged and the planner refuses the call.
    """
    if not _may_call(data):
        return data
    try:
        from tensorflow.core.framework import graph_pb2
    except ImportError:
        return data
    try:
        gd = graph_pb2.GraphDef.FromString(data)
    except Exception:  # the core reports malformed bytes with its own typed error
        return data
    if not any(n.op in CALL_OPS for n in gd.node):
        return data
    flat, _ = inline_calls(gd)
    return flat.SerializeToString(deterministic=True)


def inlined(graph_def: Any) -> Any:
    """``graph_def`` itself when it calls no function, else its inlined copy: what
    :func:`maybe_inline` gives the planner, so node indices of a plan match it."""
    if not _may_call(graph_def.SerializeToString()):
        return graph_def
    if not any(n.op in CALL_OPS for n in graph_def.node):
        return graph_def
    return inline_calls(graph_def)[0]


def inline_calls(graph_def: Any) -> tuple[Any, list[tuple[str, str, str]]]:
    """A new GraphDef with every inlinable function call replaced by its body.

    Returns ``(graph_def, kept)``: ``kept`` lists the calls left in place as ``(node
    name, op, reason)``. The input is not modified.

    Raises:
        InvalidGraphError: an inlined node's name is already taken, a body refers to a
            tensor it does not define or uses an op TensorFlow does not know.
    """
    from tensorflow.core.framework import graph_pb2

    inliner = _Inliner(graph_def)
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    for node in graph_def.node:
        inliner.expand(node, (), out)
    _copy_library(graph_def.library, out)
    _fill_missing_shapes(out)
    return out, inliner.kept


class _Inliner:
    def __init__(self, graph_def: Any):
        self.lib = {f.signature.name: f for f in graph_def.library.function}
        self.names = {n.name for n in graph_def.node}
        self.kept: list[tuple[str, str, str]] = []

    def expand(self, node: Any, chain: tuple[str, ...], out: Any) -> None:
        """Appends ``node`` to ``out``, or its body when it is an inlinable call."""
        if node.op not in CALL_OPS:
            out.node.add().CopyFrom(node)
            return
        fname = node.attr["f"].func.name if "f" in node.attr else ""
        reason = self._why_not(node, fname, chain)
        if reason is not None:
            self.kept.append((node.name, node.op, reason))
            out.node.add().CopyFrom(node)
            return
        for body_node in self._inline(node, self.lib[fname]):
            self.expand(body_node, (*chain, fname), out)

    def _why_not(self, node: Any, fname: str, chain: tuple[str, ...]) -> str | None:
        if fname not in self.lib:
            return f"function {fname!r} is not in the GraphDef's library"
        fdef = self.lib[fname]
        if fname in chain:
            return f"recursive call of {fname!r}"
        for attrs in (fdef.attr, node.attr):
            if "_noinline" in attrs and attrs["_noinline"].b:
                return f"{fname!r} is marked _noinline"
            if "_XlaMustCompile" in attrs and attrs["_XlaMustCompile"].b:
                return f"{fname!r} is compiled by XLA (jit_compile=True)"
        return None

    def _inline(self, call: Any, fdef: Any) -> list[Any]:
        """The nodes that replace ``call``: input identities, the body, the output node."""
        from tensorflow.core.framework import node_def_pb2

        prefix = call.name + "/"
        args = [a.name for a in fdef.signature.input_arg]
        data_in = [i for i in call.input if not i.startswith("^")]
        control_in = [i for i in call.input if i.startswith("^")]
        if len(data_in) != len(args):
            raise InvalidGraphError(
                f"node {call.name!r} passes {len(data_in)} inputs to {fdef.signature.name!r}, "
                f"which takes {len(args)}"
            )
        new: list[Any] = []

        def make(name: str, op: str) -> Any:
            if name in self.names:
                raise InvalidGraphError(
                    f"inlining {call.name!r} makes a node {name!r}, a name already taken: "
                    "rename that node"
                )
            self.names.add(name)
            n = node_def_pb2.NodeDef(name=name, op=op, device=call.device)
            new.append(n)
            return n

        gate = None
        if control_in:
            gate = make(f"Func/{call.name}/input_control_node/_0", "NoOp")
            gate.input.extend(control_in)
        flat: dict[str, str] = {}
        tin = call.attr["Tin"].list.type if "Tin" in call.attr else []
        if len(tin) != len(args):
            raise InvalidGraphError(f"node {call.name!r} has no Tin attribute for its inputs")
        for k, (arg, src) in enumerate(zip(args, data_in, strict=True)):
            ident = make(f"Func/{call.name}/input/_{k}", "Identity")
            ident.input.append(src)
            if gate is not None:
                ident.input.append("^" + gate.name)
            ident.attr["T"].type = tin[k]
            shapes = fdef.arg_attr[k].attr.get("_output_shapes") if k in fdef.arg_attr else None
            if shapes is not None:
                ident.attr["_output_shapes"].CopyFrom(shapes)
            flat[arg] = ident.name + ":0"
            flat["^" + arg] = "^" + ident.name
        stateful = []
        for body in fdef.node_def:
            flat["^" + body.name] = "^" + prefix + body.name
            for name, index in self._output_args(body):
                flat[name] = f"{prefix}{body.name}:{index}"
            if self._is_stateful(body.op):
                stateful.append(body.name)
        for body in fdef.node_def:
            n = make(prefix + body.name, body.op)
            n.CopyFrom(body)
            n.name = prefix + body.name
            n.device = body.device or call.device
            del n.input[:]
            n.input.extend(self._flat(flat, i, call, fdef) for i in body.input)
            if not body.input and gate is not None:
                n.input.append("^" + gate.name)
            if "_class" in n.attr:
                locs = [
                    s.replace(b"loc:@", b"loc:@" + prefix.encode(), 1)
                    for s in n.attr["_class"].list.s
                ]
                del n.attr["_class"].list.s[:]
                n.attr["_class"].list.s.extend(locs)
        rets = [
            self._flat(flat, fdef.ret.get(a.name, a.name), call, fdef)
            for a in fdef.signature.output_arg
        ]
        waits = list(fdef.control_ret.values()) if fdef.control_ret else stateful
        self.names.discard(call.name)
        out = make(call.name, "IdentityN" if rets else "NoOp")
        out.input.extend(rets)
        out.input.extend(sorted({"^" + prefix + w for w in waits}))
        if rets:
            tout = call.attr["Tout"].list.type if "Tout" in call.attr else []
            if len(tout) != len(rets):
                raise InvalidGraphError(f"node {call.name!r} has no Tout attribute for its outputs")
            out.attr["T"].list.type.extend(tout)
            if "_output_shapes" in call.attr:
                out.attr["_output_shapes"].CopyFrom(call.attr["_output_shapes"])
        return new

    def _flat(self, flat: dict[str, str], name: str, call: Any, fdef: Any) -> str:
        if name in flat:
            return flat[name]
        raise InvalidGraphError(
            f"function {fdef.signature.name!r} (called by {call.name!r}) refers to "
            f"{name!r}, which it does not define"
        )

    def _output_args(self, body: Any) -> list[tuple[str, int]]:
        """``("node:arg:i", flat index)`` of every output of a body node (FunctionDef
        tensors are named by output argument; GraphDef tensors by flat index)."""
        if body.op in self.lib:
            outputs = self.lib[body.op].signature.output_arg
        else:
            outputs = _op_def(body.op).output_arg
        pairs, index = [], 0
        for arg in outputs:
            for i in range(_num_args(arg, body)):
                pairs.append((f"{body.name}:{arg.name}:{i}", index))
                index += 1
        return pairs

    def _is_stateful(self, op: str) -> bool:
        if op in self.lib:
            return bool(self.lib[op].signature.is_stateful)
        return bool(_op_def(op).is_stateful)


def _op_def(op: str) -> Any:
    from tensorflow.python.framework import op_def_registry

    od = op_def_registry.get(op)
    if od is None:
        raise InvalidGraphError(
            f"op {op!r} in a function body is not registered with TensorFlow: import the "
            "library that defines it before planning"
        )
    return od


def _has_outputs(op: str) -> bool:
    from tensorflow.python.framework import op_def_registry

    od = op_def_registry.get(op)
    return od is None or bool(od.output_arg)


def _num_args(arg: Any, node: Any) -> int:
    """How many tensors one output argument stands for (``node_def_util``'s rule)."""
    if arg.number_attr:
        return int(node.attr[arg.number_attr].i) if arg.number_attr in node.attr else 0
    if arg.type_list_attr:
        if arg.type_list_attr not in node.attr:
            return 0
        return len(node.attr[arg.type_list_attr].list.type)
    return 1


def _copy_library(library: Any, out: Any) -> None:
    """The functions the remaining nodes refer to, transitively, with their gradients."""
    lib = {f.signature.name: f for f in library.function}
    grads = {g.function_name: g.gradient_func for g in library.gradient}
    needed: list[str] = []
    seen: set[str] = set()
    todo = [f for n in out.node for f in _refs(n, lib)]
    while todo:
        name = todo.pop()
        if name in seen or name not in lib:
            continue
        seen.add(name)
        needed.append(name)
        todo.extend(f for body in lib[name].node_def for f in _refs(body, lib))
        if name in grads:
            todo.append(grads[name])
    for name in sorted(needed):
        out.library.function.add().CopyFrom(lib[name])
    for g in library.gradient:
        if g.function_name in seen:
            out.library.gradient.add().CopyFrom(g)


def _refs(node: Any, lib: dict[str, Any]) -> list[str]:
    names = [node.op] if node.op in lib else []
    for value in node.attr.values():
        if value.HasField("func"):
            names.append(value.func.name)
        names.extend(f.name for f in value.list.func)
    return names


def recursive_function(library: Any) -> list[str] | None:
    """A cycle of calls in a ``FunctionDefLibrary`` (``[f, g, ..., f]``: ``f``'s body
    runs ``g``, ...), or None. A body runs a function by op name or through an attribute
    (``f``, ``body``, ``then_branch``, lists of functions). O(F + E) for F functions and E
    of their nodes and attributes."""
    lib = {f.signature.name: f for f in library.function}

    def callees(name: str) -> list[str]:
        out = []
        for n in lib[name].node_def:
            if n.op in lib:
                out.append(n.op)
            for a in n.attr.values():
                out.extend(f.name for f in (a.func, *a.list.func) if f.name in lib)
        return out

    state: dict[str, int] = {}  # 1: on the path, 2: done
    for root in lib:
        if root in state:
            continue
        path = [root]
        stack = [iter(callees(root))]
        state[root] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(callees(nxt)))
    return None


def _fill_missing_shapes(gd: Any) -> None:
    """Gives nodes without ``_output_shapes`` the shapes TensorFlow infers on import.
    Where it cannot and no node without them is read, the planner decides (an unread
    node's outputs are not needed, or it refuses the node).

    Raises:
        UnsupportedGraphError: a node without them is read and the library is recursive
            (TensorFlow's importer does not return from one), or holds an op this
            process has not registered.
        InvalidGraphError: a node without them is read and TensorFlow refuses the graph.
    """
    lib = {f.signature.name for f in gd.library.function}
    missing = [
        n for n in gd.node if "_output_shapes" not in n.attr and (n.op in lib or _has_outputs(n.op))
    ]
    if not missing:
        return
    read = {i.split(":", 1)[0] for n in gd.node for i in n.input if not i.startswith("^")}
    needed = [n for n in missing if n.name in read]
    cycle = recursive_function(gd.library)
    if cycle is not None:
        if not needed:
            return
        raise UnsupportedGraphError(
            f"the GraphDef's library is recursive ({' -> '.join(map(repr, cycle))}): "
            f"TensorFlow cannot import it to infer the shapes {len(needed)} nodes read lack "
            f"(the first {needed[0].name!r}), and no recursive call can be planned; "
            "export a step without recursion, its shapes written "
            "(as_graph_def(add_shapes=True))"
        )
    import tensorflow as tf
    from tensorflow.core.framework import graph_pb2

    copy = graph_pb2.GraphDef()
    copy.CopyFrom(gd)  # import_graph_def writes default attributes into its argument
    g = tf.Graph()
    try:
        with g.as_default():
            tf.graph_util.import_graph_def(copy, name="")
    except (ValueError, tf.errors.OpError) as e:
        # TensorFlow's reason, which names the node it refuses, says more than the
        # first tensor without a shape would.
        if not needed:
            return
        reason = (getattr(e, "message", None) or str(e)).strip().splitlines()[0][:500]
        what = (
            f"the shapes {len(needed)} nodes read lack (the first {needed[0].name!r}) cannot "
            f"be inferred, as TensorFlow does not accept this graph with its calls inlined: "
            f"{reason}"
        )
        if "not registered" in reason:  # an op of a library this process has not loaded
            raise UnsupportedGraphError(
                f"{what}: load the op's library (tf.load_op_library) before planning"
            ) from None
        raise InvalidGraphError(what) from None
    for n in missing:
        op = g.get_operation_by_name(n.name)
        if op.outputs:
            n.attr["_output_shapes"].list.shape.extend(t.shape.as_proto() for t in op.outputs)
