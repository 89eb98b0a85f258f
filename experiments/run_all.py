"""Runs the whole benchmark suite and writes ``docs/benchmarks.md``.

    python experiments/run_all.py            # full run (about 20 minutes on 2 cores)
    python experiments/run_all.py --quick    # smoke run (about 2 minutes), report in a temp dir
    python experiments/run_all.py --from-json results.json --out report.md   # re-render only

Steps, each timed, with the load average sampled before and after:

1. **trace** the reference models with ``hybridplan trace`` into a temp dir: ResNet-50
   at 64x64, batch 2, the transformer and the 3D U-Net at their defaults (``--quick``:
   the transformer only);
2. **criterion**: ``cargo bench -p hybridplan-core --bench core --bench plan --bench
   simulate`` with ``HYBRIDPLAN_BENCH_GRAPHS`` (the traced graphs),
   ``HYBRIDPLAN_BENCH_1E6=1`` and ``HYBRIDPLAN_BENCH_FACTS`` (what each plan came to);
   the results are read from ``<target>/criterion/<group>/<bench>/new/`` (the target
   directory from ``CARGO_TARGET_DIR`` or ``cargo metadata``), only those this run
   wrote (``--quick``: criterion's ``--quick`` on the 10^3 and real-graph groups, no
   10^6 plans, no simulate);
3. **e2e**: ``benches/e2e.py`` at 10^4, 10^5, 10^6 nodes (``--quick``: its ``--quick``):
   ``hybridplan.apply`` end to end from Python, split into its parts, with peak RSS;
4. **planning memory**: in a fresh Python process without TensorFlow, the peak RSS of
   ``hybridplan.plan`` (``hybrid``) on the 10^6-node synthetic step (``--quick``: 10^4).

The report: machine, commit, date, command, load; the targets marked met or not
met with the figure; the scaling table (time per node per phase and per strategy, and
its ratio to 10^4); per-strategy plan times and outcomes; DAG vs mixed; the real graphs;
the end-to-end split; the memory. ``--json`` also saves every collected figure, which
``--from-json`` renders again without running anything.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import importlib.util
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BENCHES = REPO / "benches"
DEVICE = "v100-nvlink2"
SIZES = ("1e3", "1e4", "1e5", "1e6")
STRATEGIES = ("tflms", "swap", "recompute", "chen", "hybrid-paper", "hybrid")
CORE_PHASES = ("decode", "build", "graph_from_bytes", "schedule", "liveness", "analyze_total")
PLAN_PHASES = ("partition", "options", *STRATEGIES, "hybrid_total")
# (model, extra `hybridplan trace` arguments); the quick run traces the first only.
MODELS = (
    ("transformer", ()),
    ("resnet50", ("--size", "64", "--batch", "2")),
    ("unet3d", ()),
)
RSS_NODES = 1_000_000
GB = 1e9
MIB = 2**20

# Targets (docs/benchmarks.md, "Targets").
TARGET_PLAN_S = 1.0
TARGET_APPLY_S = 5.0
TARGET_MEMORY_BYTES = 2 * GB
TARGET_RATIO = 1.5


# ---------------------------------------------------------------------------
# Running the steps.


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _step(results: dict, name: str, fn: Callable[[], Any]) -> Any:
    """Runs one step, recording its wall time and the load average around it."""
    before = _load()
    print(f"== {name} (load average {before[0]:.2f})", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    out = fn()
    results["meta"]["steps"].append(
        {
            "step": name,
            "seconds": time.perf_counter() - t0,
            "load_before": before,
            "load_after": _load(),
        }
    )
    return out


def _run(cmd: list[str], log: Path, env: dict[str, str] | None = None, cwd: Path = REPO) -> str:
    """Runs a command, its output to ``log``; exits with the log's tail on failure."""
    with open(log, "w") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    text = log.read_text()
    if proc.returncode != 0:
        sys.stderr.write(text[-4000:])
        raise SystemExit(f"{' '.join(cmd)} failed with exit code {proc.returncode} (log {log})")
    return text


def trace_models(out_dir: Path, quick: bool, log_dir: Path) -> list[dict]:
    """Traces the reference models to ``out_dir/<model>.pb`` with ``hybridplan trace``."""
    traced = []
    for model, args in MODELS[:1] if quick else MODELS:
        path = out_dir / f"{model}.pb"
        cmd = [sys.executable, "-m", "hybridplan.cli", "trace", model, *args, "-o", str(path)]
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        t0 = time.perf_counter()
        text = _run(cmd, log_dir / f"trace_{model}.log", env)
        seconds = time.perf_counter() - t0
        line = next((x for x in text.splitlines() if x.startswith("wrote")), "")
        traced.append(
            {
                "model": model,
                "args": " ".join(args) or "(defaults)",
                "seconds": seconds,
                "bytes": path.stat().st_size,
                "said": line.strip(),
            }
        )
    return traced


def target_dir() -> Path:
    """Cargo's target directory: ``CARGO_TARGET_DIR``, else ``cargo metadata``'s."""
    if os.environ.get("CARGO_TARGET_DIR"):
        return Path(os.environ["CARGO_TARGET_DIR"]).resolve()
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    return Path(json.loads(out.stdout)["target_directory"])


def criterion_dir() -> Path:
    """Where criterion writes: ``CRITERION_HOME``, else ``<target>/criterion``."""
    home = os.environ.get("CRITERION_HOME")
    return Path(home) if home else target_dir() / "criterion"


def run_criterion(graphs: Path, facts: Path, quick: bool, log_dir: Path) -> None:
    env = dict(
        os.environ,
        HYBRIDPLAN_BENCH_GRAPHS=str(graphs),
        HYBRIDPLAN_BENCH_FACTS=str(facts),
        HYBRIDPLAN_BENCH_1E6="0" if quick else "1",
    )
    cmd = ["cargo", "bench", "-p", "hybridplan-core", "--bench", "core", "--bench", "plan"]
    if quick:
        cmd += ["--", "--quick", "_1e3/|^real_"]
    else:
        cmd += ["--bench", "simulate"]
    _run(cmd, log_dir / "criterion.log", env)


def collect_criterion(root: Path, since: float = 0.0) -> list[dict]:
    """Every criterion result under ``root`` written at or after ``since`` (epoch s).

    Times are per iteration in nanoseconds: the median and mean of criterion's
    estimates, and the fastest and slowest sample (sample time / iterations).
    """
    rows = []
    for bench_json in sorted(root.glob("*/*/new/benchmark.json")):
        new = bench_json.parent
        est_path = new / "estimates.json"
        if not est_path.exists() or est_path.stat().st_mtime < since:
            continue
        meta = json.loads(bench_json.read_text())
        est = json.loads(est_path.read_text())
        per_iter = []
        sample_path = new / "sample.json"
        if sample_path.exists():
            sample = json.loads(sample_path.read_text())
            per_iter = [t / n for t, n in zip(sample["times"], sample["iters"], strict=True) if n]
        rows.append(
            {
                "group": meta["group_id"],
                "bench": meta["function_id"],
                "nodes": (meta.get("throughput") or {}).get("Elements"),
                "median_ns": est["median"]["point_estimate"],
                "mean_ns": est["mean"]["point_estimate"],
                "min_ns": min(per_iter, default=None),
                "max_ns": max(per_iter, default=None),
            }
        )
    return rows


def read_facts(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def run_e2e(quick: bool, out: Path, log_dir: Path) -> list[dict]:
    args = ["--quick"] if quick else ["--sizes", "10000", "100000", "1000000", "--no-resnet"]
    cmd = [sys.executable, str(BENCHES / "e2e.py"), *args, "--json", str(out)]
    _run(cmd, log_dir / "e2e.log", dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    return json.loads(out.read_text())


def _rss_bytes() -> int:
    """Peak resident set of this process (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def child_memory(nodes: int, budget: int | None) -> dict:
    """In a fresh process: peak RSS after import, after generating the graph, and after
    ``analyze`` (``budget`` None) or a ``hybrid`` plan within ``budget``."""
    import hybridplan

    out: dict[str, Any] = {"nodes_requested": nodes, "rss_import": _rss_bytes()}
    data = hybridplan.testing.synthetic_graphdef(nodes, "mixed")
    out["graph_bytes"] = len(data)
    out["rss_graph"] = _rss_bytes()
    t0 = time.perf_counter()
    if budget is None:
        a = hybridplan.analyze(data)
        out.update(nodes=a.num_nodes, peak=a.peak_bytes, persistent=a.persistent_bytes)
    else:
        p = hybridplan.plan(data, budget, strategy="hybrid", device=DEVICE)
        out.update(budget=budget, planned_peak=p.planned["peak_bytes"], strategy=p.strategy)
    out["seconds"] = time.perf_counter() - t0
    out["rss_peak"] = _rss_bytes()
    # After the call: whether anything on its way loaded TensorFlow.
    out["tensorflow_loaded"] = "tensorflow" in sys.modules
    return out


def _child(args: list[str]) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"{' '.join(cmd)} failed with exit code {proc.returncode}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def planning_memory(nodes: int) -> dict:
    """Peak RSS of analysing, then of planning, the ``nodes``-node step, each in its own
    process; budget: persistent bytes plus half the activation peak."""
    analysed = _child(["--child-memory", str(nodes)])
    persistent = analysed["persistent"]
    budget = persistent + (analysed["peak"] - persistent) // 2
    planned = _child(["--child-memory", str(nodes), "--budget", str(budget)])
    return {"analyze": analysed, "plan": planned}


def _git(*args: str) -> str:
    out = subprocess.run(["git", *args], capture_output=True, text=True, cwd=REPO)
    return out.stdout.strip()


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _extension() -> dict:
    spec = importlib.util.find_spec("hybridplan")
    if spec is None or not spec.submodule_search_locations:
        return {}
    for p in sorted(Path(spec.submodule_search_locations[0]).glob("_core*.so")):
        digest = hashlib.sha256(p.read_bytes()).hexdigest()
        mtime = datetime.datetime.fromtimestamp(p.stat().st_mtime, datetime.UTC)
        return {"path": str(p), "sha256": digest, "mtime": mtime.strftime("%Y-%m-%d %H:%M UTC")}
    return {}


def machine(argv: list[str]) -> dict:
    rustc = subprocess.run(["rustc", "--version"], capture_output=True, text=True)
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_bytes": _mem_total(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "rustc": rustc.stdout.strip(),
        "commit": _git("rev-parse", "HEAD"),
        "dirty": _git("status", "--porcelain", "--untracked-files=no").splitlines(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join(["python", "experiments/run_all.py", *argv]),
        "extension": _extension(),
        "steps": [],
    }


def run_suite(args: argparse.Namespace, argv: list[str]) -> dict:
    results: dict[str, Any] = {"meta": machine(argv), "quick": args.quick}
    results["meta"]["load_start"] = _load()
    tmp = Path(tempfile.mkdtemp(prefix="hybridplan-bench-"))
    graphs = tmp / "graphs"
    graphs.mkdir()
    try:
        results["traced"] = _step(results, "trace", lambda: trace_models(graphs, args.quick, tmp))
        facts = tmp / "facts.jsonl"
        since = time.time() - 1
        _step(results, "criterion", lambda: run_criterion(graphs, facts, args.quick, tmp))
        results["criterion"] = collect_criterion(criterion_dir(), since)
        results["facts"] = read_facts(facts)
        results["e2e"] = _step(results, "e2e", lambda: run_e2e(args.quick, tmp / "e2e.json", tmp))
        nodes = 10_000 if args.quick else RSS_NODES
        results["memory"] = _step(results, "memory", lambda: planning_memory(nodes))
    finally:
        if args.keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    results["meta"]["load_end"] = _load()
    return results


# ---------------------------------------------------------------------------
# The report.


def fmt_time(ns: float | None) -> str:
    if ns is None:
        return "-"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}" if ns < 100 * scale else f"{ns / scale:.0f} {unit}"
    return f"{ns:.3g} ns"


def fmt_ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def _index(rows: list[dict]) -> dict[tuple[str, str], dict]:
    return {(r["group"], r["bench"]): r for r in rows}


def per_node(row: dict | None) -> float | None:
    """Median nanoseconds per node of a criterion row."""
    if not row or not row.get("nodes"):
        return None
    return row["median_ns"] / row["nodes"]


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def scaling_rows(crit: dict, prefix: str, phases: tuple[str, ...]) -> list[list[str]]:
    """Per phase: ns per node at each size, then each size's ratio to 10^4."""
    out = []
    for phase in phases:
        pn = {s: per_node(crit.get((f"{prefix}_{s}", phase))) for s in SIZES}
        if all(v is None for v in pn.values()):
            continue
        cells = [f"{v:.1f}" if v is not None else "-" for v in pn.values()]
        ratios = [fmt_ratio(_ratio(pn[s], pn["1e4"])) for s in ("1e3", "1e5", "1e6")]
        out.append([f"`{phase}`", *cells, *ratios])
    return out


def _table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _facts(results: dict) -> dict[tuple[str, str], dict]:
    return {(f["group"], f["bench"]): f for f in results.get("facts", [])}


def outcome(f: dict | None) -> str:
    """What one plan came to, from its facts line."""
    if not f:
        return "-"
    if not f.get("ok"):
        err = f.get("error", "")
        best = err.split("smallest peak reached is ", 1)[-1].split(" ")[0] if err else ""
        if best.isdigit() and f.get("peak"):
            return f"no plan (best peak {int(best) / f['peak']:.2f} of the peak)"
        return "no plan: " + err[:80]
    step = _ratio(f.get("planned_step_s"), f.get("original_step_s"))
    return (
        f"fits ({f['strategy']}): peak {f['planned_peak'] / f['peak']:.2f} of the original, "
        f"step {fmt_ratio(step)}, {f['swaps']} swaps / {f['recomputes']} recomputes, "
        f"{f['evaluations']} simulations"
    )


def budget_fraction(f: dict) -> float | None:
    act = f["peak"] - f["persistent"]
    return None if act <= 0 else (f["budget"] - f["persistent"]) / act


def targets(results: dict) -> list[dict]:
    """The targets: name, figure (text), met (True, False, None: not measured)."""
    crit = _index(results.get("criterion", []))
    out = []
    hyb = crit.get(("plan_mixed_1e6", "hybrid"))
    total = crit.get(("plan_mixed_1e6", "hybrid_total"))
    fig = "not measured (no 10^6 run)"
    if hyb:
        fig = f"{fmt_time(hyb['median_ns'])} (`plan_mixed_1e6/hybrid`, {hyb['nodes']:,} nodes)"
        if total:
            fig += f"; from bytes incl. analysis {fmt_time(total['median_ns'])}"
    met = None if not hyb else hyb["median_ns"] / 1e9 < TARGET_PLAN_S
    out.append({"target": "`hybrid` plan of 10^6 nodes < 1 s, one core", "figure": fig, "met": met})
    big = [r for r in results.get("e2e", []) if r.get("nodes", 0) >= 900_000]
    fig, met = "not measured (no 10^6 e2e run)", None
    if big:
        apply_s = big[0]["median"]["apply"]
        fig = f"{apply_s:.2f} s (`e2e.py`, {big[0]['nodes']:,} nodes, median of {big[0]['repeat']})"
        met = apply_s < TARGET_APPLY_S
    out.append({"target": "`apply` end to end of 10^6 nodes < 5 s", "figure": fig, "met": met})
    out.append(_memory_target(results.get("memory")))
    facts = _facts(results)
    for phase, group in (("analyze_total", "mixed"), ("hybrid", "plan_mixed")):
        out.append(_ratio_target(crit, facts, phase, group))
    return out


def _ratio_target(crit: dict, facts: dict, phase: str, group: str) -> dict:
    """Time per node at 10^6 over 10^4 (medians; also of the fastest samples, which the
    machine's load disturbs least; and, for a plan, the simulations each ran)."""
    big, small = crit.get((f"{group}_1e6", phase)), crit.get((f"{group}_1e4", phase))
    r = _ratio(per_node(big), per_node(small))
    fig = "not measured" if r is None else f"{r:.2f}x (`{group}_1e6/{phase}` per node, medians"
    if r is not None:
        fast = _ratio(
            big["min_ns"] / big["nodes"] if big.get("min_ns") else None,
            small["min_ns"] / small["nodes"] if small.get("min_ns") else None,
        )
        fig += "" if fast is None else f"; fastest samples {fast:.2f}x"
        f4, f6 = facts.get((f"{group}_1e4", phase)), facts.get((f"{group}_1e6", phase))
        if f4 and f6 and "evaluations" in f4 and "evaluations" in f6:
            fig += f"; {f4['evaluations']} simulations at 10^4, {f6['evaluations']} at 10^6"
        fig += ")"
    return {
        "target": f"time per node at 10^6 <= 1.5x 10^4: `{phase}`",
        "figure": fig,
        "met": None if r is None else r <= TARGET_RATIO,
    }


def _memory_target(mem: dict | None) -> dict:
    name = "planning memory of 10^6 nodes < 2 GB"
    if not mem or mem["plan"].get("nodes_requested", 0) < 900_000:
        return {"target": name, "figure": "not measured (no 10^6 run)", "met": None}
    peak = mem["plan"]["rss_peak"]
    fig = (
        f"{peak / GB:.2f} GB peak RSS of the planning process ({peak / MIB:,.0f} MiB; "
        f"{mem['plan']['rss_graph'] / MIB:,.0f} MiB before planning, with the graph's bytes)"
    )
    return {"target": name, "figure": fig, "met": peak < TARGET_MEMORY_BYTES}


def _mark(met: bool | None) -> str:
    return {True: "**met**", False: "**not met**", None: "not measured"}[met]


def section_machine(results: dict) -> str:
    m = results["meta"]
    mem = f"{m['memory_bytes'] / 2**30:.1f} GiB" if m.get("memory_bytes") else "unknown"
    dirty = (
        f", with uncommitted changes to {', '.join(x.split(maxsplit=1)[-1] for x in m['dirty'])}"
        if m.get("dirty")
        else ""
    )
    ext = m.get("extension") or {}
    rows = [
        ["CPU", f"{m['cpu']}, {m['cores']} cores ({m.get('cores_usable')} usable)"],
        ["memory", mem],
        ["software", f"{m['os']}, Python {m['python']}, {m['rustc']}"],
        ["commit", f"`{m['commit']}`{dirty}"],
        ["date", m["date"]],
        ["command", f"`{m['command']}`" + _rendered(m)],
        [
            "Python extension",
            f"`{ext.get('path', '?')}`, sha256 `{ext.get('sha256', '?')[:12]}…`, "
            f"built {ext.get('mtime', '?')} (the e2e and memory steps use this installed "
            "build, which need not be built from the commit above)",
        ],
        [
            "load average (1, 5, 15 min)",
            f"{_loads(m.get('load_start'))} at the start, {_loads(m.get('load_end'))} at the end",
        ],
    ]
    steps = [
        [s["step"], f"{s['seconds']:.0f} s", _loads(s["load_before"]), _loads(s["load_after"])]
        for s in m.get("steps", [])
    ]
    return (
        "## Machine and run\n\n"
        + _table(["", ""], rows)
        + "\n\n"
        + _table(["step", "wall time", "load before", "load after"], steps)
    )


def _rendered(m: dict) -> str:
    r = m.get("rendered")
    if not r:
        return ""
    return f"; this page rendered again from its saved figures by `{r['command']}` at {r['date']}"


def _loads(x: list[float] | None) -> str:
    return "-" if not x else " / ".join(f"{v:.2f}" for v in x)


def section_targets(results: dict) -> str:
    rows = [[t["target"], t["figure"], _mark(t["met"])] for t in targets(results)]
    return "## Targets\n\n" + _table(["target", "measured", "verdict"], rows)


def section_scaling(results: dict) -> str:
    crit = _index(results.get("criterion", []))
    head = ["phase", *(f"ns/node {s}" for s in SIZES), "1e3 / 1e4", "1e5 / 1e4", "1e6 / 1e4"]
    analysis = scaling_rows(crit, "mixed", CORE_PHASES)
    planning = scaling_rows(crit, "plan_mixed", PLAN_PHASES)
    return (
        "## Scaling: time per node, synthetic `mixed` steps\n\n"
        "Median time per iteration divided by the graph's node count (criterion's median "
        "estimate), and each size's time per node over the time per node at 10^4 (1.00x: "
        "linear). Analysis phases (`--bench core`):\n\n"
        + _table(head, analysis)
        + "\n\nPlanning (`--bench plan`; a strategy row is `api::plan_analysis` on the "
        "analysed graph; `hybrid_total` is `api::plan_bytes` from the bytes):\n\n"
        + _table(head, planning)
    )


def _plan_times(crit: dict, prefix: str) -> str:
    """Median time of every planning phase and strategy at each size (rows with a figure)."""
    times = [
        [f"`{s}`", *(fmt_time(_median(crit.get((f"{prefix}_{n}", s)))) for n in SIZES)]
        for s in ("partition", "options", *STRATEGIES, "hybrid_total")
    ]
    nodes = [_nodes(crit, f"{prefix}_{n}") for n in SIZES]
    head = ["", *(f"{n} ({x})" for n, x in zip(SIZES, nodes, strict=True))]
    return _table(head, [r for r in times if any(c != "-" for c in r[1:])])


def _outcomes(facts: dict, prefix: str, kind: str) -> str:
    sizes = SIZES
    rows = [
        [f"`{s}`", *(outcome(facts.get((f"{prefix}_{n}", s))) for n in sizes)] for s in STRATEGIES
    ]
    return _table([f"strategy, `{kind}`", *sizes], rows)


def section_strategies(results: dict) -> str:
    crit = _index(results.get("criterion", []))
    facts = _facts(results)
    budget = next((f for f in results.get("facts", []) if f["group"].startswith("plan_")), None)
    frac = budget_fraction(budget) if budget else None
    return (
        "## Plan time per strategy\n\n"
        "Median wall time of one plan, device `v100-nvlink2`, budget the persistent bytes plus "
        f"{'-' if frac is None else f'{frac:.2f}'} of the activation peak. `mixed`:\n\n"
        + _plan_times(crit, "plan_mixed")
        + "\n\nRandom layered DAGs (`dag`; at 10^6 `hybrid` only):\n\n"
        + _plan_times(crit, "plan_dag")
        + "\n\nWhat each plan came to (a strategy that finds no plan is timed to its "
        "`BudgetError`; peak and step time are the simulator's, against the unplanned "
        "step):\n\n"
        + _outcomes(facts, "plan_mixed", "mixed")
        + "\n\n"
        + _outcomes(facts, "plan_dag", "dag")
    )


def _median(row: dict | None) -> float | None:
    return row["median_ns"] if row else None


def _nodes(crit: dict, group: str) -> str:
    n = next((r["nodes"] for (g, _), r in crit.items() if g == group and r.get("nodes")), None)
    return "-" if n is None else f"{n:,} nodes"


def section_dag(results: dict) -> str:
    crit = _index(results.get("criterion", []))
    rows = []
    pairs = [("mixed", "dag", p) for p in ("analyze_total", "schedule", "liveness")]
    pairs += [("plan_mixed", "plan_dag", p) for p in ("partition", "options", "hybrid")]
    for mixed, dag, phase in pairs:
        for s in SIZES:
            m, d = (
                per_node(crit.get((f"{mixed}_{s}", phase))),
                per_node(crit.get((f"{dag}_{s}", phase))),
            )
            if m is None and d is None:
                continue
            cells = [f"{x:.1f}" if x is not None else "-" for x in (m, d)]
            rows.append([f"`{phase}`", s, *cells, fmt_ratio(_ratio(d, m))])
    return (
        "## Random layered DAGs against `mixed`\n\n"
        "`SynthKind::Dag` (dense layers, each node reading one or two nodes of the two "
        "layers before, seeded) against the `mixed` steps of the same size, ns per node:\n\n"
        + _table(["phase", "size", "mixed", "dag", "dag / mixed"], rows)
    )


def section_real(results: dict) -> str:
    crit = _index(results.get("criterion", []))
    facts = _facts(results)
    traced = {t["model"]: t for t in results.get("traced", [])}
    groups = sorted({g for g, _ in crit if g.startswith("real_")})
    rows = []
    for g in groups:
        name = g[len("real_") :]
        t = traced.get(name)
        how = f"`hybridplan trace {name} {t['args']}`, {t['seconds']:.0f} s" if t else "fixture"
        f = facts.get((g, "hybrid"))
        hyb = crit.get((g, "hybrid"))
        rows.append(
            [
                name,
                how,
                _nodes(crit, g).removesuffix(" nodes"),
                fmt_time(_median(crit.get((g, "analyze_total")))),
                fmt_time(_median(crit.get((g, "options")))),
                fmt_time(_median(hyb)),
                f"{per_node(hyb):.0f}" if per_node(hyb) else "-",
                f"{budget_fraction(f):.1f}" if f and budget_fraction(f) is not None else "-",
                outcome(f),
            ]
        )
    head = [
        "graph",
        "source (trace time)",
        "nodes",
        "analyze",
        "options",
        "`hybrid` plan",
        "ns/node plan",
        "budget (act. fraction)",
        "outcome",
    ]
    return (
        "## Real graphs\n\n"
        "Train steps traced from the reference models (TensorFlow 2 / Keras 3, on the CPU) and "
        "the test fixture `small_cnn.pb`; budget: persistent bytes plus the first of 0.5..0.9 "
        "of the activation peak that `hybrid` plans.\n\n" + _table(head, rows)
    )


def section_e2e(results: dict) -> str:
    rows = results.get("e2e") or []
    if not rows:
        return "## `apply` end to end\n\nNot run."
    spec = importlib.util.spec_from_file_location("hybridplan_bench_e2e", BENCHES / "e2e.py")
    assert spec and spec.loader
    e2e = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(e2e)
    return (
        "## `apply` end to end from Python (`benches/e2e.py`)\n\n"
        '`hybridplan.apply(bytes, budget, strategy="hybrid", device="v100-nvlink2", '
        'target="gpu")` and its parts timed alone (median of the runs; columns as in '
        "[scale.md](scale.md)); budget half the analysed peak; RSS peak of the size's "
        "subprocess, TensorFlow loaded.\n\n" + e2e.table(rows)
    )


def section_memory(results: dict) -> str:
    mem = results.get("memory")
    if not mem:
        return "## Memory\n\nNot run."
    rows = []
    for what, r in (("analyze", mem["analyze"]), ("plan (`hybrid`)", mem["plan"])):
        rows.append(
            [
                what,
                f"{mem['analyze']['nodes']:,}",
                f"{r['graph_bytes'] / 1e6:.0f} MB",
                f"{r['rss_import'] / MIB:,.0f} MiB",
                f"{r['rss_graph'] / MIB:,.0f} MiB",
                f"{r['rss_peak'] / MIB:,.0f} MiB ({r['rss_peak'] / GB:.2f} GB)",
                f"{r['seconds']:.2f} s",
                "yes" if r["tensorflow_loaded"] else "no",
            ]
        )
    head = [
        "process",
        "nodes",
        "GraphDef",
        "RSS after import",
        "RSS with the graph",
        "RSS peak",
        "time",
        "TensorFlow loaded",
    ]
    return (
        "## Memory of planning\n\n"
        "Each row a fresh Python process (`import hybridplan`, no TensorFlow): generate the "
        "synthetic `mixed` step (`hybridplan.testing.synthetic_graphdef`), then "
        '`hybridplan.analyze` or `hybridplan.plan(..., strategy="hybrid")`; peak RSS from '
        "`getrusage` (a high-water mark: the plan row includes its own analysis); "
        '"TensorFlow loaded" is read after the call.\n\n' + _table(head, rows)
    )


def section_simulate(results: dict) -> str:
    rows = [r for r in results.get("criterion", []) if r["group"] == "simulate"]
    if not rows:
        return ""
    body = _table(
        ["bench", "median", "min - max sample"],
        [
            [
                r["bench"],
                fmt_time(r["median_ns"]),
                f"{fmt_time(r['min_ns'])} - {fmt_time(r['max_ns'])}",
            ]
            for r in rows
        ],
    )
    return "## Simulator (`--bench simulate`, 10^6 nodes)\n\n" + body


def render(results: dict) -> str:
    quick = results.get("quick")
    head = (
        "# Benchmarks\n\n"
        + ("**Smoke run (`--quick`): not the figures of record.**\n\n" if quick else "")
        + "Written by `python experiments/run_all.py` (see its docstring for the steps). The "
        "machine is shared with other engineers' builds and runs, so wall times are noisy: "
        "the load average around each step is below, and the ratios within this run (time "
        "per node against 10^4, DAG against mixed) are the trustworthy part. The planning "
        "core is single-threaded: every Rust figure is one core. Grappler side by side: "
        "[scale.md](scale.md)."
    )
    sections = [
        head,
        section_machine(results),
        section_targets(results),
        section_scaling(results),
        section_strategies(results),
        section_dag(results),
        section_real(results),
        section_e2e(results),
        section_memory(results),
        section_simulate(results),
    ]
    return "\n\n".join(s for s in sections if s) + "\n"


# ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: small sizes, short")
    ap.add_argument("--out", help="report path (default docs/benchmarks.md; --quick: temp)")
    ap.add_argument("--json", help="also save every collected figure to this file")
    ap.add_argument("--from-json", help="render the report from a saved --json, run nothing")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (traces, logs)")
    ap.add_argument("--child-memory", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--budget", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--collect-criterion", help=argparse.SUPPRESS)
    ap.add_argument("--since", type=float, default=0.0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.child_memory is not None:
        print(json.dumps(child_memory(args.child_memory, args.budget)))
        return
    if args.collect_criterion is not None:
        # criterion's results under a directory as rows (tests/test_benches.py).
        print(json.dumps(collect_criterion(Path(args.collect_criterion), args.since)))
        return
    if args.from_json:
        results = json.loads(Path(args.from_json).read_text())
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        command = " ".join(["python", "experiments/run_all.py", *argv])
        results["meta"]["rendered"] = {
            "command": command,
            "date": now,
            "commit": _git("rev-parse", "HEAD"),
        }
    else:
        results = run_suite(args, argv)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if args.out:
        out = Path(args.out)
    elif results.get("quick"):
        out = Path(tempfile.gettempdir()) / "benchmarks-quick.md"
    else:
        out = REPO / "docs" / "benchmarks.md"
    out.write_text(render(results))
    print(f"wrote {out}", file=sys.stderr)
    for t in targets(results):
        print(f"{_mark(t['met']):>16}  {t['target']}: {t['figure']}", file=sys.stderr)


if __name__ == "__main__":
    main()
