"""Accuracy of the simulator against measurement on CPU emulation (issues 2 and 3).

For small workloads that train on a CPU in a fraction of a second per step, each on two
logical CPU devices (``/device:CPU:0`` plays the accelerator, ``/device:CPU:1`` the host)::

    python experiments/accuracy.py            # all workloads, 5 traced + 5 timed steps each
    python experiments/accuracy.py --quick    # small_cnn and the MLP, 3 steps, docs untouched
    python experiments/accuracy.py --only transformer --explain

What is compared (ratios are measured / predicted, so > 1 means the model is short):

- **Memory, original graph.** Predicted: ``hybridplan.analyze(traced).activation_peak_bytes``
  (the peak less variables and optimizer slots). Measured: ``measuring.measure``'s device
  peak, the largest over the traced steps of the replay of the executor's allocation
  records on ``/device:CPU:0`` (the variables, allocated before the step, are not in it);
  the smallest step peak is shown too. ``measure`` runs a step with one executor inline
  (``order="inline"``, its default: the order of a GPU's executor, which the core
  models); the "thread pool" column measures the same graph with ``order="pool"`` (the
  CPU executor's own order, which defers ready kernels: ``docs/accuracy.md``, finding 11).
- **Memory, planned graphs.** For ``swap``, ``recompute`` and ``hybrid``:
  ``hybridplan.apply(traced, budget, strategy=..., device="cpu", target="cpu-emulation",
  min_bytes=4096)`` at ``budget = persistent + scratch + f * (activation peak - scratch)``
  (``scratch``: the largest one op holds, which no plan removes) for the smallest
  ``f`` in (0.7, 0.8, 0.9) that plans. Predicted: ``plan.planned["peak_bytes"] - persistent``;
  measured: the rewritten graph's device peak, and whether it is within
  ``budget - persistent``. A plan with swaps has nodes on the host, so two executors,
  which TensorFlow runs on its thread pool even when asked inline; it is measured with
  ``measure(..., host_on_device=True)``: its swap-outs run on the device (one executor,
  inline) and the copies they allocate are tallied as host memory, not in the device's
  peak. The "thread pool" column is the rewritten graph as written (swap-outs on the
  host) with ``order="pool"``.
- **Step time, original graph.** Measured: the median wall time of the untraced
  ``Session.run`` steps (the batch made before the clock starts) that ``profile`` runs
  inline, alternately with its traced ones (so that both see the same machine load).
  Predicted: the simulator's original step time
  (``plan(...).report["original"]["step_time_s"]``) on the ``cpu`` preset's estimates;
  with the measured profile (``profile(order="inline")`` -> ``plan(...,
  profile=prof.times)``); and **calibrated, leave one out**: ``profiling.calibrate`` fits
  the time outside the kernels (step time less kernel times) as ``per_step + per_kernel
  x kernels`` on the OTHER workloads' profiles, and the prediction is the simulator's step
  with ``Calibration.times(prof)`` (each dispatched kernel's time + ``per_kernel``) plus
  ``per_step``. It is compared with the profile's untraced steps and with a separate
  timing ("apart": the original's steps run in turn with its plans').
- **Step time, planned graphs.** The slowdown of each plan over the original, predicted
  by the simulator (the plan's ``planned`` vs ``original`` step time, ``cpu`` preset
  estimates, as the plan was made) and measured (planned and original steps run in turn
  in one process, inline where the graph has one executor); and each plan's step time
  re-simulated with the original's calibrated times (:func:`_planned_step`: clones cost
  their originals' calibrated time) against the measured one.

``--explain`` adds, for the original graph of each workload: the model's peak under its
variants (the core's ``analyze``: with and without in-place forwarding, with and without
the fed inputs, read from its buffers, ``Analysis.tensor_facts``) against the measured
step peaks (inline), with the rank correlation of the core's schedule with the measured
start times; the differences between the measured and the modelled live sets
at the measured peak, by cause; the op time by type, measured vs estimated; and, for each
plan, when its swap-ins and clones really ran against their triggers. ``--no-plans``
skips the planned graphs.

The tables go to stdout and, for a run of every workload (no ``--quick``, no ``--only``),
between the markers ``<!-- accuracy:begin oneDNN on|off -->`` and ``<!-- accuracy:end
oneDNN on|off -->`` (one block per setting of ``TF_ENABLE_ONEDNN_OPTS``: run the bench
under both) into ``docs/accuracy.md``, whose other text is kept (``--no-docs`` to skip).

Peaks are totals, tensors and kernel scratch (``docs/devices.md``, "Kernel workspace"):
the prediction under the workspace rule of the kernels this TensorFlow runs, the
measurement with ``measure``'s ``peak_bytes``; a second table splits both into tensors
(``tensor_peak_bytes``; a plan's predicted tensor peak is the same plan simulated
without workspace) and scratch (``scratch_bytes``; the workspace rule's largest op).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hybridplan.runner import setup_cpu_emulation

setup_cpu_emulation(2)  # before TensorFlow initialises

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import hybridplan  # noqa: E402
from hybridplan import _core, measuring, models  # noqa: E402
from hybridplan._backend import cpu_workspace_rule, onednn_enabled  # noqa: E402
from hybridplan._graphio import graph_bytes  # noqa: E402
from hybridplan.errors import BudgetError  # noqa: E402
from hybridplan.profiling import calibrate, profile  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "accuracy.md"
BEGIN, END = "<!-- accuracy:begin -->", "<!-- accuracy:end -->"
FRACTIONS = (0.7, 0.8, 0.9)
STRATEGIES = ("swap", "recompute", "hybrid")
DEVICE, TARGET, MIN_BYTES = "cpu", "cpu-emulation", 4096
ORDER = "inline"  # measure()'s default: inline where a step has one executor
NONE = 2**32 - 1  # the core's "no node" (graph::NONE)
MB = 1e6


# --------------------------------------------------------------------------- workloads


@dataclass
class Bench:
    """A workload reduced to what the bench needs."""

    name: str
    traced: Any
    batch: Any


def _mlp(batch: int = 1024, width: int = 256, layers: int = 6) -> Bench:
    keras.utils.set_random_seed(0)
    dense = [keras.layers.Dense(width, activation="relu") for _ in range(layers)]
    model = keras.Sequential([keras.Input((width,)), *dense, keras.layers.Dense(8)])
    traced = hybridplan.trace_keras(
        model,
        keras.optimizers.SGD(0.01, momentum=0.9),
        keras.losses.MeanSquaredError(),
        tf.TensorSpec([batch, width]),
        tf.TensorSpec([batch, 8]),
    )

    def batch_at(seed: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((batch, width), np.float32)
        return x, rng.standard_normal((batch, 8), np.float32)

    return Bench(f"mlp({layers}x{width}, batch={batch})", traced, batch_at)


def _model(name: str, **kwargs: Any) -> Bench:
    w = models.build(name, **kwargs)
    args = ", ".join(f"{k}={v}" for k, v in kwargs.items())
    return Bench(f"{name}({args})", w.trace(), w.batch)


WORKLOADS = {
    "small_cnn": lambda: _model("small_cnn", size=64, batch=8),
    "small_resnet": lambda: _model("small_resnet"),
    "unet3d": lambda: _model("unet3d", size=32, levels=3),
    "transformer": lambda: _model("transformer", seq=64, d_model=64),
    "mlp": _mlp,
}
QUICK = ("small_cnn", "mlp")


# --------------------------------------------------------------------------- measuring


@dataclass
class PlanRow:
    strategy: str
    fraction: float | None = None
    budget_act: int = 0
    predicted: int = 0
    measured: int = 0
    predicted_tensors: int = 0
    measured_tensors: int = 0
    measured_scratch: int = 0
    measured_min: int = 0
    inline: bool = False
    measured_pool: int = 0
    predicted_step: float = float("nan")
    predicted_original_step: float = float("nan")
    calibrated_step: float = float("nan")
    measured_step: float = float("nan")
    measured_original_step: float = float("nan")
    swaps: int = 0
    clones: int = 0
    error: str = ""
    explained: str = ""
    plan: Any = None


@dataclass
class Row:
    name: str
    nodes: int
    persistent: int
    fed: int
    predicted: int
    measured: int
    measured_min: int
    inline: bool
    measured_pool: int
    step: float
    step_estimate: float
    step_profile: float
    traced_span: float
    coverage: float
    prof: Any
    traced: Any
    peak: int
    predicted_tensors: int = 0
    predicted_scratch: int = 0
    measured_tensors: int = 0
    measured_scratch: int = 0
    step_apart: float = float("nan")
    step_calibrated: float = float("nan")
    calibration: Any = None
    plans: list[PlanRow] = field(default_factory=list)
    explained: Any = None


def _original_step(traced: Any, peak: int, times: dict[int, float] | None) -> float:
    """The simulator's step time of the unplanned graph (a budget it fits: empty plan)."""
    p = hybridplan.plan(traced, peak, device=DEVICE, min_bytes=MIN_BYTES, profile=times)
    return float(p.report["original"]["step_time_s"])


def _planned_step(
    traced: Any, plan: Any, times: dict[int, float] | None, workspace: str | None = None
) -> float:
    """The simulator's step time of an existing plan with other op times (``None``: the
    ``cpu`` preset's estimates, which must give the plan's own figure back). The report's
    decisions are written back into the core's plan format (tensor ids from
    ``export_problem``) and judged by ``_core.simulate_plan``; clones cost their
    originals' times. ``workspace``: the kernels' scratch rule to simulate with (the
    plan's own when None)."""
    return float(_simulate_again(traced, plan, times, workspace)["step_time_s"])


def _simulate_again(
    traced: Any, plan: Any, times: dict[int, float] | None, workspace: str | None = None
) -> dict:
    """The ``planned`` figures of ``plan`` simulated again (see :func:`_planned_step`)."""
    data, loss = graph_bytes(traced)
    own = plan.report.get("workspace", "none")
    rule = own if workspace is None else workspace
    problem = json.loads(
        _core.export_problem(data, device=DEVICE, loss=loss, min_bytes=MIN_BYTES, workspace=rule)
    )
    outputs = [n["outputs"] for n in problem["nodes"]]
    core_plan = {
        "swaps": [
            {
                "tensor": outputs[s["node"]][s["output"]],
                "after": s["after"],
                "ins": [
                    {k: i[k] for k in ("trigger", "consumers", "clone_consumers")} for i in s["ins"]
                ],
                "release": s["release"]["node"] if s["release"] else NONE,
                "gate": s["gate"]["node"] if s["gate"] else NONE,
            }
            for s in plan.swaps
        ],
        "recomputes": [
            {k: r[k] for k in ("nodes", "trigger", "consumers", "clone_consumers")}
            for r in plan.recomputes
        ],
    }
    core = _core.simulate_plan(
        data,
        json.dumps(core_plan),
        plan.budget,
        plan.strategy,
        device=DEVICE,
        loss=loss,
        profile=sorted(times.items()) if times else None,
        workspace=rule,
    )
    planned = json.loads(core.report_json)["planned"]
    if (
        times is None
        and rule == own
        and (
            planned["peak_bytes"] != plan.planned["peak_bytes"]
            or not math.isclose(planned["step_time_s"], plan.planned["step_time_s"], rel_tol=1e-9)
        )
    ):
        raise AssertionError("the plan written back does not simulate as planned")
    return planned


def interleaved_step_times(b: Bench, graphs: list[Any], rounds: int) -> list[float]:
    """Median wall seconds of one untraced step of each GraphDef (None: the original),
    the graphs run in turn in each round, so that a loaded machine slows them alike;
    in ``measure``'s default order (inline where a graph has one executor)."""
    config = measuring.session_config(2, inter_op_threads=1)  # as measure() runs
    options = measuring.run_options(ORDER)
    sessions, runs = [], []
    try:
        for gd in graphs:
            graph, feeds, fetches, init, _ = measuring._session_graph(b.traced, gd)
            sess = tf.compat.v1.Session(graph=graph, config=config)
            sessions.append(sess)
            sess.run(init)
            runs.append(measuring._Runner(sess, feeds, fetches, b.batch, b.traced.loss_index, []))
        for run in runs:
            for s in range(2):
                run(s, options)
        times: list[list[float]] = [[] for _ in runs]
        for r in range(rounds):
            for k, run in enumerate(runs):
                run(2 + r, options)
                times[k].append(run.seconds)
    finally:
        for sess in sessions:
            sess.close()
    return [statistics.median(t) for t in times]


def fed_bytes(traced: Any) -> int:
    """Bytes of the fed batch (the step's argument placeholders). The model counts
    them on the device, where a GPU step has them; the allocation records do not (the
    Session's feed allocates them before the step, finding 3). No plan swaps them."""
    return Model(hybridplan.analyze(traced), traced).fed_bytes()


def _pool_peak(b: Bench, m: Any, steps: int, graph_def: Any = None) -> int:
    """The device peak on the thread pool (the CPU executor's own order), for a graph
    ``m`` measured inline; 0 where ``m`` already ran on the pool."""
    if not m.inline:
        return 0
    return measuring.measure(b.traced, graph_def, b.batch, steps=steps, order="pool").device_peak


def _run_plans(b: Bench, a: Any, steps: int, explain: bool = False) -> list[PlanRow]:
    persistent = a.persistent_bytes
    rows = []
    for strategy in STRATEGIES:
        row = PlanRow(strategy)
        result = None
        for f in FRACTIONS:
            budget = a.budget_for(f)
            try:
                result = hybridplan.apply(
                    b.traced,
                    budget,
                    strategy=strategy,
                    device=DEVICE,
                    target=TARGET,
                    min_bytes=MIN_BYTES,
                )
            except BudgetError as exc:
                row.error = f"no plan at {f}: best peak {(exc.best_peak - persistent) / MB:.2f} MB"
                continue
            row.fraction, row.budget_act, row.error = f, budget - persistent, ""
            break
        if result is not None:
            planned = result.plan.planned
            row.plan = result
            row.predicted = planned["peak_bytes"] - persistent
            row.predicted_tensors = (
                _simulate_again(b.traced, result.plan, None, "none")["peak_bytes"] - persistent
            )
            row.predicted_step = planned["step_time_s"]
            row.predicted_original_step = result.plan.original["step_time_s"]
            row.swaps, row.clones = planned["swaps"], planned["clones"]
            # Swap-outs on the device, their copies tallied as host memory: one executor,
            # so inline (no effect on a recompute plan).
            m = measuring.measure(
                b.traced, result.graph_def, b.batch, steps=steps, host_on_device=True
            )
            row.measured, row.inline = m.device_peak, m.inline
            row.measured_tensors, row.measured_scratch = m.device_tensor_peak, m.device_scratch
            row.measured_min = min(m.step_peaks.get(m.device, [0]))
            row.measured_pool = _pool_peak(b, m, steps, result.graph_def)
            if explain:
                row.explained = explain_plan(b, a, strategy, result)
        rows.append(row)
    return rows


def run_workload(b: Bench, steps: int, explain: bool, plans: bool = True) -> Row:
    a = hybridplan.analyze(b.traced)
    base = measuring.measure(b.traced, None, b.batch, steps=steps)
    prof = profile(b.traced, b.batch, steps=steps, order=ORDER)
    row = Row(
        name=b.name,
        nodes=b.traced.num_nodes,
        persistent=a.persistent_bytes,
        fed=fed_bytes(b.traced),
        predicted=a.activation_peak_bytes,
        measured=base.device_peak,
        measured_min=min(base.step_peaks.get(base.device, [0])),
        inline=base.inline,
        measured_pool=_pool_peak(b, base, steps),
        step=prof.step_time,  # untraced steps alternating with the profile's traced ones
        step_estimate=_original_step(b.traced, a.peak_bytes, None),
        step_profile=_original_step(b.traced, a.peak_bytes, prof.times),
        traced_span=prof.traced_span,
        coverage=prof.coverage,
        prof=prof,
        traced=b.traced,
        peak=a.peak_bytes,
        predicted_tensors=a.tensor_peak_bytes - a.persistent_bytes,
        predicted_scratch=a.workspace_peak_bytes,
        measured_tensors=base.device_tensor_peak,
        measured_scratch=base.device_scratch,
    )
    if explain:
        row.explained = explain_peak(b, a, steps)
        row.explained.text += "\n\n" + time_by_op(b, a, prof)
    if plans:
        row.plans = _run_plans(b, a, steps, explain)
    done = [p for p in row.plans if p.plan is not None]
    graphs = [p.plan.graph_def for p in done]
    original, *planned = interleaved_step_times(b, [None, *graphs], 3 * steps)
    row.step_apart = original
    for p, t in zip(done, planned, strict=True):
        p.measured_step, p.measured_original_step = t, original
    return row


def calibrate_left_out(rows: list[Row]) -> None:
    """Predicts each workload's step times from its own kernel times plus the time
    outside the kernels fitted on the OTHER workloads' profiles
    (``profiling.calibrate``: a per-step and a per-kernel time): the original's
    (``Row.step_calibrated``) and each plan's (``PlanRow.calibrated_step``, the plan
    re-simulated with the calibrated times: clones pay their originals' time and a
    dispatch each)."""
    for r in rows:
        others = [o.prof for o in rows if o is not r]
        if not others:
            continue
        cal = r.calibration = calibrate(others)
        times = cal.times(r.prof)
        r.step_calibrated = _original_step(r.traced, r.peak, times) + cal.per_step
        for p in r.plans:
            if p.plan is not None:
                _planned_step(r.traced, p.plan.plan, None)  # the plan is read back right
                p.calibrated_step = _planned_step(r.traced, p.plan.plan, times) + cal.per_step


# --------------------------------------------------------------------------- explaining


class Model:
    """The core's liveness model of one analysed graph, per tensor ``(node, output)``,
    read from ``Analysis.tensor_facts`` and ``node_facts`` (``rust/core/src/facts.rs``):
    no op table or liveness rule of its own. ``buffer[t]`` is the tensor owning the
    buffer ``t`` lives in (its alias owner, or the buffer an op wrote it into in
    place); ``spans`` the buffers ``(bytes, produce, last position)``."""

    def __init__(self, a: Any, traced: Any):
        self.nodes = list(traced.graph_def.node)
        self.index = {n.name: i for i, n in enumerate(self.nodes)}
        self.fed = {self.index[name] for name in traced.inputs}
        self.length = len(a.order)
        f = a.tensor_facts()
        self.facts = a.node_facts()
        keys = list(zip(f["node"].tolist(), f["index"].tolist(), strict=True))
        self.tensor = {k: t for t, k in enumerate(keys)}
        nbytes, value = f["bytes"].tolist(), f["value_bytes"].tolist()
        owner, into = f["owner"].tolist(), f["written_into"].tolist()
        self.dtype = f["dtype"].tolist()
        self.value = value
        #: Bytes a measured buffer of each output has: its value, but none for a
        #: variable read or a handle (an owner with no bytes).
        self.out_bytes: list[list[int]] = [[] for _ in self.nodes]
        self.buffer: dict[tuple[int, int], tuple[int, int]] = {}
        self.spans: dict[tuple[int, int], tuple[int, int, int]] = {}
        for t, (v, k) in enumerate(keys):
            self.out_bytes[v].append(value[t] if nbytes[t] or owner[t] != t else 0)
            o = owner[t]
            b = o if into[o] == NONE else into[o]
            self.buffer[(v, k)] = keys[b]
            if nbytes[t] and into[t] == NONE:
                self.spans[(v, k)] = (nbytes[t], f["produce"][t], f["buffer_end"][t])
        self.inputs: list[list[tuple[int, int]]] = []  # data inputs (node, k)
        for n in self.nodes:
            refs = [_split_ref(r) for r in n.input if not r.startswith("^")]
            self.inputs.append([(self.index[name], k) for name, k in refs])

    def timeline(self, feeds: bool = True) -> np.ndarray:
        """Tensor bytes (persistent and scratch left out) at each schedule position;
        without the fed inputs' buffers when ``feeds`` is False."""
        delta = np.zeros(self.length + 1, np.int64)
        for (v, _), (nbytes, p, q) in self.spans.items():
            if feeds or v not in self.fed:
                delta[p] += nbytes
                delta[q + 1] -= nbytes
        return np.cumsum(delta[:-1])

    def fed_bytes(self) -> int:
        return sum(n for (v, _), (n, _, _) in self.spans.items() if v in self.fed)

    def same_buffer(self, v: int, slot: int, k: int) -> bool:
        """Could output ``k`` of ``v`` take over the buffer of its input ``slot`` (the
        same dtype and size: ``inplace::fits``)?"""
        a, b = self.tensor[self.inputs[v][slot]], self.tensor.get((v, k))
        return b is not None and self.dtype[a] == self.dtype[b] and self.value[a] == self.value[b]


def _split_ref(ref: str) -> tuple[str, int]:
    name = ref.lstrip("^")
    if ":" in name:
        name, k = name.rsplit(":", 1)
        return name, int(k)
    return name, 0


def _rank_correlation(x: list[float], y: list[float]) -> float:
    rx = np.argsort(np.argsort(x)).astype(float)
    ry = np.argsort(np.argsort(y)).astype(float)
    return float(np.corrcoef(rx, ry)[0, 1]) if len(x) > 1 else float("nan")


def _traced_stats(b: Bench, steps: int, graph_def: Any = None) -> list[Any]:
    graph, feeds, fetches, init, _ = measuring._session_graph(b.traced, graph_def)
    config = measuring.session_config(2, inter_op_threads=1)  # as measure() runs
    plain, options = measuring.run_options(ORDER), measuring.run_options(ORDER, trace=True)
    losses: list[Any] = []
    with tf.compat.v1.Session(graph=graph, config=config) as sess:
        sess.run(init)
        run = measuring._Runner(sess, feeds, fetches, b.batch, b.traced.loss_index, losses)
        for s in range(2):
            run(s, plain)
        return [run(2 + s, options).step_stats for s in range(steps)]


@dataclass
class Explained:
    name: str
    measured: list[int]
    variants: dict[str, int]
    correlation: dict[str, float]
    text: str


def explain_peak(b: Bench, a: Any, steps: int = 3, top: int = 8) -> Explained:
    """Where the measured and the modelled peaks of the original graph differ.

    Replays one traced step (the one with the largest device peak) buffer by buffer,
    and compares its live set at the measured peak with the model's at the schedule
    position of the node running then; computes the model's peak under its variants
    (in-place forwarding or separate buffers, the fed inputs counted or not) and how
    well the core's schedule ranks the measured start times.
    """
    rep = Model(a, b.traced)
    lowest = [int(v) for v in a.order]
    base_timeline = rep.timeline()
    tensors = a.tensor_peak_bytes - a.persistent_bytes  # the timeline has no workspace
    if int(base_timeline.max()) != tensors:
        raise AssertionError(
            f"the buffers' peak {int(base_timeline.max())} differs from analyze's "
            f"tensor peak {tensors}: facts.rs and liveness.rs disagree"
        )
    separate = Model(hybridplan.analyze(b.traced, separate_buffers=True), b.traced)
    all_stats = _traced_stats(b, steps)
    peaks = [int(measuring.replay_step_stats(s)["/device:CPU:0"][1].max()) for s in all_stats]
    stats = all_stats[int(np.argmax(peaks))]
    # Buffers of the device: (alloc us, free us or None, bytes, GraphDef node or -1, name).
    buffers, start, end = [], {}, {}
    for dev in stats.dev_stats:
        on_device = measuring.device_key(dev.device) == "/device:CPU:0"
        for ns in dev.node_stats:
            name = ns.node_name.removeprefix("step/")
            v = rep.index.get(name, -1)
            if v >= 0:
                start[v] = ns.all_start_micros
                end[v] = ns.all_start_micros + max(ns.op_end_rel_micros, ns.all_end_rel_micros)
            if not on_device:
                continue
            pending: dict[int, list[int]] = {}
            for mem in ns.memory:
                for r in mem.allocation_records:
                    if r.alloc_bytes > 0:
                        pending.setdefault(r.alloc_bytes, []).append(r.alloc_micros)
                    elif pending.get(-r.alloc_bytes):
                        t0 = pending[-r.alloc_bytes].pop(0)
                        buffers.append((t0, r.alloc_micros, -r.alloc_bytes, v, name))
            for nbytes, times in pending.items():
                buffers.extend((t0, None, nbytes, v, name) for t0 in times)
    events = sorted(
        [(t0, n) for t0, _, n, _, _ in buffers]
        + [(t1, -n) for _, t1, n, _, _ in buffers if t1 is not None],
        key=lambda e: e[0],
    )
    cur, best, at = 0, 0, 0
    for t, n in events:
        cur += n
        if cur > best:
            best, at = cur, t
    live = [x for x in buffers if x[0] <= at and (x[1] is None or x[1] > at)]
    allocating = {x[3] for x in buffers if x[3] >= 0}

    lines = [f"### {b.name}", ""]
    variants: dict[str, int] = {}
    correlation: dict[str, float] = {}
    common = sorted(start)
    pos = {v: p for p, v in enumerate(lowest)}
    correlation["schedule"] = _rank_correlation(
        [start[v] for v in common], [pos[v] for v in common]
    )
    for forward, model in ((False, separate), (True, rep)):
        for feeds in (True, False):
            key = f"schedule{' +forwarding' if forward else ''}{'' if feeds else ' -feeds'}"
            variants[key] = int(model.timeline(feeds).max())
    # The live sets at the measured peak: the tensors the measured buffers hold then vs
    # the current model's tensors at the schedule position of the node running then.
    running = [v for v in start if start[v] <= at <= end[v]]
    if not running:  # between two nodes: the one that started last
        running = [max((v for v in start if start[v] <= at), key=lambda v: start[v])]
    p_star = max(pos[v] for v in running)
    owner = rep.buffer
    model_live = {t: n for t, (n, p, q) in rep.spans.items() if p <= p_star <= q}
    taken_over = _forwarded_buffers(rep, start, allocating)
    held: dict[tuple[int, int], int] = {}  # model owner tensor -> bytes held at the peak
    reasons: dict[str, int] = {}
    examples: dict[str, list[tuple[int, str]]] = {}

    def note(reason: str, nbytes: int, what: str) -> None:
        reasons[reason] = reasons.get(reason, 0) + nbytes
        examples.setdefault(reason, []).append((nbytes, what))

    def desc(t: tuple[int, int]) -> str:
        return f"{rep.nodes[t[0]].name}:{t[1]} ({rep.nodes[t[0]].op})"

    for _, _, nbytes, v, name in live:
        k = next((k for k, n in enumerate(rep.out_bytes[v]) if n == nbytes), None)
        if v < 0 or k is None:
            what = f"{name} ({rep.nodes[v].op})" if v >= 0 else name
            note(
                "measured only: not an output tensor of the model (copy-on-write "
                "variable update, kernel scratch)",
                nbytes,
                what,
            )
            continue
        t = (v, k)
        while t in taken_over and start[taken_over[t][0]] <= at:
            t = taken_over[t]  # the buffer now holds a reader's output, written in place
        held[owner[t]] = held.get(owner[t], 0) + nbytes
    for t, nbytes in held.items():
        if t in model_live:
            continue
        if pos[t[0]] > p_star:
            note(
                "measured only: ran ahead of the lowest-id schedule",
                nbytes,
                f"{desc(t)}, position {pos[t[0]]} > {p_star}",
            )
        else:
            late = [u for u in _readers(rep, t, owner) if u in end and end[u] > at]
            wait = f", waits for {rep.nodes[late[0]].name}" if late else ""
            note(
                "measured only: held after the model's last use (a reader ran later "
                "than the schedule says)",
                nbytes,
                f"{desc(t)}{wait}",
            )
    forwarded_from = {src: dst for src, dst in taken_over.items() if start[dst[0]] <= at}
    for t, nbytes in model_live.items():
        if t in held:
            continue
        v = t[0]
        if v in rep.fed:
            note("model only: fed input (not in the allocation records)", nbytes, desc(t))
        elif v not in start:
            note("model only: node did not run (fused or removed by Grappler)", nbytes, desc(t))
        elif t in forwarded_from:
            dst = forwarded_from[t]
            note(
                "model only: buffer reused in place by a reader (forward_input_or_allocate_output)",
                nbytes,
                f"{desc(t)} -> {rep.nodes[dst[0]].op}",
            )
        elif start[v] > at:
            note("model only: produced later in the real run", nbytes, desc(t))
        else:
            note(
                "model only: freed earlier in the real run (its readers ran earlier "
                "than scheduled)",
                nbytes,
                desc(t),
            )
    lines.append(
        f"measured peak {best} B (step peaks {peaks}); the model: {a.activation_peak_bytes} B; "
        f"at the measured peak {_label(rep, lowest, p_star)} was running (position {p_star}), "
        f"where the model holds {int(base_timeline[p_star])} B"
    )
    lines.append("")
    lines.append("| difference at the measured peak | bytes | largest |")
    lines.append("|---|---|---|")
    for reason, nbytes in sorted(reasons.items(), key=lambda kv: -kv[1]):
        ex = [f"{what}: {n}" for n, what in sorted(examples[reason], key=lambda e: -e[0])]
        lines.append(f"| {reason} | {nbytes} | {'; '.join(ex[:top])} |")
    return Explained(b.name, peaks, variants, correlation, "\n".join(lines))


def _forwarded_buffers(
    rep: Model, start: dict[int, int], allocating: set[int]
) -> dict[tuple[int, int], tuple[int, int]]:
    """``{input tensor: output tensor}`` for every node that ran, allocated nothing and
    so shares an input's buffer (the core's ``aliased_input``) or wrote its output into
    one (``forward_output``: the first of the slots it tries whose tensor has the
    output's dtype and size)."""
    f = rep.facts
    out = {}
    for v in start:
        outputs = len(rep.out_bytes[v])
        if not outputs or (v in allocating and outputs == 1):
            continue
        alias = int(f["aliased_input"][v])
        if alias >= 0 and alias < len(rep.inputs[v]):
            out[rep.inputs[v][alias]] = (v, 0)
            continue
        if alias == -2:  # output i shares input i
            for i, t in enumerate(rep.inputs[v][:outputs]):
                out[t] = (v, i)
            continue
        k = int(f["forward_output"][v])
        if k < 0 or k >= outputs:
            continue
        for slot in range(int(f["forward_slot_start"][v]), int(f["forward_slot_end"][v])):
            if rep.same_buffer(v, slot, k):
                out.setdefault(rep.inputs[v][slot], (v, k))
                break
    return out


def _readers(rep: Model, t: tuple[int, int], owner: dict) -> list[int]:
    """Nodes reading ``t`` or an alias of it."""
    return [v for v, data in enumerate(rep.inputs) if any(owner.get(u) == t for u in data)]


def _label(rep: Model, order: list[int], p: int) -> str:
    n = rep.nodes[order[p]]
    return f"`{n.name}` ({n.op})"


def explain_plan(b: Bench, a: Any, strategy: str, result: Any, top: int = 10) -> str:
    """When the swap-ins and clones of a plan really ran, against their triggers.

    The planner puts each swap-in (and each recompute unit's clones) after a trigger op
    chosen by its position in the lowest-id schedule; the executor runs a node as soon
    as its inputs are ready. Times are percentages of one traced step of the rewritten
    graph as the table measures it (swap-outs on the device, inline; first node start
    to last node end); the trigger's planned place is its
    schedule position as a percentage of the graph's nodes.
    """
    graph_def, _ = measuring.place_host_on_device(result.graph_def, "/device:CPU:0")
    stats = _traced_stats(b, 1, graph_def)[0]  # as measured: host_on_device, inline
    start, first, last = {}, math.inf, -math.inf
    for dev in stats.dev_stats:
        for ns in dev.node_stats:
            name = ns.node_name.removeprefix("step/")
            start[name] = ns.all_start_micros
            first = min(first, ns.all_start_micros)
            last = max(last, ns.all_start_micros + ns.all_end_rel_micros)
    span = max(last - first, 1)

    def at(names: list[str]) -> str:
        times = [start[n] for n in names if n in start]
        return f"{100 * (min(times) - first) / span:.0f}%" if times else "did not run"

    pos = {int(v): p for p, v in enumerate(a.order)}
    nodes = b.traced.graph_def.node
    summary = result.summary
    rows = []
    for i, sw in enumerate(result.plan.swaps):
        out = summary.swap_out[i] if i < len(summary.swap_out) else ""
        for j, entry in enumerate(sw["ins"]):
            trigger, trigger_name = entry["trigger"], entry["trigger_name"]
            ins = [n for n in summary.swap_in if n.endswith(f"/swap_in/{i}_{j}")]
            rows.append(
                f"| swap {sw['tensor']} ({sw['bytes']} B) | `{trigger_name}` "
                f"({nodes[trigger].op}) | {100 * pos[trigger] / len(pos):.0f}% | "
                f"{at([trigger_name])} | {at([nodes[sw['node']].name])} | {at([out])} | "
                f"{at(ins)} |"
            )
    for r, rc in enumerate(result.plan.recomputes):
        clones = [c for c in summary.clones if c.endswith(f"/recompute/{r}")]
        trigger = rc["trigger"]
        rows.append(
            f"| recompute {len(rc['nodes'])} op(s) from `{rc['names'][0]}` | "
            f"`{rc['trigger_name']}` ({nodes[trigger].op}) | "
            f"{100 * pos[trigger] / len(pos):.0f}% | {at([rc['trigger_name']])} | "
            f"{at([nodes[v].name for v in rc['nodes']])} | - | {at(clones)} |"
        )
    head = [
        f"{b.name}, {strategy}: when the inserted nodes ran (percent of a traced step, "
        "inline, swap-outs on the device)",
        "",
        "| decision | trigger (op) | trigger planned at | trigger ran at | original ran at "
        "| swap-out ran at | swap-in / clones ran at |",
        "|---|---|---|---|---|---|---|",
    ]
    more = [f"| ... {len(rows) - top} more | | | | | | |"] if len(rows) > top else []
    return "\n".join(head + rows[:top] + more)


def time_by_op(b: Bench, a: Any, prof: Any, top: int = 12) -> str:
    """Measured (profile) vs estimated (``cpu`` preset) op time, summed per op type.

    The simulator's step time of the unplanned graph is the sum of its op times, so the
    estimate of one op type is the step time of a profile that sets every other node to
    0 s and leaves that type's nodes to the cost model.
    """
    nodes = b.traced.graph_def.node
    by_type: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        by_type.setdefault(n.op, []).append(i)
    rows = []
    for op, ids in by_type.items():
        keep = set(ids)
        others = {i: 0.0 for i in range(len(nodes)) if i not in keep}
        estimate = _original_step(b.traced, a.peak_bytes, others or None)
        measured = sum(prof.times.get(i, 0.0) for i in ids)
        rows.append((measured, estimate, op, len(ids)))
    rows.sort(key=lambda r: -max(r[0], r[1]))
    out = [
        f"Op time by type, {b.name} (ms; measured: sum of the profile's medians; "
        "estimate: the `cpu` preset)",
        "",
        "| op | nodes | measured | estimate | measured / estimate |",
        "|---|---|---|---|---|",
    ]
    for measured, estimate, op, n in rows[:top]:
        out.append(
            f"| {op} | {n} | {_ms(measured)} | {_ms(estimate)} | {_ratio(measured, estimate)} |"
        )
    rest = rows[top:]
    m, e = sum(r[0] for r in rest), sum(r[1] for r in rest)
    count = sum(r[3] for r in rest)
    out.append(f"| {len(rest)} other types | {count} | {_ms(m)} | {_ms(e)} | {_ratio(m, e)} |")
    return "\n".join(out)


def variants_table(explained: list[Explained]) -> str:
    """Model peaks under each variant vs the measured peaks, and schedule correlations."""
    keys = list(explained[0].variants)
    out = [
        "**Model variants vs measurement** (original graphs; activation peak in MB; "
        "measured: the largest step peak and the others; rank correlation: Spearman "
        "between the core's schedule positions and the measured start times of the nodes)",
        "",
        "| workload | measured | " + " | ".join(keys) + " | corr schedule |",
        "|---|---|" + "---|" * len(keys) + "---|",
    ]
    for e in explained:
        m = max(e.measured)
        cells = [f"{_mb(e.variants[k])} ({m / e.variants[k]:.2f})" for k in keys]
        out.append(
            f"| {e.name} | {_mb(m)} ({', '.join(_mb(x) for x in e.measured)}) | "
            + " | ".join(cells)
            + f" | {e.correlation['schedule']:.2f} |"
        )
    out.append("")
    out.append("(in brackets: measured / variant)")
    return "\n".join(out)


# --------------------------------------------------------------------------- tables


def _mb(n: float) -> str:
    return f"{n / MB:.2f}"


def _ratio(measured: float, predicted: float) -> str:
    return f"{measured / predicted:.2f}" if predicted else "-"


def _ms(s: float) -> str:
    return f"{s * 1e3:.2f}"


def _pool_cell(measured_pool: int, inline: bool, predicted: int) -> str:
    if not inline:
        return "(ran on the pool)"
    return f"{_mb(measured_pool)} ({_ratio(measured_pool, predicted)})"


def _setting() -> str:
    """The CPU kernels this run measured: ``"oneDNN on"`` or ``"oneDNN off"``."""
    return "oneDNN on" if onednn_enabled() else "oneDNN off"


def tables(rows: list[Row], steps: int) -> str:
    env = "1" if onednn_enabled() else "0"
    out = [
        f"### {_setting()} (workspace rule `{cpu_workspace_rule()}`)",
        "",
        f"Measured on {platform.machine()} with {len(tf.config.list_logical_devices('CPU'))} "
        f"logical CPUs (TensorFlow {tf.__version__}), {datetime.date.today().isoformat()}, "
        f"{steps} traced + {steps} timed steps per graph; "
        f"`TF_ENABLE_ONEDNN_OPTS={env} python experiments/accuracy.py`. "
        "Ratios are measured / predicted; predicted and measured peaks are totals: "
        "tensors and kernel scratch (split in the second table).",
        "",
        "**Device activation peak** (MB; measured: `measure`'s default order, inline "
        "(a GPU executor's order); a plan with swaps with `host_on_device=True` (its "
        "swap-outs run on the device, so the step has one executor and runs inline, and "
        "the host copies they allocate are left out of the device's tally); largest "
        "over the traced steps, smallest "
        'in brackets; thread pool: the same graph measured with `order="pool"`, a swap '
        "plan with its swap-outs on the host (the CPU "
        "executor's own order, finding 11); budget: bytes for activations, the largest "
        "kernel scratch of one op plus `f` x the rest of the original's predicted "
        "activation peak; + batch: the measured peak plus the fed "
        "batch, which the model counts on the device and the allocation records leave "
        "out (the feed allocates it before the step, finding 3), and its ratio)",
        "",
        "| workload | graph | budget | predicted | measured | ratio | + batch | ratio "
        "| within budget | thread pool (ratio) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r.name} | original | - | {_mb(r.predicted)} | {_mb(r.measured)} "
            f"({_mb(r.measured_min)}) | {_ratio(r.measured, r.predicted)} | "
            f"{_mb(r.measured + r.fed)} | {_ratio(r.measured + r.fed, r.predicted)} | - | "
            f"{_pool_cell(r.measured_pool, r.inline, r.predicted)} |"
        )
        for p in r.plans:
            if p.fraction is None:
                out.append(f"| | {p.strategy} | - | {p.error} | | | | | | |")
                continue
            fits = "yes" if p.measured + r.fed <= p.budget_act else "**no**"
            out.append(
                f"| | {p.strategy} ({p.swaps} swaps, {p.clones} clones) | "
                f"{_mb(p.budget_act)} ({p.fraction}) | {_mb(p.predicted)} | "
                f"{_mb(p.measured)} ({_mb(p.measured_min)}) | "
                f"{_ratio(p.measured, p.predicted)} | {_mb(p.measured + r.fed)} | "
                f"{_ratio(p.measured + r.fed, p.predicted)} | {fits} | "
                f"{_pool_cell(p.measured_pool, p.inline, p.predicted)} |"
            )
    out += [
        "",
        "**The same peaks split into tensors and kernel scratch** (MB; tensors: the peak "
        "without any node's scratch, predicted by the simulator without workspace for "
        "the same plan, measured as the replay of the allocation records less the "
        "buffers a node allocated and freed while it ran; scratch: the most one op "
        "holds, predicted by the workspace rule, measured as the most such buffers one "
        "node held at once; total ratio: the total measured peak plus the fed batch over "
        "the predicted total, like for like)",
        "",
        "| workload | graph | tensors predicted | measured | ratio | + batch | ratio "
        "| scratch predicted | measured | total ratio (+ batch) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        graphs = [("original", r.predicted_tensors, r.measured_tensors, r.measured_scratch)]
        graphs += [
            (p.strategy, p.predicted_tensors, p.measured_tensors, p.measured_scratch)
            for p in r.plans
            if p.fraction is not None
        ]
        totals = [(r.predicted, r.measured)] + [
            (p.predicted, p.measured) for p in r.plans if p.fraction is not None
        ]
        for (graph, pt, mt, ms), (pp, mp) in zip(graphs, totals, strict=True):
            out.append(
                f"| {r.name if graph == 'original' else ''} | {graph} | {_mb(pt)} | "
                f"{_mb(mt)} | {_ratio(mt, pt)} | {_mb(mt + r.fed)} | "
                f"{_ratio(mt + r.fed, pt)} | {_mb(r.predicted_scratch)} | {_mb(ms)} | "
                f"{_ratio(mp + r.fed, pp)} |"
            )
    out += [
        "",
        "**Step time of the original graph** (ms; measured: median of the untraced "
        "steps run inline between the profile's traced ones, timed from `Session.run` to "
        "its return; predicted by the simulator on the `cpu` preset's estimates, and with "
        'the measured profile (`profile(order="inline").times`, the kernels\' own '
        "times); outside: this graph's measured step less its kernel times; calibrated: "
        "the profile's times plus the time outside the kernels fitted on the OTHER "
        "workloads' profiles (`profiling.calibrate`, leave one out: per step + per "
        "kernel x kernels); apart: a separate timing, the original's steps run in turn "
        "with its plans' (the planned-graphs table); span: first node start to last "
        "node end of a traced step)",
        "",
        "| workload | kernels | measured | estimate | ratio | with profile | ratio "
        "| outside | fit on the others | calibrated | ratio | apart | ratio | span "
        "| coverage |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cal = r.calibration
        fit = f"{_ms(cal.per_step)} + {cal.per_kernel * 1e6:.2f} us" if cal else "-"
        out.append(
            f"| {r.name} | {len(r.prof.dispatched)} | {_ms(r.step)} | {_ms(r.step_estimate)} | "
            f"{_ratio(r.step, r.step_estimate)} | {_ms(r.step_profile)} | "
            f"{_ratio(r.step, r.step_profile)} | {_ms(r.prof.outside_time)} | {fit} | "
            f"{_ms(r.step_calibrated)} | {_ratio(r.step, r.step_calibrated)} | "
            f"{_ms(r.step_apart)} | {_ratio(r.step_apart, r.step_calibrated)} | "
            f"{_ms(r.traced_span)} | {r.coverage:.2f} |"
        )
    out += [
        "",
        "**Step time of the planned graphs** (ms; predicted on the `cpu` preset's "
        "estimates, as planned; calibrated: the plan re-simulated with the original's "
        "calibrated times (leave one out, as above; clones cost their originals' time); "
        "measured: median of untraced steps run in turn with the original's, in one "
        "process, inline where the graph has one executor; slowdown: planned / original "
        "step time)",
        "",
        "| workload | plan | predicted | predicted slowdown | calibrated "
        "| calibrated slowdown | measured | ratio to calibrated | measured slowdown |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        for p in r.plans:
            if p.fraction is None:
                continue
            out.append(
                f"| {r.name} | {p.strategy} | {_ms(p.predicted_step)} | "
                f"{p.predicted_step / p.predicted_original_step:.2f} | "
                f"{_ms(p.calibrated_step)} | {p.calibrated_step / r.step_calibrated:.2f} | "
                f"{_ms(p.measured_step)} | "
                f"{_ratio(p.measured_step, p.calibrated_step)} | "
                f"{p.measured_step / p.measured_original_step:.2f} |"
            )
    return "\n".join(out)


def write_docs(text: str, path: Path = DOCS, setting: str | None = None) -> None:
    """Puts ``text`` between the markers of ``path`` for ``setting`` (this run's
    oneDNN setting: each has its own block; made if missing)."""
    setting = setting or _setting()
    begin, end = f"{BEGIN[:-4]} {setting} -->", f"{END[:-4]} {setting} -->"
    block = f"{begin}\n{text}\n{end}"
    old = path.read_text() if path.exists() else "# Simulator accuracy\n\n"
    for b, e in ((begin, end), (BEGIN, END)):  # this setting's block, or the old one
        if b in old and e in old:
            head, rest = old.split(b, 1)
            path.write_text(head + block + rest.split(e, 1)[1])
            return
    path.write_text(old.rstrip("\n") + "\n\n" + block + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}, 3 steps")
    ap.add_argument("--only", nargs="+", choices=sorted(WORKLOADS), help="these workloads")
    ap.add_argument("--steps", type=int, help="traced (and timed) steps per graph")
    ap.add_argument("--explain", action="store_true", help="explain the original peaks")
    ap.add_argument("--no-plans", action="store_true", help="original graphs only")
    ap.add_argument("--no-docs", action="store_true", help="do not write docs/accuracy.md")
    args = ap.parse_args(argv)
    names = args.only or (QUICK if args.quick else tuple(WORKLOADS))
    steps = args.steps or (3 if args.quick else 5)
    rows = []
    for name in names:
        t0 = time.perf_counter()
        rows.append(run_workload(WORKLOADS[name](), steps, args.explain, not args.no_plans))
        print(f"{name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    calibrate_left_out(rows)
    text = tables(rows, steps)
    explained = [r.explained for r in rows if r.explained is not None]
    if explained:
        text += "\n\n" + variants_table(explained)
        text += "\n\n" + "\n\n".join(e.text for e in explained)
        plans = [p.explained for r in rows for p in r.plans if p.explained]
        if plans:
            text += "\n\n" + "\n\n".join(plans)
    print(text)
    if not (args.no_docs or args.quick or args.only):  # only a full run replaces the block
        write_docs(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
