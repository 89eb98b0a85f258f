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

Step time is the median wall time of untraced ``Session.run`` calls (tracing slows ops).

Example::

    m = measure(traced, rewritten_graph_def, workload.batch, steps=3)
    m.device_peak, m.peak_bytes["/device:CPU:1"], m.step_time
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import InvalidArgumentError, InvalidGraphError

__all__ = ["Measurement", "device_key", "measure", "replay_step_stats"]

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
    """

    device: str
    peak_bytes: dict[str, int]
    step_peaks: dict[str, list[int]]
    step_times: list[float]
    timeline_us: np.ndarray
    timeline_bytes: np.ndarray
    losses: list[np.ndarray] = field(default_factory=list)
    weights: list[np.ndarray] = field(default_factory=list)

    @property
    def device_peak(self) -> int:
        """Peak bytes of :attr:`device` (0 when nothing was allocated there)."""
        return self.peak_bytes.get(self.device, 0)

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


def replay_step_stats(step_stats: Any) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per-device memory timelines from one step's ``StepStats``.

    Every allocation record of every node is charged to the device of the node that
    allocated it; the records of a device are sorted by time (ties keep record order)
    and accumulated.

    Returns:
        ``{device_key: (times_us, bytes_in_use)}``; times are relative to the earliest
        record of the step (any device).

    Complexity:
        O(R log R) for R allocation records.
    """
    events: dict[str, list[tuple[int, int]]] = {}
    for dev in step_stats.dev_stats:
        bucket = events.setdefault(device_key(dev.device), [])
        for ns in dev.node_stats:
            for mem in ns.memory:
                bucket.extend((r.alloc_micros, r.alloc_bytes) for r in mem.allocation_records)
    start = min((t for recs in events.values() for t, _ in recs), default=0)
    out = {}
    for key, recs in events.items():
        arr = np.asarray(recs, dtype=np.int64).reshape(-1, 2)
        order = np.argsort(arr[:, 0], kind="stable")
        out[key] = (arr[order, 0] - start, np.cumsum(arr[order, 1]))
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
            which ready op each thread picks (docs/accuracy.md).

    Returns:
        A :class:`Measurement`. The caller's variables are left untouched: the Session
        runs on copies.

    Raises:
        InvalidArgumentError: ``steps`` < 1, or no batches.
        InvalidGraphError: TensorFlow rejects the GraphDef.

    Example::

        base = measure(traced, None, workload.batch)
        swap = measure(traced, rewrite(traced.graph_def, plan, "cpu-emulation"),
                       workload.batch)
        swap.device_peak / base.device_peak
    """
    import tensorflow as tf

    if steps < 1:
        raise InvalidArgumentError(f"steps must be >= 1, got {steps}")
    batch_at = _batch_source(batches)
    graph, feeds, fetches, init, variables = _session_graph(traced, graph_def)
    config = session_config(num_cpus, inter_op_threads)

    losses: list[np.ndarray] = []
    with tf.compat.v1.Session(graph=graph, config=config) as sess:
        sess.run(init)
        run = _runner(sess, feeds, fetches, batch_at, traced.loss_index, losses)
        for s in range(warmup):
            run(s, None)
        peaks, timeline = _traced_steps(run, range(warmup, warmup + steps), device)
        times = []
        for s in range(warmup + steps, warmup + 2 * steps):
            t0 = time.perf_counter()
            run(s, None)
            times.append(time.perf_counter() - t0)
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
    )


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
    run: Callable[[int, Any], Any], seeds: range, device: str
) -> tuple[dict[str, list[int]], tuple[np.ndarray, np.ndarray]]:
    """Runs FULL_TRACE steps: each device's peak per step (0 where a step allocated
    nothing there), and the device timeline of the step with the largest peak."""
    import tensorflow as tf

    options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
    replays = [replay_step_stats(run(seed, options).step_stats) for seed in seeds]
    keys = sorted({key for replay in replays for key in replay})
    peaks = {
        key: [int(r[key][1].max(initial=0)) if key in r else 0 for r in replays] for key in keys
    }
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


def _runner(
    sess: Any,
    feeds: list[Any],
    fetches: list[Any],
    batch_at: Callable[[int], Sequence[Any]],
    loss_index: int,
    losses: list[np.ndarray],
) -> Callable[[int, Any], Any]:
    import tensorflow as tf

    def run(seed: int, options: Any) -> Any:
        flat = tf.nest.flatten(list(batch_at(seed)))
        if len(flat) != len(feeds):
            raise InvalidArgumentError(
                f"a batch has {len(flat)} tensor(s); the step takes {len(feeds)}"
            )
        metadata = tf.compat.v1.RunMetadata()
        values = sess.run(
            fetches,
            feed_dict=dict(zip(feeds, flat, strict=True)),
            options=options,
            run_metadata=metadata,
        )
        losses.append(np.asarray(values[loss_index]))
        return metadata

    return run


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
