"""Smoke tests of the Python benchmarks (``benches/``) and of the benchmark report
(``experiments/run_all.py``), each run in a subprocess as a user runs it: no test imports
from ``benches/`` or ``experiments/``.

``e2e.py`` and ``grappler_compare.py`` run with ``--quick`` on a 10^4-node synthetic
graph; together they take about 15 s. ``run_all.py`` collects a made-up criterion
directory and renders a report from a made-up result (facts lines, e2e rows), so that
the report cannot rot unseen; nothing there is timed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHES = ROOT / "benches"
RUN_ALL = ROOT / "experiments" / "run_all.py"
needs_tf = pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is None, reason="needs TensorFlow"
)


def _run(script: Path, tmp_path: Path, *args: str) -> tuple[str, list[dict]]:
    """``script --quick --json OUT ARGS``: its output and the JSON it wrote."""
    out = tmp_path / "out.json"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [sys.executable, str(script), "--quick", "--json", str(out), *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout, json.loads(out.read_text())


@needs_tf
def test_e2e_quick(tmp_path):
    text, rows = _run(BENCHES / "e2e.py", tmp_path)
    assert "| graph | nodes |" in text and "mixed 1e4" in text
    (row,) = rows
    assert row["nodes"] > 9000
    assert row["planned_peak"] <= row["budget"]
    assert set(row["median"]) >= {"generate", "parse", "serialise", "core", "write_back"}


@needs_tf
def test_e2e_kinds_compared(tmp_path):
    """Two kinds in one run: the narrow row (thousands of swaps at 10^4 nodes' ~6%) is
    given against mixed (fewer swaps) as the ratio of the medians the JSON holds."""
    text, (mixed, narrow) = _run(BENCHES / "e2e.py", tmp_path, "--kind", "mixed", "narrow")
    assert narrow["swaps"] > mixed["swaps"]
    m = re.search(
        r"- narrow 1e4 \(([\d,]+) swaps\) / mixed 1e4 \(([\d,]+) swaps\): core ([\d.]+)x, "
        r"apply ([\d.]+)x",
        text,
    )
    assert m, text
    assert int(m[1].replace(",", "")) == narrow["swaps"]
    assert int(m[2].replace(",", "")) == mixed["swaps"]
    core = narrow["median"]["core"] / mixed["median"]["core"]
    apply = narrow["median"]["apply"] / mixed["median"]["apply"]
    assert float(m[3]) == pytest.approx(core, abs=0.006)
    assert float(m[4]) == pytest.approx(apply, abs=0.006)
    # Each core call is listed with the kernel's time in it (page faults).
    calls = re.search(r"core calls (.*) against (.*)\)$", text, re.M)
    assert calls, text
    for listed, row in ((calls[1], narrow), (calls[2], mixed)):
        assert listed.count("(kernel ") == len(row["runs"]), listed
        assert all(r["core_kernel"] >= 0 for r in row["runs"])


def _apply_once(*args: str) -> subprocess.CompletedProcess:
    """benches/apply_once.py on narrow 10^4 with `args`; it must succeed."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [
            sys.executable,
            str(BENCHES / "apply_once.py"),
            "--nodes",
            "10000",
            "--kind",
            "narrow",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@needs_tf
@pytest.mark.parametrize("writer", ["current", "reference"])
def test_apply_once_small(writer):
    """benches/apply_once.py on 10^4 nodes: both writers give the same graph size."""
    proc = _apply_once("--writer", writer)
    m = re.search(
        rf"{writer} narrow 10000: swaps (\d+) recomputes 0, nodes after (\d+)", proc.stdout
    )
    assert m, proc.stdout
    swaps, after = int(m[1]), int(m[2])
    assert swaps > 500 and after > 10_000 + 2 * swaps  # a swap-out and a swap-in each
    # Each part's page faults and the kernel's seconds in it.
    f = re.search(
        r"page faults plan ([\d,]+) \(kernel ([\d.]+) s\) write-back ([\d,]+)", proc.stdout
    )
    assert f, proc.stdout
    assert int(f[1].replace(",", "")) > 0 and int(f[3].replace(",", "")) > 0


@needs_tf
def test_apply_once_warm_peak_is_applys():
    """``--warm-gib``: the memory touched and freed before ``apply`` is not in the peak RSS
    printed (it is reset after the warm-up), so the peak is below what was touched."""
    proc = _apply_once("--warm-gib", "3")
    m = re.search(r"RSS peak (\d+) MiB \(before (\d+), warm-up peak (\d+)\)", proc.stdout)
    assert m, proc.stdout
    peak, before, warm = int(m[1]), int(m[2]), int(m[3])
    assert warm >= before + 0.9 * 3 * 1024, "the warm-up touched its 3 GiB"
    assert 0 < peak < 3 * 1024, "apply's peak, without the warm-up's"


@pytest.mark.parametrize(
    ("script", "args"),
    [
        ("apply_once.py", ["--warm-gib", "-1"]),
        ("apply_once.py", ["--warm-gib", "inf"]),
        ("apply_once.py", ["--warm-gib", "nan"]),
        ("page_faults.py", ["--gib", "0"]),
        ("page_faults.py", ["--pause", "-1"]),
    ],
)
def test_bench_arguments_are_checked(script, args):
    """A bad amount is a usage error (exit 2, naming the option), not a crash or a no-op."""
    proc = subprocess.run(
        [sys.executable, str(BENCHES / script), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, (proc.stdout, proc.stderr[-2000:])
    assert args[0] in proc.stderr


@needs_tf
def test_grappler_compare_quick(tmp_path):
    text, rows = _run(ROOT / "experiments" / "grappler_compare.py", tmp_path)
    assert "Grappler HEURISTICS" in text and "hybridplan hybrid" in text
    (row,) = rows
    hp = row["hybridplan"]
    # The device view of hybridplan's own rewrite is a number (the analysis ran).
    assert isinstance(hp["view_peak"], int)
    assert set(row["grappler"]) == {
        "HEURISTICS",
        "SWAPPING_HEURISTICS",
        "RECOMPUTATION_HEURISTICS",
    }
    # Grappler's recomputation pass inserts clones under its own prefix.
    rc = row["grappler"]["RECOMPUTATION_HEURISTICS"]["counts"]
    assert rc["recomputed"] > 0
    # Its rewrites, as plans, went through hybridplan's simulator: every clone became a
    # recompute, every distinct swapped tensor a swap, and no plan predicts a step
    # faster than the unplanned one.
    assert rc["simulated"]["recomputes"] == rc["recomputed"]
    sw = row["grappler"]["SWAPPING_HEURISTICS"]["counts"]
    assert sw["simulated"]["swaps"] == sw["swapped_tensors"] > 0
    for level in row["grappler"].values():
        sim = level["counts"]["simulated"]
        assert "error" not in sim, sim
        assert sim["peak"] > 0 and sim["step_s"] >= hp["original_step_s"] * (1 - 1e-9)


# ---------------------------------------------------------------------------
# run_all.py: collection and report on a made-up result.


def _run_all(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, str(RUN_ALL), *args], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _collect(root: Path, since: float = 0.0) -> list[dict]:
    """``run_all.collect_criterion`` on ``root``, through the script's command line."""
    return json.loads(_run_all("--collect-criterion", str(root), "--since", str(since)).stdout)


def _write_result(root: Path, group: str, bench: str, nodes: int, ns: float) -> None:
    """One benchmark as criterion 0.8 writes it (``<group>/<bench>/new/``)."""
    new = root / group / bench / "new"
    new.mkdir(parents=True)
    meta = {"group_id": group, "function_id": bench, "value_str": None}
    meta["throughput"] = {"Elements": nodes}
    (new / "benchmark.json").write_text(json.dumps(meta))
    point = {"point_estimate": ns, "standard_error": 1.0}
    (new / "estimates.json").write_text(json.dumps({"mean": point, "median": point}))
    (new / "sample.json").write_text(json.dumps({"iters": [1, 2], "times": [ns, 2.2 * ns]}))


NODES = {"1e3": 900, "1e4": 10_000, "1e5": 100_000, "1e6": 1_000_000}


def _made_up(tmp_path: Path) -> Path:
    """Criterion results: 100 ns per node everywhere, except `hybrid` at 10^6 (200)."""
    root = tmp_path / "criterion"
    for size, n in NODES.items():
        for phase in ("analyze_total", "schedule"):
            _write_result(root, f"mixed_{size}", phase, n, 100.0 * n)
            _write_result(root, f"dag_{size}", phase, n, 150.0 * n)
        for phase in ("partition", "options", "swap", "hybrid", "hybrid_total"):
            per = 200.0 if (phase, size) == ("hybrid", "1e6") else 100.0
            _write_result(root, f"plan_mixed_{size}", phase, n, per * n)
        _write_result(root, f"plan_dag_{size}", "hybrid", n, 300.0 * n)
    _write_result(root, "real_small_cnn", "analyze_total", 221, 1e5)
    _write_result(root, "real_small_cnn", "hybrid", 221, 3e5)
    _write_result(root, "simulate", "1M nodes, empty plan", 0, 1e8)
    return root


def _facts() -> list[dict]:
    fits = {"ok": True, "strategy": "swap", "planned_peak": 60, "original_step_s": 1.0}
    fits.update(planned_step_s=1.25, swaps=3, recomputes=1, evaluations=7)
    no_plan = {"ok": False, "error": "no plan fits the budget of 55 bytes: the smallest peak "}
    no_plan["error"] += "reached is 80 bytes (strategy 'hybrid'); raise the budget"
    base = {"nodes": 1, "budget": 55, "peak": 100, "persistent": 10}
    return [
        {"group": "plan_mixed_1e4", "bench": "hybrid", **base, **fits},
        {"group": "plan_mixed_1e5", "bench": "hybrid", **base, **no_plan},
        {"group": "real_small_cnn", "bench": "hybrid", **base, **fits},
    ]


def _e2e_row(nodes: int, apply_s: float) -> dict:
    parts = dict.fromkeys(("generate", "analyze", "parse", "serialise", "core"), 0.1)
    parts.update(write_back=0.2, apply=apply_s)
    return {
        "name": f"mixed {nodes:.0e}".replace("e+0", "e"),
        "nodes": nodes,
        "bytes": 100 * nodes,
        "repeat": 1,
        "runs": [parts],
        "median": parts,
        "inserted": {"swap_out": 4, "clones": 0},
        "fraction": 0.5,
        "rss_base_mib": 500.0,
        "rss_mib": 900.0,
    }


def _memory(rss_peak: int) -> dict:
    common = {"nodes_requested": 1_000_000, "tensorflow_loaded": False, "seconds": 2.0}
    common.update(graph_bytes=175_000_000, rss_import=30 * 2**20, rss_graph=200 * 2**20)
    analysed = {**common, "nodes": 999_864, "peak": 100, "persistent": 10, "rss_peak": 2**30}
    return {"analyze": analysed, "plan": {**common, "rss_peak": rss_peak}}


def test_collect_criterion_reads_only_this_runs_results(tmp_path):
    root = _made_up(tmp_path)
    rows = _collect(root)
    row = next(r for r in rows if (r["group"], r["bench"]) == ("plan_mixed_1e4", "hybrid"))
    assert row["nodes"] == 10_000 and row["median_ns"] == 1e6
    assert (row["min_ns"], row["max_ns"]) == (1e6, 1.1e6)
    old = root / "mixed_1e3" / "schedule" / "new" / "estimates.json"
    os.utime(old, (1, 1))  # an older run's result is left out
    since = _collect(root, since=1000.0)
    assert ("mixed_1e3", "schedule") not in {(r["group"], r["bench"]) for r in since}
    assert len(since) == len(rows) - 1


def _meta() -> dict:
    return {
        "cpu": "made up",
        "cores": 2,
        "cores_usable": 2,
        "memory_bytes": 2**34,
        "os": "Linux",
        "python": "3.11",
        "rustc": "rustc 1.80",
        "commit": "0" * 40,
        "dirty": [],
        "date": "2026-12-01 00:00 UTC",
        "command": "python experiments/run_all.py --made-up",
        "extension": {},
        "steps": [],
    }


def _render(tmp_path: Path, results: dict) -> tuple[str, list[str]]:
    """The report ``--from-json`` writes and the verdict lines it prints, in order."""
    saved, out = tmp_path / "results.json", tmp_path / "report.md"
    saved.write_text(json.dumps(results))
    proc = _run_all("--from-json", str(saved), "--out", str(out))
    lines = proc.stderr.splitlines()
    after = next(i for i, x in enumerate(lines) if x.startswith("wrote ")) + 1
    verdicts = [x.strip().split("  ", 1)[0] for x in lines[after:]]
    return out.read_text(), verdicts


def test_report_marks_each_target(tmp_path):
    results = {
        "meta": _meta(),
        "quick": False,
        "criterion": _collect(_made_up(tmp_path)),
        "facts": _facts(),
        "traced": [{"model": "small_cnn", "args": "(defaults)", "seconds": 3.0}],
        "e2e": [_e2e_row(10_000, 0.05), _e2e_row(1_000_000, 6.0)],
        "memory": _memory(1_500_000_000),
    }
    results["meta"]["steps"] = [
        {"step": "criterion", "seconds": 60.0, "load_before": [1, 2, 3], "load_after": [2, 2, 2]}
    ]
    text, verdicts = _render(tmp_path, results)
    # 1 ms at 10^6 nodes; 6 s apply; 1.5 GB; 1.0x and 2.0x per node against 10^4.
    met, not_met = "**met**", "**not met**"
    assert verdicts == [met, not_met, met, met, not_met]
    rows = [x for x in text.splitlines() if x.endswith((f"| {met} |", f"| {not_met} |"))]
    assert [r.rsplit("|", 2)[1].strip() for r in rows] == verdicts  # the same, in the report
    assert "`apply` end to end of 10^6 nodes < 5 s | 6.00 s" in text
    # The scaling table: 100 ns per node, and the 2.00x of `hybrid` at 10^6.
    hybrid_row = next(x for x in text.splitlines() if x.startswith("| `hybrid` |"))
    assert "| 100.0 |" in hybrid_row and hybrid_row.endswith("| 2.00x |")
    assert "| `analyze_total` | 1e4 | 100.0 | 150.0 | 1.50x |" in text  # DAG vs mixed
    assert "no plan (best peak 0.80 of the peak)" in text
    assert "fits (swap): peak 0.60 of the original, step 1.25x" in text
    assert "| small_cnn |" in text and "| mixed 1e6 |" in text  # real graphs, e2e
    assert "1M nodes, empty plan" in text  # simulate
    assert "2.00x (`plan_mixed_1e6/hybrid` per node, medians; fastest samples 2.00x)" in text
    # Re-rendered without running anything, and saying so.
    assert "rendered again from its saved figures" in text


def test_report_without_a_1e6_run_says_not_measured(tmp_path):
    crit = [r for r in _collect(_made_up(tmp_path)) if "1e6" not in r["group"]]
    results = {"meta": _meta(), "quick": True, "criterion": crit, "facts": []}
    text, verdicts = _render(tmp_path, results)
    assert verdicts == ["not measured"] * 5
    assert "Smoke run" in text and "not measured" in text


def test_page_faults_prints_three_passes():
    """benches/page_faults.py: one GiB, no pause: three passes, a time per page each."""
    proc = subprocess.run(
        [sys.executable, str(BENCHES / "page_faults.py"), "--gib", "1", "--pause", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["first", "again at once", "after the pause"]
    for line in lines:
        m = re.search(r": ([\d.]+) us per 4 KiB page, by GiB$", line)
        assert m and float(m[1]) > 0, line
