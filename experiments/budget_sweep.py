"""The budget sweep: step time of every strategy from the unbounded peak down to the
smallest peak any strategy reaches, per workload at the papers' sizes.

For each workload (ResNet-50 8000x8000, ResNet-152 7488x7488, DeepLabV3+ 992x992, 3D
U-Net 192^3; batch 1, as ``experiments/fit_table.py``) on ``v100-nvlink2``: traces the
step once (or reads it from ``--cache``, the ``hybridplan.fit`` cache format:
``DIR/NAME/SIZE.pb`` and ``SIZE.loss``), asks every strategy for its smallest peak
(planning at a budget of one byte: ``BudgetError.best_peak``), then plans every strategy
at ``--points`` budgets evenly spaced from the unbounded peak down to the smallest of
those peaks, plus each strategy's own smallest peak. Then checks the targets of issue 21:

(a) at every budget, ``hybrid``'s step time is the lowest of all strategies' (exact
    comparison of the simulator's figures: no tolerance);
(b) where some strategy's step equals the unbounded step (exactly), ``hybrid`` is
    within 1% of it;
(c) at the device's ``budget="auto"`` (32 GB less 8%), hybrid's speedup over ``tflms``
    (``t_tflms / t_hybrid - 1``) against the papers' (15.5%, 15.3%, 12.4%), with the
    ceiling no plan can pass (``t_tflms / t_unbounded - 1``: no plan is faster than the
    step without one) and the link figures of the ``tflms`` plan.

Writes a PNG and its own section of docs/fit.md (between the ``budget-sweep``
markers); ``--json`` the data too.

    python experiments/budget_sweep.py --cache /work/fitcache
    python experiments/budget_sweep.py --workloads resnet50 --points 8  # one workload
    python experiments/budget_sweep.py --graphs /work/fitcache/resnet50_b2/*.pb  # checks only

Not a test and not imported by tests.
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
from hybridplan import fitting
from hybridplan.errors import BudgetError

#: (builder arguments, the paper's size (rounded to the model's multiple as
#: fit_table.py rounds it), the paper's reported gain over swap-only, label)
WORKLOADS = {
    # key (the cache directory): (workload, builder arguments, size, paper's gain, label)
    "resnet50": ("resnet50", {"batch": 1}, 8000, 0.155, "ResNet-50 8000x8000, batch 1"),
    "resnet152": ("resnet152", {"batch": 1}, 7488, 0.153, "ResNet-152 7488x7488, batch 1"),
    "deeplabv3plus": ("deeplabv3plus", {"batch": 1}, 992, 0.124, "DeepLabV3+ 992x992, batch 1"),
    "deeplabv3plus_b8": (
        "deeplabv3plus",
        {"batch": 8},
        992,
        0.124,
        "DeepLabV3+ 992x992, batch 8",
    ),
    "unet3d": (
        "unet3d",
        {"batch": 1, "base_filters": 32, "levels": 4},
        192,
        None,
        "3D U-Net 192^3, batch 1",
    ),
    "unet3d_b2": (
        "unet3d",
        {"batch": 2, "base_filters": 32, "levels": 4},
        192,
        None,
        "3D U-Net 192^3, batch 2",
    ),
}
STRATEGIES = ["none", *hybridplan.STRATEGIES]
DEVICE = "v100-nvlink2"
BEGIN, END = "<!-- budget-sweep:begin -->", "<!-- budget-sweep:end -->"
GiB = 2**30


def traced(key: str, cache: Path) -> tuple[bytes, str | None, float]:
    """The step's GraphDef bytes and loss name at the paper's size, via fit's cache;
    or a cached graph's file (``DIR/SIZE.pb``) as it is."""
    if key.endswith(".pb"):
        path = Path(key)
        return path.read_bytes(), path.with_suffix(".loss").read_text() or None, 0.0
    name, fixed, size, _, _ = WORKLOADS[key]
    build, *_ = fitting._builder(name, "size", dict(fixed))
    d = cache / key
    d.mkdir(parents=True, exist_ok=True)
    pr = fitting._Prober(build, {}, d, lambda m: None)
    (data, loss), seconds = pr.graph(size)
    return data, loss, seconds


def by_need(a, p) -> float:
    """The simulated step of plan ``p`` with its swaps listed by when each is first
    needed (the schedule position of its first swap-in's first consumer) and no copy
    queued behind another (``follows`` dropped): the copy engines then serve copies
    ready at the same instant in plan order (``simulate/link.rs``). The planners list
    swaps so already and queue the copies one op releases (``plan/queue.rs``), so this
    column shows what the queues change. A what-if, not a plan: uses the core's
    ``simulate_plan`` (private)."""
    from hybridplan import _core

    none = 2**32 - 1
    tf = a._core.tensor_facts()
    tid = {
        (int(n), int(i)): t for t, (n, i) in enumerate(zip(tf["node"], tf["index"], strict=True))
    }
    order = list(a._core.order)
    pos = {int(v): k for k, v in enumerate(order)}

    def need(s: dict) -> int:
        return min(min(pos[c] for c in i["consumers"] + i["clone_consumers"]) for i in s["ins"])

    swaps = [
        {
            "tensor": tid[(s["node"], s["output"])],
            "after": s["after"],
            "ins": [
                {k: i[k] for k in ("trigger", "consumers", "clone_consumers")} for i in s["ins"]
            ],
            "release": s["release"]["node"] if s.get("release") else none,
            "gate": s["gate"]["node"] if s.get("gate") else none,
        }
        for s in sorted(p.swaps, key=need)
    ]
    recs = [
        {k: r[k] for k in ("nodes", "trigger", "consumers", "clone_consumers")}
        for r in p.recomputes
    ]
    plan = json.dumps({"swaps": swaps, "recomputes": recs})
    core = _core.simulate_plan(a._core, plan, p.budget, "hybrid", device=DEVICE)
    return core.report()["planned"]["step_time_s"]


def plan_one(a, budget: int, strategy: str) -> dict:
    """One strategy at one budget: its figures, or the smallest peak it reached."""
    t0 = time.perf_counter()
    try:
        p = hybridplan.plan(a, budget, strategy=strategy, device=DEVICE, host_budget=None)
    except BudgetError as e:
        return {"fits": False, "best_peak": e.best_peak, "seconds": time.perf_counter() - t0}
    f = p.planned
    return {
        "fits": True,
        "step_time_s": f["step_time_s"],
        "peak_bytes": f["peak_bytes"],
        "compute_time_s": f["compute_time_s"],
        "recompute_time_s": f["recompute_time_s"],
        "stall_time_s": f["stall_time_s"],
        "bytes_d2h": f["bytes_d2h"],
        "bytes_h2d": f["bytes_h2d"],
        "host_peak_bytes": f["host_peak_bytes"],
        "winner": p.strategy,
        "seconds": time.perf_counter() - t0,
    }


def spaced(lo: int, hi: int, n: int) -> set[int]:
    """``n`` budgets evenly spaced from ``hi`` down to ``lo`` (both included)."""
    return {hi - (hi - lo) * i // (n - 1) for i in range(n)} if n > 1 else {hi}


def sweep(name: str, cache: Path, points: int, dense: int, say) -> dict:
    data, loss, t_trace = traced(name, cache)
    how = "read" if t_trace < 1 else f"traced in {t_trace:.0f} s"
    say(f"{name}: graph of {len(data)} bytes ({how})")
    a = hybridplan.analyze(data, loss=loss, device=DEVICE)
    # The unbounded step: any strategy at the unplanned peak returns the empty plan.
    unb = plan_one(a, a.peak_bytes, "swap")
    assert unb["winner"] == "none", unb

    def plan_at(b: int, s: str) -> dict:
        if s == "none":  # no plan: fits where the unplanned peak does
            return dict(unb) if b >= a.peak_bytes else {"fits": False, "best_peak": a.peak_bytes}
        return plan_one(a, b, s)

    floor = {s: plan_at(1, s)["best_peak"] for s in STRATEGIES}
    lo = min(floor.values())
    hi = a.peak_bytes
    auto = int(
        hybridplan.device_model(DEVICE)["memory_bytes"] * (1 - hybridplan.planning.AUTO_RESERVE)
    )
    # The table's budgets: evenly spaced, each strategy's smallest peak, 32 GB less the
    # reserve; the checks and the picture also take the denser grid.
    shown = spaced(lo, hi, points) | {v for v in [*floor.values(), auto] if lo <= v <= hi}
    budgets = sorted(shown | spaced(lo, hi, dense), reverse=True)
    say(
        f"{name}: unbounded peak {hi / GiB:.2f} GiB, step {unb['step_time_s']:.4f} s; "
        f"smallest peak {lo / GiB:.2f} GiB; {len(budgets)} budgets"
    )
    rows = []
    for b in budgets:
        row = {"budget": b, "shown": b in shown, "plans": {s: plan_at(b, s) for s in STRATEGIES}}
        rows.append(row)
        say(
            f"{name}: {b / GiB:7.2f} GiB  "
            + "  ".join(
                f"{s}={p['step_time_s']:.4f}" if p["fits"] else f"{s}=-"
                for s, p in row["plans"].items()
            )
        )
    # Target (c): at 32 GB less the reserve; where tflms finds no plan there, also at
    # the smallest budget tflms fits (its own smallest peak).
    at = [(auto, {s: plan_at(auto, s) for s in STRATEGIES})]
    if not at[0][1]["tflms"]["fits"] and floor["tflms"] <= hi:
        at.append((floor["tflms"], {s: plan_at(floor["tflms"], s) for s in STRATEGIES}))
    for b, plans in at:
        if plans["hybrid"]["fits"]:
            p = hybridplan.plan(a, b, strategy="hybrid", device=DEVICE, host_budget=None)
            plans["hybrid"]["by_need_s"] = by_need(a, p) if p.swaps else p.planned["step_time_s"]
    return {
        "workload": name,
        "label": WORKLOADS.get(name, (None,) * 4 + (name,))[4],
        "size": WORKLOADS.get(name, (None,) * 5)[2],
        "nodes": a.num_nodes,
        "persistent_bytes": a.persistent_bytes,
        "unbounded_peak": hi,
        "unbounded_step_s": unb["step_time_s"],
        "floor": floor,
        "rows": rows,
        "auto_budget": auto,
        "at": at,
        "paper_gain": WORKLOADS.get(name, (None,) * 5)[3],
        "dense": dense,
    }


def check(res: dict) -> dict:
    """Targets (a) and (b) on one workload's sweep."""
    misses_a, misses_b = [], []
    unb = res["unbounded_step_s"]
    for row in res["rows"]:
        fit = {s: p["step_time_s"] for s, p in row["plans"].items() if p["fits"]}
        if not fit:
            continue
        best = min(fit.values())
        h = fit.get("hybrid")
        if h is None or h > best:
            who = min(fit, key=fit.get)
            misses_a.append({"budget": row["budget"], "hybrid": h, "best": best, "by": who})
        if any(t == unb for t in fit.values()) and (h is None or h > 1.01 * unb):
            misses_b.append({"budget": row["budget"], "hybrid": h, "unbounded": unb})
    return {"a": misses_a, "b": misses_b}


def figs(t: dict, h: dict, fn) -> str:
    """``fn`` of the tflms and the hybrid plan, each where it has one."""
    return "; ".join(f"{n} {fn(p)}" for n, p in (("tflms", t), ("hybrid", h)) if p["fits"])


def fmt_t(p: dict) -> str:
    return f"{p['step_time_s']:.4f}" if p["fits"] else "-"


def section(results: list[dict], png: str, cmd: str, commit: str, dense: int) -> str:
    out = [
        BEGIN,
        "## Budget sweep at the papers' sizes",
        "",
        f"Command (commit {commit}): `{cmd}`. Simulator, `{DEVICE}`, no host budget; each "
        "step traced once (the `fit` cache). Budgets in the tables: evenly spaced from the "
        "unbounded peak down to the smallest peak any strategy reaches, each strategy's "
        f"smallest peak, and 32 GB less 8%; the picture and the checks also take {dense} "
        "evenly spaced. A strategy's smallest peak is the one it reached when asked for one "
        "byte (`BudgetError.best_peak`); asked for that peak as its budget, it need not find "
        "a plan (its greedy's path depends on the budget). A cell is the step time in "
        "seconds; `-`: the strategy finds no plan "
        "within that budget. `hybrid from` names the candidate plan `hybrid` kept (`hybrid`: "
        "its greedy over swaps and recomputes; `hybrid-paper`: the published loop from the "
        "`swap` or the `tflms` plan; `none`: no plan needed).",
        "",
        f"![step time against budget]({png})",
        "",
    ]
    for r in results:
        c = r["checks"]
        out += [
            f"### {r['label']}",
            "",
            f"Unbounded: peak {r['unbounded_peak'] / GiB:.2f} GiB, step "
            f"{r['unbounded_step_s']:.4f} s (persistent {r['persistent_bytes'] / GiB:.2f} GiB). "
            "Smallest peak each strategy reached when asked for one byte (GiB): "
            + ", ".join(f"{s} {v / GiB:.2f}" for s, v in r["floor"].items())
            + ".",
            "",
            "| budget (GiB) | " + " | ".join(STRATEGIES) + " | hybrid from |",
            "|---:|" + "---:|" * len(STRATEGIES) + "---|",
        ]
        for row in (row for row in r["rows"] if row["shown"]):
            h = row["plans"]["hybrid"]
            out.append(
                f"| {row['budget'] / GiB:.2f} | "
                + " | ".join(fmt_t(row["plans"][s]) for s in STRATEGIES)
                + f" | {h.get('winner', '-') if h['fits'] else '-'} |"
            )
        n = len(r["rows"])
        reach = sum(
            any(
                p["fits"] and p["step_time_s"] == r["unbounded_step_s"]
                for p in row["plans"].values()
            )
            for row in r["rows"]
        )

        def misses(ms: list[dict]) -> str:
            return "; ".join(
                f"{m['budget'] / GiB:.3f} GiB: hybrid {m['hybrid']}, "
                f"{m.get('by', 'unbounded')} {m.get('best', m.get('unbounded'))}"
                for m in ms
            )

        out += [
            "",
            f"Checked at {n} budgets (these and an even grid of {r['dense']}): "
            "(a) `hybrid`'s step the lowest of all strategies (exact comparison): "
            + ("yes, at all" if not c["a"] else f"NO at {len(c['a'])}: {misses(c['a'])}")
            + f"; (b) at the {reach} budgets where some plan runs at the unbounded step, "
            "`hybrid` within 1% of it: "
            + ("yes, at all" if not c["b"] else f"NO at {len(c['b'])}: {misses(c['b'])}")
            + ".",
            "",
        ]
    out += [
        "### Hybrid against `tflms` and `swap` at 32 GB",
        "",
        'At `budget="auto"` (32 GB less 8%: 29.44 GiB) and, where `tflms` finds no plan '
        "there, at the smallest budget `tflms` fits. Speedup = t(other) / t(hybrid) - 1. "
        "Ceiling = t(tflms) / t(unbounded) - 1: no plan runs faster than the step without "
        "one, so a row whose ceiling is below the paper's gain cannot reach it. Link time: "
        "bytes copied each way / the device's link bandwidth (68 GB/s each way), next to the "
        "compute stream's time (ops and clones).",
        "",
        "| workload | budget (GiB) | unbounded (s) | tflms (s) | swap (s) | hybrid (s) | "
        "over tflms | over swap | ceiling | paper | hybrid, copies by need (s) | over tflms | "
        "compute (s) | stall (s) | "
        "D2H, H2D (GiB) | link time D2H, H2D (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|---|",
    ]
    for r in results:
        unb = r["unbounded_step_s"]
        paper = f"{100 * r['paper_gain']:.1f}%" if r["paper_gain"] is not None else "-"
        for budget, plans in r["at"]:
            t, w, h = plans["tflms"], plans["swap"], plans["hybrid"]

            def gain(o: dict, h: dict = h) -> str:
                if not (o["fits"] and h["fits"]):
                    return "-"
                return f"{100 * (o['step_time_s'] / h['step_time_s'] - 1):.1f}%"

            ceil = f"{100 * (t['step_time_s'] / unb - 1):.1f}%" if t["fits"] else "-"

            bn = h.get("by_need_s")
            bn_s = f"{bn:.4f}" if bn is not None else "-"
            bn_g = f"{100 * (t['step_time_s'] / bn - 1):.1f}%" if bn and t["fits"] else "-"
            c_s = figs(t, h, lambda p: f"{p['compute_time_s'] + p['recompute_time_s']:.3f}")
            st_s = figs(t, h, lambda p: f"{p['stall_time_s']:.3f}")
            b_s = figs(t, h, lambda p: f"{p['bytes_d2h'] / GiB:.1f}, {p['bytes_h2d'] / GiB:.1f}")
            l_s = figs(t, h, lambda p: f"{p['link_s'][0]:.3f}, {p['link_s'][1]:.3f}")
            out.append(
                f"| {r['label']} | {budget / GiB:.2f} | {unb:.4f} | {fmt_t(t)} | {fmt_t(w)} | "
                f"{fmt_t(h)} | {gain(t)} | {gain(w)} | {ceil} | {paper} | {bn_s} | {bn_g} | "
                f"{c_s} | {st_s} | {b_s} | {l_s} |"
            )
    out += ["", END]
    return "\n".join(out)


def picture(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(results)
    cols = 2 if n > 1 else 1
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 4.2 * rows), squeeze=False)
    marks = dict(zip(STRATEGIES, "os^vDxP", strict=True))
    for ax, r in zip(axes.flat, results, strict=False):
        for s in STRATEGIES:
            xs = [row["budget"] / GiB for row in r["rows"] if row["plans"][s]["fits"]]
            ys = [row["plans"][s]["step_time_s"] for row in r["rows"] if row["plans"][s]["fits"]]
            lw, z = (2.6, 3) if s == "hybrid" else (1.2, 2)
            ax.plot(xs, ys, marker=marks[s], ms=4, lw=lw, zorder=z, label=s)
        ax.axhline(r["unbounded_step_s"], color="grey", ls=":", lw=1)
        if r["auto_budget"] <= r["unbounded_peak"]:
            ax.axvline(r["auto_budget"] / GiB, color="grey", ls="--", lw=1)
        ax.set_title(r["label"], fontsize=10)
        ax.set_xlabel("budget (GiB)")
        ax.set_ylabel("step time (s)")
        ax.invert_xaxis()
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(
        f"Step time per strategy against the budget, {DEVICE} (simulator); "
        "dotted: unbounded step, dashed: 32 GB less 8%; hybrid (thick) drawn last, over swap",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    global DEVICE
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workloads", nargs="*", default=list(WORKLOADS), choices=list(WORKLOADS))
    ap.add_argument("--points", type=int, default=16, help="evenly spaced budgets (table)")
    ap.add_argument(
        "--check-points", type=int, default=64, help="evenly spaced budgets (checks, picture)"
    )
    ap.add_argument("--cache", default="/work/fitcache")
    ap.add_argument(
        "--graphs",
        nargs="*",
        default=[],
        help="cached graphs (DIR/SIZE.pb) to check (a) and (b) on only: no table or picture",
    )
    ap.add_argument("--json", default="", help="write the data here too")
    ap.add_argument("--png", default="docs/img/budget_sweep.png")
    ap.add_argument("--doc", default="docs/fit.md", help="'' to leave the docs alone")
    ap.add_argument("--commit", default="(uncommitted)")
    ap.add_argument(
        "--device",
        default=DEVICE,
        help="device preset (default v100-nvlink2, the papers' GPU class; the docs' "
        "section and picture are that device's: use --doc '' --png '' for another)",
    )
    args = ap.parse_args()
    DEVICE = args.device

    def say(msg: str) -> None:
        print(f"sweep: {msg}", file=sys.stderr, flush=True)

    dev = hybridplan.device_model(DEVICE)
    results = []
    for name in args.graphs or args.workloads:
        t0 = time.perf_counter()
        r = sweep(name, Path(args.cache), args.points, args.check_points, say)
        for _, plans in r["at"]:
            for p in plans.values():
                if p["fits"]:
                    p["link_s"] = (
                        p["bytes_d2h"] / dev["d2h_bandwidth"],
                        p["bytes_h2d"] / dev["h2d_bandwidth"],
                    )
        r["checks"] = check(r)
        r["seconds"] = time.perf_counter() - t0
        say(f"{name}: checks {r['checks']}; {r['seconds']:.0f} s")
        results.append(r)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if args.graphs:
        bad = [r["workload"] for r in results if r["checks"]["a"] or r["checks"]["b"]]
        print(f"{len(results)} graphs checked; misses on: {bad or 'none'}")
        return 1 if bad else 0
    Path(args.png).parent.mkdir(parents=True, exist_ok=True)
    picture(results, Path(args.png))
    cmd = "python " + " ".join(["experiments/budget_sweep.py", *sys.argv[1:]])
    text = section(
        results,
        os.path.relpath(args.png, Path(args.doc).parent),
        cmd,
        args.commit,
        args.check_points,
    )
    print(text)
    if args.doc:
        doc = Path(args.doc)
        old = doc.read_text()
        if BEGIN in old and END in old:
            new = old[: old.index(BEGIN)] + text + old[old.index(END) + len(END) :]
        else:
            new = old.rstrip("\n") + "\n\n" + text + "\n"
        doc.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
