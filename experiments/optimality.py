"""The optimality gap: every strategy's predicted step time over the exact optimum's.

    python experiments/optimality.py [--quick] [--sizes 0,1,2,3] [--device a100-pcie4]
                                 [--time-limit 60] [--out docs/optimality.md] [--json rows.json]

Graphs: the four small training-shaped families of ``families.py`` (layer-level
chains, residual networks, U-Nets, random layered DAGs; 20 to ~110 nodes).
Budgets: 0.9, 0.8, 0.6 and 0.4 of each graph's unbounded peak. Every plan is
judged by the same simulator; ``strategy="optimal"`` is the mixed-integer
optimum (``hybridplan.optimal``). Writes the table into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import time

import hybridplan
from hybridplan.errors import BudgetError, HybridplanError
from hybridplan.testing import families

STRATEGIES = ("swap", "recompute", "hybrid-paper", "hybrid")
FRACTIONS = (0.9, 0.8, 0.6, 0.4)


def run(device: str, sizes: tuple[int, ...], time_limit: float) -> list[dict]:
    rows = []
    for fam, label, data, loss in families.graphs(sizes):
        # Every strategy in the formulation's memory model (separate buffers, no
        # in-place forwarding), where the optimum is exact (docs/optimality.md).
        a = hybridplan.analyze(data, loss=loss, separate_buffers=True)
        peak, nodes = a.peak_bytes, a.num_nodes
        for frac in FRACTIONS:
            budget = int(peak * frac)
            row = {"family": fam, "graph": label, "nodes": nodes, "fraction": frac}
            for s in (*STRATEGIES, "optimal"):
                t0 = time.perf_counter()
                try:
                    p = hybridplan.plan(
                        data,
                        budget,
                        strategy=s,
                        device=device,
                        loss=loss,
                        time_limit=time_limit,
                        separate_buffers=True,
                    )
                    row[s] = p.planned["step_time_s"]
                    if s == "optimal":
                        row["solver"] = p.report.get("optimal", {})
                except BudgetError:
                    row[s] = None
                except HybridplanError as e:  # the solver found no plan in time
                    row[s], row["solver"] = None, {"status": "no plan in time", "error": str(e)}
                row[f"{s}_s"] = time.perf_counter() - t0
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def table(rows: list[dict]) -> str:
    """Markdown: ratios per case, geometric means per family, misses."""
    out = ["| graph | nodes | budget | " + " | ".join(STRATEGIES) + " | optimum (ms) | solver |"]
    out.append("|---|---:|---:|" + "---:|" * len(STRATEGIES) + "---:|---|")
    for r in rows:
        opt = r["optimal"]
        cells = []
        for s in STRATEGIES:
            if r[s] is None:
                cells.append("-" if opt is None else "**none**")
            else:
                cells.append("-" if opt is None else f"{r[s] / opt:.3f}")
        solver = r.get("solver", {})
        how = f"{solver.get('status', '')} {solver.get('solve_time_s', 0):.1f} s" if opt else ""
        timeout = solver.get("status") == "no plan in time"
        ms = ("no plan in time" if timeout else "infeasible") if opt is None else f"{opt * 1e3:.4f}"
        line = f"| {r['graph']} | {r['nodes']} | {r['fraction']} | " + " | ".join(cells)
        out.append(line + f" | {ms} | {how} |")
    out += [
        "",
        "Geometric mean of step time / optimum over the cases both fit, and misses "
        "(cases the optimum solved where the strategy found no plan):",
        "",
    ]
    out.append("| family | " + " | ".join(STRATEGIES) + " |")
    out.append("|---|" + "---|" * len(STRATEGIES))
    fams = sorted({r["family"] for r in rows}, key=families.FAMILIES.index)
    for fam in [*fams, "all"]:
        sel = [r for r in rows if (fam == "all" or r["family"] == fam) and r["optimal"]]
        cells = []
        for s in STRATEGIES:
            ratios = [r[s] / r["optimal"] for r in sel if r[s] is not None]
            miss = sum(r[s] is None for r in sel)
            worst = max(ratios, default=float("nan"))
            cells.append(f"{_geomean(ratios):.3f} (max {worst:.3f}; {miss}/{len(sel)} none)")
        out.append(f"| {fam} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the smallest graph of each family")
    ap.add_argument("--sizes", default="0,1,2,3", help="graph sizes 0..3 (~20 to ~100 nodes)")
    ap.add_argument("--device", default="a100-pcie4")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--out", type=pathlib.Path)
    ap.add_argument("--json", type=pathlib.Path)
    a = ap.parse_args()
    sizes = (0,) if a.quick else tuple(int(x) for x in a.sizes.split(","))
    rows = run(a.device, sizes, a.time_limit)
    text = table(rows)
    print(text)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    if a.out:
        a.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
