"""Prepares, on a machine with hybridplan and TensorFlow, everything the GPU run needs.

    python experiments/gpu/prepare.py [--out experiments/gpu/out] [--device h200-pcie5]

Traces the two reference workloads (ResNet-50 and the transformer, at sizes whose
unplanned step fits an H200 so that its kernels can be measured whole), and writes
into ``--out`` one replay program per workload and plan: ``none`` (the step without a
plan, budget above its peak) and ``swap``, ``recompute`` and ``hybrid`` under one
budget below the step's peak (the smallest of 50..90% of the activations that all
three fit), predicted on ``--device``. Also writes ``manifest.json`` (what was
prepared, with the command). Then run ``experiments/gpu/run_gpu.py`` on the GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import hybridplan
from hybridplan import models
from hybridplan.replaying import replay, save_replay

#: (name, model, keyword arguments): unplanned steps of ~10-30 GB on an H200.
WORKLOADS = (
    ("resnet50", "resnet50", {"size": 224, "batch": 128}),
    (
        "transformer",
        "transformer",
        {"seq": 2048, "d_model": 1024, "heads": 16, "layers": 8, "batch": 8},
    ),
)
STRATEGIES = ("swap", "recompute", "hybrid")
FRACTIONS = (0.5, 0.6, 0.7, 0.8, 0.9)


def prepare(out: Path, device: str, workloads=WORKLOADS) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    manifest: dict = {"device": device, "workloads": {}, "command": " ".join(sys.argv)}
    for name, model, kw in workloads:
        t0 = time.perf_counter()
        traced = models.build(model, **kw).trace()
        pb = out / f"{name}.pb"
        pb.write_bytes(traced.graph_def.SerializeToString())
        a = hybridplan.analyze(pb)
        act = a.peak_bytes - a.persistent_bytes
        entry = {
            "model": model,
            "args": kw,
            "peak_bytes": a.peak_bytes,
            "persistent_bytes": a.persistent_bytes,
            "replays": {},
        }
        none = replay(pb, budget=a.peak_bytes, strategy="hybrid", device=device, loss=traced.loss)
        save_replay(none, out / f"{name}-none.json")
        entry["replays"]["none"] = f"{name}-none.json"
        for f in FRACTIONS:
            budget = a.persistent_bytes + int(act * f)
            try:
                plans = {
                    s: hybridplan.plan(pb, budget, strategy=s, device=device, loss=traced.loss)
                    for s in STRATEGIES
                }
            except hybridplan.BudgetError:
                continue
            entry["budget"], entry["fraction"] = budget, f
            for s, p in plans.items():
                r = replay(pb, p, device=device, loss=traced.loss)
                save_replay(r, out / f"{name}-{s}.json")
                entry["replays"][s] = f"{name}-{s}.json"
            break
        entry["prepare_s"] = round(time.perf_counter() - t0, 1)
        manifest["workloads"][name] = entry
        print(
            f"{name}: peak {a.peak_bytes / 2**30:.2f} GiB, budget "
            f"{entry.get('budget', 0) / 2**30:.2f} GiB, replays {sorted(entry['replays'])}"
        )
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(Path(__file__).parent / "out"))
    ap.add_argument("--device", default="h200-pcie5", help="preset or device file to predict on")
    args = ap.parse_args()
    prepare(Path(args.out), args.device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
