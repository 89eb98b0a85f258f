"""Write a swap / recompute plan into a training-step GraphDef as real TensorFlow ops.

The plan is the planner's report as it is (``Plan.report``, or the :class:`Plan`): the
plan schema of ``rust/core/src/schema.rs`` (``PlanReport`` in ``_core.pyi``), whose
integers are GraphDef node indices (positions in ``graph_def.node``). The rewrite reads
these fields of it (a hand-written plan may give only these; ``output`` defaults to 0,
``after`` to ``node``)::

    {"swaps": [{"node": p, "output": k, "after": a, "gate": {"node": r} or None,
                "ins": [{"trigger": t, "consumers": [...], "clone_consumers": [...],
                         "follows": False}]}],
     "recomputes": [{"nodes": [...], "trigger": t, "consumers": [...],
                     "clone_consumers": [...], "inputs": [{"node": p, "output": k}],
                     "readers": [{"node": v, "output": k, "reads": n}]}]}

What is inserted (semantics of ``rust/core/src/plan.rs``). The swaps are written into the
graph's bytes by the core (``rust/core/src/writeback.rs``: this rule, and the checks of
this module's ``Raises``); the recomputes, gates and keepers here, on the parsed result:

- **Swap.** One swap-out node ``<prefix>/swap_out/<i>/<producer>`` copies ``p:k`` to the
  host; when ``after != p`` it has a control input from ``after``. Each ``ins`` entry
  ``j`` adds a swap-in node ``<producer><pad><prefix>/swap_in/<i>_<j>`` on the device that
  reads the swap-out and has a control input from ``trigger``; when ``follows`` is true,
  also one from the swap-in node written before it with the same trigger (the copies one
  op releases run in the plan's order, ``plan/queue.rs``). Every input slot of a
  node in ``consumers`` that reads ``p:k`` is rewired to the swap-in; the clones of the
  nodes in ``clone_consumers`` read it too. When ``gate`` is given (not None), its node
  ``r`` gets a control input from the swap-out: the step does not move past it before
  the copy has ended, so the executor cannot run ahead while the original waits. (The
  planner's gate is the release node itself, or a variable read feeding it, so that no
  op Grappler would fuse gets a control edge; see plan/release.rs.)
- **Recompute.** Every node of ``nodes`` is cloned as ``<name><pad><prefix>/recompute/<r>``
  (same op, attributes and device). A clone's input made inside the set reads the
  clone; one made outside reads the original tensor, unless a swap-in or an earlier
  recompute lists this node in its ``clone_consumers``, and reads it through a *gate*
  ``<producer><pad><prefix>/gate/<g>``: an ``Identity`` of it with a control input from
  ``trigger``, one per tensor and trigger (constants, fed inputs and variable reads are
  read directly). The gates make the clones late and keep them apart from their originals
  (common-subexpression elimination merges only equal inputs), and leave the clones
  without control edges or protection, so that Grappler's remapper fuses them as it
  fuses the originals (a fused kernel rounds differently). A clone that reads no gate
  and no other clone gets the control input from ``trigger`` itself. Control inputs of
  an original are kept: one from inside the set is redirected to that clone; one from
  outside points at a node that already ran before the original did, so it delays
  nothing and only keeps side-effect ordering (automatic control dependencies) intact.
  The data inputs of the nodes in ``consumers`` made by the set are rewired to the
  clones.
- **Keepers.** An output of a cloned node that lost readers to the clones gets
  ``<prefix>/keep/<j>`` nodes (``Identity`` of it, waited for by a gate of its
  recompute) until it has ``min(readers before, 2)`` again: the remapper fuses an op
  into its consumer only when its output has one reader, and the rewritten step must
  fuse (and round) as the original does. A recompute's ``inputs`` and ``readers``,
  which the core writes, say what the gates and keepers need; a hand-written plan
  without them costs one pass over the graph.

**Names.** A node that takes an original tensor's place in some node's inputs (swap-in,
clone, gate) is named after the tensor's producer, ``<producer><pad><tag>``: Grappler
sorts the data inputs of every commutative op (``AddN``, ``Mul``...) by name before
optimising (common-subgraph elimination, on whenever the arithmetic optimizer is), and
an ``AddN`` sums in that order, so a reader must see its inputs in the same order as in
the original. The pad (usually ``-``) ranks the name right against the reader's other
inputs that start with the producer's name too (``_ranked``). A swap-out, whose reader
is the swap-in, and a keeper, read by nothing, keep ``<prefix>/swap_out/<i>/<producer>``
and ``<prefix>/keep/<j>``.

Every inserted node carries ``T``, ``_output_shapes`` (copied from its source) and, but
the clones, ``_grappler_do_not_remove = true``: without it Grappler deletes the swap
nodes and gates (dependency optimizer, model pruning).

Targets (swap op, device, host):

- ``"gpu"``: ``Identity`` swap-out on ``/device:CPU:0`` and ``Identity`` swap-in on
  ``/device:GPU:0`` (TFLMS style: an ``Identity`` across a GPU and the CPU is a real
  copy over the link).
- ``"cpu-emulation"``: two logical CPUs; ``DeepCopy`` swap-out on the host
  ``/device:CPU:1`` and ``DeepCopy`` swap-in on the device ``/device:CPU:0``. An
  ``Identity`` would forward the buffer between logical CPUs and free nothing. Nodes
  without a device are placed on ``/device:CPU:0`` by TensorFlow's placer (the first
  CPU), so only the inserted nodes get an explicit device; rewired consumers that have
  no device are pinned to the device too, so that no placer heuristic can move a reader
  of a swap-in to the host.

Example::

    plan = {"swaps": [{"node": 47, "output": 0, "after": 50, "gate": None,
                       "ins": [{"trigger": 190, "consumers": [196]}]}], "recomputes": []}
    out = rewrite_with_summary(traced.graph_def, plan, target="cpu-emulation")
    step = compile_step(traced, out.graph_def)
    out.summary.inserted       # names verify() looks for
"""

from __future__ import annotations

import functools
import itertools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import _args, _core
from ._gc import gc_paused
from ._graphio import Inlined, parse_graph_def
from .errors import InvalidArgumentError, UnsupportedGraphError
from .inlining import inlined, maybe_inline

if TYPE_CHECKING:
    from .planning import Plan

__all__ = ["TARGETS", "RewriteSummary", "Rewritten", "Target", "rewrite", "rewrite_with_summary"]

DO_NOT_REMOVE = "_grappler_do_not_remove"


@dataclass(frozen=True)
class Target:
    """How swaps are written for one kind of machine.

    Attributes:
        name: ``"gpu"`` or ``"cpu-emulation"``.
        swap_out_op: op of the device-to-host copy.
        swap_in_op: op of the host-to-device copy.
        device: default accelerator device string.
        host: default host device string.
        pin_consumers: put rewired consumers and clones without a device on ``device``.
    """

    name: str
    swap_out_op: str
    swap_in_op: str
    device: str
    host: str
    pin_consumers: bool


TARGETS: dict[str, Target] = {
    "gpu": Target("gpu", "Identity", "Identity", "/device:GPU:0", "/device:CPU:0", False),
    "cpu-emulation": Target(
        "cpu-emulation", "DeepCopy", "DeepCopy", "/device:CPU:0", "/device:CPU:1", True
    ),
}


def check_target(target: Any) -> None:
    """Raises InvalidArgumentError unless ``target`` names one of :data:`TARGETS`."""
    if not isinstance(target, str) or target not in TARGETS:
        raise InvalidArgumentError(f"unknown target {target!r}; use one of {sorted(TARGETS)}")


@dataclass(frozen=True)
class RewriteSummary:
    """What :func:`rewrite_with_summary` inserted (node names, as in the new GraphDef).

    Attributes:
        target: the target name.
        device: the accelerator device string used.
        host: the host device string used.
        swap_out: swap-out node names, one per planned swap, in plan order.
        swap_in: swap-in node names, in plan order.
        clones: recompute clone names, in plan order.
        clone_of: original node name of every clone.
        rewired: number of input slots rewired (consumers and clone inputs).
        gates: ``Identity`` nodes holding clones back until their trigger: one per
            tensor read from outside a recompute and trigger.
        keepers: ``Identity`` nodes that read an original tensor whose readers moved to
            a clone or swap-in, so that it keeps as many readers as Grappler's fusion
            rules look at (see ``_Writer.keep_fanouts``).
    """

    target: str
    device: str
    host: str
    swap_out: tuple[str, ...] = ()
    swap_in: tuple[str, ...] = ()
    clones: tuple[str, ...] = ()
    clone_of: Mapping[str, str] = field(default_factory=dict)
    rewired: int = 0
    gates: tuple[str, ...] = ()
    keepers: tuple[str, ...] = ()

    @property
    def inserted(self) -> tuple[str, ...]:
        """Every inserted node name: swap-outs, swap-ins, clones, gates, keepers."""
        return self.swap_out + self.swap_in + self.clones + self.gates + self.keepers

    @property
    def counts(self) -> dict[str, int]:
        """Number of inserted nodes of each kind."""
        return {
            "swap_out": len(self.swap_out),
            "swap_in": len(self.swap_in),
            "clones": len(self.clones),
            "gates": len(self.gates),
            "keepers": len(self.keepers),
        }


@dataclass(frozen=True)
class Rewritten:
    """A rewritten GraphDef and the summary of what was inserted."""

    graph_def: Any
    summary: RewriteSummary


def rewrite(
    graph_def: Any,
    plan: Mapping[str, Any] | Plan,
    target: str = "gpu",
    device: str | None = None,
    host: str | None = None,
    *,
    prefix: str = "hybridplan",
) -> Any:
    """Returns a new GraphDef with ``plan``'s swaps and recomputations as real ops.

    See :func:`rewrite_with_summary`, which also says what was inserted.
    """
    return rewrite_with_summary(graph_def, plan, target, device, host, prefix=prefix).graph_def


def rewrite_with_summary(
    graph_def: Any,
    plan: Mapping[str, Any] | Plan,
    target: str = "gpu",
    device: str | None = None,
    host: str | None = None,
    *,
    prefix: str = "hybridplan",
) -> Rewritten:
    """Writes a swap / recompute plan into a copy of ``graph_def``.

    Args:
        graph_def: the training step's ``GraphDef``, its serialized bytes (then the
            result is the only parsed copy: what :func:`hybridplan.apply` passes), a path
            to a ``.pb`` / ``.pbtxt`` file or a traced step; never modified. Its
            function calls are inlined first, as the planner inlined them
            (:mod:`hybridplan.inlining`): the result is the inlined graph, rewritten.
            (``apply`` passes the bytes as ``_graphio.Inlined``: inlined already.)
        plan: a :class:`~hybridplan.planning.Plan` or its ``report`` (the plan
            schema), or a dict with the fields the module docstring lists.
        target: ``"gpu"`` or ``"cpu-emulation"`` (swap op and default devices).
        device: the accelerator device string; the target's default when None.
        host: the host device string; the target's default when None.
        prefix: first component of every inserted node's name. The rewrite does not scan
            the graph for names already taken (that would cost O(graph) in Python):
            rewriting a rewritten graph again needs another prefix, or TensorFlow
            rejects the duplicate names on import.

    Returns:
        :class:`Rewritten`: the new GraphDef (versions, library and untouched nodes kept
        exactly; new nodes appended) and a :class:`RewriteSummary`.

    Raises:
        InvalidArgumentError: unknown target; an index out of range or that is no
            integer; an output that is no integer or that the node does not have; a
            consumer list that is no list; a consumer that does not read the tensor it is
            listed for; a ``follows`` with no swap-in of its trigger before it; a clone
            consumer that no later recompute clones; a node listed twice in one recompute.
        UnsupportedGraphError: a swapped tensor whose op TensorFlow does not know, that
            lacks an attribute its output types need, or gives more outputs than a node
            may have; a resource / variant tensor (a handle, not a buffer).
        InvalidGraphError: bytes that are not a ``GraphDef`` where the core reads them.

    Complexity:
        The swaps are written by the core into the bytes (``_core.write_swaps``,
        ``rust/core/src/writeback.rs``): O(bytes) to copy them, O(swaps + inputs of the
        nodes they name) to decide; then one parse of the result (C++; given a
        ``GraphDef``, it is serialised first), and the recomputes in Python, O(their size
        + inputs of the nodes they touch); no loop over all nodes in Python. The cyclic
        garbage collector is paused meanwhile (``_gc.gc_paused``): the writer makes no
        cycles, and each of its full collections would walk every object of the process
        (TensorFlow's included) again.

    Example::

        new_gd = rewrite(traced.graph_def, plan, target="cpu-emulation")
    """
    check_target(target)
    if isinstance(graph_def, (str, os.PathLike)) or hasattr(graph_def, "graph_def"):
        # A .pb/.pbtxt path or a traced step, read as analyze, plan and apply read them.
        from ._graphio import graph_source

        graph_def = graph_source(graph_def)
    is_bytes = isinstance(graph_def, (bytes, bytearray, memoryview, Inlined))
    if not is_bytes and not (
        hasattr(graph_def, "node") and hasattr(graph_def, "SerializeToString")
    ):
        raise InvalidArgumentError(
            f"graph_def must be a tf GraphDef, its serialized bytes, a path to a .pb or "
            f".pbtxt file or a traced step, got {type(graph_def).__name__}"
        )
    planned = plan._planned() if hasattr(plan, "_planned") else None
    with gc_paused():
        if planned is not None:  # a Plan whose report nobody has read: as planned
            swaps = planned if planned.counts()[0] else None
            return _rewrite(graph_def, swaps, planned.rest(), target, device, host, prefix)
        plan = _args.rewrite_spec(getattr(plan, "report", plan))
        swaps = list(plan.get("swaps", ())) or None
        return _rewrite(graph_def, swaps, plan, target, device, host, prefix)


def _listed(entry: Mapping[str, Any], key: str, where: str) -> Sequence[Any]:
    """``entry[key]``, a list (absent: empty)."""
    return _as_list(entry.get(key, ()), f"{where}.{key}")


def _as_list(value: Any, what: str) -> Sequence[Any]:
    """``value``, which must be a list (a sequence, not a string or a mapping)."""
    if (
        isinstance(value, (str, bytes))
        or _args._is_mapping(value)
        or not isinstance(value, Sequence)
    ):
        raise InvalidArgumentError(f"{what} must be a list, got {value!r}"[:300])
    return value


def _rewrite(
    graph_def: Any,
    swaps: Any,
    plan: Mapping[str, Any],
    target: str,
    device: str | None,
    host: str | None,
    prefix: str,
) -> Rewritten:
    """``swaps``: the plan's swap dicts, or the core's plan (``_core.CorePlan``, whose
    swaps ``write_swaps`` takes as planned), None when none; ``plan``: the rest of the
    plan (its ``recomputes`` and ``hosted_accumulators``)."""
    from tensorflow.core.framework import graph_pb2

    spec = TARGETS[target]
    device, host = device or spec.device, host or spec.host
    # A plan's node indices are those of the graph the planner read: calls inlined.
    # The writer edits its own copy in place: one copy of the graph, or one parse.
    origin = None
    if isinstance(graph_def, Inlined):  # apply's bytes: calls inlined already
        data = graph_def.data
    elif isinstance(graph_def, (bytes, bytearray, memoryview)):
        data = maybe_inline(bytes(graph_def))
    else:
        origin = inlined(graph_def)
        data = None
    written = None
    if swaps is not None:  # the core writes the swaps into the bytes (rust/core/src/writeback.rs)
        if data is None:
            data = origin.SerializeToString()
        written = _core.write_swaps(
            data,
            swaps,
            _signature,
            spec.swap_out_op,
            spec.swap_in_op,
            device,
            host,
            spec.pin_consumers,
            prefix,
        )
        out = parse_graph_def(written[0])
        written = written[1:]  # the bytes (as large as the graph) are not kept
    elif data is not None:
        out = parse_graph_def(data)
    else:
        out = graph_pb2.GraphDef()
        out.CopyFrom(origin)
    writer = _Writer(out, out if origin is None else origin, spec, device, host, prefix)
    if written is not None:
        writer.took_swaps(*written)
    for r, rec in enumerate(plan.get("recomputes", ())):
        writer.recompute(r, rec)
    writer.check_redirects_used()
    writer.keep_fanouts()
    hosted = []
    for j, h in enumerate(_listed(plan, "hosted_accumulators", "plan")):
        if not (
            _args._is_mapping(h)
            and isinstance(h.get("node"), str)
            and type(h.get("output")) is int
            and h["output"] >= 0
        ):
            raise InvalidArgumentError(
                f"plan.hosted_accumulators[{j}] must be a dict with a loop's node name and "
                f"an output, got {h!r}"[:300]
            )
        hosted.append((h["node"], h["output"]))
    if hosted:  # loop accumulators kept on the host: the loops' bodies copy them
        from .accumulators import host as host_accumulators

        if target != "cpu-emulation":
            raise UnsupportedGraphError(
                "the plan keeps loop accumulators on the host, which is written for "
                "target='cpu-emulation' only (on a GPU the lists' push and pop would have "
                "to run on the host too): rewrite it for 'cpu-emulation', or plan for a GPU "
                "device model, whose plans keep the accumulators on the device"
            )

        writer.out = host_accumulators(writer.out, hosted, target)
    return Rewritten(writer.out, writer.summary())


# --------------------------------------------------------------------------- tensor names


def _tensor(name: str, k: int) -> str:
    return name if k == 0 else f"{name}:{k}"


def _parse_input(text: str) -> tuple[str, int]:
    """``"a"`` -> ``("a", 0)``, ``"a:2"`` -> ``("a", 2)``; control inputs are not parsed."""
    name, sep, index = text.rpartition(":")
    if sep and index.isdigit():
        return name, int(index)
    return text, 0


# --------------------------------------------------------------------------- dtypes, shapes


def _attr_value(node: Any, op_def: Any, name: str) -> Any:
    """The node's attribute ``name`` (read-only: never inserts into the map), or the op's
    default."""
    value = node.attr.get(name)
    if value is not None:
        return value
    for a in op_def.attr:
        if a.name == name and a.HasField("default_value"):
            return a.default_value
    raise UnsupportedGraphError(f"node {node.name!r} (op {node.op}) lacks attribute {name!r}")


def _output_dtypes(node: Any) -> list[int]:
    """The ``DataType`` enum of every output of ``node``, from its registered OpDef."""
    op = node.op
    op_def, outputs = _outputs_of(op)
    if op_def is None:
        raise UnsupportedGraphError(
            f"node {node.name!r} has op {op!r}, unknown to this TensorFlow; load the "
            "library that registers it before rewriting"
        )
    out: list[int] = []
    for type_list_attr, fixed, type_attr, number_attr in outputs:
        if type_list_attr:
            out.extend(_attr_value(node, op_def, type_list_attr).list.type)
            continue
        dtype = fixed or _attr_value(node, op_def, type_attr).type
        count = _attr_value(node, op_def, number_attr).i if number_attr else 1
        out.extend([dtype] * count)
    return out


@functools.cache
def _outputs_of(op: str) -> tuple[Any, tuple[tuple[str, int, str, str], ...]]:
    """``op``'s OpDef (None when unknown) and, per output argument, its
    ``(type_list_attr, type, type_attr, number_attr)``: read once per op."""
    from tensorflow.python.framework import op_def_registry

    op_def = op_def_registry.get(op)
    if op_def is None:
        return None, ()
    args = tuple((a.type_list_attr, a.type, a.type_attr, a.number_attr) for a in op_def.output_arg)
    return op_def, args


@functools.cache
def _signature(op: str) -> tuple | None:
    """What the core's swap writer needs of ``op`` (``write_swaps``): None when this
    TensorFlow does not know it, else ``(commutative, outputs, defaults)``: per output
    argument ``(type_list_attr, type, type_attr, number_attr)``, and per attribute with a
    default its ``(type, i, list.type)``."""
    op_def, outputs = _outputs_of(op)
    if op_def is None:
        return None
    defaults = {
        a.name: (a.default_value.type, a.default_value.i, list(a.default_value.list.type))
        for a in op_def.attr
        if a.HasField("default_value")
    }
    return op_def.is_commutative, list(outputs), defaults


#: Producers whose outputs clones read directly, not through a gate (see ``gated``).
#: The core's constants and variable reads (``opkind::CONSTANTS``,
#: ``opkind::VARIABLE_READS``): their buffers are held for the whole step.
_UNGATED_OPS = frozenset(_core.op_table()["constants"] + _core.op_table()["variable_reads"])


def _readers(inputs: Any) -> dict[str, int]:
    """Number of data inputs reading each tensor (``name`` or ``name:k``) among the nodes
    whose input lists ``inputs`` yields."""
    out: dict[str, int] = {}
    for node_inputs in inputs:
        for text in node_inputs:
            if not text.startswith("^"):
                key = _tensor(*_parse_input(text))
                out[key] = out.get(key, 0) + 1
    return out


@functools.cache
def _commutative(op: str) -> bool:
    """Whether ``op``'s OpDef is marked commutative (``AddN``, ``AddV2``, ``Mul``...):
    Grappler sorts such a node's data inputs by name (see ``_ranked``)."""
    from tensorflow.python.framework import op_def_registry

    op_def = op_def_registry.get(op)
    return op_def is not None and op_def.is_commutative


def _ranked(producer: str, targets: Sequence[str], siblings: Sequence[str], tag: str) -> str:
    """The name of a node that stands for the tensors ``producer + t`` (``t`` in
    ``targets``: ``""`` for output 0, ``":k"``) in the data inputs of commutative ops
    whose other inputs are ``siblings``, chosen so that every input keeps its rank.

    Grappler's common-subgraph elimination (on whenever the arithmetic optimizer is)
    first canonicalises the graph: it sorts the data inputs of every commutative op by
    their text (``utils/canonicalizer.cc``), and an ``AddN`` sums in that order. An input
    renamed to ``hybridplan/swap_in/...`` moves in that order, and the sum rounds
    differently. The name is ``producer + pad + tag``: compared with a sibling that does
    not start with ``producer`` it sorts as ``producer`` does; the pad is the
    first that also ranks it right against the siblings that do (``producer:1``,
    ``producer/Mul``, ``producer_1``). When none does (a pathological set of names) the
    first pad is used. The rule is the core's
    (``writeback::ranked``), which names the swap-ins: one rule for every node that stands
    for a tensor. O(len(siblings) x pads).
    """
    return _core.ranked(producer, list(targets), list(siblings), tag)


# --------------------------------------------------------------------------- the writer


class _Writer:
    """Edits ``out`` (the writer's own copy of the graph) in place; every method touches
    only the nodes the plan names.

    Names, ops, attributes and devices of the original nodes are read from ``out``
    (the rewrite changes an original node's device only where it had none, and then
    to what a clone of it gets anyway); their data inputs, which the rewrite changes,
    through ``inputs``, which remembers a node's inputs before its first change. A
    clone copies its original from ``origin`` (the input graph when the writer was
    given one, else ``out``), so that its attribute map is ordered as before."""

    def __init__(self, out: Any, origin: Any, spec: Target, device: str, host: str, prefix: str):
        self.out = out
        self.nodes = out.node
        # Clones copy their original from here: the input graph, or ``out`` itself.
        self.origin = origin.node
        self.n = len(out.node)
        # Original node index -> its inputs before the rewrite first changed them; those
        # the core's swap writer changed are read from ``before`` when first asked for.
        self.original_inputs: dict[int, list[str]] = {}
        self.before: tuple[Any, Any, Any, str] | None = None
        # Original node index -> its data inputs as rewire left them (see rewire).
        self.current: dict[int, list[str]] = {}
        self._dtypes: dict[int, list[int]] = {}
        self._shapes: dict[int, Any] = {}
        self.spec, self.device, self.host, self.prefix = spec, device, host, prefix
        self.swap_out: list[str] = []
        self.swap_in: list[str] = []
        self.clones: list[str] = []
        self.gates: list[str] = []
        self.gate_of: dict[tuple[str, str], str] = {}
        self.gate_names: set[str] = set()
        self.keepers: list[str] = []
        # Inserted node name -> its NodeDef; original tensor -> an inserted node that took
        # over its readers and may wait for a keeper (see keep_fanouts).
        self.added: dict[str, Any] = {}
        # Nodes the core inserted (the swaps, ``took_swaps``): names only.
        self.by_core: set[str] = set()
        self.taker: dict[str, str] = {}
        self.clone_of: dict[str, str] = {}
        # Recompute bookkeeping for gates and keepers (see gate, keep_fanouts):
        # tensor -> its producer (node, output); tensor -> (node, output, reads before);
        # data reads each tensor lost to rewiring and gained from inserted nodes.
        self.producer: dict[str, tuple[int, int]] = {}
        self.reads_before: dict[str, tuple[int, int, int]] = {}
        self.lost: dict[str, int] = {}
        self.gained: dict[str, int] = {}
        self._index_of: dict[str, int] | None = None
        self._counts: dict[str, int] | None = None
        self.rewired = 0
        # Original node index -> {tensor read by its clone -> replacement tensor}.
        self.redirect: dict[int, dict[str, str]] = {}
        self.redirect_used: set[int] = set()
        self.redirect_origin: dict[int, str] = {}

    def summary(self) -> RewriteSummary:
        return RewriteSummary(
            target=self.spec.name,
            device=self.device,
            host=self.host,
            swap_out=tuple(self.swap_out),
            swap_in=tuple(self.swap_in),
            clones=tuple(self.clones),
            gates=tuple(self.gates),
            keepers=tuple(self.keepers),
            clone_of=dict(self.clone_of),
            rewired=self.rewired,
        )

    def index(self, value: Any, what: str) -> int:
        if type(value) is int and 0 <= value < self.n:  # the plan's own indices
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            try:
                value = int(value)  # numpy integers
            except (TypeError, ValueError):
                raise InvalidArgumentError(f"{what} must be a node index, got {value!r}") from None
        if not 0 <= value < self.n:
            raise InvalidArgumentError(
                f"{what} = {value} is not a node index of this GraphDef (it has {self.n} nodes)"
            )
        return value

    def name(self, i: int) -> str:
        return self.nodes[i].name

    def inputs(self, i: int) -> Any:
        """Original node ``i``'s inputs as in the input graph."""
        saved = self.original_inputs.get(i)
        if saved is None:
            saved = self.core_before(i)
        return self.nodes[i].input if saved is None else saved

    def changing(self, i: int) -> Any:
        """Original node ``i``, about to be changed: its inputs are remembered first."""
        node = self.nodes[i]
        if i not in self.original_inputs and self.core_before(i) is None:
            self.original_inputs[i] = list(node.input)
        return node

    def core_before(self, i: int) -> list[str] | None:
        """The inputs of node ``i`` before the core's swap writer changed them (then
        remembered in ``original_inputs``), or None when it did not change it.
        O(log changed + its inputs)."""
        if self.before is None:
            return None
        ids, first, bounds, text = self.before
        j = int(ids.searchsorted(i))
        if j == len(ids) or int(ids[j]) != i:
            return None
        at = bounds[int(first[j]) : int(first[j + 1]) + 1].tolist()
        saved = self.original_inputs[i] = [text[a:b] for a, b in itertools.pairwise(at)]
        return saved

    def dtypes(self, i: int) -> list[int]:
        """``_output_dtypes`` of original node ``i``, computed once."""
        out = self._dtypes.get(i)
        if out is None:
            out = self._dtypes[i] = _output_dtypes(self.nodes[i])
        return out

    # ------------------------------------------------------------------ swaps

    def took_swaps(
        self,
        n: int,
        swap_out: list[str],
        swap_in: list[str],
        rewired: int,
        changed: tuple[Any, Any, Any, str],
        lost: list[tuple[str, int]],
        gained: list[tuple[str, int]],
        redirects: list[tuple[int, str, str, str]],
    ) -> None:
        """Takes over what the core's swap writer (``_core.write_swaps``,
        ``rust/core/src/writeback.rs``) did to ``out``: the nodes it inserted, the
        inputs before of the nodes it changed (packed, read when asked for:
        ``core_before``), the reads each tensor lost and gained, and the clone consumers
        whose clones read a swap-in. O(swaps)."""
        self.n = n
        self.swap_out, self.swap_in = swap_out, swap_in
        self.by_core.update(swap_out)
        self.by_core.update(swap_in)
        self.rewired += rewired
        self.before = changed
        self.lost.update(lost)
        self.gained.update(gained)
        for c, key, name, where in redirects:
            self.add_redirect(c, {key: name}, where)

    def siblings(self, readers: Sequence[int], skip: Any, where: str) -> list[str]:
        """The data inputs of the commutative nodes among ``readers`` (original node
        indices) but those whose tensor (``name`` or ``name:k``) ``skip`` accepts: what a
        node standing for the skipped tensors must sort against (``_ranked``).
        O(inputs of the readers)."""
        out: list[str] = []
        for c in readers:
            c = self.index(c, where)
            if _commutative(self.nodes[c].op):
                out.extend(
                    t
                    for t in self.inputs(c)
                    if not t.startswith("^") and not skip(_tensor(*_parse_input(t)))
                )
        return out

    def add_copy(
        self,
        name: str,
        op: str,
        device: str,
        source: str,
        control: Sequence[str],
        tensor: tuple[int, int, int],
    ) -> Any:
        """Appends (and returns) a copy node of ``source``; ``tensor`` is (producer,
        output, dtype) of the copied tensor, whose ``_output_shapes`` entry it gets."""
        p, k, dtype = tensor
        name_read = _parse_input(source)[0]
        if name_read not in self.added and name_read not in self.by_core:  # an original
            key = _tensor(*_parse_input(source))
            self.gained[key] = self.gained.get(key, 0) + 1
        # Each protobuf attribute read costs a few thousand instructions: read once.
        node = self.added[name] = self.nodes.add()
        node.name, node.op, node.device = name, op, device
        node.input.extend([source, *(f"^{c}" for c in control)])
        attr = node.attr
        attr["T"].type = dtype
        attr[DO_NOT_REMOVE].b = True
        shapes = self.output_shapes(p)
        if k < len(shapes):
            attr["_output_shapes"].list.shape.add().CopyFrom(shapes[k])
        return node

    def output_shapes(self, p: int) -> Any:
        """Original node ``p``'s ``_output_shapes`` entries (empty when it has none),
        looked up once: a swap's two copies and a recompute's gates read them."""
        out = self._shapes.get(p)
        if out is None:
            shapes = self.nodes[p].attr.get("_output_shapes")
            out = self._shapes[p] = () if shapes is None else shapes.list.shape
        return out

    # ------------------------------------------------------------------ rewiring

    def rewire(self, c: int, mapping: Mapping[str, str], where: str) -> None:
        """Points every data input of node ``c`` found in ``mapping`` at its replacement."""
        node = self.changing(c)
        # The node's inputs as rewired so far (by the core's swaps too), kept in Python:
        # reading them back from the protobuf costs a string object per input. Control
        # inputs appended to the node (swap gates) come after every data input.
        current = self.current.get(c)
        if current is None:
            current = self.current[c] = list(node.input)
        hits = 0
        for slot, text in enumerate(current):
            if text.startswith("^"):
                continue
            # An input without ":" is its own key (what _tensor(*_parse_input(.)) gives).
            key = _tensor(*_parse_input(text)) if ":" in text else text
            if key in mapping:
                current[slot] = node.input[slot] = mapping[key]
                hits += 1
                self.lost[key] = self.lost.get(key, 0) + 1
        if hits == 0:
            raise InvalidArgumentError(
                f"{where}: consumer {node.name!r} (index {c}) reads none of "
                f"{sorted(mapping)[:4]}; list only nodes that read the tensor"
            )
        if self.spec.pin_consumers and not node.device:
            node.device = self.device
        self.rewired += hits

    def add_redirect(self, c: int, mapping: Mapping[str, str], where: str) -> None:
        self.redirect.setdefault(c, {}).update(mapping)
        self.redirect_origin.setdefault(c, where)

    def check_redirects_used(self) -> None:
        unused = sorted(set(self.redirect) - self.redirect_used)
        if unused:
            c = unused[0]
            raise InvalidArgumentError(
                f"{self.redirect_origin[c]}: clone consumer {self.name(c)!r} (index {c}) is "
                "not cloned by any later recompute; list it in that recompute's nodes, or "
                "drop it from clone_consumers"
            )

    # ------------------------------------------------------------------ recompute

    def recompute(self, r: int, rec: Mapping[str, Any]) -> None:
        where = f"recomputes[{r}]"
        nodes = [self.index(v, f"{where}.nodes") for v in _listed(rec, "nodes", where)]
        if len(set(nodes)) != len(nodes):
            raise InvalidArgumentError(f"{where}: a node is listed twice in nodes")
        trigger = self.name(self.index(rec["trigger"], f"{where}.trigger"))
        clone_name = self.clone_names(r, rec, nodes, where)
        outputs: dict[str, str] = {}
        for v in nodes:
            self.check_clonable(v, where)
        self.learn(rec, nodes, where)
        gates: list[str] = []
        clones = set(clone_name.values())
        for v in nodes:
            self.add_clone(v, clone_name, clones, trigger, gates)
            original = self.name(v)
            for k in range(len(self.dtypes(v))):
                outputs[_tensor(original, k)] = _tensor(clone_name[original], k)
        for key in outputs:
            self.taker.setdefault(key, gates[0] if gates else clone_name[self.name(nodes[0])])
        for c in _listed(rec, "consumers", where):
            self.rewire(self.index(c, f"{where}.consumers"), outputs, where)
        for c in _listed(rec, "clone_consumers", where):
            self.add_redirect(self.index(c, f"{where}.clone_consumers"), outputs, where)

    def clone_names(
        self, r: int, rec: Mapping[str, Any], nodes: list[int], where: str
    ) -> dict[str, str]:
        """Original name -> clone name for recompute ``r``: each clone named by
        ``_ranked`` against the other inputs of the commutative nodes that will read it
        (clones in the set, rewired consumers, later clones). O(their inputs)."""
        names = {self.name(v) for v in nodes}
        readers = [
            *nodes,
            *_listed(rec, "consumers", where),
            *_listed(rec, "clone_consumers", where),
        ]
        readers_of: dict[str, list[int]] = {}
        for c in readers:
            c = self.index(c, where)
            if not _commutative(self.nodes[c].op):
                continue
            for text in self.inputs(c):
                name = _parse_input(text)[0]
                if not text.startswith("^") and name in names:
                    readers_of.setdefault(name, []).append(c)
        out: dict[str, str] = {}
        for v in nodes:
            original = self.name(v)
            of = readers_of.get(original, [])

            def own(text: str, original: str = original) -> bool:
                return not text.startswith("^") and _parse_input(text)[0] == original

            reads = (t for c in of for t in self.inputs(c) if own(t))
            targets = sorted({_tensor("", _parse_input(t)[1]) for t in reads})
            siblings = self.siblings(sorted(set(of)), own, where)
            out[original] = _ranked(original, targets, siblings, f"{self.prefix}/recompute/{r}")
        return out

    def check_clonable(self, v: int, where: str) -> None:
        from tensorflow.python.framework import op_def_registry

        node = self.nodes[v]
        op_def = op_def_registry.get(node.op)
        if op_def is None or op_def.is_stateful:
            what = "unknown to this TensorFlow" if op_def is None else "stateful"
            raise UnsupportedGraphError(
                f"{where}: node {node.name!r} (op {node.op}) is {what}; a clone of it could "
                "read other state or have other effects than the original, so it is never "
                "recomputed"
            )

    def add_clone(
        self,
        v: int,
        clone_name: Mapping[str, str],
        clones: set[str],
        trigger: str,
        gates: list[str],
    ) -> None:
        """Appends the clone of node ``v``. Its inputs from outside the recompute read
        them through gates (appended to ``gates``); a clone with no gated and no cloned
        input waits for the trigger by a control input of its own."""
        original = self.origin[v]
        original_inputs = list(self.inputs(v))
        clone = self.out.node.add()
        clone.CopyFrom(original)
        clone.name = clone_name[original.name]
        if self.spec.pin_consumers and not clone.device:
            clone.device = self.device
        redirect = self.redirect.get(v, {})
        if redirect:
            self.redirect_used.add(v)
        del clone.input[:]
        for text in original_inputs:
            if text.startswith("^"):
                src = text[1:]
                clone.input.append(f"^{clone_name.get(src, src)}")
                continue
            name, k = _parse_input(text)
            if name in clone_name:
                clone.input.append(_tensor(clone_name[name], k))
            else:
                key = _tensor(name, k)
                self.rewired += key in redirect
                source = redirect.get(key, text)
                if key in redirect or self.gated(key):
                    siblings = [
                        t
                        for t in original_inputs
                        if _commutative(original.op) and not t.startswith("^") and t != text
                    ]
                    gate = self.gate(source, key, trigger, clone.device, siblings)
                    gates.append(gate)
                    source = gate
                clone.input.append(source)
        late = any(
            name in clones or name in self.gate_names
            for name in (_parse_input(i)[0] for i in clone.input if not i.startswith("^"))
        )
        if not late:
            clone.input.append(f"^{trigger}")
            clone.attr[DO_NOT_REMOVE].b = True
        self.clones.append(clone.name)
        self.clone_of[clone.name] = original.name
        self.added[clone.name] = clone

    def learn(self, rec: Mapping[str, Any], nodes: list[int], where: str) -> None:
        """Records the producers of what the clones read from outside and the reads of
        the cloned nodes' outputs: from the plan (``inputs``, ``readers``: the core
        writes both; checked against the clones' own inputs and outputs) in O(plan),
        else by one pass over the graph, O(nodes + edges)."""
        inputs, readers = rec.get("inputs"), rec.get("readers")
        if inputs is not None and readers is not None:
            inputs = self.checked_inputs(inputs, nodes, where)
            readers = self.checked_readers(readers, nodes, where)
        else:
            index = self.index_of()
            if self._counts is None:
                self._counts = _readers(self.inputs(i) for i in range(self.n))
            inputs = [(index[name], k) for name, k in self.read_from_outside(nodes)]
            readers = [
                (v, k, self._counts.get(_tensor(self.name(v), k), 0))
                for v in nodes
                for k in range(len(self.dtypes(v)))
            ]
        for p, k in inputs:
            self.producer[_tensor(self.name(p), k)] = (p, k)
        for v, k, n in readers:
            self.reads_before.setdefault(_tensor(self.name(v), k), (v, k, n))

    def read_from_outside(self, nodes: list[int]) -> list[tuple[str, int]]:
        """``(producer name, output)`` of each data input of ``nodes`` produced outside
        them, in order (a tensor read twice is listed twice). O(their inputs)."""
        inside = {self.name(v) for v in nodes}
        out = []
        for v in nodes:
            for text in self.inputs(v):
                if not text.startswith("^"):
                    name, k = _parse_input(text)
                    if name not in inside:
                        out.append((name, k))
        return out

    def output_ref(self, entry: Any, what: str) -> tuple[int, int]:
        """``(node, output)`` of a plan's tensor entry, a dict with a node index and an
        output of that node."""
        if not _args._is_mapping(entry) or "node" not in entry or "output" not in entry:
            raise InvalidArgumentError(
                f"{what} must be a dict with node and output, got {entry!r}"[:300]
            )
        v = self.index(entry["node"], f"{what}.node")
        k = entry["output"]
        if type(k) is not int or not 0 <= k < len(self.dtypes(v)):
            raise InvalidArgumentError(
                f"{what}.output = {k!r} is not an output of node {self.name(v)!r} "
                f"(it has {len(self.dtypes(v))})"
            )
        return v, k

    def checked_inputs(self, given: Any, nodes: list[int], where: str) -> list[tuple[int, int]]:
        """The plan's ``inputs`` of a recompute: exactly the tensors its clones read from
        outside it. O(the clones' inputs)."""
        got = [
            self.output_ref(t, f"{where}.inputs[{j}]")
            for j, t in enumerate(_as_list(given, f"{where}.inputs"))
        ]
        want = set(self.read_from_outside(nodes))
        if {(self.name(p), k) for p, k in got} != want or len(got) != len(want):
            raise InvalidArgumentError(
                f"{where}.inputs does not list each tensor the clones read from outside "
                f"them once ({len(want)} tensors): the plan is another graph's, or was "
                "edited; plan this graph again"
            )
        return got

    def checked_readers(
        self, given: Any, nodes: list[int], where: str
    ) -> list[tuple[int, int, int]]:
        """The plan's ``readers`` of a recompute: each output of its cloned nodes once,
        with a count of reads. O(their outputs)."""
        out = []
        for j, r in enumerate(_as_list(given, f"{where}.readers")):
            v, k = self.output_ref(r, f"{where}.readers[{j}]")
            n = r.get("reads")
            if type(n) is not int or n < 0:
                raise InvalidArgumentError(
                    f"{where}.readers[{j}].reads must be a count of reads, got {n!r}"
                )
            out.append((v, k, n))
        want = {(v, k) for v in nodes for k in range(len(self.dtypes(v)))}
        if {(v, k) for v, k, _ in out} != want or len(out) != len(want):
            raise InvalidArgumentError(
                f"{where}.readers does not list each output of the cloned nodes once "
                f"({len(want)} outputs): the plan is another graph's, or was edited; plan "
                "this graph again"
            )
        return out

    def index_of(self) -> dict[str, int]:
        """Node name -> index, built once, only for plans that do not carry what
        ``learn`` needs."""
        if self._index_of is None:
            self._index_of = {n.name: i for i, n in enumerate(self.nodes[: self.n])}
        return self._index_of

    def gated(self, key: str) -> bool:
        """Whether clones read tensor ``key`` through a gate: every producer but a
        source (a ``Const``, anything without data inputs) and a variable read, which
        must stay visible as such (constant folding, shape inference) and are ready from
        the step's start anyway."""
        # A Placeholder (the step's input batch) is gated too: a clone that reads no
        # gate needs ^trigger, and the remapper never fuses a node with control fanin.
        return self.nodes[self.producer[key][0]].op not in _UNGATED_OPS

    def gate(
        self, source: str, key: str, trigger: str, device: str, siblings: Sequence[str] = ()
    ) -> str:
        """The gate of ``source`` for clones run after ``trigger``: an ``Identity`` of it
        with a control input from the trigger, made once per source and trigger (two
        equal gates would be merged by TensorFlow's CSE). ``key``: the original tensor
        that ``source`` stands for (itself, or the one a swap-in or clone replaces)."""
        if (source, trigger) not in self.gate_of:
            p, k = self.producer[key]
            tag = f"{self.prefix}/gate/{len(self.gates)}"
            name = _ranked(self.name(p), [_tensor("", k)], siblings, tag)
            dtype = self.dtypes(p)[k]
            self.add_copy(name, "Identity", device, source, [trigger], (p, k, dtype))
            self.gates.append(name)
            self.gate_names.add(name)
            self.gate_of[(source, trigger)] = name
        return self.gate_of[(source, trigger)]

    def keep_fanouts(self) -> None:
        """Gives every original tensor that lost data readers to the rewrite at least
        ``min(readers before, 2)`` of them again, adding keepers: an ``Identity`` that
        reads it and is read by nothing. Grappler's remapper fuses an op into its
        consumer only when its output has a single reader; a tensor read by a forward
        op and a backward op whose backward read moved to a clone would otherwise get
        fused in the rewritten step and not in the original, and round differently.
        Only outputs of cloned nodes can lose readers this way: a swapped tensor keeps
        its swap-out as a reader, which nothing fuses with. O(cloned outputs)."""
        for key, (p, k, n) in self.reads_before.items():
            after = n - self.lost.get(key, 0) + self.gained.get(key, 0)
            for _ in range(min(n, 2) - after):
                keeper = f"{self.prefix}/keep/{len(self.keepers)}"
                dtype = self.dtypes(p)[k]
                device = self.nodes[p].device
                self.add_copy(keeper, "Identity", device, key, [], (p, k, dtype))
                self.keepers.append(keeper)
                # Without a path to the fetches the Session would prune it; the node that
                # took over the readers runs later anyway, so waiting costs nothing.
                self.added[self.taker[key]].input.append(f"^{keeper}")
