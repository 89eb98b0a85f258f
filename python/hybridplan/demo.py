"""``hybridplan demo``: the main job end to end on built-in models.

1. Trace ResNet-50's training step at a resolution whose activations do not
   fit a 32 GB V100, plan it with every strategy for ``v100-nvlink2``, print
   the table and write the report (HTML, pictures, JSON plan).
2. Run a real, small training step (a 3D U-Net) rewritten for CPU emulation
   (two logical CPUs stand for device and host): the losses must equal the
   original's bit for bit, and the measured device peak is printed next to
   the predicted one and the budget.

Nothing is downloaded: models are built with ``weights=None``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

__all__ = ["run_demo"]

#: Stage 1: ResNet-50 at 4096x4096, batch 2 (about 53 GB of activations).
BIG = {"size": 4096, "batch": 2}
BIG_QUICK = {"size": 1024, "batch": 2}
#: Stage 2: a 3D U-Net small enough to train on two CPU cores.
SMALL = {"size": 32, "batch": 1, "levels": 3}
#: Stage 2 budget: persistent bytes plus this fraction of the original
#: activation peak.
SMALL_BUDGET_FRACTION = 0.7


def _say(msg: str) -> None:
    print(msg, flush=True)


def run_demo(out_dir: str | Path, quick: bool = False) -> int:
    """Runs both stages; returns 0 when the rewritten step matched the original."""
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

        return tqdm(total=total, desc=desc, file=sys.stderr, leave=False)
    except ImportError:  # pragma: no cover - tqdm is in the [tf] extra
        return None


def _stage_plan(out: Path, kw: dict) -> None:
    from . import models
    from .errors import BudgetError
    from .planning import STRATEGIES, plan
    from .report import fmt_bytes, summary_table, write_report

    _say(
        f"== 1. ResNet-50 at {kw['size']}x{kw['size']}, batch {kw['batch']}, "
        "on a V100 32 GB with NVLink 2.0 (v100-nvlink2)"
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
    if first is not None:
        o = first.original
        _say(f"original step: peak {fmt_bytes(o.peak_bytes)} > budget {fmt_bytes(budget or 0)}")
    _say(summary_table(plans, budget))
    main = "hybrid" if plans.get("hybrid") else next((k for k, v in plans.items() if v), "hybrid")
    files = write_report(plans, main, out)
    _say("report: " + ", ".join(str(f) for f in files.values()))


def _stage_run(out: Path) -> bool:
    from . import analyze, models
    from .applying import apply
    from .measuring import measure
    from .report import fmt_bytes

    _say(
        "\n== 2. A real training step, rewritten and run on CPU emulation "
        "(/device:CPU:0 = device, /device:CPU:1 = host)"
    )
    w = models.build("unet3d", **SMALL)
    traced = w.trace()
    a = analyze(traced)
    budget = a.persistent_bytes + int(a.activation_peak_bytes * SMALL_BUDGET_FRACTION)
    r = apply(
        traced, budget, strategy="hybrid", device="cpu", target="cpu-emulation", min_bytes=1 << 12
    )
    _say(f"3D U-Net {SMALL}: {a.num_nodes} nodes; inserted {r.report['inserted']}")
    base = measure(traced, None, w.batch, steps=3)
    new = measure(traced, r.graph_def, w.batch, steps=3)
    same = len(base.losses) == len(new.losses) and all(
        np.array_equal(x, y) for x, y in zip(base.losses, new.losses, strict=True)
    )
    losses = ", ".join(f"{float(np.asarray(v).mean()):.6f}" for v in new.losses)
    _say(f"losses over {len(new.losses)} steps: {losses}")
    _say("losses match the original bit for bit" if same else "LOSSES DIFFER FROM THE ORIGINAL")
    act_budget = budget - a.persistent_bytes
    predicted = r.plan.planned.peak_bytes - a.persistent_bytes
    _say(
        f"device activation memory (variables excluded): budget {fmt_bytes(act_budget)}, "
        f"predicted {fmt_bytes(predicted)}, measured {fmt_bytes(new.device_peak)} "
        f"(original: predicted {fmt_bytes(a.activation_peak_bytes)}, "
        f"measured {fmt_bytes(base.device_peak)})"
    )
    _say(f"measured step time {base.step_time * 1e3:.1f} ms -> {new.step_time * 1e3:.1f} ms")
    return same
