"""hybridplan on models it was not developed on: ``keras.applications`` architectures.

The reference models (``hybridplan.models``) are what the planner was developed on. This
script checks the general claim on architectures it was not: each
``keras.applications`` model (``weights=None``, 10 classes, SGD with momentum, small
inputs so that a step runs on two CPU cores) is traced, planned at ``--fraction`` of its
predicted activation peak for the ``cpu`` device model, rewritten for CPU emulation and
run next to the original (:func:`hybridplan.trial`: 3 steps, op determinism on,
Grappler's arithmetic optimiser off on both sides). Per model: the graph's size, the
budget and predicted peak (activations only), the measured device peaks of the
original and of the plan, and whether every loss and weight came out bit for bit::

    python experiments/applications.py                   # all models, writes docs/applications.md
    python experiments/applications.py --models MobileNetV2,VGG16 --no-docs
    python experiments/applications.py --strategy recompute --fraction 0.7 --no-docs

The table goes between ``<!-- applications:begin -->`` and ``<!-- applications:end -->``
in ``docs/applications.md`` (the rest of the page is kept; ``--no-docs`` to skip).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

#: name -> smallest input side the architecture accepts (square RGB images).
MODELS = {
    "MobileNetV2": 64,
    "MobileNetV3Small": 64,
    "EfficientNetB0": 64,
    "EfficientNetV2B0": 64,
    "DenseNet121": 64,
    "ResNet50V2": 64,
    "Xception": 75,
    "InceptionV3": 75,
    "NASNetMobile": 64,
    "ConvNeXtTiny": 64,
    "VGG16": 64,
}
DOC = Path(__file__).resolve().parent.parent / "docs" / "applications.md"
BEGIN, END = "<!-- applications:begin -->", "<!-- applications:end -->"


def workload(name: str, size: int, batch: int) -> Any:
    """The model as a :class:`hybridplan.models.Workload` (random weights, seed 0)."""
    import keras
    import tensorflow as tf

    from hybridplan import models

    keras.utils.set_random_seed(0)
    kwargs: dict[str, Any] = {"weights": None, "input_shape": (size, size, 3), "classes": 10}
    if name.startswith("MobileNetV3"):
        kwargs["include_preprocessing"] = False
    net = getattr(keras.applications, name)(**kwargs)
    x = tf.TensorSpec([batch, size, size, 3], tf.float32)
    return models.from_keras(net, x, tf.TensorSpec([batch], tf.int32), 10, name=name)


def run_one(name: str, size: int, batch: int, fraction: float, strategy: str) -> dict:
    from hybridplan.errors import BudgetError
    from hybridplan.trialing import trial

    w = workload(name, size, batch)
    t0 = time.perf_counter()
    row: dict[str, Any] = {"model": name, "size": size, "batch": batch}
    try:
        t = trial(w, fraction=fraction, strategy=strategy)
    except BudgetError as e:
        row.update(error=f"no plan: best peak {e.best_peak / 1e6:.2f} MB (incl. variables)")
        return row
    row.update(
        nodes=len(w.trace().graph_def.node),
        budget=t.activation_budget,
        predicted=t.predicted_peak,
        original=t.original.device_peak,
        measured=t.planned.device_peak,
        identical=t.same_losses and t.same_weights,
        swaps=t.inserted["swap_out"],
        clones=t.inserted["clones"],
        seconds=time.perf_counter() - t0,
    )
    return row


def table(rows: list[dict], fraction: float, strategy: str) -> str:
    mb = 1e6
    out = [
        f"Strategy `{strategy}` at {fraction} of the predicted activation peak; device "
        "model `cpu`; MB of activations (variables excluded). Measured: device peak "
        "over 3 traced steps of one Session.",
        "",
        "| model | input | nodes | budget | predicted | measured original | measured plan "
        "| plan / budget | swaps / clones | bit-identical |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        head = f"| {r['model']} | {r['batch']}x{r['size']}^2 |"
        if "error" in r:
            out.append(f"{head} - | - | - | - | - | - | - | {r['error']} |")
            continue
        ratio = r["measured"] / r["budget"]
        over = "" if ratio <= 1 else " **over**"
        out.append(
            f"{head} {r['nodes']:,} | {r['budget'] / mb:.2f} | {r['predicted'] / mb:.2f} "
            f"| {r['original'] / mb:.2f} | {r['measured'] / mb:.2f} | {ratio:.2f}{over} "
            f"| {r['swaps']} / {r['clones']} | {'yes' if r['identical'] else '**no**'} |"
        )
    return "\n".join(out)


def write_doc(text: str) -> None:
    page = DOC.read_text()
    a, b = page.index(BEGIN) + len(BEGIN), page.index(END)
    DOC.write_text(page[:a] + "\n" + text + "\n" + page[b:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated names")
    ap.add_argument("--fraction", type=float, default=0.6)
    ap.add_argument("--strategy", default="hybrid")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args()

    import tensorflow as tf

    tf.config.experimental.enable_op_determinism()
    names = [m for m in args.models.split(",") if m]
    unknown = [m for m in names if m not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; known: {sorted(MODELS)}")
    rows = []
    for name in names:
        row = run_one(name, MODELS[name], args.batch, args.fraction, args.strategy)
        print(row, flush=True)
        rows.append(row)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    header = (
        f"Measured on {platform.machine()} with {os.cpu_count()} logical CPUs "
        f"(TensorFlow {tf.__version__}), {datetime.date.today()}, commit `{commit}`; "
        f"`python experiments/applications.py`."
    )
    text = header + "\n\n" + table(rows, args.fraction, args.strategy)
    print(text)
    if not args.no_docs and set(names) == set(MODELS):
        write_doc(text)
    bad = [r["model"] for r in rows if r.get("identical") is False]
    if bad:
        print(f"NOT bit-identical: {bad}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
