"""``hybridplan demo``: the main job end to end on built-in models.

1. Trace ResNet-50's training step at a resolution whose activations do not
   fit a 32 GiB V100, plan it with every strategy for ``v100-nvlink2``, print
   the table and write the report (HTML, pictures, JSON plan).
2. Run a real, small training step (a residual network) rewritten for CPU emulation
   (two logical CPUs stand for device and host): the losses must equal the
   original's bit for bit, and the measured device peak is printed next to
   the predicted one and the budget.

Nothing is downloaded: models are built with ``weights=None``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

__all__ = ["run_demo"]

#: Stage 1: ResNet-50 at 4096x4096, batch 2 (about 53 GB of activations).
BIG = {"size": 4096, "batch": 2}
BIG_QUICK = {"size": 1024, "batch": 2}
#: Stage 2: a residual network small enough to train on two CPU cores.
SMALL_MODEL = "small_resnet"
SMALL: dict = {}
#: Stage 2 budget: ``Analysis.budget_for(SMALL_BUDGET_FRACTION)``, the persistent bytes
#: and the largest kernel scratch plus this fraction of the rest of the original's
#: activation peak (see :func:`hybridplan.trial`).
SMALL_BUDGET_FRACTION = 0.5


def _say(msg: str) -> None:
    print(msg, flush=True)


def run_demo(out_dir: str | Path, quick: bool = False) -> int:
    """Runs both stages; returns 0 when the rewritten step matched the original bit
    for bit and its measured peak was within the budget, else 1 (the output says which
    differed and why)."""
    from .runner import setup_cpu_emulation

    setup_cpu_emulation(2)  # before TensorFlow initialises
    import tensorflow as tf

    tf.config.experimental.enable_op_determinism()
    out = Path(out_dir)
    t0 = time.perf_counter()
    _stage_plan(out, BIG_QUICK if quick else BIG)
    ok = _stage_run(out)
    _say(f"\ndemo finished in {time.perf_counter() - t0:.0f} s; report in {out}/report.html")
    return 0 if ok else 1


def _progress(total: int, desc: str):
    try:
        from tqdm import tqdm

        # disable=None: no bar when stderr is not a terminal (a log file), where
        # its carriage returns would run into the printed lines.
        return tqdm(total=total, desc=desc, file=sys.stderr, leave=False, disable=None)
    except ImportError:  # pragma: no cover - tqdm is in the [tf] extra
        return None


def _stage_plan(out: Path, kw: dict) -> None:
    from . import _core, models
    from .errors import BudgetError
    from .planning import AUTO_RESERVE, STRATEGIES, plan
    from .report import fmt_bytes, summary_table, write_report

    _say(
        f"== 1. ResNet-50 at {kw['size']}x{kw['size']}, batch {kw['batch']}, "
        "on a 32 GiB V100 with NVLink 2.0 (v100-nvlink2)"
    )
    bar = _progress(1 + len(STRATEGIES), "tracing and planning")
    t = time.perf_counter()
    traced = models.build("resnet50", **kw).trace()
    if bar:
        bar.update()
    _say(f"traced {traced.num_nodes} nodes in {time.perf_counter() - t:.1f} s")
    plans = {}
    budget = None
    for s in STRATEGIES:
        t = time.perf_counter()
        try:
            plans[s] = plan(traced, "auto", strategy=s, device="v100-nvlink2")
            budget = plans[s].budget
        except BudgetError as e:
            plans[s] = None
            budget = e.budget
        if bar:
            bar.update()
    if bar:
        bar.close()
    first = next((p for p in plans.values() if p is not None), None)
    memory = json.loads(_core.device_preset("v100-nvlink2"))["memory_bytes"]
    _say(
        f"budget {fmt_bytes(budget or 0)}: the V100's {fmt_bytes(memory)} less "
        f"{AUTO_RESERVE:.0%} kept free for allocator fragmentation and kernel workspace "
        "(budget='auto')"
    )
    if first is not None:
        o = first.original
        _say(f"original step: peak {fmt_bytes(o['peak_bytes'])} > budget {fmt_bytes(budget or 0)}")
    _say(summary_table(plans, budget))
    main = "hybrid" if plans.get("hybrid") else next((k for k, v in plans.items() if v), "hybrid")
    files = write_report(plans, main, out)
    _say("report: " + ", ".join(str(f) for f in files.values()))


def _stage_run(out: Path) -> bool:
    from . import models
    from .report import fmt_bytes, write_report
    from .trialing import trial

    _say(
        "\n== 2. A real training step, rewritten and run on CPU emulation "
        "(/device:CPU:0 = device, /device:CPU:1 = host)"
    )
    t = trial(models.build(SMALL_MODEL, **SMALL), fraction=SMALL_BUDGET_FRACTION, steps=3)
    persistent = t.plan.report["persistent_bytes"]
    _say(
        f"{SMALL_MODEL}: {t.plan.report['num_nodes']} nodes; budget {fmt_bytes(t.plan.budget)} "
        f"= variables and optimizer slots {fmt_bytes(persistent)} + "
        f"{fmt_bytes(t.activation_budget)} for activations (the largest kernel scratch, "
        f"{fmt_bytes(t.predicted_scratch)}, + {SMALL_BUDGET_FRACTION:.0%} of the rest of "
        f"the original's activation peak); inserted {t.inserted}"
    )
    losses = ", ".join(f"{float(np.asarray(v).mean()):.6f}" for v in t.planned.losses)
    _say(f"losses over {len(t.planned.losses)} steps: {losses}")
    same = t.same_losses and t.same_weights
    _say(
        "losses and weights match the original bit for bit"
        if same
        else "LOSSES OR WEIGHTS DIFFER FROM THE ORIGINAL"
    )
    notes = [
        f"device activation memory (variables excluded): budget {fmt_bytes(t.activation_budget)}, "
        f"predicted {fmt_bytes(t.predicted_peak)}, measured {fmt_bytes(t.planned.device_peak)} "
        f"(original: measured {fmt_bytes(t.original.device_peak)})",
        f"of which kernel scratch ({t.workspace}): predicted {fmt_bytes(t.predicted_scratch)}, "
        f"measured {fmt_bytes(t.planned.device_scratch)}; tensors measured "
        f"{fmt_bytes(t.planned.device_tensor_peak)} "
        f"(original {fmt_bytes(t.original.device_tensor_peak)})",
    ]
    if not t.within_budget:
        notes.append(
            f"MEASURED PEAK OVER BUDGET: {fmt_bytes(t.planned.device_peak)} > "
            f"{fmt_bytes(t.activation_budget)}; the plan predicted {fmt_bytes(t.predicted_peak)} "
            f"with the workspace rule {t.workspace!r}: the difference is memory the model "
            "does not have (kernel scratch measured "
            f"{fmt_bytes(t.planned.device_scratch)}, predicted {fmt_bytes(t.predicted_scratch)})"
        )
    if not same:
        notes.append(
            "LOSSES OR WEIGHTS DIFFER: the rewritten step computed different numbers from "
            "the original's (see docs/how-it-works.md, Numerics)"
        )
    for line in notes:
        _say(line)
    o, n = t.original.step_time, t.planned.step_time
    _say(f"measured step time {o * 1e3:.1f} ms -> {n * 1e3:.1f} ms")
    secs, used = t.planned.timeline
    files = write_report(
        {"hybrid": t.plan},
        "hybrid",
        out / SMALL_MODEL,
        measured=(secs, used + t.plan.report["persistent_bytes"]),
        notes=notes,
    )
    _say("report with the measured curve: " + str(files["report.html"]))
    return same and t.within_budget
