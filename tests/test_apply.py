"""hybridplan.apply end to end: planner-made plans, rewritten, run on the real
variables, compute bit for bit what the original step computes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from tensorflow.core.framework import graph_pb2

import hybridplan
import hybridplan.testing
from hybridplan import models
from hybridplan.runner import compile_step
from hybridplan.testing import FLOAT, node

STEPS = 3

# (workload, kwargs): small enough for two CPU cores, activations dominate.
WORKLOADS = {
    "small_cnn": dict(size=64, batch=8, convs=4),
    "small_resnet": dict(size=32, batch=8, blocks=3),
    "unet3d": dict(size=16, batch=1, levels=3),
    "transformer": dict(seq=32, d_model=32, layers=2, batch=2),
}
CASES = [(w, opt, s) for w in WORKLOADS for opt in ("sgd", "adam") for s in hybridplan.STRATEGIES]
KIND = {
    "tflms": ("swap_out", "swap_in"),
    "swap": ("swap_out", "swap_in"),
    "recompute": ("clones",),
    "chen": ("clones",),
    "hybrid-paper": (),
    "hybrid": (),
}


_TRACED: dict[tuple[str, str], tuple] = {}


def _workload(name: str, opt: str):
    key = (name, opt)
    if key not in _TRACED:
        w = models.build(name, optimizer=opt, **WORKLOADS[name])
        traced = w.trace()
        _TRACED[key] = (w, traced, [v.numpy() for v in traced.variables])
    return _TRACED[key]


_ORIGINAL: dict[tuple[str, str], tuple] = {}


def _original_run(name: str, opt: str):
    """``_run`` of the original (unplanned) step of a workload: it depends only on the
    workload and the optimizer, so it runs once per pair and every strategy's rewritten
    run is compared with it. (Each run starts from the same initial weights.)"""
    key = (name, opt)
    if key not in _ORIGINAL:
        w, traced, initial = _workload(name, opt)
        _ORIGINAL[key] = _run(w, traced, initial, None)
    return _ORIGINAL[key]


def _gradients(traced) -> list[str]:
    """The gradient tensors: data inputs of update ops made by backward ops."""
    gd = traced.graph_def
    phase = hybridplan.analyze(traced).node_phases()
    index = {n.name: i for i, n in enumerate(gd.node)}
    grads = set()
    for i, n in enumerate(gd.node):
        if phase[i] != 2:
            continue
        for inp in n.input:
            if inp.startswith("^"):
                continue
            src = inp.split(":")[0]
            if phase[index[src]] == 1:
                grads.add(inp if ":" in inp else f"{inp}:0")
    return sorted(grads)


def _run(w, traced, initial, graph_def):
    """Losses of STEPS steps, every gradient of each step, the final weights."""
    for v, x in zip(traced.variables, initial, strict=True):
        v.assign(x)
    grads = _gradients(traced)
    assert grads, "no gradient tensors found"
    fetching = dataclasses.replace(traced, outputs=(*traced.outputs, *grads))
    step = compile_step(fetching, graph_def)
    losses, gradients = [], []
    for i in range(STEPS):
        out = step.run(*w.batch(i))
        losses.append(out[fetching.loss_index].numpy())
        gradients.append([g.numpy() for g in out[len(traced.outputs) :]])
    return losses, gradients, [v.numpy() for v in traced.variables]


def _slow_link() -> dict:
    """The ``cpu`` device model with a 0.2 GB/s link each way: copies cannot hide."""
    slow = dict(hybridplan.planning._device_args("cpu")[2])
    slow.update(name="slow-link", h2d_bandwidth=2e8, d2h_bandwidth=2e8)
    return slow


def _applied_on_a_slow_link(traced, strategy: str):
    """``apply`` at 60% of the activation peak on ``_slow_link``, for the CPU emulation,
    planned without kernel scratch (``workspace=None``) so that both oneDNN settings plan
    the same step; the result, the analysis and the budget."""
    slow = _slow_link()
    a = hybridplan.analyze(traced, device=slow, workspace=None)
    budget = a.budget_for(0.6)
    r = hybridplan.apply(
        traced,
        budget,
        strategy=strategy,
        device=slow,
        target="cpu-emulation",
        min_bytes=256,
        workspace=None,
    )
    return r, a, budget


def _plan_that_changes_the_graph(traced, strategy):
    a = hybridplan.analyze(traced, device="cpu")
    for fraction in (0.8, 0.9, 0.97):
        budget = a.budget_for(fraction)
        try:
            r = hybridplan.apply(
                traced,
                budget,
                strategy=strategy,
                device="cpu",
                target="cpu-emulation",
                min_bytes=256,
            )
        except hybridplan.BudgetError:
            continue
        if not r.plan.is_empty:
            return r, budget
    pytest.fail(f"no {strategy} plan below the original peak")


@pytest.mark.parametrize(("name", "opt", "strategy"), CASES)
def test_planned_step_is_bit_identical(name, opt, strategy):
    w, traced, initial = _workload(name, opt)
    before = traced.graph_def.SerializeToString()
    r, budget = _plan_that_changes_the_graph(traced, strategy)
    assert traced.graph_def.SerializeToString() == before, "apply modified its input"
    counts = r.report["inserted"]
    assert sum(counts.values()) > 0
    for kind in KIND[strategy]:
        assert counts[kind] > 0, counts
    if strategy in ("swap", "tflms"):
        assert counts["clones"] == 0
    if strategy in ("recompute", "chen"):
        assert counts["swap_out"] == counts["swap_in"] == 0
    assert r.plan.planned["peak_bytes"] <= budget
    assert len(r.graph_def.node) == len(traced.graph_def.node) + sum(counts.values())

    base_losses, base_grads, base_weights = _original_run(name, opt)
    new_losses, new_grads, new_weights = _run(w, traced, initial, r.graph_def)
    for a, b in zip(base_losses, new_losses, strict=True):
        assert np.array_equal(a, b), (base_losses, new_losses)
    for step_a, step_b in zip(base_grads, new_grads, strict=True):
        assert all(np.array_equal(a, b) for a, b in zip(step_a, step_b, strict=True))
    for a, b in zip(base_weights, new_weights, strict=True):
        assert np.array_equal(a, b)
    assert not all(np.array_equal(a, b) for a, b in zip(initial, new_weights, strict=True))


def test_hybrid_mixes_swaps_and_clones_and_beats_both():
    """On a slow link (0.2 GB/s) swaps cannot hide and recompute alone costs
    more: at 70% of the activation peak the hybrid plan mixes both, is faster
    than each strategy alone (or they do not fit), and runs bit for bit."""
    w, traced, initial = _workload("small_resnet", "sgd")
    slow = _slow_link()
    a = hybridplan.analyze(traced, device=slow)
    budget = a.budget_for(0.7)
    hybrid = hybridplan.plan(traced, budget, strategy="hybrid", device=slow, min_bytes=256)
    for strategy in ("swap", "recompute"):
        try:
            alone = hybridplan.plan(traced, budget, strategy=strategy, device=slow, min_bytes=256)
        except hybridplan.BudgetError as e:
            assert e.best_peak > budget
            continue
        assert hybrid.planned["step_time_s"] < alone.planned["step_time_s"], strategy
    r = hybridplan.apply(
        traced, budget, strategy="hybrid", device=slow, target="cpu-emulation", min_bytes=256
    )
    assert r.plan.planned["peak_bytes"] <= budget
    assert r.report["inserted"]["clones"] > 0 and r.report["inserted"]["swap_in"] > 0
    base_losses, base_grads, base_weights = _original_run("small_resnet", "sgd")
    new_losses, new_grads, new_weights = _run(w, traced, initial, r.graph_def)
    for step_a, step_b in zip(base_grads, new_grads, strict=True):
        assert all(np.array_equal(a, b) for a, b in zip(step_a, step_b, strict=True))
    assert all(np.array_equal(a, b) for a, b in zip(base_losses, new_losses, strict=True))
    assert all(np.array_equal(a, b) for a, b in zip(base_weights, new_weights, strict=True))


@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_a_swap_plan_that_waits_for_its_copies_runs_bit_identical_within_budget(opt):
    """On a link too slow to hide the swap-outs before the peak (0.2 GB/s), `swap`'s
    plans of hidden copies stop at 77% of the activation peak; at 60% its plan waits for
    copies (plan/wait.rs: a release node after the original's last forward reader takes
    a control edge from the copy), its step longer than the original's. Rewritten, it
    computes bit for bit what the original step computes, and the device's measured
    tensor peak is within the activation budget. Planned without kernel scratch
    (``workspace=None``), so that both oneDNN settings plan the same step; the measured
    peak leaves the scratch out too. (With SGD, two swap-ins used to be triggered by the
    unread `Identity` the optimizer puts on two batch-norm `gamma` gradients, and those
    momenta came out different in the 11th digit, with oneDNN on and off: no dead op
    triggers now, rust/core/src/dead.rs.)"""
    from hybridplan.trialing import side_by_side

    w, traced, _ = _workload("small_resnet", opt)
    r, a, budget = _applied_on_a_slow_link(traced, "swap")
    p = r.plan
    assert p.planned["peak_bytes"] <= budget
    assert p.planned["step_time_s"] > 1.01 * p.original["step_time_s"]  # it waits
    assert p.swaps and not p.recomputes
    assert all(s["gate"] is not None for s in p.swaps)
    base, new = side_by_side(traced, r.graph_def, w.batch, STEPS)
    assert all(np.array_equal(x, y) for x, y in zip(base.losses, new.losses, strict=True))
    assert all(np.array_equal(x, y) for x, y in zip(base.weights, new.weights, strict=True))
    assert new.device_tensor_peak <= budget - a.persistent_bytes, (new.device_tensor_peak, budget)
    assert new.device_tensor_peak < base.device_tensor_peak


def test_copies_one_op_releases_are_queued_by_need_and_run_bit_identical():
    """Swap-ins that share a trigger are listed by need, and each later one waits for
    the copy before it (plan/queue.rs): on a slow link (0.2 GB/s) at 60% of the
    activation peak, `hybrid`'s plan of the small ResNet queues copies. The rewrite
    gives each such swap-in a control input from the swap-in written before it with the
    same trigger, and the step computes bit for bit what the original computes. Planned
    without kernel scratch (``workspace=None``), so that both oneDNN settings plan the
    same step (with TensorFlow's own kernels' scratch the plan at 60% queues nothing)."""
    from hybridplan.trialing import side_by_side

    w, traced, _ = _workload("small_resnet", "sgd")
    r, a, budget = _applied_on_a_slow_link(traced, "hybrid")
    p = r.plan
    assert p.planned["peak_bytes"] <= budget
    ins = [i for s in p.swaps for i in s["ins"]]
    assert any(i["follows"] for i in ins)
    # Listed by need: the swap-ins of one trigger are listed by their first reader.
    order = {n: k for k, n in enumerate(a._core.order)}
    written = {n.name: n for n in r.graph_def.node}
    names = r.summary.swap_in
    assert len(names) == len(ins)
    last: dict[int, tuple[str, int]] = {}
    for name, i in zip(names, ins, strict=True):
        need = min(order[c] for c in i["consumers"] + i["clone_consumers"])
        control = [x[1:] for x in written[name].input if x.startswith("^")]
        if i["follows"]:
            before, before_need = last[i["trigger"]]
            assert before in control, (name, control)
            assert before_need <= need
        else:
            assert not any(c in names for c in control), (name, control)
        last[i["trigger"]] = (name, need)
    base, new = side_by_side(traced, r.graph_def, w.batch, STEPS)
    assert all(np.array_equal(x, y) for x, y in zip(base.losses, new.losses, strict=True))
    assert all(np.array_equal(x, y) for x, y in zip(base.weights, new.weights, strict=True))


def test_nothing_to_plan_returns_the_graph_unchanged():
    _, traced, _ = _workload("small_cnn", "sgd")
    r = hybridplan.apply(traced, "64GiB", device="cpu")
    assert r.plan.is_empty
    assert "already fits" in r.report["note"]
    assert r.graph_def.SerializeToString(deterministic=True) == traced.graph_def.SerializeToString(
        deterministic=True
    )


def test_keras_step_trains_the_real_model():
    w = models.small_resnet(size=16, batch=4, blocks=2)
    a = hybridplan.analyze(w.trace(), device="cpu")
    budget = a.budget_for(0.8)
    step = hybridplan.keras_step(
        w.model,
        w.optimizer,
        w.loss_fn,
        w.x_spec,
        w.y_spec,
        budget=budget,
        device="cpu",
        target="cpu-emulation",
        min_bytes=256,
    )
    assert not step.plan.is_empty
    before = [v.numpy() for v in w.model.trainable_variables]
    losses = [float(step(*w.batch(i))) for i in range(2)]
    after = [v.numpy() for v in w.model.trainable_variables]
    assert all(np.isfinite(losses))
    assert not all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))


def test_dropout_model_stays_bit_identical():
    """Random ops are never cloned; Keras 3 dropout (stateless random from a seed
    variable) recomputed from its kept seed gives the same mask."""
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input((16, 16, 3), batch_size=4)
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.Dropout(0.3)(x)
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(x)
    x = keras.layers.Dropout(0.3)(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    model = keras.Model(inputs, keras.layers.Dense(10)(x))
    w = models._image_classifier("dropout_cnn", model, "sgd", batch=4, size=16, classes=10)
    traced = w.trace()
    ops = {n.op for n in traced.graph_def.node}
    assert any("Random" in op for op in ops), ops
    initial = [v.numpy() for v in traced.variables]
    base_losses, base_grads, base_weights = _run(w, traced, initial, None)  # once for both
    for strategy in ("recompute", "hybrid"):
        r, _ = _plan_that_changes_the_graph(traced, strategy)
        cloned = {traced.graph_def.node[v].op for rc in r.plan.recomputes for v in rc["nodes"]}
        assert not any("Random" in op and not op.startswith("Stateless") for op in cloned)
        new_losses, new_grads, new_weights = _run(w, traced, initial, r.graph_def)
        assert all(np.array_equal(x, y) for x, y in zip(base_losses, new_losses, strict=True))
        for step_a, step_b in zip(base_grads, new_grads, strict=True):
            assert all(np.array_equal(x, y) for x, y in zip(step_a, step_b, strict=True))
        assert all(np.array_equal(x, y) for x, y in zip(base_weights, new_weights, strict=True))


def _identity_n_chain(t_list: bool):
    """x -> MatMul -> IdentityN -> Tanh -> MatMul -> Tanh -> MatMul -> loss, the backward
    ops reading the IdentityN's output last. ``t_list``: its ``T`` is a list of types, as
    TensorFlow requires (else a single type: a malformed node)."""
    gd = graph_pb2.GraphDef()
    sq = [[64, 64]]
    for name in ("x", "w"):
        node(gd, name, "Placeholder", [], sq)
        gd.node[-1].attr["dtype"].type = FLOAT
    node(gd, "f0", "MatMul", ["x", "w"], sq)
    node(gd, "f1", "IdentityN", ["f0"], sq)
    if t_list:
        gd.node[-1].attr["T"].list.type.append(FLOAT)
    for name, op, inputs in [
        ("f2", "Tanh", ["f1"]),
        ("f3", "MatMul", ["f2", "w"]),
        ("f4", "Tanh", ["f3"]),
        ("f5", "MatMul", ["f4", "w"]),
    ]:
        node(gd, name, op, inputs, sq)
    node(gd, "axes", "Const", [], [[2]])
    node(gd, "loss", "Sum", ["f5", "axes"], [[]])
    node(gd, "seed", "Const", [], sq)
    for name, inputs in [("b0", ["seed", "f4"]), ("b1", ["b0", "f2"]), ("b2", ["b1", "f1"])]:
        node(gd, name, "Mul", inputs, sq)
    node(gd, "out", "Identity", ["loss"], [[]])
    node(gd, "outg", "Identity", ["b2"], sq)
    return gd


def test_a_recompute_through_an_identity_n_applies():
    gd = _identity_n_chain(t_list=True)
    a = hybridplan.analyze(gd, loss="loss")
    budget = a.persistent_bytes + a.activation_peak_bytes * 9 // 10
    r = hybridplan.apply(gd, budget, strategy="chen", loss="loss", min_bytes=256, device="cpu")
    cloned = {gd.node[v].name for rec in r.plan.recomputes for v in rec["nodes"]}
    assert "f1" in cloned and r.summary.rewired > 0
    assert hybridplan.analyze(r.graph_def, loss="loss").peak_bytes <= budget


@pytest.mark.parametrize("strategy", ["chen", "hybrid"])
def test_plan_refuses_an_identity_n_that_apply_could_not_rewrite(strategy):
    # Its T is one type, not a list (TensorFlow refuses the node): plan() used to plan
    # it, chen recomputing it and hybrid swapping its output, and apply() then failed
    # with "recomputes[0]: consumer 'b2' reads none of [...]" / "swaps[0]: node 'f1'
    # (op IdentityN) has 0 output(s)", blaming the plan.
    gd = _identity_n_chain(t_list=False)
    a = hybridplan.analyze(_identity_n_chain(t_list=True), loss="loss")
    budget = a.persistent_bytes + a.activation_peak_bytes * 9 // 10
    bad = r"node 'f1' \(op IdentityN\) has 1 data inputs but its attribute T is not a list"
    with pytest.raises(hybridplan.InvalidGraphError, match=bad):
        hybridplan.plan(gd, budget, strategy=strategy, loss="loss", min_bytes=256, device="cpu")
    with pytest.raises(hybridplan.InvalidGraphError, match=bad):
        hybridplan.apply(gd, budget, strategy=strategy, loss="loss", min_bytes=256, device="cpu")


def test_a_graph_tensorflow_rejects_is_the_graphs_error_not_the_plans():
    """Found by tests/fuzz_structured.py (execution 70639): a node whose op has no
    outputs (NoOp) but whose output 0 is read. The core plans from structure, without
    TensorFlow's op registry, and swapped that output; the rewrite's error blamed the
    plan ("swaps[7]: ... has 0 output(s)"). It is the graph's, in TensorFlow's words."""
    from tensorflow.core.framework import graph_pb2

    gd = graph_pb2.GraphDef.FromString(
        hybridplan.testing.synthetic_graphdef(120, "mixed", batch=2, size=8, channels=8)
    )
    next(n for n in gd.node if n.name == "model/block0/conv2/bn/batchnorm/mul").op = "NoOp"
    p = hybridplan.plan(gd, 41242, strategy="tflms", min_bytes=1024)
    assert p.swaps
    with pytest.raises(hybridplan.InvalidGraphError, match="TensorFlow does not accept this graph"):
        hybridplan.apply(gd, 41242, strategy="tflms", min_bytes=1024)


@pytest.mark.parametrize("fraction", [0.8, 1.5])
def test_bytes_malformed_where_the_core_does_not_read_are_the_graphs_error(fraction):
    """The core reads only the fields it plans with: an attribute value whose tag is not
    a valid protobuf tag passes the analysis and the plan. The rewrite parses the whole
    message (TensorFlow's parser refuses it): a typed error about the graph, whether the
    step needs a plan or already fits, and nothing returned."""
    gd = graph_pb2.GraphDef.FromString(
        hybridplan.testing.synthetic_graphdef(120, "mixed", batch=2, size=8, channels=8)
    )
    gd.node[3].attr["zz_marker"].i = 77  # AttrValue bytes: tag 0x18 (field 3, varint), 77
    data = bytearray(gd.SerializeToString())
    at = data.index(b"zz_marker")
    tag = data.index(b"\x18\x4d", at)
    data[tag] = 0xFF  # field 31, wire type 7: no such wire type
    data = bytes(data)
    from google.protobuf.message import DecodeError

    with pytest.raises(DecodeError):
        graph_pb2.GraphDef.FromString(data)
    a = hybridplan.analyze(data, device="v100-nvlink2")  # the device apply plans for
    budget = int(a.peak_bytes * fraction)
    p = hybridplan.plan(data, budget, strategy="tflms", min_bytes=1024)
    assert p.is_empty == (fraction > 1)
    with pytest.raises(hybridplan.InvalidGraphError, match="malformed where the planner"):
        hybridplan.apply(data, budget, strategy="tflms", min_bytes=1024)


@pytest.mark.parametrize("budget", ["1TiB", None])
def test_an_unknown_target_is_refused_even_when_the_step_already_fits(budget):
    """A misspelt target is refused before planning, also when the budget needs no
    rewrite (which would otherwise never reach the code that writes for the target)."""
    gd = hybridplan.testing.synthetic_graphdef(300)
    budget = budget or hybridplan.analyze(gd).budget_for(0.5)
    for target in ("GPU", "cpu_emulation", "tpu", None):
        with pytest.raises(hybridplan.InvalidArgumentError, match="unknown target"):
            hybridplan.apply(gd, budget, target=target)
