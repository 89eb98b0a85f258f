"""Planned steps under ``tf.distribute``: one plan per replica device.

A step run by ``MirroredStrategy`` or ``MultiWorkerMirroredStrategy`` traces to one
flat GraphDef holding every local replica's forward, backward and update ops, each op
pinned to its replica's device, plus the gradient all-reduce (``CollectiveReduceV2``,
one per replica device, packed by ``ConcatV2``/``SplitV``) and a few unplaced glue nodes
(argument placeholders, variable reads, output ``Identity``\\ s). See
``docs/distributed.md`` for what was measured.

The core plans a whole GraphDef against one budget and one link, so this module:

1. assigns every node a device (:func:`node_devices`): its own; for a captured
   placeholder, the device of the eager handle it stands for; for an unplaced op that
   reads a resource, the resource's device (TensorFlow colocates it there); for an
   argument placeholder, the one device all its readers are on;
2. cuts, for each replica device, the sub-GraphDef of its nodes (:func:`replica_subgraph`):
   a tensor made elsewhere becomes a ``Placeholder`` of its dtype and shape, a control
   input from elsewhere is dropped, and sub-graph position ``k`` maps back to full-graph
   position ``members[k]``;
3. plans each sub-graph with :func:`hybridplan.plan` under that device's budget and
   device model, with the replica's own loss, and with every collective op type present
   excluded from selection (the core never clones a collective; excluding the type also
   keeps its outputs from being swapped, so collectives run exactly as traced);
4. rewrites the full GraphDef once per replica (:func:`hybridplan.rewrite`), with that
   replica's device and the host CPU of the same task, under the prefix
   ``hybridplan/r<i>``.

Collective instance keys are call-time captures of the traced function: fresh values
on every call. The traced step takes them as extra arguments and :class:`DistributedStep`
feeds them from the same closures TensorFlow uses.

Example::

    strategy = tf.distribute.MirroredStrategy(["/gpu:0", "/gpu:1"])
    with strategy.scope():
        model, optimizer = make_model(), keras.optimizers.SGD(0.1)
    dt = distributed.trace_keras_distributed(strategy, model, optimizer, loss_fn, x_spec, y_spec)
    r = distributed.apply_distributed(dt, "30GiB", device="a100-pcie4", target="gpu")
    step = distributed.DistributedStep(dt, r)
    loss = step(x_global, y_global)     # one step on every replica; weights updated
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _core
from .errors import BudgetError, InvalidArgumentError, UnsupportedGraphError

__all__ = [
    "DistributedResult",
    "DistributedStep",
    "DistributedTraced",
    "ReplicaPlan",
    "apply_distributed",
    "charged_devices",
    "measure_distributed",
    "node_devices",
    "one_executor",
    "replica_subgraph",
    "trace_distributed",
    "trace_keras_distributed",
]

#: ``DT_RESOURCE``, from the core's dtype table.
_RESOURCE = next(code for code, name, _, _ in _core.dtypes() if name == "resource")
#: The core's identities (``opkind::IDENTITIES``) and function-argument op
#: (``opkind::ARGUMENTS``: a step's fed input or captured handle).
_IDENTITIES = frozenset(_core.op_table()["identities"])
_ARGUMENTS = frozenset(_core.op_table()["arguments"])
#: The core's all-reduces (``opkind::ALL_REDUCES``), which :func:`one_executor` emulates.
_ALL_REDUCES = frozenset(_core.op_table()["all_reduces"])


# --------------------------------------------------------------------------- tracing


@dataclass
class DistributedTraced:
    """A traced ``tf.distribute`` step and what ties it to its replicas.

    Attributes:
        traced: the flat step (:class:`hybridplan.Traced`); its arguments are every
            replica's inputs (argument ``a`` of replica ``r`` at position
            ``a * num_replicas + r``) followed by the collective instance keys; its
            outputs are the replicas' losses, in replica order.
        strategy: the ``tf.distribute`` strategy it was traced under.
        devices: the local replica devices, in replica order (full device strings).
        losses: each replica's forward-pass loss tensor (``"node:index"``).
        call_time: ``(placeholder name, closure)`` of each value TensorFlow computes at
            call time (collective instance keys); the closure returns a list holding
            one tensor.
        num_args: arguments of the replica function.
    """

    traced: Any
    strategy: Any
    devices: list[str]
    losses: list[str]
    call_time: list[tuple[str, Callable[[], Any]]]
    num_args: int

    @property
    def num_replicas(self) -> int:
        return len(self.devices)

    def run_original(self, *args: Any) -> list[Any]:
        """One step of the traced ``tf.function`` itself (no rewrite), each replica's
        loss; ``args`` as for :class:`DistributedStep`. The reference a plan is judged by."""
        keys = {name for name, _ in self.call_time}
        flat = flat_arguments(self, args)
        data = [a for name, a in zip(self.traced.inputs, flat, strict=True) if name not in keys]
        return list(self.traced.concrete_function(*data))


def trace_distributed(
    strategy: Any, replica_fn: Callable[..., Any], *specs: Any
) -> DistributedTraced:
    """Traces ``strategy.run(replica_fn, args)`` into one flat GraphDef.

    Args:
        strategy: a ``tf.distribute.MirroredStrategy`` or
            ``MultiWorkerMirroredStrategy``; the model and optimizer must have been
            built under its scope, the optimizer's slots included.
        replica_fn: the per-replica training step: forward under ``tf.GradientTape``,
            ``tape.gradient``, ``optimizer.apply_gradients`` (which all-reduces the
            gradients across replicas); returns the replica's loss (a float scalar).
        *specs: one fully defined ``tf.TensorSpec`` per argument of ``replica_fn``,
            for ONE replica's share of the batch.

    Returns:
        A :class:`DistributedTraced`.

    Raises:
        ShapeError, UnsupportedGraphError: see :func:`hybridplan.trace`.
        InvalidArgumentError: a replica's loss is not placed on its replica's device.

    Example::

        dt = trace_distributed(
            strategy, replica_step, tf.TensorSpec([4, 32]), tf.TensorSpec([4, 1])
        )
    """
    from .tracing import trace as trace_flat

    devices = list(strategy.extended.worker_devices)
    n, a = len(devices), len(specs)

    def step(*flat: Any) -> Any:
        per_arg = [flat[i * n : (i + 1) * n] for i in range(a)]
        # Global replica id -> local: MultiWorkerMirroredStrategy numbers the replicas
        # of worker t from t * n (every worker has n local replicas).
        args = [
            strategy.experimental_distribute_values_from_function(
                lambda ctx, v=values: v[ctx.replica_id_in_sync_group % n]
            )
            for values in per_arg
        ]
        per = strategy.run(replica_fn, args=tuple(args))
        return tuple(strategy.experimental_local_results(per))

    flat_specs = [s for s in specs for _ in range(n)]
    traced = trace_flat(step, *flat_specs)
    graph = traced.concrete_function.graph
    captures = graph.function_captures
    by_ref = [(t.op.name, captures.by_ref_external[k]) for k, t in captures.by_ref_internal.items()]
    losses = [_through_identities(traced.graph_def, out) for out in traced.outputs]
    dt = DistributedTraced(traced, strategy, devices, losses, by_ref, a)
    _check_losses(dt)
    return dt


def trace_keras_distributed(
    strategy: Any,
    model: Any,
    optimizer: Any,
    loss_fn: Any,
    x_spec: Any,
    y_spec: Any,
) -> DistributedTraced:
    """Traces the standard Keras step of ``model`` under ``strategy``.

    Each replica computes ``sum(loss_fn(y, model(x))) / global_batch`` (the scaling of
    ``tf.nn.compute_average_loss``) plus its share of ``model.losses``; the gradients
    are all-reduced by ``optimizer.apply_gradients``. ``x_spec`` and ``y_spec`` are ONE
    replica's batch. ``loss_fn`` must reduce with ``"sum"`` or ``"none"`` (a Keras loss
    built with ``reduction="sum"``); ``model`` and ``optimizer`` must be built (the
    optimizer with ``optimizer.build(model.trainable_variables)``) under
    ``strategy.scope()``.

    Example::

        with strategy.scope():
            model = make_model(); opt = keras.optimizers.SGD(0.1)
            opt.build(model.trainable_variables)
        dt = trace_keras_distributed(strategy, model, opt, keras.losses.MeanSquaredError(
            reduction="sum"), tf.TensorSpec([4, 32]), tf.TensorSpec([4, 1]))
    """
    import tensorflow as tf

    n = strategy.num_replicas_in_sync
    global_batch = int(x_spec.shape[0]) * n
    loss_fn = _per_example_loss(loss_fn)

    def replica_step(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            per_example = loss_fn(y, model(x, training=True))
            loss = tf.reduce_sum(per_example) / global_batch
            if model.losses:
                loss = loss + tf.add_n(model.losses) / n
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    return trace_distributed(strategy, replica_step, x_spec, y_spec)


def _per_example_loss(identifier: Any) -> Any:
    """``identifier`` as a loss whose ``reduce_sum`` is the replica's summed loss.

    A name or a plain function gives per-example losses (Keras' loss functions do); a
    ``keras.losses.Loss`` must reduce with ``"sum"`` or ``"none"``: a batch mean would be
    divided by the global batch again and train on a loss ``batch`` times too small.
    """
    import keras

    if isinstance(identifier, keras.losses.Loss):
        if identifier.reduction not in ("sum", "none", None):
            raise InvalidArgumentError(
                f"loss {identifier.name!r} reduces with {identifier.reduction!r}; under a "
                "distribution strategy each replica's loss is summed and divided by the "
                "global batch, so build it with reduction='sum' (or 'none')"
            )
        return identifier
    if isinstance(identifier, str):
        try:
            return keras.losses.get(identifier)
        except ValueError as e:
            raise InvalidArgumentError(
                f"loss {identifier!r} is not a loss Keras knows ({e}); pass a name such as "
                "'mse', a function loss_fn(y_true, y_pred) or a keras.losses.Loss"
            ) from None
    if not callable(identifier):
        raise InvalidArgumentError(
            f"loss is a {type(identifier).__name__}; pass a name such as 'mse', a function "
            "loss_fn(y_true, y_pred) or a keras.losses.Loss built with reduction='sum'"
        )
    return identifier


def _through_identities(graph_def: Any, tensor: str) -> str:
    """Follows ``Identity`` data inputs back from ``tensor`` (bounded by graph size)."""
    by_name = {n.name: n for n in graph_def.node}
    for _ in range(len(graph_def.node) + 1):
        node = by_name[tensor.rsplit(":", 1)[0]]
        data = [i for i in node.input if not i.startswith("^")]
        if node.op not in _IDENTITIES or not data:
            break
        tensor = data[0] if ":" in data[0] else f"{data[0]}:0"
    return tensor


def _check_losses(dt: DistributedTraced) -> None:
    devices = node_devices(dt.traced.graph_def, dt.traced.captures)
    index = {n.name: i for i, n in enumerate(dt.traced.graph_def.node)}
    for r, (loss, device) in enumerate(zip(dt.losses, dt.devices, strict=True)):
        placed = devices[index[loss.rsplit(":", 1)[0]]]
        if not _same_device(placed, device):
            raise InvalidArgumentError(
                f"replica {r}'s loss {loss} is placed on {placed or 'no device'}, not on its "
                f"replica device {device}; return the loss computed inside replica_fn"
            )


# --------------------------------------------------------------------------- devices


def _spec(device: str) -> Any:
    import tensorflow as tf

    return tf.DeviceSpec.from_string(device)


def _same_device(a: str, b: str) -> bool:
    """Same device type and index; job, replica and task equal where both give one."""
    if not a or not b:
        return False
    x, y = _spec(a), _spec(b)
    if (x.device_type, x.device_index) != (y.device_type, y.device_index):
        return False
    return all(
        u is None or v is None or u == v
        for u, v in ((x.job, y.job), (x.replica, y.replica), (x.task, y.task))
    )


def node_devices(graph_def: Any, captures: Sequence[tuple[Any, str]] = ()) -> list[str]:
    """The device each node of ``graph_def`` runs on, as far as the graph says (``""``
    where it does not).

    A node's own ``device`` wins. A captured placeholder takes the device of the eager
    handle it stands for (``captures`` as in :attr:`hybridplan.Traced.captures`). An
    unplaced node that reads a resource takes that resource's device (TensorFlow
    colocates ops with the resources they read). An unplaced argument placeholder takes
    the device of its data readers when they all agree. Other unplaced nodes (output
    ``Identity``\\ s, ``NoOp`` groups) stay ``""``: they belong to no replica.

    Complexity:
        O(N + E) dictionary operations in Python.
    """
    nodes = graph_def.node
    index = {n.name: i for i, n in enumerate(nodes)}
    devices = [n.device for n in nodes]
    handle_device = {name: getattr(h, "device", "") for h, name in captures}
    for i, node in enumerate(nodes):
        if not devices[i] and node.name in handle_device:
            devices[i] = handle_device[node.name]
    for i, node in enumerate(nodes):
        if devices[i]:
            continue
        for text in node.input:
            j = index.get(text.lstrip("^").split(":")[0])
            if text.startswith("^") or j is None or not devices[j]:
                continue
            if nodes[j].op in _ARGUMENTS and nodes[j].attr["dtype"].type == _RESOURCE:
                devices[i] = devices[j]
                break
    readers: dict[int, set[str]] = {}
    for i, node in enumerate(nodes):
        for text in node.input:
            j = index.get(text.split(":")[0])
            if not text.startswith("^") and j is not None and nodes[j].op in _ARGUMENTS:
                readers.setdefault(j, set()).add(devices[i])
    for j, seen in readers.items():
        if not devices[j] and len(seen) == 1:
            devices[j] = next(iter(seen))
    return devices


# --------------------------------------------------------------------------- sub-graphs


def replica_subgraph(
    graph_def: Any, members: Sequence[int], boundary_of: list[tuple[int, int]] | None = None
) -> Any:
    """The sub-GraphDef of the nodes at positions ``members`` (ascending).

    Node ``k`` of the result is ``graph_def.node[members[k]]``, with its inputs from
    non-members replaced: a data input by a ``Placeholder`` (same dtype and
    ``_output_shapes``; one per tensor, named ``hybridplan/boundary/<j>``, appended
    after the members), a control input dropped. The input is not modified. When
    ``boundary_of`` is a list, ``(producer position, output)`` in ``graph_def`` of each
    placeholder ``j`` is appended to it.

    Complexity:
        O(size of the member nodes) in Python.
    """
    from tensorflow.core.framework import graph_pb2

    from .rewriting import _output_dtypes

    nodes = graph_def.node
    inside = {nodes[i].name for i in members}
    position = {n.name: i for i, n in enumerate(nodes)}
    sub = graph_pb2.GraphDef()
    sub.versions.CopyFrom(graph_def.versions)
    boundary: dict[str, str] = {}
    for i in members:
        node = sub.node.add()
        node.CopyFrom(nodes[i])
        kept = []
        for text in node.input:
            name = text.lstrip("^").split(":")[0]
            if name in inside:
                kept.append(text)
            elif not text.startswith("^"):
                if text not in boundary:
                    boundary[text] = f"hybridplan/boundary/{len(boundary)}"
                kept.append(boundary[text])
        del node.input[:]
        node.input.extend(kept)
    for text, name in boundary.items():
        producer, _, k = text.partition(":")
        at = position[producer]
        _boundary_placeholder(sub, name, nodes[at], int(k or 0), _output_dtypes)
        if boundary_of is not None:
            boundary_of.append((at, int(k or 0)))
    return sub


def _boundary_placeholder(
    sub: Any, name: str, producer: Any, k: int, output_dtypes: Callable[[Any], list[int]]
) -> None:
    node = sub.node.add()
    node.name, node.op = name, "Placeholder"
    node.attr["dtype"].type = output_dtypes(producer)[k]
    shapes = producer.attr["_output_shapes"].list.shape if "_output_shapes" in producer.attr else []
    if k < len(shapes):
        node.attr["shape"].shape.CopyFrom(shapes[k])
        node.attr["_output_shapes"].list.shape.add().CopyFrom(shapes[k])


# --------------------------------------------------------------------------- planning


@dataclass(frozen=True)
class ReplicaPlan:
    """One replica's part of a :class:`DistributedResult`.

    Attributes:
        replica: replica index.
        device: the replica's device (full device string).
        host: the host device its swaps copy to.
        budget: the device's budget in bytes (persistent bytes included).
        members: full-graph positions of the replica's nodes (sub-graph order).
        plan: its :class:`~hybridplan.Plan` (indices into the sub-graph).
        summary: what the rewrite inserted for it (a ``RewriteSummary``), or None when
            the replica already fits.
    """

    replica: int
    device: str
    host: str
    budget: int
    members: tuple[int, ...]
    plan: Any
    summary: Any


@dataclass(frozen=True)
class DistributedResult:
    """What :func:`apply_distributed` returns: the rewritten GraphDef and every replica's plan."""

    graph_def: Any
    replicas: tuple[ReplicaPlan, ...]

    @property
    def inserted(self) -> tuple[str, ...]:
        """Every inserted node name, all replicas."""
        return tuple(n for r in self.replicas if r.summary for n in r.summary.inserted)

    @property
    def host_peak_bytes(self) -> dict[str, int]:
        """Predicted host bytes per machine (``"/job:J/task:T"``, ``""`` for a
        local step): the sum of its replicas' host peaks (each replica swaps to the
        host memory of its own machine; the replicas run the same step side by side,
        so their peaks coincide, and the sum is also an upper bound)."""
        out: dict[str, int] = {}
        for r in self.replicas:
            key = machine_of(r.device)
            out[key] = out.get(key, 0) + r.plan.host_peak_bytes
        return out


def _per_device(value: Any, device: str, r: int, what: str) -> Any:
    if isinstance(value, Mapping) and not _looks_like_device_model(value):
        for key, v in value.items():
            if (isinstance(key, int) and key == r) or (
                isinstance(key, str) and _same_device(key, device)
            ):
                return v
        raise InvalidArgumentError(f"{what} gives nothing for replica {r} ({device})")
    return value


def _looks_like_device_model(value: Mapping) -> bool:
    return "h2d_bandwidth" in value or "name" in value


def machine_of(device: str) -> str:
    """The machine a device is on: ``"/job:J/task:T"`` (``""`` when neither is given)."""
    d = _spec(device)
    return "".join(f"/{k}:{v}" for k, v in (("job", d.job), ("task", d.task)) if v is not None)


def _host_shares(devices: Sequence[str], host_budget: Any) -> list[Any]:
    """Each replica's share of its machine's host budget (split evenly between the
    replicas on one machine); ``"auto"`` and ``None`` pass through."""
    if host_budget is None or (isinstance(host_budget, str) and host_budget == "auto"):
        return [host_budget] * len(devices)
    from .planning import parse_bytes

    total = parse_bytes(host_budget, "host_budget")
    per = {}
    for d in devices:
        per[machine_of(d)] = per.get(machine_of(d), 0) + 1
    return [max(total // per[machine_of(d)], 1) for d in devices]


def host_for(device: str, host: str) -> str:
    """``host`` (e.g. ``"/device:CPU:2"``) on the same job and task as ``device``."""
    d, h = _spec(device), _spec(host)
    return h.make_merged_spec(d.replace(device_type=None, device_index=None)).to_string()


def apply_distributed(
    dt: DistributedTraced,
    budget: Any,
    *,
    host: str | None = None,
    strategy: str = "hybrid",
    device: str | dict | os.PathLike | Mapping = "v100-nvlink2",
    target: str = "gpu",
    min_bytes: int = 1 << 16,
    host_budget: Any = "auto",
    **plan_options: Any,
) -> DistributedResult:
    """Plans every replica's part of the step against its own budget and link, and
    writes all plans into one new GraphDef.

    Args:
        dt: the traced step (:func:`trace_distributed`, :func:`trace_keras_distributed`).
        budget: bytes per device (persistent bytes included), as for
            :func:`hybridplan.plan`; or a mapping from replica index or device string
            to each device's budget.
        host: the host device the swaps copy to, e.g. ``"/device:CPU:2"`` on CPU
            emulation; it is taken on each replica's own job and task. Default:
            ``"/device:CPU:0"`` for ``target="gpu"``; required for ``"cpu-emulation"``
            (a logical CPU no replica runs on).
        strategy, min_bytes: as for :func:`hybridplan.plan`.
        device: the device model (preset, dict or file), or a mapping from replica index
            or device string to one.
        target: ``"gpu"`` or ``"cpu-emulation"`` (the swap ops, see
            :func:`hybridplan.rewrite`).
        host_budget: host bytes per machine (as for :func:`hybridplan.plan`), split
            evenly between the replicas on that machine; ``"auto"``: each replica
            plans under :func:`hybridplan.plan`'s default divided by the replicas on
            its machine. :attr:`DistributedResult.host_peak_bytes` gives the
            predicted host bytes per machine, summed over its replicas.
        **plan_options: further :func:`hybridplan.plan` options (``exclude_types`` is
            extended with the collective op types present).

    Returns:
        :class:`DistributedResult`; ``dt`` is not modified.

    Raises:
        BudgetError: a replica's plan does not fit (the message names the device).
        InvalidArgumentError: no host for CPU emulation, a host that is a replica
            device, a budget or device mapping that misses a replica.
        UnsupportedGraphError: a plan names a node outside its replica.

    Example::

        r = apply_distributed(dt, {0: "12GiB", 1: "16GiB"}, device="a100-pcie4")
    """
    from tensorflow.core.framework import graph_pb2

    from .planning import plan as plan_graph
    from .rewriting import rewrite_with_summary

    host = _default_host(dt, host, target)
    full = dt.traced.graph_def
    devices = node_devices(full, dt.traced.captures)
    out = graph_pb2.GraphDef()
    out.CopyFrom(full)
    replicas = []
    shares = _host_shares(dt.devices, host_budget)
    owner = _owners(devices, dt.devices)
    outside: dict[str, int] | None = None  # made when a plan first recomputes
    for r, dev in enumerate(dt.devices):
        members = [i for i, d in enumerate(devices) if owner[i] == r]
        boundary: list[tuple[int, int]] = []
        sub = replica_subgraph(full, members, boundary)
        nbytes = _per_device(budget, dev, r, "budget")
        options = dict(plan_options)
        options["exclude_types"] = _collective_types(sub, options.get("exclude_types"))
        options["host_budget"] = _auto_share(shares[r], dt.devices, dev, device, r)
        p = _plan_replica(plan_graph, sub, nbytes, r, dev, strategy, device, dt, min_bytes, options)
        summary = None
        if not p.is_empty:
            if p.recomputes and outside is None:
                outside = _outside_reads(full, owner)
            spec = _in_full_graph(p.report, members, boundary, outside or {}, full, dev)
            rh = host_for(dev, host)
            rewritten = rewrite_with_summary(
                out, spec, target=target, device=dev, host=rh, prefix=f"hybridplan/r{r}"
            )
            out, summary = rewritten.graph_def, rewritten.summary
        replicas.append(
            ReplicaPlan(r, dev, host_for(dev, host), p.budget, tuple(members), p, summary)
        )
    return DistributedResult(out, tuple(replicas))


def _default_host(dt: DistributedTraced, host: str | None, target: str) -> str:
    if host is None:
        if target != "gpu":
            raise InvalidArgumentError(
                f"target={target!r} needs host=: a logical CPU no replica runs on, e.g. "
                f"'/device:CPU:{len(dt.devices)}' after setup_cpu_emulation("
                f"{len(dt.devices) + 1})"
            )
        host = "/device:CPU:0"
    for dev in dt.devices:
        if _same_device(host_for(dev, host), dev):
            raise InvalidArgumentError(
                f"host {host} is replica device {dev}: swaps would copy to the device itself"
            )
    return host


def _collective_types(sub: Any, given: Sequence[str] | str | None) -> list[str]:
    excluded = [given] if isinstance(given, str) else list(given or [])
    # TensorFlow's collective communication ops (the core's op table): never cloned,
    # their outputs never swapped.
    present = {op for op in {n.op for n in sub.node} if _core.op_facts(op)[0]}
    return sorted(set(excluded) | present)


def _plan_replica(
    plan_graph: Callable[..., Any],
    sub: Any,
    nbytes: Any,
    r: int,
    dev: str,
    strategy: str,
    device: Any,
    dt: DistributedTraced,
    min_bytes: int,
    options: dict,
) -> Any:
    try:
        return plan_graph(
            sub.SerializeToString(),
            nbytes,
            strategy=strategy,
            device=_per_device(device, dev, r, "device"),
            loss=dt.losses[r],
            min_bytes=min_bytes,
            **options,
        )
    except BudgetError as e:
        # The same class (HostBudgetError stays one), the replica named.
        raise type(e)(f"replica {r} ({dev}): {e}", e.budget, e.best_peak, e.strategy) from None


def _auto_share(share: Any, devices: Sequence[str], dev: str, device: Any, r: int) -> Any:
    """``"auto"``: the default host budget of ``dev``'s model, split between the
    replicas on its machine; anything else as it is."""
    if not (isinstance(share, str) and share == "auto"):
        return share
    from .planning import _device_args, auto_host_budget

    total = auto_host_budget(_device_args(_per_device(device, dev, r, "device"))[2])
    if total is None:
        return None
    n = sum(1 for d in devices if machine_of(d) == machine_of(dev))
    return max(total // n, 1)


def _owners(devices: Sequence[str], replicas: Sequence[str]) -> list[int]:
    """The replica of every node (its position in ``replicas``), -1 for none."""
    owner = [-1] * len(devices)
    for r, dev in enumerate(replicas):
        for i, d in enumerate(devices):
            if owner[i] < 0 and _same_device(d, dev):
                owner[i] = r
    return owner


def _outside_reads(full: Any, owner: Sequence[int]) -> dict[str, int]:
    """Data reads of each tensor (``name`` or ``name:k``) by nodes of another replica
    (or none) than its producer's: what a replica's sub-graph does not see of its
    tensors' readers. One pass over the graph for all replicas. O(nodes + edges)."""
    nodes = full.node
    position = {n.name: i for i, n in enumerate(nodes)}
    out: dict[str, int] = {}
    for j, n in enumerate(nodes):
        for text in n.input:
            if text.startswith("^"):
                continue
            name = text.split(":")[0]
            p = position.get(name)
            if p is not None and owner[p] != owner[j]:
                key = text[:-2] if text.endswith(":0") else text
                out[key] = out.get(key, 0) + 1
    return out


def _in_full_graph(
    report: Mapping[str, Any],
    members: Sequence[int],
    boundary: Sequence[tuple[int, int]],
    outside: Mapping[str, int],
    full: Any,
    dev: str,
) -> dict:
    """A replica's plan (the plan schema, sub-graph positions) in full-graph positions,
    every field kept: node ids through ``members``, a clone's input from a boundary
    placeholder as the tensor it stands for (``boundary``), and each cloned output's
    reads counted in the whole graph (``outside``: reads by other replicas), so that the
    rewrite need not search the graph. O(plan size)."""

    def at(k: Any) -> int:
        k = int(k)
        if not 0 <= k < len(members):
            raise UnsupportedGraphError(
                f"the plan for {dev} names sub-graph node {k}, a boundary placeholder (a "
                "tensor made on another device); please report it with the graph"
            )
        return members[k]

    def many(ks: Sequence[Any]) -> list[int]:
        return [at(k) for k in ks]

    def node(ref: Mapping[str, Any] | None) -> dict | None:
        return None if ref is None else {**ref, "node": at(ref["node"])}

    def tensor(t: Mapping[str, Any]) -> dict:
        k = int(t["node"])
        if k >= len(members) and k - len(members) < len(boundary):
            p, output = boundary[k - len(members)]
            return {"node": p, "output": output}
        return {"node": at(k), "output": t["output"]}

    def reads(t: Mapping[str, Any]) -> dict:
        v, k = at(t["node"]), int(t["output"])
        name = full.node[v].name if k == 0 else f"{full.node[v].name}:{k}"
        return {"node": v, "output": k, "reads": t["reads"] + outside.get(name, 0)}

    swaps = [
        {
            **s,
            "node": at(s["node"]),
            "after": at(s["after"]),
            "release": node(s["release"]),
            "gate": node(s["gate"]),
            "ins": [
                {
                    **i,
                    "trigger": at(i["trigger"]),
                    "consumers": many(i["consumers"]),
                    "clone_consumers": many(i["clone_consumers"]),
                }
                for i in s["ins"]
            ],
        }
        for s in report["swaps"]
    ]
    recomputes = [
        {
            **rc,
            "nodes": many(rc["nodes"]),
            "trigger": at(rc["trigger"]),
            "consumers": many(rc["consumers"]),
            "clone_consumers": many(rc["clone_consumers"]),
            "inputs": [tensor(t) for t in rc["inputs"]],
            "readers": [reads(t) for t in rc["readers"]],
        }
        for rc in report["recomputes"]
    ]
    return {**report, "swaps": swaps, "recomputes": recomputes}


# --------------------------------------------------------------------------- running


class DistributedStep:
    """A (possibly rewritten) distributed step that trains the real variables.

    ``step(x, y)`` takes each argument as the global batch (split evenly along axis 0,
    replica 0 first, as ``strategy.experimental_distribute_dataset`` splits it), as a
    ``tf.distribute`` per-replica value, or as a list with one tensor per replica. It
    returns the sum of the replicas' losses (for :func:`trace_keras_distributed`, the global
    mean loss); :meth:`run` returns each replica's loss.
    """

    def __init__(self, dt: DistributedTraced, result: DistributedResult | Any = None):
        from .runner import compile_step

        self.dt = dt
        self.result = result
        gd = result.graph_def if isinstance(result, DistributedResult) else result
        self.graph_def = gd if gd is not None else dt.traced.graph_def
        self._step = compile_step(dt.traced, self.graph_def)

    def arguments(self, *args: Any) -> list[Any]:
        """The flat argument list of the traced step (call-time keys included)."""
        return flat_arguments(self.dt, args)

    def run(self, *args: Any) -> list[Any]:
        """One step; each replica's loss, in replica order."""
        return self._step.run(*self.arguments(*args))

    def __call__(self, *args: Any) -> Any:
        import tensorflow as tf

        return tf.add_n(self.run(*args))


def flat_arguments(dt: DistributedTraced, args: Sequence[Any]) -> list[Any]:
    """Per-replica pieces of ``args`` plus fresh call-time values, in the traced order."""
    import tensorflow as tf

    if len(args) != dt.num_args:
        raise InvalidArgumentError(f"the step takes {dt.num_args} argument(s), got {len(args)}")
    n = dt.num_replicas
    data: list[Any] = []
    for a in args:
        if hasattr(a, "values") and not isinstance(a, (np.ndarray, tf.Tensor)):
            parts = list(dt.strategy.experimental_local_results(a))
        elif isinstance(a, (list, tuple)):
            parts = list(a)
        else:
            parts = tf.split(tf.convert_to_tensor(a), n, axis=0)
        if len(parts) != n:
            raise InvalidArgumentError(f"an argument has {len(parts)} parts for {n} replicas")
        data.extend(parts)
    keys = {name: closure()[0] for name, closure in dt.call_time}
    it = iter(data)
    return [keys[name] if name in keys else next(it) for name in dt.traced.inputs]


# --------------------------------------------------------------------------- measuring


def measure_distributed(
    dt: DistributedTraced,
    graph_def: Any = None,
    batches: Callable[[int], Sequence[Any]] | None = None,
    steps: int = 3,
    *,
    num_cpus: int,
    warmup: int = 1,
    order: str = "inline",
) -> Any:
    """Runs the step in a Session on CPU emulation and measures every device's peak.

    As :func:`hybridplan.measure` (allocation records replayed per device, copies of
    the variables, the caller's untouched), but each collective gets its call-time
    instance key, and with ``order="pool"`` each variable copy lives on its replica's
    device.

    **The executor's order.** A step on several devices has one executor per device,
    and TensorFlow runs such a step on its CPU thread pool, which defers weight
    gradients to the end of the backward pass differently in each Session
    (docs/accuracy.md, finding 11): the same unplanned step peaked at 366 kB or 490 kB
    per replica. By default (``order="inline"``, as :func:`hybridplan.measure`'s) the
    step measured is :func:`one_executor`'s copy: every node on the first replica's
    device (variable copies and unplaced nodes too), each all-reduce replaced by an op
    of its memory behaviour; one executor then runs the step inline, in a GPU
    executor's order, the same in every Session. Each allocation is charged to the
    device its node is placed on, or, for a node Grappler made or an unplaced one, that
    of its inputs (:func:`charged_devices`; one more untraced step first returns the
    graph that runs). The copy's losses and weights are not the step's (no all-reduce
    sums the gradients), so ``losses`` and ``weights`` are left empty: judge values
    with ``order="pool"``, which runs ``graph_def`` as given on the thread pool.

    Args:
        dt: the traced step.
        graph_def: what to run; ``dt.traced.graph_def`` when None.
        batches: ``seed -> (x, y, ...)`` global batches (split as by :class:`DistributedStep`).
        steps: traced steps (after ``warmup`` untraced ones).
        num_cpus: logical CPUs of the Session (replicas + host).
        order: ``"inline"`` or ``"pool"`` (:data:`hybridplan.measuring.ORDERS`).

    Returns:
        A :class:`hybridplan.measuring.Measurement` (``peak_bytes`` per device; with
        ``order="pool"`` every step's replica losses in ``losses`` and the variables in
        ``weights``; ``inline``: every traced step ran inline; ``unattributed``: the
        allocating nodes whose device could not be told).

    Raises:
        InvalidArgumentError: no ``batches``, or an unknown ``order``.
        UnsupportedGraphError: ``order="inline"`` on a step :func:`one_executor`
            cannot emulate.
    """
    from . import measuring

    if batches is None:
        raise InvalidArgumentError("measure_distributed needs batches: seed -> (x, y, ...)")
    options = measuring.run_options(order, trace=True)
    given = dt.traced.graph_def if graph_def is None else graph_def
    source, moved, run_on = given, {}, None
    if order == "inline":
        run_on = dt.devices[0]
        source, moved = one_executor(given, run_on)
    sess, feeds, fetches, variables = _session(dt, source, num_cpus, run_on)
    losses: list[np.ndarray] = []

    def run(seed: int, options: Any) -> Any:
        import tensorflow as tf

        # Arguments (and fresh instance keys) are made eagerly, outside the Session's graph.
        flat = [np.asarray(v) for v in flat_arguments(dt, tuple(batches(seed)))]
        metadata = tf.compat.v1.RunMetadata()
        feed = dict(zip(feeds, flat, strict=True))
        losses.append(np.asarray(sess.run(fetches, feed, options, run_metadata=metadata)))
        return metadata

    device_of: dict[str, str] = {}
    unresolved: set[str] = set()
    try:
        for s in range(warmup):
            run(s, None)
        if order == "inline":
            # The graph that ran (after Grappler) names the nodes the allocation records
            # will: each charged to the device its node, or the node it was made from, is on.
            first = measuring.run_options(order)
            first.output_partition_graphs = True
            ran = run(warmup, first).partition_graphs
            devices = node_devices(given, dt.traced.captures)
            placed = {f"step/{n.name}": d for n, d in zip(given.node, devices, strict=True)}
            device_of, unresolved = charged_devices(ran, placed, run_on)
            # A loop body's nodes run as ``<loop>/body/_<i>/<name>``: named by ``*/<name>``
            # where the body places them (moved or not).
            device_of.update(
                (f"*/{node.name}", measuring.device_key(_spec(node.device).to_string()))
                for f in given.library.function
                for node in f.node_def
                if node.device
            )
        split: dict[str, dict[str, list[int]]] = {}
        start = warmup + (order == "inline")  # after the step that returned the graph
        seeds = range(start, start + steps)
        inline: list[bool] = []

        suffixes = measuring.body_suffixes(device_of)
        unattributed: set[str] = set()

        def traced_run(seed: int, options: Any) -> Any:
            metadata = run(seed, options)
            inline.append(order == "inline" and measuring.ran_inline(metadata.step_stats))
            if order == "inline":
                unattributed.update(
                    _unattributed(metadata.step_stats, device_of, suffixes, unresolved)
                )
            return metadata

        peaks, timeline = measuring._traced_steps(traced_run, seeds, "", options, device_of, split)
        weights = [np.asarray(w) for w in sess.run(variables)]
    finally:
        sess.close()
    if order == "inline":
        losses, weights = [], []  # the copy's, not the step's: no all-reduce summed them
    return measuring.Measurement(
        device="",
        peak_bytes={k: max(v) for k, v in peaks.items()},
        step_peaks=peaks,
        step_times=[],
        timeline_us=timeline[0],
        timeline_bytes=timeline[1],
        losses=losses,
        weights=weights,
        inline=all(inline),
        host_nodes=tuple(
            sorted(name.removeprefix("step/") for name in moved if not name.startswith("*/"))
        ),
        unattributed=tuple(sorted(unattributed)),
        tensor_peak_bytes={k: max(v) for k, v in split["tensor"].items()},
        scratch_bytes={k: max(v) for k, v in split["scratch"].items()},
    )


def one_executor(graph_def: Any, device: str) -> tuple[Any, dict[str, str]]:
    """A copy of a multi-device step that one executor runs, for measuring its memory.

    The rule: every node placed elsewhere is placed on ``device``
    (:func:`hybridplan.measuring.place_host_on_device`, which also returns where each
    was placed, to charge its allocations there); each all-reduce (the core's
    ``opkind::ALL_REDUCES``: output of its first input's shape) becomes a ``Neg`` of
    that input: as the all-reduce (``forward_input_or_allocate_output``) it writes into
    its input when no one else reads it, else into a new buffer of the same size, so
    the memory is the step's, not the value. Nothing else changes: no control edge is
    added, so Grappler fuses and prunes as in the step.

    Returns:
        ``(copy, {moved node name: device key it was placed on})``.

    Raises:
        UnsupportedGraphError: a collective that is not an all-reduce, or one inside a
            function body (a loop's or a call's): measure with ``order="pool"``.

    Complexity:
        O(nodes) in Python.
    """
    from .measuring import place_host_on_device

    for f in graph_def.library.function:
        for node in f.node_def:
            if _core.op_facts(node.op)[0]:
                raise UnsupportedGraphError(
                    f"measure_distributed(order='inline') cannot run collective "
                    f"{node.name!r} ({node.op}) of function {f.signature.name!r} on one "
                    f"device; measure with order='pool'"
                )
    out, moved = place_host_on_device(graph_def, device)
    for node in out.node:
        if not _core.op_facts(node.op)[0]:
            continue
        data = [t for t in node.input if not t.startswith("^")]
        if node.op not in _ALL_REDUCES or not data:
            raise UnsupportedGraphError(
                f"measure_distributed(order='inline') emulates all-reduces only "
                f"({', '.join(sorted(_ALL_REDUCES))}), and {node.name!r} is a {node.op}; "
                f"measure with order='pool'"
            )
        dtype = node.attr["T"].type
        controls = [t for t in node.input if t.startswith("^")]
        node.op = "Neg"
        del node.input[:]
        node.input.extend([data[0], *controls])
        keep = {k: node.attr[k] for k in ("_output_shapes",) if k in node.attr}
        node.attr.clear()
        node.attr["T"].type = dtype
        for k, v in keep.items():
            node.attr[k].CopyFrom(v)
    return out, moved


def charged_devices(
    graphs: Sequence[Any], placed: Mapping[str, str], default: str
) -> tuple[dict[str, str], set[str]]:
    """The device key each node of the graphs that ran is charged to, and the nodes whose
    device could not be told (charged to ``default``).

    The rule: a node of the step takes the device it is placed on (``placed``: name as
    it ran -> device string, ``""`` where the step does not say); a node Grappler made
    or renamed (``.../ArithmeticOptimizer/...``, a fused node) or an unplaced one takes
    the device of a data input already charged, found by a breadth-first walk from the
    charged nodes along data edges (the first to reach it wins).

    Complexity:
        O(N + E) over the graphs' nodes and edges.
    """
    from .measuring import device_key

    nodes = [n for g in graphs for n in g.node]
    key_of: dict[str, str] = {}
    for n in nodes:
        where = placed.get(n.name, "")
        if where:
            key_of[n.name] = device_key(_spec(where).to_string())
    readers: dict[str, list[str]] = {}
    for n in nodes:
        for text in n.input:
            if not text.startswith("^"):
                readers.setdefault(text.split(":")[0], []).append(n.name)
    queue = deque(n.name for n in nodes if n.name in key_of)
    while queue:
        name = queue.popleft()
        for r in readers.get(name, ()):
            if r not in key_of:
                key_of[r] = key_of[name]
                queue.append(r)
    unresolved = {n.name for n in nodes if n.name not in key_of}
    fallback = device_key(_spec(default).to_string())
    for name in unresolved:
        key_of[name] = fallback
    return key_of, unresolved


def _unattributed(
    step_stats: Any, device_of: Mapping[str, str], suffixes: list, unresolved: set[str]
) -> set[str]:
    """Nodes that allocated in a step and that neither ``device_of`` nor a loop body's
    suffix places, or that :func:`charged_devices` could not place: their records fall
    to the device they ran on."""
    from .measuring import charged_device

    out = set()
    for dev in step_stats.dev_stats:
        for ns in dev.node_stats:
            allocated = any(r.alloc_bytes > 0 for m in ns.memory for r in m.allocation_records)
            unplaced = charged_device(device_of, suffixes, ns.node_name, "") == ""
            if allocated and (unplaced or ns.node_name in unresolved):
                out.add(ns.node_name)
    return out


def _session(
    dt: DistributedTraced, graph_def: Any, num_cpus: int, device: str | None = None
) -> tuple:
    """A Session over a new graph: the step, variable copies on their own devices (all
    on ``device``, and every unplaced node there, when given)."""
    import tensorflow as tf

    from .measuring import session_config

    traced = dt.traced
    source = traced.graph_def if graph_def is None else graph_def
    known = {id(v.handle): v.numpy() for v in traced.variables}
    graph = tf.Graph()
    with graph.as_default(), tf.device(device):
        input_map, feeds, variables = {}, [], []
        for spec, name in zip(traced.input_specs, traced.inputs, strict=True):
            ph = tf.compat.v1.placeholder(spec.dtype, spec.shape, name=f"feed/{name}")
            input_map[f"{name}:0"] = ph
            feeds.append(ph)
        for i, (handle, name) in enumerate(traced.captures):
            value = known.get(id(handle))
            with tf.device(device or handle.device):
                if value is None and handle.dtype != tf.resource:
                    input_map[f"{name}:0"] = tf.constant(np.asarray(handle), name=f"capture/{i}")
                    continue
                # A resource that is no tf.Variable the step knows of is a collective's
                # ordering token (a scalar variable only used to order launches).
                initial = value if value is not None else np.float32(0)
                copy = tf.Variable(initial, name=f"capture/{i}", trainable=False)
            if value is not None:
                variables.append(copy)
            input_map[f"{name}:0"] = copy.handle
        gd = tf.compat.v1.GraphDef()
        gd.CopyFrom(source)
        fetches = tf.graph_util.import_graph_def(
            gd, input_map=input_map, return_elements=list(traced.outputs), name="step"
        )
        init = tf.compat.v1.global_variables_initializer()
    config = session_config(num_cpus, inter_op_threads=1)
    sess = tf.compat.v1.Session(graph=graph, config=config)
    sess.run(init)
    return sess, feeds, list(fetches), variables
