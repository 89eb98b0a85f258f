"""Plan quality on the workloads of the published results, judged by the simulator.

    python experiments/quality.py [--quick] [--out docs/quality.md]

For each row: trace the model's training step at the published input size
(tracing allocates no activations), take the smallest batch whose original
step exceeds the budget, plan it with every strategy, and report the peak and
the predicted step time of each plan (``-`` where no plan fits). GraphDefs are
cached in ``experiments/.cache/``. ``--out`` rewrites the file up to its first ``## ``
heading and keeps the sections from there on (the page's text on the table).
"""

from __future__ import annotations

import argparse
import datetime
import os
import pathlib
import platform
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import hybridplan
from hybridplan.report import fmt_bytes

CACHE = pathlib.Path(__file__).parent / ".cache"
GIB = 2**30

# (label, workload, kwargs, device, budget): the seed rows (published results on
# a V100 32 GB with NVLink 2.0) and the same models on an H100 over PCIe 5.
ROWS = [
    ("ResNet-50 8000x8000", "resnet50", {"size": 8000}, "v100-nvlink2", 32 * GIB),
    ("ResNet-152 7500x7500", "resnet152", {"size": 7500}, "v100-nvlink2", 32 * GIB),
    ("DeepLabV3+ 1008x1008", "deeplabv3plus", {"size": 1008}, "v100-nvlink2", 32 * GIB),
    ("3D U-Net 192^3", "unet3d", {"size": 192, "base_filters": 32}, "v100-nvlink2", 32 * GIB),
    ("ResNet-50 8000x8000", "resnet50", {"size": 8000}, "h100-pcie5", 80 * GIB),
    ("ResNet-152 7500x7500", "resnet152", {"size": 7500}, "h100-pcie5", 80 * GIB),
    ("DeepLabV3+ 1008x1008", "deeplabv3plus", {"size": 1008}, "h100-pcie5", 80 * GIB),
    ("3D U-Net 192^3", "unet3d", {"size": 192, "base_filters": 32}, "h100-pcie5", 80 * GIB),
]
QUICK_ROWS = [
    ("ResNet-50 2048x2048", "resnet50", {"size": 2048}, "v100-nvlink2", 8 * GIB),
    ("3D U-Net 96^3", "unet3d", {"size": 96, "base_filters": 16}, "v100-nvlink2", 4 * GIB),
]
BATCHES = (1, 2, 4, 8, 16, 32, 64)


def traced_graph(model: str, kw: dict, batch: int) -> bytes:
    """The serialized train-step GraphDef, traced once and cached."""
    CACHE.mkdir(exist_ok=True)
    key = "_".join([model, *(f"{k}{v}" for k, v in sorted(kw.items())), f"b{batch}"])
    path = CACHE / f"{key}.pb"
    if not path.exists():
        from hybridplan import models

        t = time.perf_counter()
        traced = models.build(model, batch=batch, **kw).trace()
        path.write_bytes(traced.graph_def.SerializeToString())
        print(
            f"  traced {key}: {traced.num_nodes} nodes in {time.perf_counter() - t:.0f} s",
            file=sys.stderr,
        )
    return path.read_bytes()


def smallest_batch_over(model: str, kw: dict, budget: int) -> tuple[int, bytes]:
    for b in BATCHES:
        data = traced_graph(model, kw, b)
        if hybridplan.analyze(data).peak_bytes > budget:
            return b, data
    raise SystemExit(f"{model} {kw} fits {budget} bytes even at batch {BATCHES[-1]}")


def row(label: str, model: str, kw: dict, device: str, budget: int) -> list[str]:
    batch, data = smallest_batch_over(model, kw, budget)
    a = hybridplan.analyze(data)
    cells = [label, device, str(batch), fmt_bytes(budget), fmt_bytes(a.peak_bytes)]
    times: dict[str, float] = {}
    base = None
    for s in hybridplan.STRATEGIES:
        t = time.perf_counter()
        try:
            p = hybridplan.plan(data, budget, strategy=s, device=device)
            base = p.original["step_time_s"]
            times[s] = p.planned["step_time_s"]
            cells.append(f"{fmt_bytes(p.planned['peak_bytes'])} / {p.planned['step_time_s']:.3f} s")
        except hybridplan.BudgetError as e:
            cells.append(f"no plan (best {fmt_bytes(e.best_peak)})")
        print(f"  {label} {device} {s}: {time.perf_counter() - t:.2f} s to plan", file=sys.stderr)
    cells.insert(5, f"{base:.3f} s" if base else "-")
    for strategy, baseline in (("hybrid-paper", "tflms"), ("swap", "tflms"), ("hybrid", "swap")):
        b, t = times.get(baseline), times.get(strategy)
        cells.append(f"{(b / t - 1) * 100:+.1f}%" if b and t else "-")
    return cells


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="two small rows")
    ap.add_argument("--out", help="also write the markdown here")
    args = ap.parse_args()
    head = [
        "workload",
        "device",
        "batch",
        "budget",
        "original peak",
        "original step",
        *hybridplan.STRATEGIES,
        "hybrid-paper vs tflms",
        "swap vs tflms",
        "hybrid vs swap",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in QUICK_ROWS if args.quick else ROWS:
        lines.append("| " + " | ".join(row(*r)) + " |")
        print(lines[-1], flush=True)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    text = (
        f"Measured {datetime.date.today()} on {platform.node() or 'this machine'}, commit "
        f"{commit}, with `python experiments/quality.py{' --quick' if args.quick else ''}`.\n"
        "Each strategy cell: predicted peak / predicted step time (the simulator's). "
        "A speed-up `a vs b` is b's predicted step time divided by a's, minus one.\n\n"
        + "\n".join(lines)
    )
    print(text)
    if args.out:
        out = pathlib.Path(args.out)
        # The page's own sections (from its first "## " heading on) are kept.
        old = out.read_text() if out.exists() else ""
        keep = old[old.index("\n## ") :] if "\n## " in old else ""
        out.write_text(text + "\n" + keep)


if __name__ == "__main__":
    main()
