"""Loop accumulators kept in host memory: the ``TensorList`` a forward ``While`` fills for
its gradient loop, moved element by element to the host as it is filled and back as the
gradient loop pops it.

**The rule.** ``while_v2`` makes a loop whose gradient is taken push, every iteration,
each value its gradient reads onto a ``TensorList`` accumulator (a loop variable the loop
returns), and its gradient loop pop them in reverse (``TensorListPopBack``). The list
holds the pushed buffers (``list_kernels.h``: no copy), so a forward loop of ``T``
iterations leaves ``T`` elements of every accumulator on the device until the gradient
loop has popped them: for a Keras LSTM more than 40% of the step's tensor peak, all of
it an input of the gradient loop, so no swap of the list as a whole lowers the peak the
gradient loop starts at (the list would have to be back on the device before it), and
TensorFlow's ``DeepCopy`` has no ``variant`` kernel anyway. Instead, for each movable
accumulator, the loops' bodies are rewritten (real TensorFlow ops, in the GraphDef's
library; the step's own nodes are untouched, so a plan's node indices stay valid):

- forward body: ``TensorListPushBack(list, x)`` becomes
  ``TensorListPushBack(list, copy_to_host(x))``: the list holds host buffers;
- gradient body: every reader of ``TensorListPopBack(list, ...):1`` reads
  ``copy_to_device(TensorListPopBack(...):1)``, and the gradient loop runs one iteration
  at a time (``parallel_iterations = 1``; its pops depend on nothing the iterations
  compute, so TensorFlow would otherwise run them and their copies up to 32 iterations
  ahead): one element of each list on the device at a time.

The copies are the rewrite target's swap ops on its devices (``DeepCopy`` on
``/device:CPU:1`` and ``/device:CPU:0`` for CPU emulation, the one target the rewrite
writes them for: on a GPU the push and pop would have to run on the host too), marked
:data:`HOST_COPY` (and ``_grappler_do_not_remove``). The values are the same buffers'
bytes, so the step computes the same numbers. An accumulator is movable when, from the
graph's structure: the forward ``While``'s output ``k`` is a ``variant`` its body returns
from one ``TensorListPushBack`` of loop variable ``k``; the element pushed is not the
same buffer every iteration (a variable's value, a loop-invariant argument: the list
then holds no bytes of its own); the output's only reader is one loop (the gradient
``While``), whose body returns, for that input, one ``TensorListPopBack`` of the
argument, read by nothing else. The memory stated for a hosted list
(:func:`hybridplan.controlflow.body_memory`) is 0 device bytes; the copies are nodes of
the bodies, so each iteration's peak counts them.

**Complexity.** O(N + F) for N nodes and F library nodes, plus one
``function_def_to_graph_def`` per loop body.

Example::

    found = movable(graph_def)              # [(forward loop, output), ...]
    hosted = host(graph_def, found, "cpu-emulation")
"""

from __future__ import annotations

from typing import Any

from . import _core

__all__ = ["HOST_COPY", "host", "movable"]

#: The attribute that marks a copy this module writes into a loop body: a list element
#: made by such a copy is a host buffer, no device bytes (``controlflow.body_memory``).
HOST_COPY = "_hybridplan_host_copy"

_OPS = _core.op_table()
_LOOPS = frozenset(_OPS["loops"])
_ADDS = dict(_OPS["list_adds_element"])
_TAKES = frozenset(_OPS["list_takes_element"])
_VARIABLE_READ = frozenset(_OPS["variable_reads"])
_VARIANT = next(code for code, name, _, _ in _core.dtypes() if name == "variant")
# The one add and take op of while_v2's accumulators: push and pop back (their element
# input and output slots, from the core's table).
_PUSH = next(op for op, slot in _ADDS.items() if slot == 1)


def movable(graph_def: Any) -> list[tuple[str, int]]:
    """The accumulators of ``graph_def`` that :func:`host` can keep on the host:
    ``[(forward loop node name, output index)]``, in node order."""
    return [(fwd.name, k) for fwd, k, _, _ in _found(graph_def)]


def _found(gd: Any) -> list[tuple[Any, int, Any, int]]:
    """``(forward loop node, output k, gradient loop node, its input j)`` of every
    movable accumulator."""
    lib = {f.signature.name: f for f in gd.library.function}
    uses: dict[str, int] = {}
    for n in gd.node:
        for a in n.attr.values():
            if a.func.name:
                uses[a.func.name] = uses.get(a.func.name, 0) + 1
    readers: dict[str, list[tuple[Any, int]]] = {}
    for n in gd.node:
        for j, ref in enumerate(n.input):
            if not ref.startswith("^"):
                readers.setdefault(ref if ":" in ref else ref + ":0", []).append((n, j))
    out = []
    for fwd in gd.node:
        if fwd.op not in _LOOPS:
            continue
        body = _own_body(fwd, lib, uses)
        if body is None:
            continue
        types = list(fwd.attr["T"].list.type)
        for k, dtype in enumerate(types):
            if dtype != _VARIANT:
                continue
            who = readers.get(f"{fwd.name}:{k}", [])
            if len(who) != 1 or who[0][0].op not in _LOOPS:
                continue
            grad, j = who[0]
            gbody = _own_body(grad, lib, uses)
            if gbody is None or _push(body, k) is None or _pop(gbody, j) is None:
                continue
            out.append((fwd, k, grad, j))
    return out


def _own_body(node: Any, lib: dict[str, Any], uses: dict[str, int]) -> Any:
    """The loop's body function when this loop is its only user, else ``None``."""
    name = node.attr["body"].func.name if "body" in node.attr else ""
    return lib.get(name) if uses.get(name) == 1 else None


def _push(body: Any, k: int) -> Any:
    """The ``TensorListPushBack`` node that makes the body's return ``k`` from argument
    ``k``, pushing an element that is a new buffer each iteration; else ``None``."""
    if k >= len(body.signature.output_arg) or k >= len(body.signature.input_arg):
        return None
    arg = body.signature.input_arg[k].name
    ret = body.ret.get(body.signature.output_arg[k].name, "")
    by = {n.name: n for n in body.node_def}
    push = by.get(ret.split(":")[0])
    if push is None or push.op != _PUSH or push.input[0] != arg:
        return None
    element = push.input[_ADDS[_PUSH]]
    src = by.get(element.split(":")[0])
    if src is not None and (src.op in _VARIABLE_READ or HOST_COPY in src.attr):
        return None  # a variable's buffer (no bytes of its own), or hosted already
    args = [a.name for a in body.signature.input_arg]
    if element in args:  # an argument: a new buffer only if the body returns a new one
        i = args.index(element)
        back = body.ret.get(body.signature.output_arg[i].name, "")
        if back in (element, ""):
            return None
    elif src is None:
        return None
    return push


def _pop(body: Any, j: int) -> Any:
    """The one ``TensorListPopBack`` of argument ``j`` whose list the body returns as
    ``j``, read by nothing else; else ``None``."""
    if j >= len(body.signature.output_arg) or j >= len(body.signature.input_arg):
        return None
    arg = body.signature.input_arg[j].name
    readers = [n for n in body.node_def if any(i.split(":")[0] == arg for i in n.input)]
    ret = body.ret.get(body.signature.output_arg[j].name, "")
    if len(readers) != 1 or readers[0].op not in _TAKES or readers[0].input[0] != arg:
        return None
    pop = readers[0]
    if ret.split(":")[0] != pop.name:
        return None
    return pop


def host(graph_def: Any, which: list[tuple[str, int]], target: str) -> Any:
    """A copy of ``graph_def`` whose accumulators ``which`` (from :func:`movable`) are
    kept on the host, with the swap ops and devices of the rewrite ``target``
    (``hybridplan.rewriting.TARGETS``).

    Raises:
        InvalidArgumentError: an accumulator of ``which`` is not movable in this graph.
    """
    from .errors import InvalidArgumentError
    from .rewriting import TARGETS

    t = TARGETS[target]
    gd = type(graph_def)()
    gd.CopyFrom(graph_def)
    found = {(fwd.name, k): (fwd, k, grad, j) for fwd, k, grad, j in _found(gd)}
    lib = {f.signature.name: f for f in gd.library.function}
    for key in sorted(set(map(tuple, which))):
        if key not in found:
            raise InvalidArgumentError(
                f"the plan keeps output {key[1]} of loop '{key[0]}' on the host, but this "
                "graph has no such movable accumulator: rewrite the graph the plan was made from"
            )
        fwd, k, grad, j = found[key]
        body = lib[fwd.attr["body"].func.name]
        push = _push(body, k)
        element = push.input[_ADDS[_PUSH]]
        push.input[_ADDS[_PUSH]] = _copy(
            body, f"{push.name}/to_host", t.swap_out_op, t.host, element, push, -1
        )
        gbody = lib[grad.attr["body"].func.name]
        pop = _pop(gbody, j)
        popped = f"{pop.name}:tensor:0"
        back = _copy(gbody, f"{pop.name}/to_device", t.swap_in_op, t.device, popped, pop, 1)
        copy_name = back.split(":")[0]
        for n in gbody.node_def:
            if n.name != copy_name:
                for i, ref in enumerate(n.input):
                    if ref == popped:
                        n.input[i] = back
        for name, ref in gbody.ret.items():
            if ref == popped:
                gbody.ret[name] = back
        # One iteration at a time: the pops read nothing the iterations compute, so with
        # parallel iterations TensorFlow runs them (and now their copies, each a new
        # device buffer) up to ``parallel_iterations`` ahead of the arithmetic.
        grad.attr["parallel_iterations"].i = 1
    return gd


def _copy(body: Any, name: str, op: str, device: str, source: str, like: Any, k: int) -> str:
    """Adds the copy ``name`` of the body tensor ``source`` (``node:output:index`` or an
    argument) to ``body``: its dtype is ``like``'s ``element_dtype`` (the list op that
    pushes or pops it), its shape ``like``'s ``k``-th output shape when ``like`` states
    one, else the pushed tensor's (its producer's, or the argument's). Returns the copy's
    output as a body input reference."""
    from tensorflow.python.framework import op_def_registry

    by = {n.name: n for n in body.node_def}
    shape = _stated_shape(like, k) if k >= 0 else None
    if shape is None:
        src = by.get(source.split(":")[0])
        if src is None:  # an argument
            index = [a.name for a in body.signature.input_arg].index(source)
            shapes = body.arg_attr[index].attr["_output_shapes"].list.shape
            shape = shapes[0] if shapes else None
        else:
            shape = _stated_shape(src, _flat_index(src, source))
    n = body.node_def.add()
    n.name, n.op, n.device = name, op, device
    n.input.append(source)
    n.attr["T"].type = like.attr["element_dtype"].type
    if shape is not None:
        n.attr["_output_shapes"].list.shape.append(shape)
    n.attr[HOST_COPY].b = True
    n.attr["_grappler_do_not_remove"].b = True
    return f"{name}:{op_def_registry.get(op).output_arg[0].name}:0"


def _stated_shape(node: Any, k: int) -> Any:
    """``node``'s ``k``-th ``_output_shapes`` entry, or ``None``."""
    shapes = node.attr["_output_shapes"].list.shape if "_output_shapes" in node.attr else []
    return shapes[k] if 0 <= k < len(shapes) else None


def _flat_index(node: Any, ref: str) -> int:
    """The output position of ``node:arg:index`` among ``node``'s outputs (the output
    args before ``arg`` are single tensors: the ops that make a pushed value); -1 when
    it cannot be told."""
    from tensorflow.python.framework import op_def_registry

    parts = ref.split(":")
    if len(parts) != 3:
        return 0
    op_def = op_def_registry.get(node.op)
    names = [a.name for a in op_def.output_arg] if op_def is not None else []
    if parts[1] not in names:
        return -1
    before = op_def.output_arg[: names.index(parts[1])]
    if any(a.number_attr or a.type_list_attr for a in before):
        return -1
    return len(before) + int(parts[2])
