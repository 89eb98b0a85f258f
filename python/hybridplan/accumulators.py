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

**Who decides.** :func:`statements` states every movable accumulator for the core
(``rust/core/src/hosting.rs``): its loops, one element's dtype and shape, the trip
count, the output of the same loop that holds the same elements too, and the loops'
per-iteration scratch with the lists hosted (one more ``body_memory`` of the graph with
every movable list hosted). The core plans with every list on the device first and,
when that does not fit, hosts the largest as few as fit; the plan records them
(``hosted_accumulators``) and the rewrite writes them with :func:`host`.

**Complexity.** O(N + F) for N nodes and F library nodes, plus one
``function_def_to_graph_def`` per loop body (:func:`statements`: one ``body_memory``).

Example::

    found = movable(graph_def)              # [(forward loop, output), ...]
    hosted = host(graph_def, found, "cpu-emulation")
"""

from __future__ import annotations

from typing import Any

from . import _core

__all__ = ["HOST_COPY", "host", "movable", "statements"]

#: The attribute that marks a copy this module writes into a loop body: a list element
#: made by such a copy is a host buffer, no device bytes (``controlflow.body_memory``).
HOST_COPY = "_hybridplan_host_copy"

_OPS = _core.op_table()
_LOOPS = frozenset(_OPS["loops"])
_ADDS = dict(_OPS["list_adds_element"])
_TAKES = frozenset(_OPS["list_takes_element"])
_IDENTITY = frozenset(_OPS["identities"])
_VARIABLE_READ = frozenset(_OPS["variable_reads"])
_VARIANT = next(code for code, name, _, _ in _core.dtypes() if name == "variant")
# The push and pop of while_v2's accumulators (``opkind::ACCUMULATOR_PUSH`` / ``_POP``).
_PUSHES = frozenset(_OPS["accumulator_push"])
_POPS = frozenset(_OPS["accumulator_pop"])


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
    if push is None or push.op not in _PUSHES or push.input[0] != arg:
        return None
    element = push.input[_ADDS[push.op]]
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
    if len(readers) != 1 or readers[0].op not in _POPS or readers[0].input[0] != arg:
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
        slot = _ADDS[push.op]
        element = push.input[slot]
        push.input[slot] = _copy(
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

    shape = _stated_shape(like, k) if k >= 0 else None
    if shape is None:
        shape = _source_shape(body, source)
    n = body.node_def.add()
    n.name, n.op, n.device = name, op, device
    n.input.append(source)
    n.attr["T"].type = like.attr["element_dtype"].type
    if shape is not None:
        n.attr["_output_shapes"].list.shape.append(shape)
    n.attr[HOST_COPY].b = True
    n.attr["_grappler_do_not_remove"].b = True
    return f"{name}:{op_def_registry.get(op).output_arg[0].name}:0"


def _source_shape(body: Any, source: str) -> Any:
    """The stated shape of the body tensor ``source`` (its producer's, or the
    argument's), or ``None``."""
    src = next((n for n in body.node_def if n.name == source.split(":")[0]), None)
    if src is None:  # an argument
        names = [a.name for a in body.signature.input_arg]
        if source not in names:
            return None
        shapes = body.arg_attr[names.index(source)].attr["_output_shapes"].list.shape
        return shapes[0] if shapes else None
    return _stated_shape(src, _flat_index(src, source))


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


# ------------------------------------------------------------------ statements


Statement = tuple[str, int, str, int, int, list[int], int, int | None, int, int]


def statements(data: bytes, bodies: list[Any], workspace: str | None) -> list[Statement]:
    """The movable accumulators of the serialized GraphDef ``data`` as the core takes
    them (``rust/core/src/hosting.rs``): ``(forward loop, output, gradient loop, input,
    element dtype, element dims, count, output sharing its elements or None, forward
    scratch, gradient scratch)``. ``bodies`` is ``body_memory(data, workspace)``; the
    scratch is each loop's with every movable list hosted. A list whose elements another
    list of the loop holds in the device statement (it saves no device bytes), whose
    element shape is not known, or whose gradient loop's memory is not stated (the core
    refuses that loop, with its own advice), is left out. Empty (TensorFlow not imported) when no
    stated body is a loop's."""
    from .controlflow import WHILE_OPS, body_memory

    if not bodies:
        return []
    from ._graphio import parse_graph_def

    gd = parse_graph_def(data)
    loops = {n.name for n in gd.node if n.op in WHILE_OPS}
    held = {name: entries for name, _, entries in bodies if name in loops}
    # Both loops stated: a gradient loop whose memory is not is refused by the core with
    # its own advice, which a statement naming it would hide.
    found = [
        f
        for f in _found(gd)
        if any(e[0] == f[1] for e in held.get(f[0].name, ())) and f[2].name in held
    ]
    if not found:
        return []
    which = [(fwd.name, k) for fwd, k, _, _ in found]
    hosted = host(gd, which, "cpu-emulation").SerializeToString()
    scratch = {name: s for name, s, _ in body_memory(hosted, workspace)}
    lib = {f.signature.name: f for f in gd.library.function}
    out = []
    for fwd, k, grad, j in found:
        body = lib[fwd.attr["body"].func.name]
        element = _element(body, _push(body, k))
        if element is None:
            continue
        count = max(e[4] for e in held[fwd.name])
        shared = _shared_with(body, k)
        stated = (scratch.get(fwd.name, 0), scratch.get(grad.name, 0))
        out.append((fwd.name, k, grad.name, j, *element, count, shared, *stated))
    return out


def _element(body: Any, push: Any) -> tuple[int, list[int]] | None:
    """``(dtype enum, dims)`` of the element ``push`` adds, or ``None`` when its shape is
    not fully known."""
    shape = _source_shape(body, push.input[_ADDS[push.op]])
    if shape is None or shape.unknown_rank or any(d.size < 0 for d in shape.dim):
        return None
    return int(push.attr["element_dtype"].type), [int(d.size) for d in shape.dim]


def _shared_with(body: Any, k: int) -> int | None:
    """The first other list the body returns that adds the same element as its list
    ``k`` (an argument counts as the value the body returns for it: the next
    iteration's), or ``None``."""
    keys = _list_elements(body)
    mine = keys.get(k, set())
    return next((m for m in sorted(keys) if m != k and keys[m] & mine), None)


def _list_elements(body: Any) -> dict[int, set[str]]:
    """For each list the body returns (by output index), the elements its list ops add,
    each resolved through identities and loop-carried arguments. O(body nodes x lists)."""
    by = {n.name: n for n in body.node_def}
    args = [a.name for a in body.signature.input_arg]
    outs = [body.ret.get(a.name, "") for a in body.signature.output_arg]
    out: dict[int, set[str]] = {}
    for k, ref in enumerate(outs):
        seen: set[str] = set()
        node = by.get(_resolve(ref, by, args, outs).split(":")[0])
        for _ in range(len(by)):
            if node is None or (node.op not in _ADDS and node.op not in _TAKES):
                break
            if node.op in _ADDS:
                seen.add(_resolve(node.input[_ADDS[node.op]], by, args, outs))
            node = by.get(node.input[0].split(":")[0])
        if seen:
            out[k] = seen
    return out


def _resolve(ref: str, by: dict[str, Any], args: list[str], outs: list[str]) -> str:
    """``ref`` through ``Identity`` nodes, and an argument as the body's return for it
    (the same buffer, an iteration later) when that differs. Bounded by the body's size."""
    for _ in range(len(by) + len(args) + 1):
        node = by.get(ref.split(":")[0])
        if node is not None and node.op in _IDENTITY and node.input:
            ref = node.input[0]
        elif ref in args and outs[args.index(ref)] not in ("", ref):
            ref = outs[args.index(ref)]
        else:
            return ref
    return ref
