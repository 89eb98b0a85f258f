"""Accuracy of the simulator against measurement on CPU emulation (issues 2 and 3).

For small workloads that train on a CPU in a fraction of a second per step, each on two
logical CPU devices (``/device:CPU:0`` plays the accelerator, ``/device:CPU:1`` the host)::

    python benches/accuracy.py            # all workloads, 5 traced + 5 timed steps each
    python benches/accuracy.py --quick    # small_cnn and the MLP, 3 steps
    python benches/accuracy.py --only transformer --explain

What is compared (ratios are measured / predicted, so > 1 means the model is short):

- **Memory, original graph.** Predicted: ``hybridplan.analyze(traced).activation_peak_bytes``
  (the peak less variables and optimizer slots). Measured: ``measuring.measure``'s device
  peak, the largest over the traced steps of the replay of the executor's allocation
  records on ``/device:CPU:0`` (the variables, allocated before the step, are not in it);
  the smallest step peak is shown too (the executor's order varies from step to step).
- **Memory, planned graphs.** For ``swap``, ``recompute`` and ``hybrid``:
  ``hybridplan.apply(traced, budget, strategy=..., device="cpu", target="cpu-emulation",
  min_bytes=4096)`` at ``budget = persistent + f * activation peak`` for the smallest
  ``f`` in (0.7, 0.8, 0.9) that plans. Predicted: ``plan.planned.peak_bytes - persistent``;
  measured: the rewritten graph's device peak, and whether it is within
  ``budget - persistent``.
- **Step time, original graph.** Measured: the median wall time of untraced
  ``Session.run`` steps (those of ``measure`` and of ``profile`` together). Predicted: the
  simulator's original step time (``plan(...).report["original"]["step_time_s"]``) on the
  ``cpu`` preset's estimates, and with the measured profile
  (``hybridplan.profiling.profile`` -> ``plan(..., profile=prof.times)``).
- **Step time, planned graphs.** The slowdown of each plan over the original, predicted
  by the simulator (the plan's ``planned`` vs ``original`` step time, ``cpu`` preset
  estimates, as the plan was made) and measured.

``--explain`` prints, for the original graph of each workload, where the measured peak
and the model's peak differ: the tensors live at each peak, and the buffers TensorFlow
forwarded in place (outputs whose ``allocation_records`` are empty).

The table goes to stdout and, between the markers ``<!-- accuracy:begin -->`` and
``<!-- accuracy:end -->``, into ``docs/accuracy.md`` (``--no-docs`` to skip).
"""

from __future__ import annotations

import argparse
import datetime
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
from hybridplan import measuring, models  # noqa: E402
from hybridplan.errors import BudgetError  # noqa: E402
from hybridplan.profiling import profile  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "accuracy.md"
BEGIN, END = "<!-- accuracy:begin -->", "<!-- accuracy:end -->"
FRACTIONS = (0.7, 0.8, 0.9)
STRATEGIES = ("swap", "recompute", "hybrid")
DEVICE, TARGET, MIN_BYTES = "cpu", "cpu-emulation", 4096
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
    measured_min: int = 0
    predicted_step: float = float("nan")
    predicted_original_step: float = float("nan")
    measured_step: float = float("nan")
    swaps: int = 0
    clones: int = 0
    error: str = ""


@dataclass
class Row:
    name: str
    nodes: int
    persistent: int
    predicted: int
    measured: int
    measured_min: int
    step: float
    step_estimate: float
    step_profile: float
    serial: float
    traced_span: float
    coverage: float
    plans: list[PlanRow] = field(default_factory=list)


def _original_step(traced: Any, peak: int, times: dict[int, float] | None) -> float:
    """The simulator's step time of the unplanned graph (a budget it fits: empty plan)."""
    p = hybridplan.plan(traced, peak, device=DEVICE, min_bytes=MIN_BYTES, profile=times)
    return float(p.report["original"]["step_time_s"])


def _run_plans(b: Bench, a: Any, steps: int, base_step: float) -> list[PlanRow]:
    persistent, act = a.persistent_bytes, a.activation_peak_bytes
    rows = []
    for strategy in STRATEGIES:
        row = PlanRow(strategy)
        result = None
        for f in FRACTIONS:
            budget = persistent + int(f * act)
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
            row.predicted = planned.peak_bytes - persistent
            row.predicted_step = planned.step_time_s
            row.predicted_original_step = result.plan.original.step_time_s
            row.swaps, row.clones = planned.swaps, planned.clones
            m = measuring.measure(b.traced, result.graph_def, b.batch, steps=steps)
            row.measured = m.device_peak
            row.measured_min = min(m.step_peaks.get(m.device, [0]))
            row.measured_step = m.step_time
        rows.append(row)
    return rows


def run_workload(b: Bench, steps: int, explain: bool) -> Row:
    a = hybridplan.analyze(b.traced)
    base = measuring.measure(b.traced, None, b.batch, steps=steps)
    prof = profile(b.traced, b.batch, steps=steps)
    step = statistics.median(base.step_times + prof.step_times)
    row = Row(
        name=b.name,
        nodes=b.traced.num_nodes,
        persistent=a.persistent_bytes,
        predicted=a.activation_peak_bytes,
        measured=base.device_peak,
        measured_min=min(base.step_peaks.get(base.device, [0])),
        step=step,
        step_estimate=_original_step(b.traced, a.peak_bytes, None),
        step_profile=_original_step(b.traced, a.peak_bytes, prof.times),
        serial=prof.serial_time,
        traced_span=prof.traced_span,
        coverage=prof.coverage,
    )
    if explain:
        print(explain_peak(b, a), flush=True)
    row.plans = _run_plans(b, a, steps, step)
    return row


# --------------------------------------------------------------------------- explaining


def explain_peak(b: Bench, a: Any, top: int = 12) -> str:
    """Where the measured and the modelled peaks of the original graph differ.

    Runs one traced step, replays the device's allocation records and lists the buffers
    live at the measured peak (by the node that allocated them), the tensors live at the
    model's peak (``Analysis.live_at_peak``), and the model's tensors of nodes that
    allocated nothing in the step (outputs forwarded from an input buffer, or nodes that
    did not run).
    """
    graph, feeds, fetches, init = measuring._session_graph(b.traced, None)
    config = tf.compat.v1.ConfigProto(device_count={"CPU": 2}, allow_soft_placement=True)
    options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
    losses: list[Any] = []
    with tf.compat.v1.Session(graph=graph, config=config) as sess:
        sess.run(init)
        run = measuring._runner(sess, feeds, fetches, b.batch, b.traced.loss_index, losses)
        run(0, None)
        stats = run(1, options).step_stats
    events = []  # (time, bytes, node)
    allocated: dict[str, int] = {}
    for dev in stats.dev_stats:
        if measuring.device_key(dev.device) != "/device:CPU:0":
            continue
        for ns in dev.node_stats:
            name = ns.node_name.removeprefix("step/")
            for mem in ns.memory:
                for r in mem.allocation_records:
                    events.append((r.alloc_micros, r.alloc_bytes, name))
                    if r.alloc_bytes > 0:
                        allocated[name] = allocated.get(name, 0) + r.alloc_bytes
    events.sort(key=lambda e: e[0])
    live: dict[str, int] = {}
    best, best_live, cur = 0, {}, 0
    for _, nbytes, name in events:
        cur += nbytes
        live[name] = live.get(name, 0) + nbytes
        if cur > best:
            best, best_live = cur, {k: v for k, v in live.items() if v > 0}
    lines = [f"### {b.name}: measured peak {best} B, model {a.activation_peak_bytes} B"]
    lines.append("measured: buffers live at the peak, by allocating node (bytes)")
    for name, nbytes in sorted(best_live.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"  {nbytes:>10}  {name}")
    lines.append("model: tensors live at the peak (bytes)")
    model_live = a.live_at_peak(10**6)
    for t in model_live[:top]:
        flag = "" if t.name.rsplit(":", 1)[0] in allocated else "   <- allocated nothing"
        lines.append(f"  {t.bytes:>10}  {t.name} ({t.op}){flag}")
    ghost = [t for t in model_live if t.name.rsplit(":", 1)[0] not in allocated]
    lines.append(
        f"model tensors live at its peak whose node allocated nothing in the step: "
        f"{len(ghost)}, {sum(t.bytes for t in ghost)} B"
    )
    return "\n".join(lines)


# --------------------------------------------------------------------------- tables


def _mb(n: float) -> str:
    return f"{n / MB:.2f}"


def _ratio(measured: float, predicted: float) -> str:
    return f"{measured / predicted:.2f}" if predicted else "-"


def _ms(s: float) -> str:
    return f"{s * 1e3:.1f}"


def tables(rows: list[Row], steps: int) -> str:
    out = [
        f"Measured on {platform.machine()} with {len(tf.config.list_logical_devices('CPU'))} "
        f"logical CPUs (TensorFlow {tf.__version__}), {datetime.date.today().isoformat()}, "
        f"{steps} traced + {steps} timed steps per graph; `python benches/accuracy.py`. "
        "Ratios are measured / predicted.",
        "",
        "**Device activation peak** (MB; measured: largest over the traced steps, "
        "smallest in brackets; budget: bytes for activations, `f` x the original's "
        "predicted activation peak)",
        "",
        "| workload | graph | budget | predicted | measured | ratio | within budget |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r.name} | original | - | {_mb(r.predicted)} | {_mb(r.measured)} "
            f"({_mb(r.measured_min)}) | {_ratio(r.measured, r.predicted)} | - |"
        )
        for p in r.plans:
            if p.fraction is None:
                out.append(f"| | {p.strategy} | - | {p.error} | | | |")
                continue
            fits = "yes" if p.measured <= p.budget_act else "**no**"
            out.append(
                f"| | {p.strategy} ({p.swaps} swaps, {p.clones} clones) | "
                f"{_mb(p.budget_act)} ({p.fraction}) | {_mb(p.predicted)} | "
                f"{_mb(p.measured)} ({_mb(p.measured_min)}) | "
                f"{_ratio(p.measured, p.predicted)} | {fits} |"
            )
    out += [
        "",
        "**Step time of the original graph** (ms; predicted by the simulator on the `cpu` "
        "preset's estimates and with the measured profile; serial: the sum of the "
        "profile's op times; span: first op start to last op end of a traced step)",
        "",
        "| workload | nodes | measured | estimate | ratio | with profile | ratio "
        "| serial | span | coverage |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r.name} | {r.nodes} | {_ms(r.step)} | {_ms(r.step_estimate)} | "
            f"{_ratio(r.step, r.step_estimate)} | {_ms(r.step_profile)} | "
            f"{_ratio(r.step, r.step_profile)} | {_ms(r.serial)} | {_ms(r.traced_span)} | "
            f"{r.coverage:.2f} |"
        )
    out += [
        "",
        "**Step time of the planned graphs** (ms; predicted on the `cpu` preset's "
        "estimates, as planned; slowdown: planned / original step time)",
        "",
        "| workload | plan | predicted | predicted slowdown | measured | measured slowdown |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        for p in r.plans:
            if p.fraction is None:
                continue
            out.append(
                f"| {r.name} | {p.strategy} | {_ms(p.predicted_step)} | "
                f"{p.predicted_step / p.predicted_original_step:.2f} | {_ms(p.measured_step)} | "
                f"{p.measured_step / r.step:.2f} |"
            )
    return "\n".join(out)


def write_docs(text: str, path: Path = DOCS) -> None:
    """Puts ``text`` between the markers of ``path`` (made if missing)."""
    block = f"{BEGIN}\n{text}\n{END}"
    old = path.read_text() if path.exists() else "# Simulator accuracy\n\n"
    if BEGIN in old and END in old:
        head, rest = old.split(BEGIN, 1)
        new = head + block + rest.split(END, 1)[1]
    else:
        new = old.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(new)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}, 3 steps")
    ap.add_argument("--only", nargs="+", choices=sorted(WORKLOADS), help="these workloads")
    ap.add_argument("--steps", type=int, help="traced (and timed) steps per graph")
    ap.add_argument("--explain", action="store_true", help="explain the original peaks")
    ap.add_argument("--no-docs", action="store_true", help="do not write docs/accuracy.md")
    args = ap.parse_args(argv)
    names = args.only or (QUICK if args.quick else tuple(WORKLOADS))
    steps = args.steps or (3 if args.quick else 5)
    rows = []
    for name in names:
        t0 = time.perf_counter()
        rows.append(run_workload(WORKLOADS[name](), steps, args.explain))
        print(f"{name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    text = tables(rows, steps)
    print(text)
    if not args.no_docs:
        write_docs(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
