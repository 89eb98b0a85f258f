"""Turns measured results (``run_gpu.py``'s JSON) into a device description file the
planner reads (``device=path``, ``--device path``; format in docs/devices.md).

    python experiments/gpu/device_file.py results.json [--base h200-pcie5] [-o h200-measured.json]

Link: ``h2d_bandwidth`` / ``d2h_bandwidth`` = each direction's pinned rate at the
largest size; ``link_latency_s`` = the time of the smallest pinned copy less its
bytes at that rate (the larger of the two directions); ``duplex_factor`` = the
rates while both directions ran, summed, over the two alone. Compute: the base
preset's figures scaled by the median predicted/measured time of the unplanned
steps' ops: ``flops_f32`` and ``flops_f16`` by the convolution and matmul classes,
``mem_bandwidth`` by the element-wise class. For per-op accuracy, ``profiles``
in the results give measured seconds per GraphDef node, which ``hybridplan.plan``
takes as ``profile=``. Pure Python: needs neither PyTorch nor hybridplan.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path


def link_figures(link: dict) -> dict:
    pinned = sorted((r for r in link["sizes"] if r["pinned"]), key=lambda r: r["bytes"])
    big, small = pinned[-1], pinned[0]
    h2d, d2h = big["h2d_bytes_per_s"], big["d2h_bytes_per_s"]
    lat = max(small["h2d_s"] - small["bytes"] / h2d, small["d2h_s"] - small["bytes"] / d2h, 0.0)
    duplex = (big["duplex_h2d_bytes_per_s"] + big["duplex_d2h_bytes_per_s"]) / (h2d + d2h)
    return {
        "h2d_bandwidth": h2d,
        "d2h_bandwidth": d2h,
        "link_latency_s": lat,
        "duplex_factor": min(max(duplex, 0.05), 1.0),
    }


def ratio(per_op: list[dict], classes: tuple[str, ...]) -> float | None:
    r = [
        o["predicted_s"] / o["measured_s"]
        for o in per_op
        if o.get("kernel") in classes and o["measured_s"] > 0 and o["predicted_s"] > 0
    ]
    return statistics.median(r) if r else None


def device_file(results: dict, base: dict) -> dict:
    dev = dict(base)
    dev["name"] = f"{base['name']}-measured"
    if results.get("link"):
        dev.update(link_figures(results["link"]))
    per_op = [
        o
        for w in results.get("runs", {}).values()
        if "none" in w
        for o in w["none"].get("per_op", [])
    ]
    compute = ratio(
        per_op, ("conv", "conv_backprop_input", "conv_backprop_filter", "matmul", "batch_matmul")
    )
    memory = ratio(per_op, ("elementwise",))
    if compute:
        dev["flops_f32"] = base["flops_f32"] * compute
        dev["flops_f16"] = base["flops_f16"] * compute
    if memory:
        dev["mem_bandwidth"] = base["mem_bandwidth"] * memory
    return dev


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results")
    ap.add_argument("--base", help="the preset's JSON (default: the one in the results)")
    ap.add_argument("-o", "--output", default="h200-measured.json")
    args = ap.parse_args()
    results = json.loads(Path(args.results).read_text())
    base = json.loads(Path(args.base).read_text()) if args.base else results["preset"]
    Path(args.output).write_text(json.dumps(device_file(results, base), indent=1))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
