"""Check that the swap and recompute nodes of a rewrite survived TensorFlow's optimizers.

Grappler deletes nodes it considers useless (an ``Identity`` between two devices, a clone
equal to its original) unless they are protected; a rewrite that lost its nodes still
computes the right numbers, only without saving memory, so losses alone cannot tell.
:func:`verify` runs a compiled step ONCE, its first call, with run metadata on, and reads
what TensorFlow built for execution: each function's ``post_optimization_graph`` (after
Grappler and placement) and its ``partition_graphs`` (one per device, with the
``_Send``/``_Recv`` pairs of every device crossing). Every planned node is reported
``present`` (with the op and device it runs as), ``absorbed`` (a clone whose original is
gone too: both were rewritten the same way, e.g. fused) or ``missing``.

**The same kernels.** Given the run metadata of the original step's first call
(``original=``, recorded with :func:`run_recorded`), the report also counts the kernels
of both executed graphs by type (a fused kernel by its op and the ops it fused, from its
``fused_ops`` attribute, e.g. ``_FusedConv2D(BiasAdd,Relu)``), leaving out the planned
nodes and what the partitioner adds for a device crossing (``_Send``/``_Recv``): a rewrite that made
Grappler or oneDNN fuse (or fold) differently shows up in ``kernel_changes``, and
rounds differently. A node that Grappler's arithmetic optimizer regrouped is counted
apart, by the stage's tag (``Mul{MinimizeBroadcasts}``, ``AddN{AddOpsRewrite}``): those
stages reorder a chain of products or sums only where no node of it drives a control
edge, so a trigger placed inside such a chain shows up too (plan/trigger.rs).

Limits: TensorFlow records these graphs when it instantiates a function, i.e. on the
first call only; eager run metadata has no per-node execution trace. The classic graph
CSE pass (``optimizer_cse.cc``) runs after that snapshot; it merges only nodes of equal
op, attributes and inputs, so each clone is also checked to differ from its original in
the executed graph (``distinct``).

Example::

    out = rewrite_with_summary(traced.graph_def, plan, target="cpu-emulation")
    step = compile_step(traced, out.graph_def)
    report = verify(step, out.summary, x, y)       # runs the first step
    report.ok, report.missing
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from . import _core
from .errors import InvalidArgumentError, UnsupportedGraphError

__all__ = [
    "NodeStatus",
    "NodesRemovedError",
    "VerifyReport",
    "kernel_counts",
    "run_recorded",
    "verify",
    "verify_run_metadata",
]

_ON_MISSING = ("raise", "warn", "ignore")
#: How a clone's name starts after the prefix (``rewriting.py``).
_CLONE_NAME = re.compile(r"/recompute/\d+$")
#: Characters a clone's name puts between its original's name and the prefix.
_PAD_CHARS = frozenset("-9A")
#: Ops the partitioner adds for a device crossing (a swap to the host adds a pair), and
#: the names it gives the nodes around them (``<source>/_<n>``, ``<source>/ctrl/_<n>``: a
#: control edge crossing devices becomes a dummy ``Const``, a pair and an ``Identity``).
_TRANSFER_OPS = frozenset(_core.op_table()["transfers"])  # opkind::TRANSFERS
#: The runtime's plumbing, not the step's kernels: function arguments and results, and
#: ``_EagerConst``, which converts a NumPy batch once per process in a function graph of
#: its own (``_Arg`` -> ``_EagerConst`` -> ``_Retval``), so whichever step runs first shows
#: one such graph per fed array and the other none.
_PLUMBING_OPS = frozenset(_core.op_table()["runtime_plumbing"])  # opkind::RUNTIME_PLUMBING
_PARTITIONER = re.compile(r"/_\d+$")
#: The ``NoOp`` the partitioner puts on the receiving side when several control edges
#: cross from one device to one node (``GroupCrossDeviceControlEdges_<n>/<node>``): what a
#: swap-out's release edges to the device add, plumbing like the pairs above.
_GROUPED_CONTROL = re.compile(r"(?:^|/)GroupCrossDeviceControlEdges_\d+/")
#: The attributes Grappler's arithmetic optimizer leaves on the nodes its regrouping
#: stages took in (``arithmetic_optimizer.cc``), with the name :func:`kernel_counts` gives.
_REGROUPED = {
    "_grappler_ArithmeticOptimizer_MinimizeBroadcasts": "MinimizeBroadcasts",
    "_grappler_ArithmeticOptimizer_AddOpsRewriteStage": "AddOpsRewrite",
}


class NodesRemovedError(UnsupportedGraphError):
    """TensorFlow removed (or merged) planned swap / recompute nodes. ``report`` holds the
    full :class:`VerifyReport`."""

    def __init__(self, message: str, report: VerifyReport):
        super().__init__(message)
        self.report = report


@dataclass(frozen=True)
class NodeStatus:
    """What became of one planned node.

    Attributes:
        name: the node's name in the rewritten GraphDef.
        kind: ``"swap_out"``, ``"swap_in"``, ``"clone"``, ``"gate"``, ``"keeper"`` or
            ``"node"`` (given by name only).
        status: ``"present"``, ``"absorbed"`` or ``"missing"``.
        executed_name: its name in the executed graph (import scope included), or None.
        op: the op it runs as (oneDNN renames some, e.g. ``_MklNativeMaxPool``), or None.
        device: the device it was placed on, or None.
        distinct: for a present clone, whether it differs from its original in op,
            attributes or inputs (so no CSE can merge them); None otherwise.
    """

    name: str
    kind: str
    status: str
    executed_name: str | None = None
    op: str | None = None
    device: str | None = None
    distinct: bool | None = None


@dataclass(frozen=True)
class VerifyReport:
    """The verdict of :func:`verify` on every planned node.

    Attributes:
        nodes: one :class:`NodeStatus` per planned node, in the order given.
        source: ``"partition_graphs"`` or ``"post_optimization_graph"`` (what was read).
        outputs: what the step call returned (verify runs the first training step).
    """

    nodes: tuple[NodeStatus, ...]
    source: str
    outputs: Any = None
    kernels: Mapping[str, tuple[int, int]] | None = None

    @property
    def kernel_changes(self) -> dict[str, tuple[int, int]]:
        """Kernel types run a different number of times by the original and by the
        rewritten step (``{}`` when no original was given)."""
        return {k: v for k, v in (self.kernels or {}).items() if v[0] != v[1]}

    @property
    def fused(self) -> dict[str, tuple[int, int]]:
        """Fused kernels by type (op and the ops it fused): count in the original, count
        in the rewritten step (``{}`` when no original was given)."""
        return {k: v for k, v in (self.kernels or {}).items() if "(" in k}

    def _with(self, status: str) -> list[str]:
        return [n.name for n in self.nodes if n.status == status]

    @property
    def present(self) -> list[str]:
        return self._with("present")

    @property
    def missing(self) -> list[str]:
        return self._with("missing")

    @property
    def absorbed(self) -> list[str]:
        return self._with("absorbed")

    @property
    def mergeable(self) -> list[str]:
        """Present clones identical to their original (a later CSE may merge them)."""
        return [n.name for n in self.nodes if n.distinct is False]

    @property
    def ok(self) -> bool:
        """No planned node is missing, no clone can be merged into its original and, when
        the original's run was given, the same kernels ran (``kernel_changes`` empty). An
        absorbed clone (fused like its original, which is gone too) is what the rewrite
        intends since clones are unprotected (rewriting.py: gates)."""
        return not self.missing and not self.mergeable and not self.kernel_changes

    def by_name(self) -> dict[str, NodeStatus]:
        return {n.name: n for n in self.nodes}

    def describe(self) -> str:
        """A one-paragraph account, naming the first few removed nodes."""
        counts = {s: len(self._with(s)) for s in ("present", "absorbed", "missing")}
        text = (
            f"{counts['present']} of {len(self.nodes)} planned nodes present in the "
            f"{self.source}, {counts['absorbed']} absorbed, {counts['missing']} missing"
        )
        if self.missing:
            text += f"; missing: {self.missing[:5]}"
        if self.mergeable:
            text += f"; clones identical to their original: {self.mergeable[:5]}"
        if self.kernels is not None:
            fused = sum(v[1] for v in self.fused.values())
            text += f"; {fused} fused kernels"
            changes = self.kernel_changes
            text += (
                f"; kernels run differently from the original (original, rewritten): "
                f"{dict(sorted(changes.items())[:5])}"
                if changes
                else ", the same kernels as the original"
            )
        return text


def verify(
    step: Callable[..., Any],
    expected: Any,
    *args: Any,
    on_missing: str = "raise",
    original: Any = None,
    **kwargs: Any,
) -> VerifyReport:
    """Runs ``step(*args, **kwargs)`` for the FIRST time and checks the planned nodes.

    Args:
        step: a callable that runs a TensorFlow function, e.g. the ``StepFn`` of
            :func:`hybridplan.runner.compile_step`; it must not have been called before
            (TensorFlow records the optimized graphs only when it instantiates a function).
        expected: a :class:`~hybridplan.rewriting.RewriteSummary` (kinds and clone
            originals known) or an iterable of node names (a clone is then known by
            its name, ``<original><pad><prefix>/recompute/<r>``).
        *args, **kwargs: the step's arguments (one training step runs: variables change).
        on_missing: ``"raise"`` (:class:`NodesRemovedError`), ``"warn"``
            (``RuntimeWarning``) or ``"ignore"`` when a node is missing, a clone is
            mergeable (an absorbed clone, fused like its original, is fine) or the
            kernels differ from the original's.
        original: the ``RunMetadata`` of the original step's first call
            (:func:`run_recorded`); the report then compares the kernels that ran.

    Returns:
        :class:`VerifyReport`, with the step's return value in ``outputs``.

    Raises:
        NodesRemovedError: with ``on_missing="raise"``, when the report is not ``ok``.
        InvalidArgumentError: bad ``on_missing``, or the call instantiated no function
            (the step had already run, or is not a TensorFlow function).

    Example::

        report = verify(step, out.summary, *workload.batch(0), on_missing="warn")
    """
    _check_on_missing(on_missing)
    outputs, metadata = run_recorded(step, *args, **kwargs)
    report = verify_run_metadata(metadata, expected, on_missing=on_missing, original=original)
    return dataclasses.replace(report, outputs=outputs)


def run_recorded(step: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    """Makes the FIRST call of ``step`` with run metadata on: ``(outputs, RunMetadata)``,
    whose function graphs are what TensorFlow built for execution (e.g. the original
    step's, for :func:`verify`'s ``original``).

    Raises:
        InvalidArgumentError: the call instantiated no function (the step had already
            run, or is not a TensorFlow function).
    """
    from tensorflow.python.eager import context

    ctx = context.context()
    ctx.enable_run_metadata()
    try:
        ctx.export_run_metadata()  # drop what earlier calls recorded
        outputs = step(*args, **kwargs)
        metadata = ctx.export_run_metadata()
    finally:
        ctx.disable_run_metadata()
    if metadata is None or not metadata.function_graphs:
        raise InvalidArgumentError(
            "the step instantiated no TensorFlow function: it must be the step's FIRST "
            "call (compile a fresh step with compile_step and pass it unused)"
        )
    return outputs, metadata


def kernel_counts(run_metadata: Any, leave_out: Iterable[str] = ()) -> dict[str, int]:
    """The kernels of the executed graphs in ``run_metadata`` (as :func:`verify` reads
    them) by type: the op, and for a fused kernel the ops it fused (its ``fused_ops``
    attribute) as ``op(a,b)``, and a node that an arithmetic-optimizer stage regrouped
    with its stage after it, as ``op{MinimizeBroadcasts}``. Nodes named in ``leave_out``
    (or ``<scope>/name``), what the partitioner adds for a device crossing (``_Send``,
    ``_Recv``, the ``NoOp`` grouping control edges) and the runtime's plumbing (function
    arguments and results, ``_EagerConst``) are not counted. O(executed nodes)."""
    graphs, _ = _executed_graphs(run_metadata)
    names = set(leave_out)
    counts: dict[str, int] = {}
    for graph in graphs:
        for node in graph.node:
            if node.op in _TRANSFER_OPS or node.op in _PLUMBING_OPS:
                continue
            if _PARTITIONER.search(node.name) or _GROUPED_CONTROL.search(node.name):
                continue
            if _planned(node.name, names):
                continue
            key = node.op
            if "fused_ops" in node.attr:
                key += "(" + ",".join(x.decode() for x in node.attr["fused_ops"].list.s) + ")"
            stages = [stage for tag, stage in _REGROUPED.items() if tag in node.attr]
            if stages:
                key += "{" + ",".join(stages) + "}"
            counts[key] = counts.get(key, 0) + 1
    return counts


def _planned(name: str, names: set[str]) -> bool:
    """Whether ``name`` is one of ``names`` or ``<scope>/`` one of them."""
    if not names:
        return False
    at = -1
    while True:
        if name[at + 1 :] in names:
            return True
        at = name.find("/", at + 1)
        if at < 0:
            return False


def verify_run_metadata(
    run_metadata: Any, expected: Any, *, on_missing: str = "raise", original: Any = None
) -> VerifyReport:
    """Checks the planned nodes against a ``RunMetadata`` already collected.

    Reads ``run_metadata.function_graphs`` (eager / ``tf.function``: partition graphs,
    else post-optimization graphs) or, for a Session run with
    ``RunOptions(output_partition_graphs=True)``, ``run_metadata.partition_graphs``.
    Executed names may carry an import scope (``step/...``): a node matches a planned name
    when its name equals it or ends with ``"/" + name``.

    Complexity:
        O(executed nodes x name depth + planned nodes).
    """
    _check_on_missing(on_missing)
    graphs, source = _executed_graphs(run_metadata)
    kinds, clone_of = _expected(expected)
    found = _match(graphs, kinds, clone_of)
    nodes = tuple(_status(name, kind, found, clone_of) for name, kind in kinds.items())
    kernels = None
    if original is not None:
        before = kernel_counts(original)
        after = kernel_counts(run_metadata, kinds)
        kernels = {k: (before.get(k, 0), after.get(k, 0)) for k in sorted({*before, *after})}
    report = VerifyReport(nodes, source, kernels=kernels)
    if not report.ok and on_missing != "ignore":
        message = (
            f"TensorFlow did not run the rewritten step as planned: {report.describe()}. "
            "Swap nodes, gates and keepers need attr _grappler_do_not_remove=true and "
            "clones inputs of their own (a gate, another clone or a control input; "
            "hybridplan.rewrite does all of it); was the GraphDef rewritten again?"
        )
        if on_missing == "raise":
            raise NodesRemovedError(message, report)
        warnings.warn(message, RuntimeWarning, stacklevel=2)
    return report


# --------------------------------------------------------------------------- helpers


def _check_on_missing(on_missing: str) -> None:
    if on_missing not in _ON_MISSING:
        raise InvalidArgumentError(f"on_missing must be one of {_ON_MISSING}, got {on_missing!r}")


def _executed_graphs(run_metadata: Any) -> tuple[list[Any], str]:
    partitions = [g for fg in run_metadata.function_graphs for g in fg.partition_graphs]
    partitions += list(run_metadata.partition_graphs)
    if partitions:
        return partitions, "partition_graphs"
    post = [fg.post_optimization_graph for fg in run_metadata.function_graphs]
    if post:
        return post, "post_optimization_graph"
    raise InvalidArgumentError(
        "the run metadata holds no function graphs and no partition graphs: record it on "
        "the function's first call (eager), or with "
        "RunOptions(output_partition_graphs=True) (Session)"
    )


def _expected(expected: Any) -> tuple[dict[str, str], Mapping[str, tuple[str, ...]]]:
    """``{name: kind}`` in the given order, and ``{clone: names its original may have}``
    (one name when a summary says it; the longest found in the executed graph wins)."""
    if hasattr(expected, "swap_out") and hasattr(expected, "clones"):
        kinds = {n: "swap_out" for n in expected.swap_out}
        kinds.update((n, "swap_in") for n in expected.swap_in)
        kinds.update((n, "clone") for n in expected.clones)
        kinds.update((n, "gate") for n in getattr(expected, "gates", ()))
        kinds.update((n, "keeper") for n in getattr(expected, "keepers", ()))
        return kinds, {c: (o,) for c, o in expected.clone_of.items()}
    if isinstance(expected, str) or not isinstance(expected, Iterable):
        raise InvalidArgumentError(
            "expected must be a RewriteSummary or an iterable of node names, got "
            f"{type(expected).__name__}"
        )
    # Names only: a clone is known by its name, ``<original><pad><prefix>/recompute/<r>``
    # (rewriting.py: ``_ranked``), so that a clone fused like its original counts as
    # absorbed; the original ends where some run of pad characters starts.
    kinds, clone_of = {}, {}
    for name in expected:
        m = _CLONE_NAME.search(name)
        kinds[name] = "clone" if m else "node"
        if m:
            cuts = (i for i in range(1, len(name)) if name[i] in _PAD_CHARS)
            clone_of[name] = tuple(sorted({name[:i] for i in cuts}, key=len, reverse=True))
    return kinds, clone_of


@dataclass(frozen=True)
class _Found:
    """Executed NodeDefs of the planned nodes, and of the clones' originals by clone."""

    planned: Mapping[str, Any]
    originals: Mapping[str, Any]


def _match(
    graphs: list[Any], kinds: Mapping[str, str], clone_of: Mapping[str, tuple[str, ...]]
) -> _Found:
    """Finds the planned nodes, then the clones' originals, in the executed graphs.

    A planned node matches an executed node named ``name`` or ``<scope>/name``; the
    scopes seen there locate the originals (``<scope>/<original>``), so that a clone's
    name never stands for its original.
    """
    by_name: dict[str, Any] = {}
    found: dict[str, Any] = {}
    scopes: set[str] = set()
    for graph in graphs:
        for node in graph.node:
            name = node.name
            by_name.setdefault(name, node)
            at = -1
            while True:
                suffix = name[at + 1 :]
                if suffix in kinds and suffix not in found:
                    found[suffix] = node
                    scopes.add(name[: max(at, 0)])
                at = name.find("/", at + 1)
                if at < 0:
                    break
    originals: dict[str, Any] = {}
    for clone, names in clone_of.items():
        for original in names:
            for scope in sorted(scopes) or [""]:
                node = by_name.get(f"{scope}/{original}" if scope else original)
                if node is not None:
                    originals[clone] = node
                    break
            if clone in originals:
                break
    return _Found(found, originals)


def _status(
    name: str, kind: str, found: _Found, clone_of: Mapping[str, tuple[str, ...]]
) -> NodeStatus:
    node = found.planned.get(name)
    original = found.originals.get(name)
    if node is None:
        gone_too = name in clone_of and original is None
        return NodeStatus(name, kind, "absorbed" if gone_too else "missing")
    distinct = _differs(node, original) if kind == "clone" and original is not None else None
    return NodeStatus(name, kind, "present", node.name, node.op, node.device, distinct)


def _differs(clone: Any, original: Any) -> bool:
    """Whether CSE could tell the two apart: op, attributes, inputs or device differ."""
    if clone.op != original.op or clone.device != original.device:
        return True
    if list(clone.input) != list(original.input):
        return True
    return clone.attr != original.attr
