"""Measure the op times of a real training step: ``profile(traced, batches) -> Profile``.

:func:`profile` runs the step in a ``tf.compat.v1.Session`` on copies of the variables
(the same set-up as :func:`hybridplan.measuring.measure`: two logical CPU devices by
default, the caller's weights untouched). Traced steps (``RunOptions(trace_level=
FULL_TRACE)``) alternate with untimed warm-up and timed untraced steps; from the traced
steps' ``step_stats.dev_stats[].node_stats`` every executed node gives one interval,
from the moment the executor started it (``all_start_micros``) to the end of its kernel
(``+ op_end_rel_micros``), which is mapped back to the GraphDef node of the same name.

**Concurrent nodes share the wall time.** TensorFlow's executor runs independent nodes at
once (two inter-op threads here: e.g. the input and filter backprops of a convolution),
each then taking longer, while the simulator adds op times up on one compute stream. So
:attr:`Profile.times` charges each node its share of the step: an instant during which k
nodes run counts 1/k for each. The times then add up to the time during which at least
one node ran (on a 3D U-Net the plain durations add up to 1.4x that);
:attr:`Profile.durations` keeps the plain durations. Both are medians over the traced
steps. ``Profile.times`` is what ``hybridplan.plan(..., profile=...)`` takes:
``{GraphDef node index: seconds}``.

How executed nodes map back to GraphDef nodes:

- **Import scope.** The Session imports the GraphDef under the scope ``step``, so node
  ``n`` runs as ``step/n``; the prefix is removed. Nodes Grappler adds
  (``ConstantFolding/step/.../ShapeN-matshapes-0``, ``ArithmeticOptimizer/...``) are
  charged to the GraphDef node whose name they extend (the longest GraphDef name that
  the executed name, without the optimizer's prefix, starts with at a ``/``, ``-`` or
  ``_`` boundary); the rest are listed in :attr:`Profile.unmapped`.
- **oneDNN renames ops, not nodes** (``MatMul`` runs as ``_MklMatMul``...): mapping is
  by node name only.
- **Fusion.** Grappler's remapper replaces a chain such as ``MatMul -> BiasAdd [-> Relu]``
  (or ``Conv2D -> BiasAdd -> Relu``, the decomposed ``LayerNorm``, ``BatchMatMul -> Mul``)
  by one kernel (``_MklNativeFusedMatMul``, ``_FusedConv2D``, ``_MklLayerNorm``...) that
  carries the name of the LAST node of the chain; the other nodes of the chain do not run.
  The absorbed nodes are found by walking back from the fused node along GraphDef data
  edges through nodes that did not run, stopping at the fused kernel's real inputs
  (read from its ``timeline_label``) and at nodes that ran. The fused time is split over
  the chain in proportion to a FLOP count from the shapes (``2 * out * K`` for a
  convolution or matrix product, one per output element for the rest, 0 for
  buffer-forwarding ops), so the contraction gets nearly all of it and the sum is kept.
  :attr:`Profile.fused` lists each fused node with the nodes it absorbed.
- **Nodes that do not run.** GraphDef nodes with a data input that neither ran nor were
  absorbed were removed by Grappler (``Identity`` forwarding, common-subexpression
  elimination, arithmetic rewrites); they get 0 s in :attr:`Profile.times` (they cost
  nothing in the real step) and are listed in :attr:`Profile.removed`. Constant-folded
  nodes still run, as ``Const``, under their own name, and are timed.

Caveats (see ``docs/accuracy.md``): the trace's resolution is a whole microsecond (ops
under 1 us read 0 or 1 us); tracing adds some time per node, so on a graph of many tiny
ops the times add up to more than an untraced step; and an untraced step also pays for
what happens outside the nodes (``Session.run``, feeding, the executor's start and end),
which no node time covers.

Example::

    prof = profile(traced, workload.batch, steps=3)
    p = hybridplan.plan(traced, budget, device="cpu", profile=prof.times)
    p.report["original"]["step_time_s"], prof.step_time
"""

from __future__ import annotations

import dataclasses
import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from . import _core
from .errors import InvalidArgumentError
from .inlining import inlined
from .measuring import (
    Batches,
    _batch_source,
    _Runner,
    _session_graph,
    ran_inline,
    run_options,
    session_config,
)

__all__ = ["Calibration", "Profile", "calibrate", "profile"]

#: The import scope of the Session graph (see ``measuring._session_graph``).
_SCOPE = "step"
#: ``[allocator ...] name = Op(in0, in1, ...)``; the bracket is present when the node
#: allocated memory.
_LABEL = re.compile(r"^(?:\[[^\]]*\]\s*)?(?P<name>\S+) = (?P<op>[^(\s]+)\((?P<inputs>.*)\)\s*$")
#: Executed op types that replace one node without absorbing others: a constant-folded
#: node runs as ``Const`` (its folded inputs do not run: they count as removed); the
#: arithmetic optimizer turns a division by a constant into a ``Mul``.
_NOT_FUSION = frozenset(_core.op_table()["replaces_one_node"])  # opkind::REPLACES_ONE_NODE


@dataclass(frozen=True)
class Profile:
    """Measured op times of one training step (see :func:`profile`).

    Attributes:
        times: ``{GraphDef node index: seconds}``, the median over the traced steps of
            each node's share of the wall time (an instant during which k nodes ran is
            split equally among them), for every node that ran (directly or inside a
            fused kernel), plus 0.0 for the nodes Grappler removed. Their sum is the time
            during which at least one node ran, what a single compute stream (the
            simulator) adds up. Pass it as ``hybridplan.plan(..., profile=times)``.
        step_time: median wall seconds of one untraced ``Session.run`` of the step.
        step_times: wall seconds of each untraced step.
        busy_times: seconds during which at least one node ran, in each traced step
            (the sum of every executed node's share, GraphDef or not).
        traced_spans: seconds from the first node start to the last node end of each
            traced step.
        coverage: fraction of the GraphDef's compute nodes (nodes with at least one data
            input) that were timed, directly or through a fused kernel.
        durations: like :attr:`times`, but each node's own elapsed time, whether or not
            other nodes ran meanwhile (larger than its share when the executor ran nodes
            concurrently: with 2 inter-op threads, the two backprops of a convolution).
        measured: GraphDef indices of the nodes that ran under their own name.
        fused: ``{fused node index: absorbed node indices}`` for every fused kernel.
        kernels: ``{node index: executed op type}`` where it differs from the GraphDef
            op (oneDNN and remapper rewrites).
        removed: GraphDef indices of compute nodes that did not run (0 s in ``times``).
        unmapped: ``{executed node name: median seconds}`` of nodes with no GraphDef
            counterpart (the runtime's ``_SOURCE``, ``_Arg``, ``_Retval``, the copied
            variables...).
        dispatched: GraphDef indices of the nodes that ran as a kernel of their own
            (under their own name, or as the fused kernel named after them); the nodes a
            fused kernel absorbed are not in it.
        workspace: ``{GraphDef node name: bytes}``, the most kernel scratch each node
            that ran under its own name held at once over the traced steps (buffers it
            allocated and freed while it ran: :func:`hybridplan.measuring.step_scratch`;
            0 for a node that held none). Give it to ``plan``/``apply``/``analyze`` as
            ``workspace_profile`` to replace the workspace rule's figures by these.
        inline: the traced steps ran inline, one kernel at a time (``order="inline"``
            granted; see :func:`profile`).
    """

    times: dict[int, float]
    step_time: float
    step_times: list[float]
    traced_spans: list[float]
    coverage: float
    busy_times: list[float] = field(default_factory=list)
    durations: dict[int, float] = field(default_factory=dict)
    measured: frozenset[int] = frozenset()
    fused: dict[int, list[int]] = field(default_factory=dict)
    kernels: dict[int, str] = field(default_factory=dict)
    removed: frozenset[int] = frozenset()
    unmapped: dict[str, float] = field(default_factory=dict)
    dispatched: frozenset[int] = frozenset()
    workspace: dict[str, int] = field(default_factory=dict)
    inline: bool = False

    @property
    def serial_time(self) -> float:
        """Sum of :attr:`times`: the step time of one serial compute stream."""
        return math.fsum(self.times.values())

    @property
    def outside_time(self) -> float:
        """Seconds of an untraced step that no GraphDef node's time covers:
        :attr:`step_time` minus :attr:`serial_time` (0 if negative). The executor's
        dispatch between nodes, ``Session.run``, feeding and fetching, the runtime's own
        nodes; on a graph of many small ops it is a large part of the step
        (``docs/accuracy.md``, finding 9)."""
        return max(0.0, self.step_time - self.serial_time)

    @property
    def calibrated_times(self) -> dict[int, float]:
        """:attr:`times` with :attr:`outside_time` spread evenly over the
        :attr:`dispatched` nodes (a per-kernel dispatch cost), so that they add up to
        :attr:`step_time`. What to pass as ``plan(..., profile=...)`` when the predicted
        step time should be this machine's wall time rather than the time the kernels
        run: a clone then also pays a kernel's dispatch. Fitted on this graph's own
        steps, so on the profiled graph the prediction equals the measurement by
        construction; on a rewritten graph (clones, copies) it is a prediction."""
        extra = self.outside_time / len(self.dispatched) if self.dispatched else 0.0
        return {v: t + (extra if v in self.dispatched else 0.0) for v, t in self.times.items()}

    @property
    def traced_span(self) -> float:
        """Median of :attr:`traced_spans`."""
        return statistics.median(self.traced_spans) if self.traced_spans else float("nan")

    def __repr__(self) -> str:
        return (
            f"Profile(nodes timed={len(self.times) - len(self.removed)}, "
            f"coverage={self.coverage:.2f}, serial={self.serial_time * 1e3:.3f} ms, "
            f"step={self.step_time * 1e3:.3f} ms, fused={len(self.fused)})"
        )


@dataclass(frozen=True)
class Calibration:
    """Time a step costs outside its kernels, fitted over profiles (:func:`calibrate`):
    ``outside = per_step + per_kernel * kernels``, where ``kernels`` is the number of
    kernels the step dispatches (``len(Profile.dispatched)``).

    Attributes:
        per_step: seconds each step costs once (``Session.run``, feeding, fetching,
            the executor's start and end).
        per_kernel: seconds each dispatched kernel costs besides its own run time
            (the executor's dispatch between nodes).
        profiles: how many profiles the fit used.
    """

    per_step: float
    per_kernel: float
    profiles: int = 0

    def outside(self, kernels: int) -> float:
        """Predicted seconds outside the kernels of a step dispatching ``kernels``."""
        return self.per_step + self.per_kernel * kernels

    def times(self, prof: Profile) -> dict[int, float]:
        """``prof.times`` with :attr:`per_kernel` added to every dispatched node: what
        to pass as ``plan(..., profile=...)``, so that a clone also pays a dispatch.
        Add :attr:`per_step` once to the simulated step time."""
        extra = self.per_kernel
        return {v: t + (extra if v in prof.dispatched else 0.0) for v, t in prof.times.items()}

    def step_time(self, prof: Profile) -> float:
        """Predicted wall seconds of the profiled graph's step: its kernel times plus
        :meth:`outside` (what the simulator's serial stream gives with :meth:`times`,
        plus :attr:`per_step`)."""
        return prof.serial_time + self.outside(len(prof.dispatched))


def calibrate(profiles: Sequence[Profile]) -> Calibration:
    """Fits :class:`Calibration` to the outside time of other graphs' profiles.

    A line ``outside = per_step + per_kernel * kernels`` through the points
    ``(len(Profile.dispatched), Profile.outside_time)``, fitted by repeated medians
    (Siegel: for each point the median of its slopes to the others, the slope the median
    of those; the intercept the median of ``outside - slope * kernels``), which a profile
    taken while something else loaded the machine cannot drag off as it drags a least-
    squares line: fewer than half the points wrong leave the fit where the others put
    it. Both terms stay non-negative: a negative slope keeps the median outside time
    per step only; a negative intercept keeps the median outside time per kernel only.
    With one kernel count among the profiles, only a time per kernel can be told (as
    :attr:`Profile.calibrated_times` spreads it).

    Apply the result to a graph that was NOT among ``profiles`` (leave one out) to
    predict its wall time from its kernel times alone; applied to its own profile it
    only restates the measurement.

    Raises:
        InvalidArgumentError: no profiles, or a profile with no kernels.

    Complexity:
        O(P^2 log P) for P profiles.

    Example::

        cal = calibrate([profile(t, b) for t, b in others])
        prof = profile(traced, batch)
        p = hybridplan.plan(traced, budget, device="cpu", profile=cal.times(prof))
        p.report["original"]["step_time_s"] + cal.per_step  # vs the measured step
    """
    points = [(float(len(p.dispatched)), p.outside_time) for p in profiles]
    if not points:
        raise InvalidArgumentError("calibrate needs at least one profile")
    if any(n == 0 for n, _ in points):
        raise InvalidArgumentError("a profile has no dispatched kernels: nothing to fit")
    k = len(points)
    per_kernel_only = Calibration(0.0, statistics.median(o / n for n, o in points), k)
    slopes = []
    for n, o in points:
        mine = [(o2 - o) / (n2 - n) for n2, o2 in points if n2 != n]
        if mine:
            slopes.append(statistics.median(mine))
    if not slopes:  # one kernel count
        return per_kernel_only
    slope = statistics.median(slopes)
    if slope <= 0:
        return Calibration(statistics.median(o for _, o in points), 0.0, k)
    intercept = statistics.median(o - slope * n for n, o in points)
    if intercept < 0:
        return per_kernel_only
    return Calibration(intercept, slope, k)


def profile(
    traced: Any,
    batches: Batches,
    steps: int = 3,
    graph_def: Any = None,
    *,
    warmup: int = 2,
    num_cpus: int = 2,
    order: str = "inline",
) -> Profile:
    """Measures the per-node op times of a training step on the current machine.

    Args:
        traced: the :class:`~hybridplan.tracing.Traced` step.
        batches: a sequence of ``(x, y, ...)`` tuples used in turn, or a callable
            ``seed -> (x, y, ...)`` such as ``Workload.batch``.
        steps: traced steps (times are their median), and as many timed untraced steps,
            run alternately with them.
        graph_def: the GraphDef to profile (e.g. a rewritten one); ``traced.graph_def``
            when None. Keys of :attr:`Profile.times` index its nodes. Never mutated.
        warmup: untraced steps first (Grappler, oneDNN primitive creation, allocator
            growth happen there and would otherwise inflate the first times).
        num_cpus: logical CPU devices of the Session (2: device and host, as
            :func:`~hybridplan.measuring.measure` uses).
        order: ``"inline"`` (default): every step asked to run inline, one kernel at
            a time in the order nodes become ready (a GPU executor's order, one stream
            as the simulator models it, as ``measure`` runs by default), so
            :attr:`Profile.times` are plain durations and :attr:`Profile.step_time` is
            a one-stream step; a step with two executors falls back to the pool
            (:attr:`Profile.inline` says which ran). ``"pool"``: TensorFlow's inter-op
            pool (one thread per core), whose concurrent nodes share the wall time (see
            above).

    Returns:
        A :class:`Profile`. The caller's variables are left untouched.

    Raises:
        InvalidArgumentError: ``steps`` < 1, ``warmup`` < 0, no batches, or an unknown
            ``order``.
        InvalidGraphError: TensorFlow rejects the GraphDef.

    Example::

        prof = profile(traced, workload.batch)
        hybridplan.plan(traced, budget, device="cpu", profile=prof.times)
    """
    import tensorflow as tf

    if steps < 1:
        raise InvalidArgumentError(f"steps must be >= 1, got {steps}")
    if warmup < 0:
        raise InvalidArgumentError(f"warmup must be >= 0, got {warmup}")
    plain, options = run_options(order), run_options(order, trace=True)
    batch_at = _batch_source(batches)
    # Indexed like the graph the planner reads: function calls inlined.
    source = inlined(traced.graph_def if graph_def is None else graph_def)
    graph, feeds, fetches, init, _ = _session_graph(traced, source)
    config = session_config(num_cpus)

    stats = []
    wall: list[float] = []
    losses: list[Any] = []
    with tf.compat.v1.Session(graph=graph, config=config) as sess:
        sess.run(init)
        run = _Runner(sess, feeds, fetches, batch_at, traced.loss_index, losses)
        for s in range(warmup):
            run(s, plain)
        for k in range(steps):
            seed = warmup + 2 * k
            stats.append(run(seed, options).step_stats)
            run(seed + 1, plain)
            wall.append(run.seconds)
    prof = _profile_from_stats(source, stats, wall)
    inline = order == "inline" and all(ran_inline(s) for s in stats)
    return dataclasses.replace(prof, inline=inline)


# --------------------------------------------------------------------------- attribution


@dataclass
class _Executed:
    """One executed node of one traced step."""

    seconds: float
    op: str
    inputs: list[str]


def _parse_step(step_stats: Any, share: bool = True) -> tuple[dict[str, _Executed], float]:
    """Executed nodes of one step by name (times of repeated names add up) and its span.

    A node's interval is ``[all_start_micros, all_start_micros + op_end_rel_micros)``. With
    ``share``, each instant of the step is divided equally among the nodes running then,
    so that concurrent nodes split the wall time instead of each counting all of it: the
    times then add up to the time during which at least one node ran.
    """
    rows = []
    for dev in step_stats.dev_stats:
        for ns in dev.node_stats:
            begin = ns.all_start_micros
            end = begin + max(ns.op_end_rel_micros, 0)
            m = _LABEL.match(ns.timeline_label)
            op = m.group("op") if m else ""
            inputs = _split_inputs(m.group("inputs")) if m else []
            stop = begin + max(ns.all_end_rel_micros, ns.op_end_rel_micros)
            rows.append((ns.node_name, begin, end, stop, op, inputs))
    if not rows:
        return {}, 0.0
    spent = _shared([(b, e) for _, b, e, _, _, _ in rows]) if share else None
    out: dict[str, _Executed] = {}
    for k, (name, begin, end, _, op, inputs) in enumerate(rows):
        seconds = (spent[k] if spent is not None else end - begin) / 1e6
        prev = out.get(name)
        if prev is None:
            out[name] = _Executed(seconds, op, inputs)
        else:
            prev.seconds += seconds
    span = (max(r[3] for r in rows) - min(r[1] for r in rows)) / 1e6
    return out, span


def _shared(intervals: list[tuple[int, int]]) -> list[float]:
    """For each ``[begin, end)``, the integral over it of 1 / (number of intervals open).

    Sweep over the sorted endpoints keeping ``C(t) = integral of 1/k``; an interval's
    share is ``C(end) - C(begin)``. O(n log n).
    """
    points = sorted({t for iv in intervals for t in iv})
    delta: dict[int, int] = {}
    for b, e in intervals:
        if e > b:
            delta[b] = delta.get(b, 0) + 1
            delta[e] = delta.get(e, 0) - 1
    acc: dict[int, float] = {}
    c, open_, prev = 0.0, 0, None
    for t in points:
        if prev is not None and open_ > 0:
            c += (t - prev) / open_
        acc[t] = c
        open_ += delta.get(t, 0)
        prev = t
    return [acc[e] - acc[b] if e > b else 0.0 for b, e in intervals]


def _split_inputs(text: str) -> list[str]:
    return [s.strip().split(":")[0].lstrip("^") for s in text.split(",") if s.strip()]


def _strip_scope(name: str) -> str:
    prefix = f"{_SCOPE}/"
    return name[len(prefix) :] if name.startswith(prefix) else name


def _map_name(name: str, index: dict[str, int]) -> int | None:
    """GraphDef index of an executed node name, or None.

    The name without the import scope first; then, for a node Grappler made
    (``ConstantFolding/step/<node>-matshapes-0``, ``step/<node>/unary_ops_composition``),
    the longest GraphDef name that it starts with at a ``/``, ``-`` or ``_`` boundary,
    after the optimizer's own prefix.
    """
    base = _strip_scope(name)
    if base in index:
        return index[base]
    at = name.find(f"/{_SCOPE}/")
    rest = name[at + len(_SCOPE) + 2 :] if at >= 0 else base
    if rest in index:
        return index[rest]
    cut = len(rest)
    while True:
        cut = max(rest.rfind(sep, 0, cut) for sep in "/-_")
        if cut <= 0:
            return None
        if rest[:cut] in index:
            return index[rest[:cut]]


def _normalise_op(op: str) -> str:
    for prefix in ("_MklNative", "_Mkl"):
        if op.startswith(prefix):
            return op[len(prefix) :]
    return op


def _flops(source: Any) -> Any:
    """FLOPs of every node of ``source`` from shapes alone, by GraphDef index: the cost
    model's (``cost::flops`` of the core), to split a fused kernel's time."""
    return _core.analyze(source.SerializeToString()).node_facts()["flops"]


def _profile_from_stats(source: Any, stats: list[Any], wall: list[float]) -> Profile:
    nodes = list(source.node)
    index = {n.name: i for i, n in enumerate(nodes)}
    steps = [(_parse_step(s, share=True)[0], *_parse_step(s, share=False)) for s in stats]

    # Per GraphDef node and step: (wall share, duration); the last step's labels.
    per_node: dict[int, list[tuple[float, float]]] = {}
    unmapped_lists: dict[str, list[float]] = {}
    label_of: dict[int, _Executed] = {}
    for shared, raw, _ in steps:
        seen: dict[int, tuple[float, float]] = {}
        for name, e in shared.items():
            v = _map_name(name, index)
            if v is None:
                unmapped_lists.setdefault(name, []).append(e.seconds)
                continue
            a, b = seen.get(v, (0.0, 0.0))
            seen[v] = (a + e.seconds, b + raw[name].seconds)
            if _strip_scope(name) == nodes[v].name:
                label_of[v] = e
        for v, ab in seen.items():
            per_node.setdefault(v, []).append(ab)
    ran = {v: statistics.median(a for a, _ in ts) for v, ts in per_node.items()}
    ran_raw = {v: statistics.median(b for _, b in ts) for v, ts in per_node.items()}
    measured = frozenset(v for v in ran if v in label_of)
    fused, kernels = _fusions(nodes, index, label_of, ran)

    compute = [i for i, n in enumerate(nodes) if any(not r.startswith("^") for r in n.input)]
    timed = {*ran, *(u for group in fused.values() for u in group)}
    removed = frozenset(i for i in compute if i not in timed)
    flops = _flops(source) if fused else None
    times = _split_fused(ran, fused, removed, flops)
    durations = _split_fused(ran_raw, fused, removed, flops)
    return Profile(
        times=times,
        step_time=statistics.median(wall) if wall else float("nan"),
        step_times=list(wall),
        traced_spans=[span for _, _, span in steps],
        busy_times=[math.fsum(e.seconds for e in shared.values()) for shared, _, _ in steps],
        coverage=sum(1 for i in compute if i in timed) / len(compute) if compute else 0.0,
        durations=durations,
        measured=measured,
        fused=fused,
        kernels=kernels,
        removed=removed,
        unmapped={k: statistics.median(v) for k, v in sorted(unmapped_lists.items())},
        dispatched=frozenset(ran),
        workspace=_workspace(nodes, index, stats),
    )


def _workspace(nodes: list[Any], index: dict[str, int], stats: list[Any]) -> dict[str, int]:
    """The most scratch each GraphDef node held at once over the steps ``stats``, for the
    nodes that ran under their own name (a node Grappler made, or one fused under another
    name, is left to the workspace rule). O(R log R) for R allocation records."""
    from .measuring import _without_scratch

    out: dict[str, int] = {}
    for st in stats:
        for dev in st.dev_stats:
            for ns in dev.node_stats:
                v = index.get(_strip_scope(ns.node_name))
                if v is None:
                    continue
                records = [
                    (r.alloc_micros, r.alloc_bytes) for m in ns.memory for r in m.allocation_records
                ]
                name = nodes[v].name
                out[name] = max(out.get(name, 0), _without_scratch(ns, records)[1])
    return dict(sorted(out.items()))


def _producer(index: dict[str, int], ref: str) -> int | None:
    return index.get(ref.lstrip("^").split(":")[0])


def _fusions(
    nodes: list[Any], index: dict[str, int], label_of: dict[int, _Executed], ran: dict[int, float]
) -> tuple[dict[int, list[int]], dict[int, str]]:
    """Fused kernels and the GraphDef nodes each absorbed; executed op types that differ."""
    fused: dict[int, list[int]] = {}
    kernels: dict[int, str] = {}
    absorbed_by: dict[int, int] = {}
    for v in sorted(label_of):
        e = label_of[v]
        if not e.op or _normalise_op(e.op) == nodes[v].op:
            continue
        kernels[v] = e.op
        if e.op in _NOT_FUSION:
            continue  # constant folded, or an arithmetic rewrite of the node alone
        stop = {index.get(_strip_scope(i)) for i in e.inputs}
        group: list[int] = []
        stack = [v]
        while stack:
            u = stack.pop()
            for ref in nodes[u].input:
                if ref.startswith("^"):
                    continue
                p = _producer(index, ref)
                if p is None or p in stop or p in ran or p in absorbed_by or p == v:
                    continue
                if not any(not i.startswith("^") for i in nodes[p].input):
                    continue  # a source: nothing to run
                absorbed_by[p] = v
                group.append(p)
                stack.append(p)
        if group:
            fused[v] = sorted(group)
    return fused, kernels


def _split_fused(
    ran: dict[int, float],
    fused: dict[int, list[int]],
    removed: frozenset[int],
    flops: Any,
) -> dict[int, float]:
    """Node times: a fused kernel's time split over its chain by the cost model's FLOPs
    (``flops``, by node index); removed nodes 0."""
    times = dict(ran)
    for v, group in fused.items():
        members = [v, *group]
        weights = [float(flops[u]) for u in members]
        total = math.fsum(weights)
        share = [w / total for w in weights] if total > 0 else [1.0] + [0.0] * len(group)
        for u, f in zip(members, share, strict=True):
            times[u] = ran[v] * f
    for i in removed:
        times[i] = 0.0
    return times
