"""Smoke test of the Python benchmarks: each runs with ``--quick`` and prints its tables.

Each script runs in a subprocess (as a user would run it), on a 10^4-node synthetic
graph; together they take about 15 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

BENCHES = Path(__file__).resolve().parent.parent / "benches"


def _run(script: str, tmp_path: Path) -> tuple[str, list[dict]]:
    out = tmp_path / "out.json"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [sys.executable, str(BENCHES / script), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout, json.loads(out.read_text())


def test_e2e_quick(tmp_path):
    text, rows = _run("e2e.py", tmp_path)
    assert "| graph | nodes |" in text and "mixed 1e4" in text
    (row,) = rows
    assert row["nodes"] > 9000
    assert row["planned_peak"] <= row["budget"]
    assert set(row["median"]) >= {"generate", "parse", "serialise", "core", "write_back"}


def test_grappler_compare_quick(tmp_path):
    text, rows = _run("grappler_compare.py", tmp_path)
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
    assert row["grappler"]["RECOMPUTATION_HEURISTICS"]["counts"]["recomputed"] > 0
