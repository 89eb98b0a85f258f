"""Measure a training-step GraphDef on CPU emulation: per-device memory peaks and step time.

:func:`measure` imports the GraphDef into a fresh ``tf.Graph`` run by a
``tf.compat.v1.Session`` with two CPU devices (``/device:CPU:0`` stands for the
accelerator, ``/device:CPU:1`` for the host). Each captured variable becomes a new
resource variable initialised with the current value of the real one, so measuring never
changes the caller's weights. Steps run with ``RunOptions(trace_level=FULL_TRACE)``; the
executor then records, for every node, each allocation and deallocation it made
(``node_stats[].memory[].allocation_records``: microsecond timestamps and signed byte
counts). Both logical CPUs share one allocator, so the records are grouped by the device
of the node that allocated (``step_stats.dev_stats[].device``) and replayed in time order
into a per-device timeline of bytes in use; its maximum is that device's peak.

The peak counts the buffers the step allocates: activations, gradients, temporaries and
the step's outputs. Variables and optimizer slots live in resource variables allocated
before the step and are not in it (compare with ``Analysis.activation_peak_bytes``).

Step time is the median wall time of untraced ``Session.run`` calls (tracing slows ops),
each timed from the call to its return, the batch already made.

**The executor's order.** By default (``order="inline"``) every step runs with
``RunOptions(inter_op_thread_pool=-1)``: TensorFlow then runs a step that has ONE executor
(every node on one device: an original graph, a recompute plan) in the calling thread
with every kernel inline, in the order nodes become ready (first in, first out). That is
the order of a GPU's executor, which treats every GPU kernel as inexpensive, and of the
core's schedule. With a thread pool, even of one thread, the CPU executor hands all but
one of the kernels that become ready together to the pool, which runs them when the
inline chain runs dry: in a backward pass, at its end (``docs/accuracy.md``, finding 11),
so ready kernels hold their inputs far longer than on a GPU. A step with two executors
(nodes on ``/device:CPU:1``: a swap plan) cannot run inline; TensorFlow then uses its
thread pool without saying so. :attr:`Measurement.inline` tells which happened: a step
ran inline exactly when its step stats show nodes on one device only.

**A swap plan, inline** (``host_on_device=True``). The nodes placed on another device
than ``device`` (in a ``"cpu-emulation"`` rewrite: the ``DeepCopy`` swap-outs on
``/device:CPU:1``) are moved onto ``device``, so that the step has one executor and runs
inline, and the buffers they allocate (the host copies) are tallied under the device
they were placed on, not ``device``: on an accelerator they would be host memory. The
rest is as on the device: the original buffer of a swapped tensor is freed by
TensorFlow after its last reader and the copy (its producer's records), the swap-in's
copy is a device buffer. Only the measurement changes (no extra cross-device transfer,
the copy runs in the step's own order); the arithmetic is the same (same losses).
:attr:`Measurement.host_nodes` names the nodes tallied so.

Example::

    m = measure(traced, rewritten_graph_def, workload.batch, steps=3)
    m.device_peak, m.peak_bytes["/device:CPU:1"], m.step_time
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import InvalidArgumentError, InvalidGraphError

__all__ = [
    "ORDERS",
    "Measurement",
    "device_key",
    "measure",
    "place_host_on_device",
    "ran_inline",
    "replay_step_stats",
    "run_options",
    "step_scratch",
]

#: Values of ``measure(..., order=...)``: ``"inline"`` (a step with one executor runs in
#: the caller's thread, every kernel inline: a GPU executor's order) and ``"pool"``
#: (TensorFlow's inter-op thread pool, the CPU executor's own order).
ORDERS = ("inline", "pool")

Batches = Sequence[Sequence[Any]] | Callable[[int], Sequence[Any]]


@dataclass(frozen=True)
class Measurement:
    """What :func:`measure` saw.

    Attributes:
        device: the device whose timeline is kept (``"/device:CPU:0"``).
        peak_bytes: the largest peak of each device over the traced steps, in bytes,
            keyed ``"/device:CPU:0"``, ``"/device:CPU:1"``...
        step_peaks: each device's peak in every traced step, in bytes.
        step_times: wall seconds of each untraced step.
        timeline_us: times (microseconds from the first record) of the device's
            allocation events in the traced step with the largest device peak.
        timeline_bytes: bytes in use on the device after each of those events.
        losses: the loss of every step run (warm-up, traced, timed), as numpy arrays.
        weights: every captured variable's value after the last step, in the
            order of ``traced.captures``.
        inline: every traced step ran inline, in the order nodes become ready (asked
            with ``order="inline"`` and granted: the step had one executor). False
            with ``order="pool"``, and for a step with nodes on two devices (a swap
            plan), which TensorFlow runs on its thread pool even when asked inline.
            With ``host_on_device=True`` a swap plan has one executor and runs inline.
        host_nodes: with ``host_on_device=True``, the nodes moved from another device
            onto :attr:`device` (a swap plan's swap-outs), whose allocations are
            tallied under the device they were placed on (empty otherwise).
        tensor_peak_bytes: each device's largest peak of the tensors alone: the
            timeline without any node's kernel scratch (buffers a node allocated and
            freed while it ran). ``peak_bytes`` is the total, scratch included.
        scratch_bytes: the most scratch one node of each device held at once.
        unattributed: nodes that allocated in a traced step although the device they
            belong to could not be told, so their records are charged to the device
            they ran on (``distributed.measure_distributed``'s one-executor copy; empty
            for :func:`measure`, where every node runs on the device it is placed on
            or is listed in ``host_nodes``).
    """

    device: str
    peak_bytes: dict[str, int]
    step_peaks: dict[str, list[int]]
    step_times: list[float]
    timeline_us: np.ndarray
    timeline_bytes: np.ndarray
    losses: list[np.ndarray] = field(default_factory=list)
    weights: list[np.ndarray] = field(default_factory=list)
    inline: bool = False
    host_nodes: tuple[str, ...] = ()
    tensor_peak_bytes: dict[str, int] = field(default_factory=dict)
    scratch_bytes: dict[str, int] = field(default_factory=dict)
    unattributed: tuple[str, ...] = ()

    @property
    def device_peak(self) -> int:
        """Peak bytes of :attr:`device` (0 when nothing was allocated there)."""
        return self.peak_bytes.get(self.device, 0)

    @property
    def device_tensor_peak(self) -> int:
        """Peak bytes of :attr:`device`'s tensors, scratch left out."""
        return self.tensor_peak_bytes.get(self.device, 0)

    @property
    def device_scratch(self) -> int:
        """The most scratch one node of :attr:`device` held at once."""
        return self.scratch_bytes.get(self.device, 0)

    @property
    def timeline(self) -> tuple[np.ndarray, np.ndarray]:
        """``(seconds, bytes_in_use)`` of :attr:`device` (what ``report.memory_figure``
        takes as ``measured``)."""
        return self.timeline_us / 1e6, self.timeline_bytes

    @property
    def step_time(self) -> float:
        """Median wall seconds of one step."""
        return statistics.median(self.step_times) if self.step_times else float("nan")


def device_key(device: str) -> str:
    """``"/job:localhost/replica:0/task:0/device:CPU:0"`` -> ``"/device:CPU:0"``."""
    at = device.rfind("/device:")
    return device[at:] if at >= 0 else device


def replay_step_stats(
    step_stats: Any, device_of: Mapping[str, str] | None = None, scratch: bool = True
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per-device memory timelines from one step's ``StepStats``.

    Every allocation record of every node is charged to the device of the node that
    allocated it (TensorFlow files a buffer's deallocation with the node that allocated
    it); the records of a device are sorted by time (ties keep record order) and
    accumulated. ``device_of`` (node name as in the step stats -> device key) charges
    the records of the nodes it names to that device instead (the nodes that
    ``host_on_device`` moved, see :func:`measure`). ``scratch=False`` leaves out each
    node's kernel scratch (see :func:`step_scratch`): the tensors' timeline.

    Returns:
        ``{device_key: (times_us, bytes_in_use)}``; times are relative to the earliest
        record of the step (any device).

    Complexity:
        O(R log R) for R allocation records.
    """
    events: dict[str, list[tuple[int, int]]] = {}
    device_of = device_of or {}
    suffixes = body_suffixes(device_of)
    for dev in step_stats.dev_stats:
        key = device_key(dev.device)
        events.setdefault(key, [])
        for ns in dev.node_stats:
            bucket = events.setdefault(charged_device(device_of, suffixes, ns.node_name, key), [])
            records = [
                (r.alloc_micros, r.alloc_bytes) for m in ns.memory for r in m.allocation_records
            ]
            if not scratch:
                records = _without_scratch(ns, records)[0]
            bucket.extend(records)
    start = min((t for recs in events.values() for t, _ in recs), default=0)
    out = {}
    for key, recs in events.items():
        arr = np.asarray(recs, dtype=np.int64).reshape(-1, 2)
        order = np.argsort(arr[:, 0], kind="stable")
        out[key] = (arr[order, 0] - start, np.cumsum(arr[order, 1]))
    return out


def _without_scratch(ns: Any, records: list[tuple[int, int]]) -> tuple[list, int]:
    """A node's records without its scratch, and the most scratch it held at once.

    Scratch is a buffer the node allocated and freed while it ran (its kernel's
    ``allocate_temp``): a deallocation record no later than the node's end, paired with
    the latest earlier allocation of the same size. An output outlives its node, so its
    deallocation (filed with the node, at its last reader's time) comes later. O(R log R).
    """
    end = ns.all_start_micros + ns.all_end_rel_micros
    ordered = sorted(range(len(records)), key=lambda i: records[i][0])
    open_: dict[int, list[int]] = {}
    drop: set[int] = set()
    for i in ordered:
        t, b = records[i]
        if t > end:
            break
        if b > 0:
            open_.setdefault(b, []).append(i)
        elif b < 0 and open_.get(-b):
            drop.add(open_[-b].pop())
            drop.add(i)
    cur = held = 0
    for i in ordered:
        if i in drop:
            cur += records[i][1]
            held = max(held, cur)
    return [r for i, r in enumerate(records) if i not in drop], held


def step_scratch(step_stats: Any, device_of: Mapping[str, str] | None = None) -> dict[str, int]:
    """The most kernel scratch any one node of each device held at once in one step,
    bytes (``{device_key: bytes}``; see :func:`_without_scratch` for what counts)."""
    out: dict[str, int] = {}
    device_of = device_of or {}
    suffixes = body_suffixes(device_of)
    for dev in step_stats.dev_stats:
        key = device_key(dev.device)
        out.setdefault(key, 0)
        for ns in dev.node_stats:
            k = charged_device(device_of, suffixes, ns.node_name, key)
            records = [
                (r.alloc_micros, r.alloc_bytes) for m in ns.memory for r in m.allocation_records
            ]
            out[k] = max(out.get(k, 0), _without_scratch(ns, records)[1])
    return out


def measure(
    traced: Any,
    graph_def: Any = None,
    batches: Batches = (),
    steps: int = 3,
    device: str = "/device:CPU:0",
    *,
    warmup: int = 1,
    num_cpus: int = 2,
    inter_op_threads: int = 1,
    order: str = "inline",
    host_on_device: bool = False,
) -> Measurement:
    """Runs ``graph_def`` as a training step in a Session and measures memory and time.

    Args:
        traced: the :class:`~hybridplan.tracing.Traced` step (argument placeholders,
            outputs, captured variables).
        graph_def: the GraphDef to run (e.g. a rewritten one); ``traced.graph_def`` when
            None. Never mutated.
        batches: the step's arguments: a sequence of ``(x, y, ...)`` tuples, used in
            turn, or a callable ``seed -> (x, y, ...)`` such as ``Workload.batch``.
        steps: traced steps, and as many timed (untraced) steps.
        device: the device whose timeline is returned, as ``"/device:CPU:0"``.
        warmup: untraced steps first (Grappler and kernel set-up happen there).
        num_cpus: logical CPU devices of the Session (2: device and host).
        inter_op_threads: ops run at once (each op still uses every core). 1, the
            default, runs the step as one stream, like an accelerator's compute
            stream, and the measured peak repeats from step to step; 0 lets
            TensorFlow choose (one per core), and the peak then varies with
            which ready op each thread picks (docs/accuracy.md). With
            ``order="inline"`` it only matters for steps that cannot run inline.
        order: ``"inline"`` (default): every step (warm-up, traced, timed) is asked
            to run inline, in the order nodes become ready, as a GPU's executor runs
            them; TensorFlow grants it to a step with one executor and silently uses
            its thread pool for a step with two (see :attr:`Measurement.inline`).
            ``"pool"``: always the thread pool, the CPU executor's own order, which
            defers kernels that become ready together (the measured peak is then
            larger and varies between Sessions; the behaviour before this option).
        host_on_device: run the nodes placed on other devices than ``device`` (a
            ``"cpu-emulation"`` swap plan's swap-outs, on ``/device:CPU:1``) on
            ``device``, so that a swap plan has one executor and runs inline, and
            tally their allocations (the host copies) under the device they were
            placed on, not ``device`` (see the module docstring). A measuring option:
            the GraphDef given is not changed. No effect on a graph without such nodes.

    Returns:
        A :class:`Measurement`. The caller's variables are left untouched: the Session
        runs on copies.

    Raises:
        InvalidArgumentError: ``steps`` < 1, no batches, or an unknown ``order``.
        InvalidGraphError: TensorFlow rejects the GraphDef.

    Example::

        base = measure(traced, None, workload.batch)
        swap = measure(traced, rewrite(traced.graph_def, plan, "cpu-emulation"),
                       workload.batch, host_on_device=True)
        swap.inline, swap.device_peak / base.device_peak
    """
    import tensorflow as tf

    if steps < 1:
        raise InvalidArgumentError(f"steps must be >= 1, got {steps}")
    plain = run_options(order)
    batch_at = _batch_source(batches)
    device_of: dict[str, str] = {}
    if host_on_device:
        graph_def, moved = place_host_on_device(
            traced.graph_def if graph_def is None else graph_def, device
        )
        device_of = {
            name if name.startswith("*/") else f"step/{name}": key for name, key in moved.items()
        }
    graph, feeds, fetches, init, variables = _session_graph(traced, graph_def)
    config = session_config(num_cpus, inter_op_threads)

    losses: list[np.ndarray] = []
    inline: list[bool] = []
    with tf.compat.v1.Session(graph=graph, config=config) as sess:
        sess.run(init)
        run = _Runner(sess, feeds, fetches, batch_at, traced.loss_index, losses)

        def traced_run(seed: int, options: Any) -> Any:
            metadata = run(seed, options)
            inline.append(order == "inline" and ran_inline(metadata.step_stats))
            return metadata

        for s in range(warmup):
            run(s, plain)
        seeds = range(warmup, warmup + steps)
        split: dict[str, dict[str, list[int]]] = {}
        peaks, timeline = _traced_steps(
            traced_run, seeds, device, run_options(order, True), device_of, split
        )
        times = []
        for s in range(warmup + steps, warmup + 2 * steps):
            run(s, plain)
            times.append(run.seconds)
        weights = [np.asarray(w) for w in sess.run(variables)]
    return Measurement(
        device=device,
        peak_bytes={k: max(v) for k, v in peaks.items()},
        step_peaks=peaks,
        step_times=times,
        timeline_us=timeline[0],
        timeline_bytes=timeline[1],
        losses=losses,
        weights=weights,
        inline=all(inline),
        host_nodes=tuple(name.removeprefix("step/") for name in device_of),
        tensor_peak_bytes={k: max(v) for k, v in split["tensor"].items()},
        scratch_bytes={k: max(v) for k, v in split["scratch"].items()},
    )


def place_host_on_device(graph_def: Any, device: str) -> tuple[Any, dict[str, str]]:
    """A copy of ``graph_def`` whose nodes placed on another device than ``device`` are
    placed on ``device``, and ``{moved node name: device key it was placed on}``
    (``measure(..., host_on_device=True)``). Nodes without a device stay so. O(nodes)."""
    import tensorflow as tf

    want = device_key(tf.DeviceSpec.from_string(device).to_string())
    out = type(graph_def)()
    out.CopyFrom(graph_def)
    moved: dict[str, str] = {}
    for node in out.node:
        if not node.device:
            continue
        key = device_key(tf.DeviceSpec.from_string(node.device).to_string())
        if key != want:
            moved[node.name] = key
            node.device = device
    # A loop body's copies to the host (hybridplan.accumulators): TensorFlow runs a body
    # node as ``<loop>/body/_<i>/<name>``, so they are named by ``*/<name>``.
    for f in out.library.function:
        for node in f.node_def:
            if node.device:
                key = device_key(tf.DeviceSpec.from_string(node.device).to_string())
                if key != want:
                    moved[f"*/{node.name}"] = key
                    node.device = device
    return out, moved


def charged_device(
    device_of: Mapping[str, str], suffixes: list[tuple[str, str]], node_name: str, default: str
) -> str:
    """The device a node's allocation records are charged to: ``device_of``'s entry
    for the node, or the first of ``suffixes`` (:func:`body_suffixes`) its name ends
    with (a loop body's node), else ``default``. O(1), plus O(S) for a name not found."""
    found = device_of.get(node_name)
    if found is not None:
        return found
    for suffix, key in suffixes:
        if node_name.endswith(suffix):
            return key
    return default


def body_suffixes(device_of: Mapping[str, str]) -> list[tuple[str, str]]:
    """The ``*/name`` entries of ``device_of`` as ``("/name", device key)``."""
    return [(name[1:], key) for name, key in device_of.items() if name.startswith("*/")]


def run_options(order: str = "inline", trace: bool = False) -> Any:
    """``RunOptions`` for a step in the executor's ``order`` (see :func:`measure`):
    ``inter_op_thread_pool=-1`` for ``"inline"``, the Session's pool for ``"pool"``;
    ``trace`` adds ``FULL_TRACE`` (per-node times and allocation records).

    Raises:
        InvalidArgumentError: ``order`` is not in :data:`ORDERS`.
    """
    import tensorflow as tf

    if order not in ORDERS:
        raise InvalidArgumentError(f"order must be one of {ORDERS}, got {order!r}")
    options = tf.compat.v1.RunOptions(inter_op_thread_pool=-1 if order == "inline" else 0)
    if trace:
        options.trace_level = tf.compat.v1.RunOptions.FULL_TRACE
    return options


def ran_inline(step_stats: Any) -> bool:
    """Whether a step asked to run inline (``inter_op_thread_pool=-1``) really did:
    TensorFlow grants it only to a step with one executor, i.e. whose nodes all ran on
    one device, and otherwise falls back to its thread pool without a word. (The step
    stats' ``thread_id`` is not filled in, so the device count is the evidence.)"""
    devices = {device_key(dev.device) for dev in step_stats.dev_stats if dev.node_stats}
    return len(devices) <= 1


def session_config(num_cpus: int, inter_op_threads: int = 0) -> Any:
    """A Session config with ``num_cpus`` logical CPUs and Grappler set as the
    process's ``tf.config.optimizer`` options say (Sessions do not read them
    by themselves), so a measured step is optimised like an eager one."""
    import tensorflow as tf
    from tensorflow.core.protobuf import rewriter_config_pb2

    config = tf.compat.v1.ConfigProto(
        device_count={"CPU": num_cpus},
        allow_soft_placement=True,
        inter_op_parallelism_threads=inter_op_threads,
    )
    rw = config.graph_options.rewrite_options
    toggle = rewriter_config_pb2.RewriterConfig.Toggle
    for key, value in tf.config.optimizer.get_experimental_options().items():
        field = rw.DESCRIPTOR.fields_by_name.get(key)
        if field is None:
            continue
        if field.enum_type is not None and field.enum_type.name == "Toggle":
            setattr(rw, key, toggle.Value("ON" if value else "OFF"))
        elif field.type == field.TYPE_BOOL:
            setattr(rw, key, bool(value))
        elif field.type in (field.TYPE_INT32, field.TYPE_INT64):
            setattr(rw, key, int(value))
    return config


def _traced_steps(
    run: Callable[[int, Any], Any],
    seeds: range,
    device: str,
    options: Any = None,
    device_of: Mapping[str, str] | None = None,
    split: dict[str, dict[str, list[int]]] | None = None,
) -> tuple[dict[str, list[int]], tuple[np.ndarray, np.ndarray]]:
    """Runs FULL_TRACE steps (``options``: ``run_options("pool", True)`` when None):
    each device's peak per step (0 where a step allocated nothing there), and the
    device timeline of the step with the largest peak. ``device_of``: as in
    :func:`replay_step_stats`. ``split``, when given, gets ``"tensor"`` (each device's
    peak without scratch, per step) and ``"scratch"`` (:func:`step_scratch` per step)."""
    if options is None:
        options = run_options("pool", trace=True)
    stats = [run(seed, options).step_stats for seed in seeds]
    replays = [replay_step_stats(st, device_of) for st in stats]
    keys = sorted({key for replay in replays for key in replay})

    def per_step(rs: list) -> dict[str, list[int]]:
        return {k: [int(r[k][1].max(initial=0)) if k in r else 0 for r in rs] for k in keys}

    peaks = per_step(replays)
    if split is not None:
        split["tensor"] = per_step([replay_step_stats(st, device_of, False) for st in stats])
        scratch = [step_scratch(st, device_of) for st in stats]
        split["scratch"] = {k: [sc.get(k, 0) for sc in scratch] for k in keys}
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    with_device = [r[device] for r in replays if device in r]
    timeline = max(with_device, key=lambda tb: tb[1].max(initial=0), default=empty)
    return peaks, timeline


def _batch_source(batches: Batches) -> Callable[[int], Sequence[Any]]:
    if callable(batches):
        return batches
    items = list(batches)
    if not items:
        raise InvalidArgumentError(
            "no batches: pass a sequence of (x, y) tuples or a callable seed -> (x, y)"
        )
    return lambda s: items[s % len(items)]


class _Runner:
    """``run(seed, options) -> RunMetadata``: one step on the batch of ``seed``.

    :attr:`seconds` is the wall time of the last ``Session.run`` alone: the batch is
    made (``batch_at(seed)``, often a random draw in Python) before the clock starts,
    so that a timed step is the step and not the making of its data (a 1024x256 draw
    takes ~3 ms, a fifth of the MLP's step: ``docs/accuracy.md``, finding 9).
    """

    def __init__(
        self,
        sess: Any,
        feeds: list[Any],
        fetches: list[Any],
        batch_at: Callable[[int], Sequence[Any]],
        loss_index: int,
        losses: list[np.ndarray],
    ):
        self.sess, self.feeds, self.fetches = sess, feeds, fetches
        self.batch_at, self.loss_index, self.losses = batch_at, loss_index, losses
        self.seconds = float("nan")

    def __call__(self, seed: int, options: Any) -> Any:
        import tensorflow as tf

        flat = tf.nest.flatten(list(self.batch_at(seed)))
        if len(flat) != len(self.feeds):
            raise InvalidArgumentError(
                f"a batch has {len(flat)} tensor(s); the step takes {len(self.feeds)}"
            )
        feed_dict = dict(zip(self.feeds, flat, strict=True))
        metadata = tf.compat.v1.RunMetadata()
        t0 = time.perf_counter()
        values = self.sess.run(
            self.fetches, feed_dict=feed_dict, options=options, run_metadata=metadata
        )
        self.seconds = time.perf_counter() - t0
        self.losses.append(np.asarray(values[self.loss_index]))
        return metadata


def _session_graph(traced: Any, graph_def: Any) -> tuple[Any, list[Any], list[Any], Any, list[Any]]:
    """A new ``tf.Graph`` holding ``graph_def`` with each capture replaced by a copy.

    Returns the graph, the argument tensors to feed, the output tensors to fetch, and
    the initializer op and the list of the copied variables.
    """
    import tensorflow as tf

    source = traced.graph_def if graph_def is None else graph_def
    present = {n.name for n in source.node}  # O(graph) once, in C++-backed protos
    value_of = {id(v.handle): v.numpy() for v in traced.variables}
    values = [
        value_of[id(h)] if id(h) in value_of else np.asarray(h) for h, name in traced.captures
    ]
    graph = tf.Graph()
    with graph.as_default():
        input_map: dict[str, Any] = {}
        feeds = []
        for spec, name in zip(traced.input_specs, traced.inputs, strict=True):
            ph = tf.compat.v1.placeholder(spec.dtype, spec.shape, name=f"feed/{name}")
            input_map[f"{name}:0"] = ph
            feeds.append(ph)
        variables = []
        for i, (handle, name) in enumerate(traced.captures):
            if name not in present:
                continue
            if id(handle) in value_of:
                copy = tf.Variable(values[i], name=f"capture/{i}", trainable=False)
                variables.append(copy)
                input_map[f"{name}:0"] = copy.handle
            else:
                input_map[f"{name}:0"] = tf.constant(values[i], name=f"capture/{i}")
        gd = tf.compat.v1.GraphDef()
        gd.CopyFrom(source)  # import_graph_def writes default attributes into its input
        try:
            fetches = tf.graph_util.import_graph_def(
                gd, input_map=input_map, return_elements=list(traced.outputs), name="step"
            )
        except (ValueError, TypeError, tf.errors.OpError) as exc:
            raise InvalidGraphError(f"TensorFlow rejected the GraphDef on import: {exc}") from exc
        init = tf.compat.v1.variables_initializer(variables)
    return graph, feeds, list(fetches), init, variables
