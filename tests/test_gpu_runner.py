"""The standalone GPU replay player (replay/) on the CPU: its pure-Python layout of a
replay (order, waits, buffer drops, kernel parameters from shapes) always, and a dry
run of the player with real PyTorch kernels when PyTorch is installed."""

from __future__ import annotations

import copy
import importlib.util
import pathlib
import sys

import pytest

import hybridplan
import hybridplan.testing

GPU = pathlib.Path(__file__).parents[1] / "replay"
sys.path.insert(0, str(GPU))
import replay_program as rp  # noqa: E402

HAS_TORCH = importlib.util.find_spec("torch") is not None
NO_TORCH = (
    "PyTorch is not installed: the CPU dry run of replay/runner.py needs it "
    "(pip install torch --index-url https://download.pytorch.org/whl/cpu); the "
    "pure-Python tests of the runner in this file still run"
)


@pytest.fixture(scope="module")
def replays():
    g = hybridplan.testing.synthetic_graphdef(600, "mixed", batch=4, size=16)
    a = hybridplan.analyze(g, device="h200-pcie5")  # the device replayed for
    b = a.budget_for(0.8)
    out = {"none": hybridplan.replay(g, budget=a.peak_bytes, device="h200-pcie5")}
    for s in ("swap", "recompute", "hybrid"):
        out[s] = hybridplan.replay(g, budget=b, strategy=s, device="h200-pcie5")
    return out


def test_load_refuses_what_it_cannot_play(replays):
    r = copy.deepcopy(replays["swap"])
    assert rp.load(r) is r
    with pytest.raises(rp.ReplayError, match="version 2"):
        rp.load({**r, "version": 2})
    bad = copy.deepcopy(r)
    del bad["ops"][3]["inputs"]
    with pytest.raises(rp.ReplayError, match="lacks the field 'inputs'"):
        rp.load(bad)
    bad = copy.deepcopy(r)
    bad["ops"][5]["outputs"] = [10**9]
    with pytest.raises(rp.ReplayError, match="out of range"):
        rp.load(bad)


@pytest.mark.parametrize("strategy", ["none", "swap", "recompute", "hybrid"])
def test_layout_orders_as_the_plan(replays, strategy):
    r = replays[strategy]
    lay = rp.layout(r)
    keys = [it.key for it in lay.order]
    n_in = sum(len(s["ins"]) for s in r["swaps"])
    assert len(keys) == len(set(keys)) == len(r["ops"]) + len(r["swaps"]) + n_in
    ops = [k[1] for k in keys if k[0] == "op"]
    assert ops == list(range(len(r["ops"])))  # the compute stream's order
    pos = {k: p for p, k in enumerate(keys)}
    for k, need in lay.waits.items():
        assert all(pos[d] < pos[k] for d in need), k
    for k, s in enumerate(r["swaps"]):
        assert pos[("out", k)] > pos[("op", lay.op_of_node[s["after"]])]
        for j, si in enumerate(s["ins"]):
            assert pos[("in", k, j)] > pos[("out", k)]
            assert pos[("in", k, j)] > pos[("op", lay.op_of_node[si["trigger"]])]
            for reader in si["readers"]:
                assert ("in", k, j) in lay.waits[("op", lay.op_of_node[reader])]
    # Every buffer is dropped once, after its last read.
    dropped = [k for d in lay.drops for k in d]
    assert len(dropped) == len(set(dropped))
    for i, o in enumerate(r["ops"]):
        for x in o["inputs"]:
            assert lay.drop_after[rp.key_of(x)] >= pos[("op", i)]
    if strategy != "none":
        assert r["swaps"] or r["clones"]


def test_kernel_parameters_from_shapes():
    # ResNet-50's stem: 224 -> 112, 7x7 stride 2 SAME: 5 padding in all (TF: 2 + 3);
    # symmetric 3 + 3 gives the same 112 (the cost is the kernel's, not the values').
    assert rp.conv_geometry([224, 224], [112, 112], [7, 7]) == ([2, 2], [3, 3])
    assert rp.conv_geometry([56, 56], [56, 56], [3, 3]) == ([1, 1], [1, 1])
    assert rp.conv_geometry([10], [4], [3]) == ([2], [0])  # VALID: (10 - 3) // 2 + 1
    assert rp.reduce_axes([8, 7, 7, 64], [64]) == [0, 1, 2]
    assert rp.reduce_axes([8, 7, 7, 64], [1, 1, 1, 64]) == [0, 1, 2]
    assert rp.reduce_axes([8, 7, 7, 64], [8, 64]) == [1, 2]
    assert rp.reduce_axes([8, 64], [3]) == []
    assert rp.matmul_transposes([32, 128], [128, 10], [32, 10]) == (False, False)
    assert rp.matmul_transposes([32, 10], [128, 10], [32, 128]) == (False, True)
    assert rp.matmul_transposes([32, 128], [32, 10], [128, 10]) == (True, False)
    assert rp.matmul_transposes([4, 32, 16], [4, 32, 16], [4, 32, 32]) == (False, True)
    # ResNet-50's max pooling: 3x3 stride 2 VALID after explicit padding (18 -> 8).
    assert rp.pool_geometry([18, 18], [8, 8]) == ([3, 3], [2, 2], False)
    assert rp.pool_geometry([7, 7], [4, 4]) == ([2, 2], [2, 2], True)  # SAME only
    assert rp.pool_geometry([5], [3]) == ([3], [1], False)  # VALID taken where both fit
    assert rp.channels_last([8, 56, 56, 64], [3, 3, 64, 64])
    assert not rp.channels_last([8, 64, 56, 56], [3, 3, 64, 32])


@pytest.mark.skipif(not HAS_TORCH, reason=NO_TORCH)
@pytest.mark.parametrize("strategy", ["none", "swap", "recompute", "hybrid"])
def test_cpu_dry_run_plays_every_op_with_real_kernels(replays, strategy):
    import runner

    r = replays[strategy]
    res = runner.play(r, "cpu", repeats=1)
    # Every known op type ran its kernel at the replay's shapes and dtypes.
    assert res["fallbacks"] == {}
    assert res["misshapen"] == {}
    # Swapped tensors came back bit for bit; nothing is left held after the step.
    assert res["corrupted"] == []
    assert res["left"] == []
    assert res["swaps"] == len(r["swaps"]) and res["clones"] == sum(
        len(c["nodes"]) for c in r["clones"]
    )
    kinds = {o["kernel"] for o in r["ops"]}
    assert {"conv", "conv_backprop_input", "conv_backprop_filter", "elementwise"} <= kinds
    assert res["measured"]["tracked_peak_bytes"] > r["persistent_bytes"]
