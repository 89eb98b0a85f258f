"""The seed table restated: the largest size each strategy fits, per workload and device.

For each workload (ResNet-50, ResNet-152, DeepLabV3+, 3D U-Net) and device
(v100-nvlink2 32 GB, h100-pcie5 80 GB, h200-pcie5 141 GB) runs ``hybridplan.fit`` over
the input side (every strategy and no plan), then plans every strategy at the papers'
size on v100-nvlink2 (the papers' GPU class). One trace per size serves every device
(``--cache``). Writes a Markdown fragment and a JSON file.

    python experiments/fit_table.py --out docs/fit_table.md --json docs/fit_table.json
    python experiments/fit_table.py --workloads resnet50 --devices v100-nvlink2  # one row

Not a test and not imported by tests; figures go into docs/fit.md with this command.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import hybridplan
from hybridplan.errors import BudgetError

#: (workload, builder arguments, the paper's size, the paper's reported gain over swap)
WORKLOADS = {
    "resnet50": ({"batch": 1}, 8000, 0.155),
    "resnet152": ({"batch": 1}, 7500, 0.153),
    "deeplabv3plus": ({"batch": 1}, 1000, 0.124),
    "unet3d": ({"batch": 1, "base_filters": 32, "levels": 4}, 192, None),
}
DEVICES = ["v100-nvlink2", "h100-pcie5", "h200-pcie5"]
ROUND_TO = {"resnet50": 32, "resnet152": 32, "deeplabv3plus": 16, "unet3d": 8}


def at_paper_size(name: str, fixed: dict, size: int, device: str, cache: Path) -> dict:
    """Every strategy at the paper's size (rounded to the model's multiple); the traced
    step is read from (or written to) ``cache`` in ``hybridplan.fit``'s format."""
    from hybridplan._files import write_all
    from hybridplan._graphio import graph_bytes

    mult = ROUND_TO[name]
    n = mult * round(size / mult)
    pb = cache / f"{n}.pb"
    if pb.exists():
        data, loss = pb.read_bytes(), pb.with_suffix(".loss").read_text() or None
    else:
        data, loss = graph_bytes(hybridplan.models.build(name, size=n, **fixed).trace())
        write_all({pb: data, pb.with_suffix(".loss"): (loss or "").encode()})
    out: dict = {"size": n}
    for s in hybridplan.STRATEGIES:
        try:
            p = hybridplan.plan(
                data, "auto", strategy=s, loss=loss, device=device, host_budget=None
            )
            out[s] = {
                "step_time_s": p.planned["step_time_s"],
                "peak": p.planned["peak_bytes"],
                "unbounded_step_s": p.original["step_time_s"],
            }
        except BudgetError as e:
            out[s] = {"best_peak": e.best_peak}
    return out


def paper_table(name: str, res: dict) -> str:
    """The papers'-size rows as Markdown: step time, and gain over tflms."""
    tf = res.get("tflms", {}).get("step_time_s")
    lines = [
        f"{name} at {res['size']} on v100-nvlink2:",
        "",
        "| strategy | step (s) | peak (GiB) | faster than tflms |",
        "|---|---:|---:|---:|",
    ]
    steps = [
        r["unbounded_step_s"]
        for r in res.values()
        if isinstance(r, dict) and "unbounded_step_s" in r
    ]
    unbounded = steps[0] if steps else 0.0
    lines.append(f"| none (unbounded step) | {unbounded:.4g} | - | - |")
    for s in hybridplan.STRATEGIES:
        r = res[s]
        if "step_time_s" not in r:
            lines.append(f"| {s} | no plan (best peak {r['best_peak'] / 2**30:.2f} GiB) | - | - |")
            continue
        gain = f"{tf / r['step_time_s'] - 1:+.1%}" if tf else "-"
        lines.append(f"| {s} | {r['step_time_s']:.4g} | {r['peak'] / 2**30:.2f} | {gain} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workloads", nargs="*", default=list(WORKLOADS))
    ap.add_argument("--devices", nargs="*", default=DEVICES)
    ap.add_argument("--tol", type=float, default=0.03)
    ap.add_argument("--cache", default="/tmp/hybridplan-fit-cache")
    ap.add_argument("--out", default="fit_table.md")
    ap.add_argument("--json", default="fit_table.json")
    ap.add_argument("--no-paper", action="store_true", help="skip the papers' sizes")
    ap.add_argument("--paper-only", action="store_true", help="only the papers' sizes")
    args = ap.parse_args()
    results: dict = {}
    lines = []
    for name in args.workloads:
        fixed, paper, _gain = WORKLOADS[name]
        for dev in [] if args.paper_only else args.devices:
            t0 = time.perf_counter()
            f = hybridplan.fit(
                name,
                device=dev,
                over="size",
                host_budget=None,
                tol=args.tol,
                start=ROUND_TO[name] * 8,
                cache=Path(args.cache) / name,
                **fixed,
            )
            results.setdefault(name, {})[dev] = {
                "budget": f.budget,
                "rows": [r.__dict__ for r in f.rows],
                "probes": f.probes,
                "seconds": time.perf_counter() - t0,
            }
            secs = time.perf_counter() - t0
            lines += [
                f"### {name} on {dev} (budget {f.budget / 2**30:.1f} GiB; "
                f"{len(f.probes)} sizes probed, {secs:.0f} s)",
                "",
                f.table(),
                "",
            ]
            print("\n".join(lines[-4:]), flush=True)
        if not args.no_paper:
            res = at_paper_size(name, fixed, paper, "v100-nvlink2", Path(args.cache) / name)
            results.setdefault(name, {})["paper"] = res
            lines += [paper_table(name, res), ""]
            print(lines[-2], flush=True)
        # written after each workload, so that an interrupted run keeps what it made
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
        Path(args.out).write_text("\n".join(lines) + "\n")
    Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}, {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
