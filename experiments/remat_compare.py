"""hybridplan side by side with Keras' own rematerialisation.

One command, on two logical CPU devices (``/device:CPU:0`` plays the accelerator,
``/device:CPU:1`` the host)::

    python experiments/remat_compare.py            # 3 models; writes docs/remat.md (~2.5 min)
    python experiments/remat_compare.py --quick    # one tiny model, stdout only
    python experiments/remat_compare.py --check    # its self-check alone

A full run first runs the self-check (``remat_compare_check.py``) and stops if it fails.

For each reference model (a residual network, a 3D U-Net, a transformer stack):

1. **Keras variants** of the same model, same initial weights:
   ``keras.RematScope(mode=...)`` around the model's construction for each of
   ``"full"``, ``"activations"``, ``"larger_than"`` (threshold: the median layer output
   size) and ``"list_of_layers"`` (the first half of the layers), and ``keras.remat``
   around each block between two single-tensor cut points of the functional graph
   (:func:`remat_blocks`). Under a ``tf.function`` the TensorFlow backend cannot
   rematerialise a layer whose ``call`` receives keyword arguments (``training``,
   ``mask``: ``BatchNormalization``, ``Dense``, ``MultiHeadAttention``, the functional
   model itself; keras-team/keras#21207), so ``"full"`` and ``"larger_than"`` as written
   fail to trace; they are tried as written (the error goes in the notes) and then
   measured on the same selection restricted to the layers Keras can rematerialise
   (:func:`keras_can_remat`), passed as ``"list_of_layers"``. A variant whose traced
   graph equals the original's does not apply.
2. **Measured on CPU emulation**, every graph in one process: the device peak (replay of
   the executor's allocation records, largest over the traced steps), the step time
   (median of untraced steps, all graphs of a model run in turn in each round, so load
   moves them alike), the losses of every step against the original's (bit for bit;
   op determinism on, Grappler's arithmetic optimiser off on both sides, as the tests).
3. **hybridplan** ``swap``, ``recompute`` and ``hybrid`` on the original step
   (``device="cpu"``, ``target="cpu-emulation"``) at a budget matched to each variant's
   measured peak: persistent bytes plus that peak; when the measured peak of the plan
   overshoots, once more at a budget lowered by the overshoot. Plus ``hybrid`` at
   ``SWEEP`` fractions of the original's activation peak, for the step-time match.
4. **Targets.** At each variant's measured peak: the fastest hybridplan graph whose
   measured peak is not above it (the unchanged original counts: hybridplan returns it
   when it fits). At each variant's measured step time: the lowest measured peak of a
   hybridplan graph not slower.
5. **h100-pcie5, predicted.** The same models at GPU sizes (``GPU``), traced with the
   same variants; hybridplan plans the original at each variant's predicted peak, and a
   sweep of budgets gives the lowest peak recompute-only and hybrid reach at each
   variant's predicted step time.

The tables go to stdout and, for a full run, between ``<!-- remat:begin -->`` and
``<!-- remat:end -->`` in ``docs/remat.md`` (the other text is kept; ``--no-docs`` to
skip).
"""

from __future__ import annotations

import argparse
import datetime
import inspect
import platform
import statistics
import subprocess
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
from hybridplan import measuring, models  # noqa: E402
from hybridplan.errors import BudgetError  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "remat.md"
CHECK = Path(__file__).resolve().parent / "remat_compare_check.py"
BEGIN, END = "<!-- remat:begin -->", "<!-- remat:end -->"
STRATEGIES = ("swap", "recompute", "hybrid")
MODES = ("full", "activations", "larger_than", "list_of_layers")
CPU_DEVICE, GPU_DEVICE, TARGET, MIN_BYTES = "cpu", "h100-pcie5", "cpu-emulation", 4096
#: hybrid budgets (fractions of the original's predicted activation peak) measured for
#: the step-time match on CPU emulation
SWEEP = (0.5, 0.6, 0.7, 0.8, 0.9)
#: budget fractions planned (not run) on the GPU preset
GPU_SWEEP = tuple(round(0.2 + 0.05 * k, 2) for k in range(17))
MB = 1e6

#: model -> (CPU emulation arguments, GPU preset arguments)
MODELS: dict[str, tuple[dict, dict]] = {
    "small_resnet": (
        dict(size=32, batch=8, blocks=3),
        dict(size=224, batch=32, filters=64, blocks=3),
    ),
    "unet3d": (dict(size=24, levels=3), dict(size=128, levels=3, base_filters=16)),
    "transformer": (
        dict(seq=64, d_model=64),
        dict(seq=1024, d_model=512, heads=8, layers=4, batch=8),
    ),
}
QUICK = {"small_resnet": (dict(size=16, batch=4, blocks=2), dict(size=128, batch=8, blocks=2))}


# --------------------------------------------------------------------------- Keras variants


class RematBlock(keras.layers.Layer):
    """Runs a functional sub-model under ``keras.remat`` (``tf.recompute_grad``): only
    its input is kept for the backward pass; its inside is recomputed there."""

    def __init__(self, block: keras.Model, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.block = block

    def call(self, inputs: Any, training: Any = None) -> Any:
        # training reaches the block through the closure: tf.custom_gradient takes no
        # keyword arguments in graph mode
        return keras.remat(lambda t: self.block(t, training=training))(inputs)


def keras_can_remat(layer: keras.layers.Layer) -> bool:
    """Whether Keras' TensorFlow backend can rematerialise ``layer`` inside a
    ``tf.function``: its ``call`` takes its inputs and nothing else (Keras passes the
    other arguments as keywords, which ``tf.custom_gradient`` rejects in graph mode)."""
    return len(inspect.signature(layer.call).parameters) == 1


def _layers(model: keras.Model) -> list[keras.layers.Layer]:
    return [lay for lay in model.layers if not isinstance(lay, keras.layers.InputLayer)]


def _output_size(layer: keras.layers.Layer) -> int:
    return sum(int(np.prod(t.shape)) for t in keras.tree.flatten(layer.output))


def cut_points(model: keras.Model) -> list[int]:
    """Indices into ``model.layers`` (topological order) of the layers whose single output
    is the only tensor crossing from the layers up to it to the layers after it.

    Complexity: O(L + E) for L layers and E layer-to-layer edges.
    """
    layers = model.layers
    producer = {id(t): i for i, lay in enumerate(layers) for t in keras.tree.flatten(lay.output)}
    last_read = list(range(len(layers)))
    for j, lay in enumerate(layers):
        if isinstance(lay, keras.layers.InputLayer):
            continue
        for t in keras.tree.flatten(lay.input):
            i = producer[id(t)]
            last_read[i] = max(last_read[i], j)
    cuts, reach = [], -1  # reach: the last reader of any output before layer i
    for i, lay in enumerate(layers[:-1]):
        if reach <= i and len(keras.tree.flatten(lay.output)) == 1:
            cuts.append(i)
        reach = max(reach, last_read[i])
    return cuts


def remat_blocks(model: keras.Model) -> tuple[keras.Model, int]:
    """The model with each run of layers between two cut points (more than one layer)
    wrapped in a :class:`RematBlock`; the layers (and weights) are shared with ``model``.
    Returns the new model and the number of blocks."""
    layers = model.layers
    x = keras.Input(batch_shape=tuple(model.input.shape), dtype=model.input.dtype)
    y, prev, blocks = x, 0, 0
    for c in [*cut_points(model)[1:], len(layers) - 1]:
        sub = keras.Model(layers[prev].output, layers[c].output)
        if c - prev > 1:
            y, blocks = RematBlock(sub)(y), blocks + 1
        else:
            y = sub(y)
        prev = c
    return keras.Model(x, y, name=f"{model.name}_remat_blocks"), blocks


@dataclass
class Variant:
    """One way to write the model: the original, a RematScope mode, keras.remat blocks."""

    label: str
    workload: models.Workload | None = None
    traced: Any = None
    note: str = ""


def _with_model(w: models.Workload, model: keras.Model) -> models.Workload:
    opt = type(w.optimizer).from_config(w.optimizer.get_config())
    return models.Workload(
        w.name, model, opt, w.loss_fn, w.x_spec, w.y_spec, w.y_classes, w.x_vocab
    )


def _scoped(name: str, kwargs: dict, scope: keras.RematScope, weights: list) -> models.Workload:
    keras.backend.clear_session()  # same layer names as the original build
    with scope:
        w = models.build(name, **kwargs)
    w.model.set_weights(weights)
    return w


def _selections(layers: list[keras.layers.Layer]) -> dict[str, tuple[dict, list[str]]]:
    """Per mode: the RematScope arguments as a user writes them, and the names of the
    layers that mode selects among those Keras can rematerialise."""
    can = [lay for lay in layers if keras_can_remat(lay)]
    threshold = int(statistics.median(_output_size(lay) for lay in layers))
    first_half = {id(lay) for lay in layers[: len(layers) // 2]}
    return {
        "full": ({"mode": "full"}, [lay.name for lay in can]),
        "activations": ({"mode": "activations"}, []),
        "larger_than": (
            {"mode": "larger_than", "output_size_threshold": threshold},
            [lay.name for lay in can if _output_size(lay) > threshold],
        ),
        "list_of_layers": (
            {"mode": "list_of_layers"},
            [lay.name for lay in can if id(lay) in first_half],
        ),
    }


def keras_variants(name: str, kwargs: dict) -> list[Variant]:
    """The original workload (first) and its Keras rematerialisation variants, traced.

    Every variant starts from the original's weights. Variants that cannot be traced
    or equal the original carry a note and no trace.
    """
    keras.backend.clear_session()
    base = models.build(name, **kwargs)
    weights = base.model.get_weights()
    layers = _layers(base.model)
    out = [Variant("original", base, base.trace())]
    size = out[0].traced.num_nodes
    for mode, (args, names) in _selections(layers).items():
        label, note = f"RematScope({mode})", ""
        scope = keras.RematScope(**args)
        if mode in ("full", "larger_than"):
            try:
                _scoped(name, kwargs, scope, weights).trace()
            except (ValueError, AttributeError) as exc:  # what Keras raises here
                note = "as written: fails to trace (" + _first_line(exc) + "); "
                note += f"measured: the {len(names)} of {len(layers)} layers Keras can remat"
                scope = keras.RematScope(mode="list_of_layers", layer_names=names)
        elif mode == "activations":
            wrapped = [lay for lay in layers if getattr(lay, "activation", None) is not None]
            note = f"wraps the activation function of {len(wrapped)} of {len(layers)} layers"
        elif mode == "list_of_layers":
            scope = keras.RematScope(mode="list_of_layers", layer_names=names)
            note = f"{len(names)} of {len(layers)} layers (first half, those Keras can remat)"
        if mode != "activations" and not names:
            out.append(Variant(label, note="selects no layer Keras can remat"))
            continue
        w = _scoped(name, kwargs, scope, weights)
        traced = w.trace()
        if traced.num_nodes == size:
            out.append(Variant(label, note="graph unchanged: does not apply"))
            continue
        out.append(Variant(label, w, traced, note))
    blocks_model, blocks = remat_blocks(base.model)
    w = _with_model(base, blocks_model)
    note = f"{blocks} blocks between single-tensor cut points"
    out.append(Variant("keras.remat per block", w, w.trace(), note))
    return out


def _first_line(exc: Exception) -> str:
    """Keras' own message (set in bold inside the traced-code error), on one line."""
    text = str(exc)
    start, end = text.find("\x1b[1m"), text.find("\x1b[0m")
    if 0 <= start < end:
        text = text[start + 4 : end]
    text = " ".join(text.split()).rstrip(".")
    return f"{type(exc).__name__}: {text[:100]}"


# --------------------------------------------------------------------------- measuring


def session_config() -> Any:
    """Two logical CPUs; Grappler's arithmetic optimiser off (it rounds a rewritten graph
    differently in the last bit, see docs/how-it-works.md, Numerics)."""
    from tensorflow.core.protobuf import rewriter_config_pb2

    config = tf.compat.v1.ConfigProto(device_count={"CPU": 2}, allow_soft_placement=True)
    off = rewriter_config_pb2.RewriterConfig.OFF
    config.graph_options.rewrite_options.arithmetic_optimization = off
    return config


@dataclass
class Run:
    """One graph in its own Session: peaks from traced steps, then timed rounds."""

    label: str
    traced: Any
    graph_def: Any
    batch: Any
    sess: Any = None
    run: Any = None
    seed: int = 0
    peaks: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    losses: list[np.ndarray] = field(default_factory=list)
    device_of: dict[str, str] = field(default_factory=dict)

    def open(self, steps: int) -> None:
        # A swap plan's host copies run on the device and are charged to the host, as
        # ``measure(host_on_device=True)`` does, so that it too has one executor and runs
        # inline: on the thread pool two kernels run at once, each with its own scratch
        # (two 28 MB convolution-gradient buffers with oneDNN off, docs/devices.md).
        source = self.traced.graph_def if self.graph_def is None else self.graph_def
        gd, moved = measuring.place_host_on_device(source, "/device:CPU:0")
        self.device_of = {f"step/{name}": key for name, key in moved.items()}
        graph, feeds, fetches, init, *_ = measuring._session_graph(self.traced, gd)
        self.sess = tf.compat.v1.Session(graph=graph, config=session_config())
        self.sess.run(init)
        loss = self.traced.loss_index
        self.run = measuring._Runner(self.sess, feeds, fetches, self.batch, loss, self.losses)
        self.step(measuring.run_options())  # warm-up: Grappler and kernel set-up
        # Inline, as ``measure`` runs by default: a GPU executor's order, the same peak
        # in every Session (the thread pool's varies between Sessions, accuracy.md 11).
        options = measuring.run_options(trace=True)
        for _ in range(steps):
            stats = self.step(options).step_stats
            replay = measuring.replay_step_stats(stats, self.device_of).get("/device:CPU:0")
            self.peaks.append(int(replay[1].max(initial=0)) if replay else 0)

    def step(self, options: Any) -> Any:
        self.seed += 1
        return self.run(self.seed - 1, options)

    def timed(self) -> None:
        self.step(measuring.run_options())
        self.times.append(self.run.seconds)  # the Session.run alone, not the batch

    def close(self) -> None:
        if self.sess is not None:
            self.sess.close()

    @property
    def peak(self) -> int:
        return max(self.peaks)

    @property
    def step_time(self) -> float:
        return statistics.median(self.times) if self.times else float("nan")


@dataclass
class Graph:
    """A measured graph with its predicted figures and how it was made."""

    label: str
    kind: str  # "original", "keras", "hybridplan"
    run: Run
    predicted_peak: int
    predicted_step: float
    budget: int = 0  # activation bytes the plan was made for (hybridplan)
    inserted: str = ""
    note: str = ""
    target: int = 0  # the Keras peak it was matched to (hybridplan)


def _predicted_step(traced: Any, device: str) -> float:
    p = hybridplan.plan(traced, "1TiB", device=device, min_bytes=MIN_BYTES)
    return float(p.report["original"]["step_time_s"])


def _losses_equal(a: Run, b: Run) -> tuple[bool, float]:
    n = min(len(a.losses), len(b.losses))
    same = all(np.array_equal(x, y) for x, y in zip(a.losses[:n], b.losses[:n], strict=True))
    diff = max(
        float(np.max(np.abs(x - y) / np.maximum(np.abs(x), 1e-30)))
        for x, y in zip(a.losses[:n], b.losses[:n], strict=True)
    )
    return same, diff


class CpuBench:
    """Every graph of one model, measured in one process; sessions stay open until
    the interleaved timing at the end."""

    def __init__(self, name: str, kwargs: dict, steps: int, rounds: int) -> None:
        self.name, self.kwargs, self.steps, self.rounds = name, kwargs, steps, rounds
        self.graphs: list[Graph] = []
        self.variants: list[Variant] = []
        self._by_graph: dict[bytes, Graph] = {}

    def add(self, graph: Graph) -> Graph:
        graph.run.open(self.steps)
        self.graphs.append(graph)
        return graph

    def keras(self) -> None:
        self.variants = keras_variants(self.name, self.kwargs)
        for v in self.variants:
            if v.traced is None:
                continue
            a = hybridplan.analyze(v.traced)
            run = Run(v.label, v.traced, None, v.workload.batch)
            kind = "original" if v.label == "original" else "keras"
            step = _predicted_step(v.traced, CPU_DEVICE)
            self.add(Graph(v.label, kind, run, a.activation_peak_bytes, step, note=v.note))
        self.original = self.graphs[0]
        self.analysis = hybridplan.analyze(self.original.run.traced)

    def plan(self, strategy: str, act_budget: int, target: int = 0) -> Graph | str:
        """hybridplan's plan of the original step for ``act_budget`` activation bytes,
        rewritten and measured (a graph already measured is reused)."""
        traced = self.original.run.traced
        persistent = self.analysis.persistent_bytes
        try:
            r = hybridplan.apply(
                traced,
                persistent + act_budget,
                strategy=strategy,
                device=CPU_DEVICE,
                target=TARGET,
                min_bytes=MIN_BYTES,
            )
        except BudgetError as exc:
            return f"no plan: best peak {(exc.best_peak - persistent) / MB:.2f} MB"
        if r.plan.is_empty:
            return self.original
        key = r.graph_def.SerializeToString(deterministic=True)
        if key in self._by_graph:
            return self._by_graph[key]
        c = r.report["inserted"]
        graph = Graph(
            f"{strategy} @ {act_budget / MB:.2f} MB",
            "hybridplan",
            Run(strategy, traced, r.graph_def, self.original.run.batch),
            r.plan.planned["peak_bytes"] - persistent,
            r.plan.planned["step_time_s"],
            budget=act_budget,
            inserted=f"{c['swap_out']} swaps, {c['clones']} clones",
            target=target,
        )
        self._by_graph[key] = self.add(graph)
        return graph

    def matched(self, strategy: str, target: int) -> Graph | str:
        """The plan at the Keras peak ``target``; once more, lower, if it overshoots."""
        g = self.plan(strategy, target, target)
        if isinstance(g, Graph) and g.kind == "hybridplan" and g.run.peak > target:
            lower = target - (g.run.peak - target)
            if lower > 0:
                g2 = self.plan(strategy, lower, target)
                if isinstance(g2, Graph):
                    return g2
        return g

    def hybridplan(self) -> None:
        self.attempts: dict[tuple[str, str], Graph | str] = {}
        for g in [g for g in self.graphs if g.kind == "keras"]:
            for s in STRATEGIES:
                self.attempts[(g.label, s)] = self.matched(s, g.run.peak)
        act = self.analysis.activation_peak_bytes
        for f in SWEEP:
            self.plan("hybrid", int(f * act))

    def time(self) -> None:
        n = len(self.graphs)
        for r in range(self.rounds):  # each round starts one graph later: no place bias
            for k in range(n):
                self.graphs[(r + k) % n].run.timed()
        for g in self.graphs:
            g.run.close()

    def run_all(self) -> None:
        self.keras()
        self.hybridplan()
        self.time()


# --------------------------------------------------------------------------- targets


@dataclass
class Target:
    keras: Graph
    at_peak: Graph | None  # fastest hybridplan graph with a measured peak <= the Keras peak
    at_time: Graph | None  # lowest-peak hybridplan graph no slower than the Keras step

    @property
    def faster(self) -> bool:
        return self.at_peak is not None and self.at_peak.run.step_time < self.keras.run.step_time

    @property
    def lower(self) -> bool:
        return self.at_time is not None and self.at_time.run.peak < self.keras.run.peak


def targets(bench: CpuBench) -> list[Target]:
    """For each Keras variant, hybridplan's best answer at its peak and at its step time
    (the original graph counts: hybridplan leaves a step that fits unchanged)."""
    ours = [g for g in bench.graphs if g.kind in ("original", "hybridplan")]
    out = []
    for k in (g for g in bench.graphs if g.kind == "keras"):
        fits = [g for g in ours if g.run.peak <= k.run.peak]
        quick = [g for g in ours if g.run.step_time <= k.run.step_time]
        at_peak = min(fits, key=lambda g: g.run.step_time, default=None)
        at_time = min(quick, key=lambda g: g.run.peak, default=None)
        out.append(Target(k, at_peak, at_time))
    return out


# --------------------------------------------------------------------------- GPU preset


@dataclass
class GpuRow:
    label: str
    peak: int
    step: float
    plans: dict[str, tuple[int, float] | str]
    at_time: dict[str, tuple[int, float] | None]
    note: str = ""


def gpu_rows(name: str, kwargs: dict) -> list[GpuRow]:
    """Predicted on the GPU preset: each variant's peak and step time, hybridplan's plans
    of the original at that peak, and the lowest peak each strategy reaches at that step
    time (over ``GPU_SWEEP``)."""
    variants = keras_variants(name, kwargs)
    original = variants[0].traced
    a = hybridplan.analyze(original)
    persistent, act = a.persistent_bytes, a.activation_peak_bytes

    def planned(strategy: str, budget: int) -> tuple[int, float] | str:
        try:
            p = hybridplan.plan(
                original, persistent + budget, strategy=strategy, device=GPU_DEVICE,
                min_bytes=MIN_BYTES,
            )  # fmt: skip
        except BudgetError as exc:
            return f"no plan ({(exc.best_peak - persistent) / 1e9:.2f} GB)"
        return p.planned["peak_bytes"] - persistent, p.planned["step_time_s"]

    sweep = {
        s: [x for f in GPU_SWEEP if isinstance(x := planned(s, int(f * act)), tuple)]
        for s in ("recompute", "hybrid")
    }
    rows = []
    for v in variants:
        if v.traced is None:
            rows.append(GpuRow(v.label, 0, float("nan"), {}, {}, v.note))
            continue
        peak = hybridplan.analyze(v.traced).activation_peak_bytes
        step = _predicted_step(v.traced, GPU_DEVICE)
        plans = {s: planned(s, peak) for s in STRATEGIES} if v.label != "original" else {}
        at_time = {
            s: min((x for x in pts if x[1] <= step), default=None) for s, pts in sweep.items()
        }
        rows.append(GpuRow(v.label, peak, step, plans, at_time, v.note))
    return rows


# --------------------------------------------------------------------------- tables


def _mb(n: int) -> str:
    return f"{n / MB:.2f}"


def _ms(s: float) -> str:
    return f"{s * 1e3:.1f}"


def cpu_tables(bench: CpuBench) -> str:
    name = f"{bench.name}({', '.join(f'{k}={v}' for k, v in bench.kwargs.items())})"
    base = bench.original.run
    lines = [
        f"**{name}** ({bench.original.run.traced.num_nodes} nodes)",
        "",
        "| graph | made by | budget | predicted peak | measured peak | predicted step | "
        "measured step | vs original | losses equal | notes |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for g in bench.graphs:
        same, diff = _losses_equal(base, g.run)
        equal = "yes" if same else f"**no** (rel. diff {diff:.1e})"
        budget = _mb(g.budget) if g.kind == "hybridplan" else "-"
        made = g.inserted if g.kind == "hybridplan" else g.kind
        lines.append(
            f"| {g.label} | {made} | {budget} | {_mb(g.predicted_peak)} | {_mb(g.run.peak)} "
            f"({_mb(min(g.run.peaks))}) | {_ms(g.predicted_step)} | {_ms(g.run.step_time)} | "
            f"{g.run.step_time / base.step_time:.2f} | {equal} | {g.note} |"
        )
    for v in bench.variants:
        if v.traced is None:
            lines.append(f"| {v.label} | - | - | - | - | - | - | - | - | {v.note} |")
    lines += [
        "",
        "| Keras variant | peak | step | hybridplan at that peak | peak | step | faster | "
        "hybridplan at that step time | peak | step | lower peak |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for t in targets(bench):
        k = t.keras.run
        p, q = t.at_peak, t.at_time
        lines.append(
            f"| {t.keras.label} | {_mb(k.peak)} | {_ms(k.step_time)} | "
            + (f"{p.label} | {_mb(p.run.peak)} | {_ms(p.run.step_time)} | " if p else "- | | | ")
            + ("**yes**" if t.faster else "no")
            + " | "
            + (f"{q.label} | {_mb(q.run.peak)} | {_ms(q.run.step_time)} | " if q else "- | | | ")
            + ("**yes**" if t.lower else "no")
            + " |"
        )
    tried = [
        f"{k} {s}: {v}"
        for (k, s), v in getattr(bench, "attempts", {}).items()
        if isinstance(v, str)
    ]
    if tried:
        lines += ["", "Matched budgets with no plan: " + "; ".join(tried) + "."]
    return "\n".join(lines)


def gpu_table(name: str, kwargs: dict, rows: list[GpuRow]) -> str:
    gb = 1e9
    label = f"{name}({', '.join(f'{k}={v}' for k, v in kwargs.items())})"

    def plan_cell(x: tuple[int, float] | str | None) -> str:
        if x is None:
            return "-"
        if isinstance(x, str):
            return x
        return f"{x[1] * 1e3:.1f} ms"

    def peak_cell(x: tuple[int, float] | None) -> str:
        return "-" if x is None else f"{x[0] / gb:.2f} GB ({x[1] * 1e3:.1f} ms)"

    lines = [
        f"**{label}**",
        "",
        "| variant | predicted peak | predicted step | at that peak: swap | recompute | "
        "hybrid | at that step: lowest peak, recompute only | hybrid |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if not r.at_time:
            lines.append(f"| {r.label} | - | - | - | - | - | - | - |")
            continue
        lines.append(
            f"| {r.label} | {r.peak / gb:.2f} GB | {r.step * 1e3:.1f} ms | "
            + " | ".join(plan_cell(r.plans.get(s)) for s in STRATEGIES)
            + f" | {peak_cell(r.at_time['recompute'])} | {peak_cell(r.at_time['hybrid'])} |"
        )
    return "\n".join(lines)


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def header(command: str, steps: int, rounds: int, wall: float) -> str:
    today = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"Measured on {platform.machine()} with 2 logical CPUs (TensorFlow {tf.__version__}, "
        f"Keras {keras.__version__}), commit `{_commit()}`, {today}, `{command}` "
        f"({wall:.0f} s). Each graph: 1 warm-up, {steps} traced steps (peak: largest, "
        f"smallest in brackets), {rounds} timed steps run in turn with the model's other "
        "graphs (step: median). Peaks are device activation bytes in MB (variables and "
        "optimizer slots excluded); steps in ms; budgets are the activation bytes a plan "
        "was made for."
    )


def write_docs(block: str) -> None:
    text = (
        DOCS.read_text() if DOCS.exists() else f"# hybridplan and Keras remat\n\n{BEGIN}\n{END}\n"
    )
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    DOCS.write_text(f"{head}{BEGIN}\n{block}\n{END}{tail}")


# --------------------------------------------------------------------------- main


def self_check() -> int:
    """Runs ``remat_compare_check.py`` (this experiment's own tests) with pytest: the
    Keras variants trace and keep the losses, the matched plan measures at or below."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(CHECK)]
    return subprocess.run(cmd, check=False).returncode  # a fresh process: TF set up anew


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one tiny model, stdout only")
    ap.add_argument("--only", choices=sorted(MODELS), help="one model, stdout only")
    ap.add_argument("--no-gpu", action="store_true", help="skip the h100-pcie5 predictions")
    ap.add_argument("--no-docs", action="store_true", help=f"do not rewrite {DOCS.name}")
    ap.add_argument("--steps", type=int, default=3, help="traced steps per graph")
    ap.add_argument("--rounds", type=int, default=9, help="timed rounds per model")
    ap.add_argument("--check", action="store_true", help="run the self-check only")
    args = ap.parse_args(argv)
    if args.check or not (args.quick or args.only):
        check = self_check()
        if check != 0 or args.check:
            return int(check)
    tf.config.experimental.enable_op_determinism()
    tf.config.optimizer.set_experimental_options({"arithmetic_optimization": False})
    chosen = QUICK if args.quick else MODELS
    if args.only:
        chosen = {args.only: MODELS[args.only]}
    t0 = time.perf_counter()
    parts = ["### CPU emulation, measured"]
    for name, (cpu_kw, _) in chosen.items():
        t = time.perf_counter()
        bench = CpuBench(name, cpu_kw, args.steps, args.rounds)
        bench.run_all()
        parts += ["", cpu_tables(bench)]
        print(parts[-1] + "\n", flush=True)
        print(f"{name}: {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
    if not args.no_gpu:
        parts += ["", f"### {GPU_DEVICE}, predicted"]
        for name, (_, gpu_kw) in chosen.items():
            parts += ["", gpu_table(name, gpu_kw, gpu_rows(name, gpu_kw))]
            print(parts[-1] + "\n", flush=True)
    command = "python experiments/remat_compare.py" + (" --quick" if args.quick else "")
    block = header(command, args.steps, args.rounds, time.perf_counter() - t0)
    block += "\n\n" + "\n".join(parts)
    if not (args.quick or args.only or args.no_docs or args.no_gpu):
        write_docs(block)
        print(f"wrote {DOCS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
