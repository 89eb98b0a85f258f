"""End-to-end timing of ``hybridplan.apply`` from Python, split into its parts.

For synthetic training steps (``hybridplan.testing.synthetic_graphdef``) of about 10^4, 10^5 and
10^6 nodes, each size in a fresh subprocess (so that the peak RSS is per size)::

    python benches/e2e.py                 # 10^4, 10^5, 10^6 and a traced ResNet-152
    python benches/e2e.py --quick         # 10^4 only, one run, no ResNet-152
    python benches/e2e.py --sizes 10000 --repeat 5 --no-resnet --json out.json

Columns (seconds; each the median over ``--repeat`` runs, ``--repeat-large`` at 10^6):

- ``generate``: ``hybridplan.testing.synthetic_graphdef(n, kind)`` (bytes, made by the Rust core);
- ``analyze``: ``hybridplan.analyze(bytes)`` alone;
- ``parse``: ``GraphDef.FromString(bytes)``;
- ``serialise``: ``GraphDef.SerializeToString()`` of the parsed graph (what ``apply`` does
  when handed a ``GraphDef`` or a traced step rather than bytes);
- ``core``: ``hybridplan.plan(bytes, budget, strategy, device)``;
- ``write-back``: ``rewriting.rewrite_with_summary(bytes, plan)`` on the serialized
  GraphDef, as ``apply`` calls it (target ``gpu``): the decisions as the core planned them
  (``Plan.report`` not built), one parse of the bytes, then the edits;
- ``report``: the first read of ``plan.report`` after that (the report's JSON decoded into
  Python objects), which ``plan``, the write-back and ``apply`` leave to the caller;
- ``apply``: one ``hybridplan.apply(bytes, budget, ...)`` call, timed on its own; it does
  core + parse + write-back (not generate, analyze or serialise);
- ``nodes/s``: nodes / ``apply``.

With several ``--kind``s, each kind's ``core`` and ``apply`` are also given as ratios to
those of the kind with the fewest swaps at the same size, from the same run (medians, and
the calls of ``core`` listed).

The budget is half the analysed peak (``analyze(b).peak_bytes // 2``); if ``plan`` raises
``BudgetError`` a larger fraction is tried (0.6, 0.7, 0.8, 0.9) and the table says which.
``RSS`` is the peak resident set of the size's subprocess (``getrusage``, after the runs);
``RSS base`` the same just after importing TensorFlow and hybridplan.

The ResNet-152 row traces ``hybridplan.models.resnet152(size=224, batch=2)`` once
(tracing time reported, not counted) and times ``apply`` on the traced step, whose
``graph_bytes`` serialises the traced ``GraphDef`` first (so ``serialise`` is inside
``apply`` there).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

DEFAULT_SIZES = (10_000, 100_000, 1_000_000)
FRACTIONS = (0.5, 0.6, 0.7, 0.8, 0.9)
STRATEGY = "hybrid"
DEVICE = "v100-nvlink2"
TARGET = "gpu"
PARTS = ("generate", "analyze", "parse", "serialise", "core", "write_back", "report", "apply")


def _rss_mib() -> float:
    """Peak resident set of this process in MiB (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - t0, out


def _kernel_s() -> float:
    """The kernel's CPU seconds in this process so far (page faults are most of it)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime


def _choose_budget(hybridplan: Any, data: Any, peak: int) -> tuple[int, float, list[dict]]:
    """Half the analysed peak, or the first larger fraction that plans; also what each
    refused fraction's ``BudgetError`` said (the smallest peak reached)."""
    refused: list[dict] = []
    for frac in FRACTIONS:
        budget = int(peak * frac) if frac != 0.5 else peak // 2
        try:
            hybridplan.plan(data, budget, strategy=STRATEGY, device=DEVICE)
        except hybridplan.BudgetError as e:
            refused.append({"fraction": frac, "budget": budget, "best_peak": e.best_peak})
            continue
        return budget, frac, refused
    raise SystemExit(f"no budget in {FRACTIONS} of the peak {peak} could be planned")


def _median_parts(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def child_synthetic(nodes: int, kind: str, repeat: int) -> dict[str, Any]:
    """Times every part on one synthetic size; runs in its own process."""
    from tensorflow.core.framework import graph_pb2

    import hybridplan
    from hybridplan.rewriting import rewrite_with_summary

    rss_base = _rss_mib()
    data = hybridplan.testing.synthetic_graphdef(nodes, kind)
    peak = hybridplan.analyze(data).peak_bytes
    budget, frac, refused = _choose_budget(hybridplan, data, peak)
    del data
    runs: list[dict[str, float]] = []
    facts: dict[str, Any] = {}
    for _ in range(repeat):
        t: dict[str, float] = {}
        t["generate"], data = _timed(hybridplan.testing.synthetic_graphdef, nodes, kind)
        t["analyze"], analysis = _timed(hybridplan.analyze, data)
        t["parse"], gd = _timed(graph_pb2.GraphDef.FromString, data)
        t["serialise"], serialised = _timed(gd.SerializeToString)
        del gd, serialised  # the peak RSS is apply's, not that of copies kept alive
        k0 = _kernel_s()
        t["core"], plan = _timed(hybridplan.plan, data, budget, strategy=STRATEGY, device=DEVICE)
        t["core_kernel"] = _kernel_s() - k0
        t0 = time.perf_counter()
        out = rewrite_with_summary(data, plan, target=TARGET)
        t["write_back"] = time.perf_counter() - t0
        del out
        t["report"], _ = _timed(getattr, plan, "report")
        t["apply"], result = _timed(
            hybridplan.apply, data, budget, strategy=STRATEGY, device=DEVICE, target=TARGET
        )
        runs.append(t)
        facts = {
            "nodes": analysis.num_nodes,
            "bytes": len(data),
            "peak": analysis.peak_bytes,
            "persistent": analysis.persistent_bytes,
            "planned_peak": result.plan.planned["peak_bytes"],
            "swaps": len(result.plan.swaps),
            "recomputes": len(result.plan.recomputes),
            "inserted": dict(result.report["inserted"]),
            "out_nodes": len(result.graph_def.node),
        }
        del result, analysis, data
    return {
        "name": f"{kind} {nodes:.0e}".replace("e+0", "e"),
        "target_nodes": nodes,
        "kind": kind,
        "budget": budget,
        "fraction": frac,
        "refused": refused,
        "repeat": repeat,
        "runs": runs,
        "median": _median_parts(runs),
        "rss_base_mib": rss_base,
        "rss_mib": _rss_mib(),
        **facts,
    }


def child_resnet(repeat: int) -> dict[str, Any]:
    """Traces ResNet-152 once and times ``apply`` on the traced step."""
    from tensorflow.core.framework import graph_pb2

    import hybridplan
    from hybridplan import models
    from hybridplan._graphio import graph_bytes
    from hybridplan.rewriting import rewrite_with_summary

    rss_base = _rss_mib()
    t_trace, traced = _timed(lambda: models.resnet152(size=224, batch=2).trace())
    loss = graph_bytes(traced)[1]
    analysis = hybridplan.analyze(traced)
    budget, frac, refused = _choose_budget(hybridplan, traced, analysis.peak_bytes)
    runs: list[dict[str, float]] = []
    facts: dict[str, Any] = {}
    for _ in range(repeat):
        t: dict[str, float] = {}
        t["serialise"], data = _timed(traced.graph_def.SerializeToString)
        t["analyze"], _ = _timed(hybridplan.analyze, data, loss=loss)
        t["parse"], _ = _timed(graph_pb2.GraphDef.FromString, data)
        t["core"], plan = _timed(
            hybridplan.plan, data, budget, strategy=STRATEGY, device=DEVICE, loss=loss
        )
        t0 = time.perf_counter()
        rewrite_with_summary(data, plan, target=TARGET)
        t["write_back"] = time.perf_counter() - t0
        t["report"], _ = _timed(getattr, plan, "report")
        t["apply"], result = _timed(
            hybridplan.apply, traced, budget, strategy=STRATEGY, device=DEVICE, target=TARGET
        )
        runs.append(t)
        facts = {
            "nodes": analysis.num_nodes,
            "bytes": len(data),
            "peak": analysis.peak_bytes,
            "persistent": analysis.persistent_bytes,
            "planned_peak": result.plan.planned["peak_bytes"],
            "swaps": len(result.plan.swaps),
            "recomputes": len(result.plan.recomputes),
            "inserted": dict(result.report["inserted"]),
            "out_nodes": len(result.graph_def.node),
        }
    return {
        "name": "ResNet-152 224 b2",
        "kind": "traced",
        "trace_s": t_trace,
        "budget": budget,
        "fraction": frac,
        "refused": refused,
        "repeat": repeat,
        "runs": runs,
        "median": _median_parts(runs),
        "rss_base_mib": rss_base,
        "rss_mib": _rss_mib(),
        **facts,
    }


def _run_child(args: list[str], timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), *args]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"{' '.join(cmd)} failed with exit code {proc.returncode}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _fmt_s(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x * 1e3:.1f} ms" if x < 1 else f"{x:.2f} s"


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| graph | nodes | MB | runs | generate | analyze | parse | serialise | core "
        "| write-back | report | apply | apply min-max | nodes/s | swaps / clones | budget "
        "| RSS base | RSS peak |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        m = r["median"]
        budget = f"{r['fraction']:.1f} x peak" + (" (!)" if r["fraction"] != 0.5 else "")
        ins = r["inserted"]
        lines.append(
            f"| {r['name']} | {r['nodes']:,} | {r['bytes'] / 1e6:.1f} | {r['repeat']} "
            f"| {_fmt_s(m.get('generate'))} | {_fmt_s(m['analyze'])} | {_fmt_s(m['parse'])} "
            f"| {_fmt_s(m['serialise'])} | {_fmt_s(m['core'])} | {_fmt_s(m['write_back'])} "
            f"| {_fmt_s(m.get('report'))} | {_fmt_s(m['apply'])} "
            f"| {_fmt_s(min(x['apply'] for x in r['runs']))}-"
            f"{_fmt_s(max(x['apply'] for x in r['runs']))} | {r['nodes'] / m['apply']:,.0f} "
            f"| {ins['swap_out']} / {ins['clones']} | {budget} "
            f"| {r['rss_base_mib']:,.0f} MiB | {r['rss_mib']:,.0f} MiB |"
        )
    return "\n".join(lines)


def _core_calls(row: dict[str, Any]) -> str:
    """A synthetic row's ``core`` calls, each with the kernel's CPU time in it."""
    return ", ".join(
        f"{_fmt_s(x['core'])} (kernel {_fmt_s(x['core_kernel'])})" for x in row["runs"]
    )


def ratios(rows: list[dict[str, Any]]) -> list[str]:
    """Each synthetic row against the row of the same size with the fewest swaps, in this
    run: ``core`` and ``apply`` as ratios of the medians, the calls of ``core`` listed
    with the kernel's CPU time in each (issue 18's question: does the time grow with the
    plan? On a VM whose host takes freed memory back, first touches fault to the host:
    docs/scale.md, "Fresh memory"). Empty when no size has two kinds."""
    out: list[str] = []
    by_size: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        if "target_nodes" in r:
            by_size.setdefault(r["target_nodes"], []).append(r)
    for same in by_size.values():
        if len(same) < 2:
            continue
        base = min(same, key=lambda r: (r["swaps"], r["name"]))
        for r in same:
            if r is base:
                continue
            calls, base_calls = _core_calls(r), _core_calls(base)
            out.append(
                f"- {r['name']} ({r['swaps']:,} swaps) / {base['name']} ({base['swaps']:,} "
                f"swaps): core {r['median']['core'] / base['median']['core']:.2f}x, apply "
                f"{r['median']['apply'] / base['median']['apply']:.2f}x (medians; core calls "
                f"{calls} against {base_calls})"
            )
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="10^4 only, one run, no ResNet-152")
    ap.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES))
    ap.add_argument(
        "--kind",
        nargs="+",
        default=["mixed"],
        choices=("mixed", "residual", "transformer", "dag", "narrow"),
        help="synthetic kinds, each at every size, in one run (e.g. mixed narrow)",
    )
    ap.add_argument("--repeat", type=int, default=3, help="runs per size (median)")
    ap.add_argument("--repeat-large", type=int, default=3, help="runs at >= 10^6 nodes")
    ap.add_argument("--no-resnet", action="store_true", help="skip the traced ResNet-152")
    ap.add_argument("--json", help="also write every run to this file")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.child is not None:  # inside the per-size subprocess
        if args.child == "resnet":
            out = child_resnet(args.repeat)
        else:
            out = child_synthetic(int(args.child), args.kind[0], args.repeat)
        print(json.dumps(out))
        return

    sizes = [10_000] if args.quick else args.sizes
    repeat = 1 if args.quick else args.repeat
    rows = []
    for n in sizes:
        for kind in args.kind:
            rep = args.repeat_large if n >= 1_000_000 else repeat
            child = ["--child", str(n), "--kind", kind, "--repeat", str(rep)]
            rows.append(_run_child(child, timeout=3600))
            print(f"done: {rows[-1]['name']}", file=sys.stderr)
    if not (args.quick or args.no_resnet):
        rows.append(_run_child(["--child", "resnet", "--repeat", str(repeat)], timeout=3600))
        print(f"done: ResNet-152 (traced in {rows[-1]['trace_s']:.1f} s)", file=sys.stderr)
    print(table(rows))
    print()
    for r in rows:
        gib = 2**30
        print(
            f"- {r['name']}: analysed peak {r['peak'] / gib:.3f} GiB (persistent "
            f"{r['persistent'] / gib:.3f}), budget {r['budget'] / gib:.3f} GiB, planned peak "
            f"{r['planned_peak'] / gib:.3f} GiB, {r['nodes']:,} -> {r['out_nodes']:,} nodes"
            + (f"; traced in {r['trace_s']:.1f} s (not counted)" if "trace_s" in r else "")
            + "".join(
                f"; {x['fraction']:.1f} x peak refused (BudgetError, best peak "
                f"{x['best_peak'] / gib:.3f} GiB)"
                for x in r["refused"]
            )
        )
    compared = ratios(rows)
    if compared:
        print("\nAgainst the kind with the fewest swaps at the same size, in this run:\n")
        print("\n".join(compared))
    load = os.getloadavg()
    print(f"\nload average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
