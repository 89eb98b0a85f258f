"""Writes docs/gpu.md from ``run_gpu.py``'s results JSON; without one, the page with
its tables marked "not yet measured on a GPU" and the commands that fill them.

    python experiments/gpu/make_docs.py [results.json] [-o docs/gpu.md]

Pure Python: needs neither PyTorch nor hybridplan.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

NOT_YET = "not yet measured on a GPU"
GB = 1e9

HEAD = """# hybridplan on a real GPU

Every other GPU figure in this project is the simulator's prediction. This page sets
the predictions next to measurements on one NVIDIA H200, made with PyTorch alone (no
TensorFlow runs there): the planned step is exported by the core as a *replay program*
(`hybridplan replay`, `rust/core/src/replay.rs`) and played by a standalone runner
(`replay/runner.py`): real kernels of the same shapes for the op types it
knows, a timed busy kernel of the predicted time for the rest, real asynchronous
copies to and from pinned host memory on their own streams, ordered with CUDA events
as the plan orders them, and real allocations (peak = `torch.cuda.max_memory_allocated`).

## How to reproduce

On a machine with hybridplan and TensorFlow (writes the replays into `experiments/gpu/out`):

    python experiments/gpu/prepare.py --device h200-pcie5

On the GPU machine (PyTorch with CUDA and numpy only; about 8 minutes at most):

    python experiments/gpu/run_gpu.py --replays experiments/gpu/out -o results.json

Back here, this page and a measured device description:

    python experiments/gpu/make_docs.py results.json -o docs/gpu.md
    python experiments/gpu/device_file.py results.json -o h200-measured.json
    hybridplan plan step.pb --device h200-measured.json ...

The replay format: `replay/replay.schema.json` (version 1). A CPU dry run
of the runner (same order, buffers and kernels; no streams, pinned memory or busy
kernels) is tested in `tests/test_gpu_runner.py` when PyTorch is installed.
"""


def _gbs(x: float | None) -> str:
    return "-" if x is None else f"{x / GB:.1f}"


def _r(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def link_table(res: dict | None) -> list[str]:
    rows = ["| direction | measured GB/s | preset GB/s | measured / preset |", "|---|---|---|---|"]
    if not res or not res.get("link"):
        for d in (
            "H2D (pinned)",
            "D2H (pinned)",
            "duplex H2D + D2H",
            "H2D (pageable)",
            "D2H (pageable)",
        ):
            rows.append(f"| {d} | {NOT_YET} | | |")
        return rows
    preset = res.get("preset", {})
    big = {
        r["pinned"]: r
        for r in res["link"]["sizes"]
        if r["bytes"] == max(x["bytes"] for x in res["link"]["sizes"])
    }
    p, q = big[True], big.get(False)
    ph, pd = preset.get("h2d_bandwidth"), preset.get("d2h_bandwidth")
    duplex = p["duplex_h2d_bytes_per_s"] + p["duplex_d2h_bytes_per_s"]
    pdup = (ph + pd) * preset.get("duplex_factor", 1.0) if ph and pd else None
    for name, m, ref in (
        ("H2D (pinned)", p["h2d_bytes_per_s"], ph),
        ("D2H (pinned)", p["d2h_bytes_per_s"], pd),
        ("duplex H2D + D2H", duplex, pdup),
        ("H2D (pageable)", q and q["h2d_bytes_per_s"], ph),
        ("D2H (pageable)", q and q["d2h_bytes_per_s"], pd),
    ):
        rows.append(f"| {name} | {_gbs(m)} | {_gbs(ref)} | {_r(m / ref if m and ref else None)} |")
    rows.append("")
    rows.append(
        f"At {p['bytes'] / 2**20:.0f} MiB per copy; by size in the results JSON (`link.sizes`)."
    )
    return rows


def kernel_table(res: dict | None, workloads: list[str]) -> list[str]:
    rows = [
        "| workload | op type | ops | predicted / measured (median) | worst |",
        "|---|---|---|---|---|",
    ]
    if not res:
        for w in workloads:
            rows.append(f"| {w} | every known op type | {NOT_YET} | | |")
        return rows
    for w, runs in res.get("runs", {}).items():
        none = runs.get("none")
        if not none or "per_op" not in none:
            rows.append(f"| {w} | - | {NOT_YET} | | |")
            continue
        by: dict[str, list[float]] = {}
        for o in none["per_op"]:
            if o["predicted_s"] > 0 and o["measured_s"] > 0:
                by.setdefault(o["op"], []).append(o["predicted_s"] / o["measured_s"])
        for op, rs in sorted(by.items(), key=lambda kv: -len(kv[1])):
            worst = max(rs, key=lambda x: abs(x - 1) if x >= 1 else abs(1 / x - 1))
            rows.append(f"| {w} | {op} | {len(rs)} | {statistics.median(rs):.2f} | {worst:.2f} |")
        m, p = none["measured"]["step_time_s"], none["predicted"]["step_time_s"]
        rows.append(f"| {w} | **whole step, no plan** | | {p / m:.2f} | |")
    return rows


def step_table(res: dict | None, workloads: list[str]) -> list[str]:
    rows = [
        "| workload | plan | step predicted s | step measured s | predicted / measured "
        "| peak predicted GiB | peak measured GiB | predicted / measured |",
        "|---|---|---|---|---|---|---|---|",
    ]
    if not res:
        for w in workloads:
            for s in ("none", "swap", "recompute", "hybrid"):
                rows.append(f"| {w} | {s} | {NOT_YET} | | | | | |")
        return rows
    for w, runs in res.get("runs", {}).items():
        for s, r in runs.items():
            p, m = r["predicted"], r["measured"]
            mp = m.get("peak_bytes")
            mgib = "-" if mp is None else f"{mp / 2**30:.2f}"
            pr = "-" if not mp else f"{p['peak_bytes'] / mp:.2f}"
            rows.append(
                f"| {w} | {s} | {p['step_time_s']:.4g} | {m['step_time_s']:.4g} | "
                f"{p['step_time_s'] / m['step_time_s']:.2f} | {p['peak_bytes'] / 2**30:.2f} | "
                f"{mgib} | {pr} |"
            )
    return rows


def page(res: dict | None) -> str:
    workloads = ["resnet50", "transformer"]
    out = [HEAD]
    if res:
        out.append(
            f"Measured on {res.get('gpu')} with PyTorch {res.get('torch')} "
            f"(CUDA {res.get('cuda')}), {res.get('elapsed_s')} s in all; the command is above.\n"
        )
        if res.get("errors") or res.get("skipped"):
            out.append(
                f"Errors: {[e['part'] for e in res.get('errors', [])]}; "
                f"skipped: {res.get('skipped')}.\n"
            )
    else:
        out.append(
            f"**Status: {NOT_YET}.** The runner has not run on a GPU yet; every table below "
            "is empty until `run_gpu.py` has run once.\n"
        )
    out += [
        "## Link",
        "",
        *link_table(res),
        "",
        "## Kernels (the unplanned step)",
        "",
        *kernel_table(res, workloads),
        "",
        "## Whole steps",
        "",
        *step_table(res, workloads),
        "",
    ]
    out.append(
        "Op types the runner has no kernel for run a busy kernel of their predicted time: "
        "their measured time checks the busy kernel, not the cost model. "
        "Fallbacks (a known type whose shapes the runner could not map) are listed per run "
        "in the results JSON (`fallbacks`).\n"
    )
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", nargs="?")
    ap.add_argument("-o", "--output", default=str(Path(__file__).parents[2] / "docs" / "gpu.md"))
    args = ap.parse_args()
    res = json.loads(Path(args.results).read_text()) if args.results else None
    Path(args.output).write_text(page(res))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
