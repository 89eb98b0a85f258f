"""Control flow in the step: the memory of a functional ``If``'s branches and of a
``While``'s body, trip count and lists, for the planner.

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

A functional ``While`` / ``StatelessWhile`` (``lower_while_op.cc`` lowers it to a frame
whose outputs keep the node's names) is stated the same way (:func:`_loop`):

- **trip count**: an upper bound from the loop's structure (:func:`_trip_count`): a
  counter ``i`` (the body returns ``i + 1``, its start a constant) compared by
  ``Less(i, b)`` in the condition (through ``LogicalAnd`` only), ``b`` a constant, a
  loop-invariant variable of constant start (TensorFlow evaluates a stateless
  subgraph), or the counter output of a bounded loop (a gradient loop's);
- **held**: each ``variant`` output the body fills by ``TensorListPushBack`` /
  ``TensorListSetItem`` holds its elements times the trip count (branch 0), as does one
  the body returns as an ``AddN`` of the list it carries and new lists it fills so (an
  element one list leaves uninitialized is the other's buffer: a gradient loop summing
  the gradient of the sequence it read); a pop adds nothing; an element that is the same
  buffer every iteration (a ``ReadVariableOp`` value, a loop-invariant argument, a value
  of constants only, which Grappler folds into one ``Const``) counts 0, and a tensor
  held by two lists once; a copy to the host (:mod:`hybridplan.accumulators`) counts 0
  device bytes;
- **scratch**: one iteration's peak less each ordinary loop variable twice (the node's
  input and output) and the list elements live at the peak.

``TensorListFromTensor`` nodes hold their input's bytes (the list keeps slices of its
buffer). A node whose memory cannot be stated (a branch missing from the library, a branch with
a node that runs a function other than a stated ``If``: a loop, a call, a ``Case``; an
unknown shape) is left out; the planner then refuses it in the forward
or backward pass with :class:`~hybridplan.errors.UnsupportedGraphError`.

**Complexity.** O(N) to find the nodes, plus one analysis per branch or loop body:
O(B log B) for B body nodes; nested bodies are visited once per enclosing body; a trip
count's constant subgraph is evaluated once per loop input (one TensorFlow session).

Example::

    bodies = body_memory(graph_bytes, workspace="cpu-onednn")
    # [(node name, scratch bytes, [(output, branch, dtype enum, dims, count)])]
"""

from __future__ import annotations

from typing import Any

from . import _core

__all__ = ["IF_OPS", "WHILE_OPS", "body_memory"]

# Every op type this module matches is a fact of the core's one op table
# (``rust/core/src/opkind.rs``, exported by ``_core.op_table``); none is spelled here.
_OPS = _core.op_table()

#: The functional conditionals planned as one op: with :data:`WHILE_OPS`, the ops of
#: ``opkind::runs_as_one_op`` in the core (``opkind::CONDITIONALS``), which refuses any
#: other control flow in the forward or backward pass.
IF_OPS: tuple[str, ...] = tuple(_OPS["conditionals"])
#: The functional loops planned as one op (``tf.while_loop``, a Keras RNN layer;
#: ``opkind::ONE_OP_LOOPS``).
WHILE_OPS: tuple[str, ...] = tuple(_OPS["loops"])

#: TensorList ops that add one element to the list they take as input 0, and the input
#: that is the element (the list holds the element's buffer: no copy is made).
_ADDS_ELEMENT: dict[str, int] = dict(_OPS["list_adds_element"])
#: TensorList ops that take one element off the list they take as input 0.
_TAKES_ELEMENT = frozenset(_OPS["list_takes_element"])
#: TensorList ops whose list holds their input 0's buffer (``TensorListFromTensor``).
_HOLDS_INPUT = frozenset(_OPS["list_holds_input"])
_NEW_LIST = frozenset(_OPS["list_new"])  # a list holding no element's buffer
_LIST_SUMS = frozenset(_OPS["list_sums"])  # lists added element by element
_OPTIONAL = frozenset(_OPS["optional_from_value"])  # wraps its inputs in an optional
_IDENTITY = frozenset(_OPS["identities"])  # output 0 is input 0, unchanged
_ARGUMENT = frozenset(_OPS["arguments"])  # a function body's argument
_FEEDS = frozenset(_OPS["feeds"])  # fed at run time: no constant reads one
_LESS = frozenset(_OPS["less"])
_AND = frozenset(_OPS["logical_and"])
_ADD = frozenset(_OPS["additions"])
_CONSTANT = frozenset(_OPS["constants"])
_VARIABLE_READ = frozenset(_OPS["variable_reads"])  # its output is the variable's buffer
#: The handle dtypes (``resource``, ``variant``): no bytes of their own, from the core's
#: dtype table.
_HANDLES = frozenset(code for code, _, _, handle in _core.dtypes() if handle)
_VARIANT = next(code for code, name, _, _ in _core.dtypes() if name == "variant")

Body = tuple[str, int, list[tuple[int, int, int, list[int], int]]]


def body_memory(
    data: bytes, workspace: str | None = None, control_flow: bool | None = None
) -> list[Body]:
    """The stated memory of every ``If`` / ``StatelessIf`` / ``While`` /
    ``StatelessWhile`` node (and ``TensorListFromTensor``) of a serialized GraphDef.

    Returns ``[(node name, scratch bytes, [(output, branch, dtype, dims, count)])]``,
    sorted by name; empty (and TensorFlow not imported) when the graph holds no such
    node, and without TensorFlow. ``workspace`` is the core's workspace rule for the
    branch bodies' kernels. ``control_flow``: whether ``data`` may hold such a node, when
    the caller knows (``_graphio.graph_source``); None: looked for here.
    """
    if control_flow is None:
        # The core reads the nodes' op fields only (opscan.rs): no parse without such a node.
        control_flow = _core.has_node_op(data, [*IF_OPS, *WHILE_OPS])
    if not control_flow:
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
    return _bodies(gd, lib, workspace, depth=0)


def _bodies(gd: Any, lib: dict[str, Any], workspace: str | None, depth: int) -> list[Body]:
    out = []
    trips: dict[str, int | None] = {}
    for node in gd.node:
        if node.op in IF_OPS:
            stated = _stated(node, lib, workspace, depth)
        elif node.op in WHILE_OPS:
            stated = _loop(node, gd, lib, workspace, depth, trips)
        else:
            continue
        if stated is not None:
            out.append(stated)
    out.extend(_lists_of_tensors(gd))
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
        inner = _bodies(bgd, lib, workspace, depth + 1)
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
            if producer is None or producer.op not in _OPTIONAL:
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
    parts = _peak_parts(bgd, bodies, workspace, frozenset())
    return None if parts is None else max(0, parts[0] - parts[1])


def _peak_parts(
    bgd: Any, bodies: list[Body], workspace: str | None, also: frozenset[str]
) -> tuple[int, int, int] | None:
    """The body's peak as the core computes it, the bytes of its arguments live at the
    peak, and those of the tensors named in ``also`` (``name:k``, or the tensor whose
    buffer TensorFlow forwards into one) live there."""
    from .errors import HybridplanError

    try:
        a = _core.analyze(
            bgd.SerializeToString(), persistent_bytes=0, workspace=workspace, bodies=bodies
        )
    except HybridplanError:
        return None
    args = {n.name for n in bgd.node if n.op in _ARGUMENT}
    live = a.live_at_peak(a.num_tensors)
    if also:
        also = also | {owner for name, owner in a.forwarded() if name in also}
    held_args = sum(nbytes for name, nbytes, _, _, _ in live if name.split(":")[0] in args)
    held_also = sum(
        nbytes for name, nbytes, _, _, _ in live if name in also and name.split(":")[0] not in args
    )
    return a.peak_bytes, held_args, held_also


# ---------------------------------------------------------------------------- loops


def _loop(
    node: Any,
    gd: Any,
    lib: dict[str, Any],
    workspace: str | None,
    depth: int,
    trips: dict[str, int | None],
) -> Body | None:
    """The memory of one ``While`` node, or ``None`` when it cannot be stated: a trip
    count that is not a constant, a body that runs a function, an unknown shape, a list
    output the body fills in a way not modelled."""
    from tensorflow.python.framework.function_def_to_graph import function_def_to_graph_def

    if depth > 16:
        return None
    trip = _trip_count(node, gd, lib, trips)
    body = lib.get(node.attr["body"].func.name) if "body" in node.attr else None
    if trip is None or body is None:
        return None
    bgd, flat_names = function_def_to_graph_def(body)
    del bgd.library.function[:]
    inner = _bodies(bgd, lib, workspace, depth + 1)
    runs_functions = {n.name for n in bgd.node if _runs_function(n, lib)}
    if runs_functions - {name for name, _, _ in inner}:
        return None
    by_name = {n.name: n for n in bgd.node}
    args = _arg_nodes(body, bgd)
    raw = [flat_names.get(body.ret[a.name], "") for a in body.signature.output_arg]
    rets = [_through_identity(r, by_name) for r in raw]
    invariant = {args[k] for k, r in enumerate(rets) if k < len(args) and r == args[k] + ":0"}
    types = list(node.attr["T"].list.type)
    held: list[tuple[int, int, int, list[int], int]] = []
    seen: set[str] = set()  # a tensor added to two lists holds one buffer
    # A buffer two lists hold lives as long as the longer-lived list: count it in a list
    # another loop reads (an accumulator, held until the gradient loop) before the others
    # (a TensorArray the forward pass reads right after the loop).
    to_loops = _read_by_loops(node.name, gd)
    for k in sorted(range(len(rets)), key=lambda k: (k not in to_loops, k)):
        ref = rets[k]
        if k >= len(types) or types[k] != _VARIANT:
            continue
        while True:  # walk the list ops from the returned list back to the argument
            name = ref.split(":")[0]
            if k < len(args) and name == args[k]:
                break
            producer = by_name.get(name)
            if producer is None:
                return None
            if producer.op in _ADDS_ELEMENT:
                added = [_added(producer)]
                ref = _through_identity(producer.input[0], by_name)
            elif producer.op in _LIST_SUMS:
                # The carried list summed with lists made this iteration: it holds their
                # elements too (an element one list leaves uninitialized is the other's).
                parts = [_through_identity(i, by_name) for i in producer.input if i[0] != "^"]
                fresh = [_new_list_elements(p, by_name) for p in parts]
                carried = [p for p, f in zip(parts, fresh, strict=True) if f is None]
                if len(carried) != 1:
                    return None  # no carried list, or two: not modelled
                added = [e for f in fresh if f is not None for e in f]
                ref = carried[0]
            elif producer.op in _TAKES_ELEMENT:
                added = []
                ref = _through_identity(producer.input[0], by_name)
            else:
                return None  # a list op (or an op) not modelled: its bytes are unknown
            for added_ref, dtype in added:
                element = _through_identity(added_ref, by_name)
                # An argument added each iteration is the value the body returned for it
                # the iteration before: the same buffer, if that value is added too.
                name = element.split(":")[0]
                key = rets[args.index(name)] if name in args and name not in invariant else element
                if _hosted(element, by_name):
                    pass  # a copy to the host (hybridplan.accumulators): no device bytes
                elif key not in seen and not _shares_a_buffer(element, by_name, invariant):
                    seen.add(key)
                    stated = _shape(element, by_name)
                    if stated is None:
                        return None
                    held.append((k, 0, dtype, stated, trip))
    # The scratch: one iteration's peak, less what the model counts already for the
    # whole loop: each loop variable twice (the node's input and its output; in the
    # body, the argument and the value returned for it, in whichever buffer) and the
    # elements added to its lists that are live at the peak (held by the lists).
    parts = _peak_parts(bgd, inner, workspace, frozenset(seen))
    loop_variables = _loop_variable_bytes(node)
    if parts is None or loop_variables is None:
        return None
    peak, _, elements = parts
    return node.name, max(0, peak - elements - 2 * loop_variables), sorted(held)


def _added(adder: Any) -> tuple[str, int]:
    """The element a list op of ``_ADDS_ELEMENT`` adds, and its dtype enum."""
    return adder.input[_ADDS_ELEMENT[adder.op]], int(adder.attr["element_dtype"].type)


def _new_list_elements(ref: str, by_name: dict[str, Any]) -> list[tuple[str, int]] | None:
    """The elements (and their dtypes) added to a list the body makes (``_NEW_LIST``) on
    the way to ``ref``, when ``ref`` is such a list; ``None`` otherwise."""
    added = []
    while True:
        producer = by_name.get(ref.split(":")[0])
        if producer is None:
            return None
        if producer.op in _NEW_LIST:
            return added
        if producer.op not in _ADDS_ELEMENT:
            return None
        added.append(_added(producer))
        ref = _through_identity(producer.input[0], by_name)


def _read_by_loops(name: str, gd: Any) -> set[int]:
    """The outputs of node ``name`` that a loop of ``gd`` reads. O(inputs of gd)."""
    out = set()
    for n in gd.node:
        if n.op in WHILE_OPS:
            for ref in n.input:
                src, _, k = ref.partition(":")
                if src == name:
                    out.add(int(k or 0))
    return out


def _loop_variable_bytes(node: Any) -> int | None:
    """The bytes of a loop's ordinary (not ``variant``/``resource``) loop variables, from
    its ``T`` and ``output_shapes``; ``None`` when a shape is not fully known."""
    import tensorflow as tf

    types = list(node.attr["T"].list.type)
    shapes = list(node.attr["output_shapes"].list.shape) if "output_shapes" in node.attr else []
    if len(shapes) != len(types):
        return None
    total = 0
    for dtype, shape in zip(types, shapes, strict=True):
        if dtype in _HANDLES:
            continue
        if shape.unknown_rank or any(d.size < 0 for d in shape.dim):
            return None
        n = tf.as_dtype(dtype).size
        for d in shape.dim:
            n *= d.size
        total += n
    return total


def _hosted(ref: str, by_name: dict[str, Any]) -> bool:
    """Whether a tensor added to a list is a copy :mod:`hybridplan.accumulators` wrote to
    keep the list on the host (marked ``HOST_COPY``): a host buffer, no device bytes."""
    from .accumulators import HOST_COPY

    producer = by_name.get(ref.split(":")[0])
    return producer is not None and HOST_COPY in producer.attr


def _shares_a_buffer(ref: str, by_name: dict[str, Any], invariant: set[str]) -> bool:
    """Whether a tensor added to a list each iteration is the same buffer every time:
    a variable's value (``ReadVariableOp`` returns the variable's buffer) or an argument
    the body passes through unchanged (a loop-invariant input, held outside)."""
    producer = by_name.get(ref.split(":")[0])
    if producer is None:
        return False
    return (
        producer.op in _VARIABLE_READ
        or producer.name in invariant
        or _folded(producer.name, by_name)
    )


def _folded(name: str, by_name: dict[str, Any]) -> bool:
    """Whether a body tensor is computed from constants only (stateless ops, no
    argument, no function): TensorFlow's constant folding (Grappler, on by default)
    makes it one ``Const`` whose buffer every iteration shares (the ``zeros_like`` a
    gradient loop sets into the gradient of the list its forward loop wrote)."""
    from tensorflow.python.framework import op_def_registry

    seen: set[str] = set()
    stack = [name]
    while stack:
        node = by_name.get(stack.pop().lstrip("^").split(":")[0])
        if node is None or node.op in _FEEDS or node.op in _ARGUMENT:
            return False
        if node.name in seen:
            continue
        seen.add(node.name)
        if len(seen) > 64:  # a constant subgraph this large is no list element's
            return False
        op_def = op_def_registry.get(node.op)
        if op_def is None or op_def.is_stateful or _runs_function(node, {}):
            return False
        stack.extend(i for i in node.input if not i.startswith("^"))
    return True


def _arg_nodes(fdef: Any, bgd: Any) -> list[str]:
    """The body's argument nodes (``Placeholder``), in the signature's order."""
    placeholders = [n.name for n in bgd.node if n.op in _ARGUMENT]
    if len(placeholders) != len(fdef.signature.input_arg):
        return []
    return placeholders


def _through_identity(ref: str, by_name: dict[str, Any]) -> str:
    """``ref`` with any ``Identity`` in front of it skipped (it forwards its input)."""
    ref = ref if ":" in ref else ref + ":0"
    for _ in range(len(by_name) + 1):
        producer = by_name.get(ref.split(":")[0])
        if producer is None or producer.op not in _IDENTITY:
            return ref
        ref = producer.input[0] if ":" in producer.input[0] else producer.input[0] + ":0"
    return ref


def _shape(ref: str, by_name: dict[str, Any]) -> list[int] | None:
    """The fully known shape of a body tensor, from its producer's ``_output_shapes`` (an
    argument's: its ``shape``)."""
    name, _, index = ref.partition(":")
    src = by_name.get(name)
    if src is not None and src.op in _ARGUMENT and "shape" in src.attr:
        shapes = [src.attr["shape"].shape]
    elif src is None or "_output_shapes" not in src.attr:
        return None
    else:
        shapes = src.attr["_output_shapes"].list.shape
    k = int(index or 0)
    if k >= len(shapes) or shapes[k].unknown_rank:
        return None
    dims = [d.size for d in shapes[k].dim]
    return None if any(d < 0 for d in dims) else dims


def _trip_count(
    node: Any, gd: Any, lib: dict[str, Any], trips: dict[str, int | None]
) -> int | None:
    """An upper bound on a loop's iterations, from its structure, or ``None``.

    A loop variable ``i`` is a counter when the body returns ``i + 1`` (``AddV2``/``Add``
    of ``i`` and a constant 1) and its initial value is a constant; the condition bounds
    it when it is ``Less(i, b)`` reached from the condition's output through
    ``LogicalAnd``/``Identity`` only, ``b`` a constant of the condition or a loop variable
    the body passes through unchanged whose initial value is known: a constant, or a
    counter output of a loop already bounded (at most its start plus that loop's trips).
    The bound is the smallest ``b - start`` over such comparisons (``while_v2`` compares
    its loop counter with ``maximum_iterations``; a Keras RNN its time step with the
    sequence length; a gradient loop its counter with the forward loop's count).
    """
    from tensorflow.python.framework.function_def_to_graph import function_def_to_graph_def

    if node.name in trips:
        return trips[node.name]
    trips[node.name] = None  # a cycle of loops bounding each other bounds nothing
    body = lib.get(node.attr["body"].func.name) if "body" in node.attr else None
    cond = lib.get(node.attr["cond"].func.name) if "cond" in node.attr else None
    if body is None or cond is None:
        return None
    bgd, bflat = function_def_to_graph_def(body)
    cgd, cflat = function_def_to_graph_def(cond)
    bby = {n.name: n for n in bgd.node}
    cby = {n.name: n for n in cgd.node}
    bargs, cargs = _arg_nodes(body, bgd), _arg_nodes(cond, cgd)
    inputs = [i for i in node.input if not i.startswith("^")]
    if not bargs or len(cargs) != len(bargs) or len(inputs) != len(bargs):
        return None
    rets = [
        _through_identity(bflat.get(body.ret[a.name], ""), bby) for a in body.signature.output_arg
    ]

    def initial(k: int) -> int | None:
        return _value(inputs[k], gd, lib, trips)

    def counter(k: int) -> bool:
        step = bby.get(rets[k].split(":")[0]) if k < len(rets) else None
        if step is None or step.op not in _ADD:
            return False
        a, b = (_through_identity(i, bby) for i in step.input[:2])
        one = [x for x in (a, b) if x != bargs[k] + ":0"]
        return len(one) == 1 and _const(one[0], bby) == 1

    def bound(ref: str) -> int | None:
        name = ref.split(":")[0]
        if name in cargs:
            k = cargs.index(name)
            if k < len(rets) and rets[k] == bargs[k] + ":0":  # passed through unchanged
                return initial(k)
            return None
        return _const(ref, cby)

    out = [cflat.get(cond.ret[a.name], "") for a in cond.signature.output_arg]
    frontier, best = [_through_identity(r, cby) for r in out[:1]], None
    while frontier:
        producer = cby.get(frontier.pop().split(":")[0])
        if producer is None:
            continue
        if producer.op in _AND:
            frontier.extend(_through_identity(i, cby) for i in producer.input[:2])
        elif producer.op in _LESS:
            i, b = (_through_identity(x, cby) for x in producer.input[:2])
            name = i.split(":")[0]
            if name not in cargs:
                continue
            k = cargs.index(name)
            limit, start = bound(b), initial(k)
            if counter(k) and limit is not None and start is not None:
                n = max(0, limit - start)
                best = n if best is None else min(best, n)
    trips[node.name] = best
    return best


def _const(ref: str, by_name: dict[str, Any]) -> int | None:
    """The value of an integer scalar constant (``Const``), or ``None``."""
    from tensorflow.python.framework import tensor_util

    src = by_name.get(ref.split(":")[0])
    if src is None or src.op not in _CONSTANT:
        return None
    try:
        v = tensor_util.MakeNdarray(src.attr["value"].tensor)
    except Exception:  # a dtype numpy does not read: not a bound
        return None
    return int(v) if v.ndim == 0 and v.dtype.kind in "iu" else None


def _value(ref: str, gd: Any, lib: dict[str, Any], trips: dict[str, int | None]) -> int | None:
    """The value of an integer scalar in ``gd``, or an upper bound of it: a counter output
    of a bounded loop is bounded by its start plus the loop's trips; any other tensor is
    evaluated by TensorFlow when every op it depends on is stateless and reads no
    argument (``Placeholder``), no variable and no function; else ``None``."""
    by_name = {n.name: n for n in gd.node}
    name, _, index = ref.partition(":")
    src = by_name.get(name)
    if src is None:
        return None
    if src.op in WHILE_OPS:
        k = int(index or 0)
        trip = _trip_count(src, gd, lib, trips)
        inputs = [i for i in src.input if not i.startswith("^")]
        start = _value(inputs[k], gd, lib, trips) if k < len(inputs) else None
        return None if trip is None or start is None else start + trip
    constant = _const(ref, by_name)
    return constant if constant is not None else _evaluate(ref, by_name, gd)


def _evaluate(ref: str, by_name: dict[str, Any], gd: Any) -> int | None:
    """Evaluates a constant integer scalar subgraph with TensorFlow, or ``None``."""
    import tensorflow as tf
    from tensorflow.core.framework import graph_pb2
    from tensorflow.python.framework import op_def_registry

    seen: set[str] = set()
    stack = [ref.split(":")[0]]
    while stack:
        name = stack.pop().lstrip("^").split(":")[0]
        if name in seen:
            continue
        n = by_name.get(name)
        if n is None or n.op in _FEEDS:
            return None
        op_def = op_def_registry.get(n.op)
        if op_def is None or op_def.is_stateful or _runs_function(n, {}):
            return None
        if any(t.type in _HANDLES for t in op_def.input_arg):  # resource, variant
            return None
        seen.add(name)
        stack.extend(n.input)
    sub = graph_pb2.GraphDef()
    sub.versions.CopyFrom(gd.versions)
    for n in gd.node:
        if n.name in seen:
            m = sub.node.add()
            m.CopyFrom(n)
            m.device = ""
    try:
        with tf.Graph().as_default() as g:
            tf.graph_util.import_graph_def(sub, name="")
            with tf.compat.v1.Session(graph=g) as s:
                v = s.run(ref if ":" in ref else ref + ":0")
    except Exception:  # not evaluable here: the bound is unknown
        return None
    return int(v) if getattr(v, "ndim", 1) == 0 and v.dtype.kind in "iu" else None


def _lists_of_tensors(gd: Any) -> list[Body]:
    """``TensorListFromTensor`` nodes: the list holds its input's buffer, sliced along
    dimension 0 (no copy: ``list_kernels.h``), so it holds the input's bytes."""
    by_name = {n.name: n for n in gd.node}
    out = []
    for n in gd.node:
        if n.op not in _HOLDS_INPUT or not n.input:
            continue
        dims = _shape(n.input[0] if ":" in n.input[0] else n.input[0] + ":0", by_name)
        if dims is not None:
            out.append((n.name, 0, [(0, 0, int(n.attr["element_dtype"].type), dims, 1)]))
    return out
