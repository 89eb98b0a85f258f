"""The replay program (``hybridplan.replay``, ``hybridplan replay``): its schema, a JSON
round trip, and its ops and times against the simulator's own events."""

from __future__ import annotations

import json
import pathlib

import jsonschema
import numpy as np
import pytest

import hybridplan
import hybridplan.testing
from hybridplan import InvalidArgumentError, _core, device_model
from hybridplan._backend import workspace_rule
from hybridplan.cli import EXIT_BAD_INPUT, main

SCHEMA = json.loads((pathlib.Path(__file__).parents[1] / "replay/replay.schema.json").read_text())
STRATEGIES = ("swap", "recompute", "hybrid")


@pytest.fixture(scope="module")
def step(tmp_path_factory):
    path = tmp_path_factory.mktemp("g") / "synth.pb"
    path.write_bytes(hybridplan.testing.synthetic_graphdef(600, "mixed", batch=4, size=16))
    # Half of the peak under the workspace rule the h200 plans use (the CPU kernels'
    # scratch, with oneDNN off, is no part of a GPU plan).
    a = hybridplan.analyze(path, workspace=workspace_rule("auto", device_model("h200-pcie5")))
    budget = a.persistent_bytes + (a.peak_bytes - a.persistent_bytes) * 8 // 10
    plans = {s: hybridplan.plan(path, budget, strategy=s, device="h200-pcie5") for s in STRATEGIES}
    return path, budget, plans


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_replays_match_the_schema_and_the_simulator(step, strategy):
    path, _, plans = step
    p = plans[strategy]
    assert not p.is_empty
    r = hybridplan.replay(path, p, device="h200-pcie5")
    jsonschema.validate(r, SCHEMA)
    assert r["version"] == hybridplan.REPLAY_VERSION == 1
    # The planned step's events, as the simulator gave them to the plan.
    kind, start, end = p.events()
    compute = (kind == 0) | (kind == 1)
    assert [o["clone"] is not None for o in r["ops"]] == list(kind[compute] == 1)
    np.testing.assert_array_equal([o["start_s"] for o in r["ops"]], start[compute])
    np.testing.assert_array_equal([o["end_s"] for o in r["ops"]], end[compute])
    assert sum(kind == 2) == len(r["swaps"]) == p.planned["swaps"]
    assert sum(kind == 3) == sum(len(s["ins"]) for s in r["swaps"]) == p.planned["swap_ins"]
    assert sum(kind == 1) == p.planned["clones"]
    pred = r["predicted"]
    assert pred["step_time_s"] == p.planned["step_time_s"]
    assert pred["peak_bytes"] == p.planned["peak_bytes"]
    assert pred["bytes_d2h"] == p.planned["bytes_d2h"]
    t, b = p.timeline()
    np.testing.assert_array_equal([m[0] for m in r["memory"]], t)
    np.testing.assert_array_equal([m[1] for m in r["memory"]], b)
    # Each swap is the plan's: bytes, producer and the readers of each swap-in.
    for s, d in zip(r["swaps"], p.swaps, strict=True):
        assert (s["producer"], s["bytes"], s["after"]) == (d["node"], d["bytes"], d["after"])
        assert [(i["trigger"], i["readers"]) for i in s["ins"]] == [
            (x["trigger"], x["consumers"]) for x in d["ins"]
        ]


def test_json_round_trip_and_determinism(step, tmp_path):
    path, _, plans = step
    r = hybridplan.replay(path, plans["hybrid"], device="h200-pcie5")
    out = tmp_path / "replay.json"
    hybridplan.save_replay(r, out)
    assert json.loads(out.read_text()) == r
    again = hybridplan.replay(path, plans["hybrid"], device="h200-pcie5")
    assert json.dumps(again) == json.dumps(r)


def test_a_saved_plan_replays_as_the_plan(step, tmp_path):
    path, _, plans = step
    saved = tmp_path / "plan.json"
    plans["swap"].save(saved)
    assert hybridplan.replay(path, saved, device="h200-pcie5") == hybridplan.replay(
        path, plans["swap"], device="h200-pcie5"
    )


def test_a_plan_of_another_graph_is_refused(step):
    path, _, plans = step
    other = pathlib.Path(__file__).parents[1] / "rust/core/tests/fixtures/small_cnn.pb"
    with pytest.raises(InvalidArgumentError, match=r"another graph|no device bytes"):
        hybridplan.replay(other, plans["swap"], device="h200-pcie5")
    with pytest.raises(InvalidArgumentError, match="not a complete hybridplan plan"):
        _core.replay(path.read_bytes(), '{"schema_version": 2, "swaps": 1}')
    with pytest.raises(hybridplan.PlanVersionError, match="re-plan"):
        _core.replay(path.read_bytes(), '{"swaps": 1}')
    with pytest.raises(InvalidArgumentError, match="apply only when the plan is made here"):
        hybridplan.replay(path, plans["swap"], min_bytes=1)


def test_cli_writes_a_replay(step, tmp_path, capsys):
    path, budget, _ = step
    out = tmp_path / "r.json"
    args = ["replay", str(path), "--budget", str(budget), "--device", "h200-pcie5"]
    assert main([*args, "--strategy", "swap", "-o", str(out)]) == 0
    r = json.loads(out.read_text())
    jsonschema.validate(r, SCHEMA)
    assert r["strategy"] == "swap" and r["swaps"]
    assert "wrote" in capsys.readouterr().out
    assert main([*args, "-o", str(tmp_path / "missing" / "r.json")]) == EXIT_BAD_INPUT
