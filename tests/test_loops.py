"""Loops in the step: a functional ``While`` planned as one op of the schedule.

The claims under test: a Keras LSTM and a GRU classifier (sequence 64, batch 8: a forward
``While`` filling ``TensorList`` accumulators, its gradient ``StatelessWhile`` popping
them) are traced as TensorFlow traced them. The accumulators, inputs of the gradient
loop, are more than 40% of the tensor peak, so 60% of the activations needs them off the
device: the core keeps the largest of them on the host, as few as the budget needs (the
loops' bodies copy each element out as it is pushed and back as it is popped,
``hybridplan.accumulators``; ``rust/core/src/hosting.rs`` decides), rewritten for CPU
emulation and run 3 steps next to the original: losses and weights equal bit for bit,
the measured device peak within the budget, the predicted peaks within 10% of the
measured ones (original and plan; device and host); the loops are never cloned and their ``variant``
outputs never swapped; the memory stated for them is their body's (trip count x the
values pushed each iteration, a variable's value not counted; 0 device bytes for a list
kept on the host); a loop whose trip count is not a constant is refused with a typed
error that says how to make it known.
"""

from __future__ import annotations

import json

import keras
import pytest
import tensorflow as tf

import hybridplan
from hybridplan import _core, trial
from hybridplan.accumulators import host, movable
from hybridplan.controlflow import WHILE_OPS, body_memory
from hybridplan.models import from_keras
from hybridplan.rewriting import rewrite_with_summary

SEQUENCE, BATCH, FEATURES, UNITS = 64, 8, 32, 128


def _workload(kind: str):
    """A classifier of one recurrent layer, or two stacked (``lstm_gru``: an LSTM whose
    sequence a GRU reads)."""
    keras.utils.set_random_seed(3)
    x = keras.Input((SEQUENCE, FEATURES), batch_size=BATCH)
    layers = {"lstm": keras.layers.LSTM, "gru": keras.layers.GRU}
    h = x
    *lower, top = kind.split("_")
    for name in lower:
        h = layers[name](UNITS, return_sequences=True)(h)
    model = keras.Model(x, keras.layers.Dense(10)(layers[top](UNITS)(h)))
    return from_keras(
        model,
        tf.TensorSpec([BATCH, SEQUENCE, FEATURES]),
        tf.TensorSpec([BATCH], tf.int32),
        10,
        name=f"{kind}_classifier",
    )


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_rnn_step_plans_at_60_percent_and_runs_bit_identical(kind):
    w = _workload(kind)
    traced = w.trace()
    gd = traced.graph_def
    loops = {n.name: n for n in gd.node if n.op in WHILE_OPS}
    assert sum(n.op == "While" for n in loops.values()) == 1  # forward
    assert sum(n.op == "StatelessWhile" for n in loops.values()) == 1  # its gradient

    # The forward loop's TensorList accumulators, live from the forward loop to its
    # gradient and inputs of the gradient loop, are more than 40% of the tensor peak:
    # 60% of the activations needs them off the device.
    a = hybridplan.analyze(traced)
    live = a.live_at_peak(a.num_tensors)
    lists = sum(t.bytes for t in live if t.dtype == "variant" and t.op in WHILE_OPS)
    tensors = a.activation_peak_bytes - a.workspace_peak_bytes
    assert lists > 0.4 * tensors, (lists, tensors)
    t = trial(w, fraction=0.6)
    print(t)  # the figures docs/control-flow.md states (pytest -s)
    forward = next(n.name for n in loops.values() if n.op == "While")
    assert t.plan.hosted_accumulators and {n for n, _ in t.plan.hosted_accumulators} == {forward}
    saved = hybridplan.Plan(_core.load_plan(t.plan.to_json()))  # what Plan.save/load keep
    assert saved.hosted_accumulators == t.plan.hosted_accumulators
    _check_trial(a, t)
    print(
        f"{kind}: original predicted {a.activation_peak_bytes} measured "
        f"{t.original.device_peak}; plan predicted {t.predicted_peak} measured "
        f"{t.planned.device_peak}"
    )
    # The hosted lists' bytes are in the host peak; the model's host peak within 10% of
    # the host device's allocation records.
    hosted = _hosted_bytes(t.plan, gd)
    host_measured = t.planned.peak_bytes.get("/device:CPU:1", 0)
    assert t.plan.host_peak_bytes >= hosted > 0, (t.plan.host_peak_bytes, hosted)
    assert abs(t.plan.host_peak_bytes - host_measured) <= 0.10 * host_measured, (
        t.plan.host_peak_bytes,
        host_measured,
    )
    print(
        f"{kind}: hosted {len(t.plan.hosted_accumulators)} of {len(movable(gd))} lists; "
        f"host predicted {t.plan.host_peak_bytes} measured {host_measured}"
    )
    names = [n.name for n in gd.node]
    for s in t.plan.swaps:
        node = gd.node[s["node"]]
        if node.op in WHILE_OPS:  # only ordinary outputs: no swap op copies a variant
            assert node.attr["T"].list.type[s["output"]] != tf.variant.as_datatype_enum
    cloned = {names[v] for rc in t.plan.recomputes for v in rc["nodes"]}
    assert not cloned & set(loops), cloned & set(loops)


@pytest.mark.parametrize("kind", ["lstm_lstm", "lstm_gru"])
def test_stacked_rnn_step_plans_at_60_percent_and_runs_bit_identical(kind):
    """The upper layer's gradient loop carries the gradient of the sequence it read one
    element at a time: a list it sums, each iteration, with a new list holding that
    iteration's element (``AddN`` of lists). Its memory is stated like an accumulator's
    (trip count x the element), so the step plans, and the plan runs bit for bit."""
    w = _workload(kind)
    traced = w.trace()
    gd = traced.graph_def
    data = gd.SerializeToString()
    loops = {n.name for n in gd.node if n.op in WHILE_OPS}
    assert len(loops) == 4  # two forward loops, two gradient loops
    stated = {name: held for name, _, held in body_memory(data)}
    assert loops <= set(stated), loops - set(stated)
    sums = [
        name
        for name in loops
        if any(
            summed and k == j
            for j, summed in enumerate(_gradient_sums(gd, name))
            for k, *_ in stated[name]
        )
    ]
    assert sums, "no gradient loop states the list it sums"
    a = hybridplan.analyze(traced)
    t = trial(w, fraction=0.6)
    print(t)
    _check_trial(a, t)


def _check_trial(a, t) -> None:
    """The trial's losses and weights equal bit for bit, its measured device peak within
    the budget and below the original's, and the model's peaks (original and plan,
    ``a`` the original's analysis) within 10% of the measured ones."""
    assert t.same_losses and t.same_weights, (t.original.losses, t.planned.losses)
    assert t.within_budget, (t.planned.device_peak, t.activation_budget)
    assert t.planned.device_peak < t.original.device_peak
    for predicted, measured in (
        (a.activation_peak_bytes, t.original.device_peak),
        (t.predicted_peak, t.planned.device_peak),
    ):
        assert abs(predicted - measured) <= 0.10 * measured, (predicted, measured)


def _gradient_sums(gd, loop: str) -> list[bool]:
    """For each output of ``loop``: whether its body returns an ``AddN`` of lists."""
    from tensorflow.python.framework.function_def_to_graph import function_def_to_graph_def

    node = next(n for n in gd.node if n.name == loop)
    body = next(f for f in gd.library.function if f.signature.name == node.attr["body"].func.name)
    bgd, flat = function_def_to_graph_def(body)
    by_name = {n.name: n for n in bgd.node}
    out = []
    for arg in body.signature.output_arg:
        ref = flat.get(body.ret[arg.name], "")
        producer = by_name.get(ref.split(":")[0])
        while producer is not None and producer.op == "Identity":
            producer = by_name.get(producer.input[0].split(":")[0])
        out.append(producer is not None and producer.op == "AddN")
    return out


def _hosted_bytes(plan, gd) -> int:
    """The bytes of the lists ``plan`` hosts: 64 elements of each pushed value."""
    stated = {(n, k): (dims, count) for n, k, _, _, _, dims, count, *_ in _statements(gd)}
    total = 0
    for key in plan.hosted_accumulators:
        dims, count = stated[key]
        total += 4 * count * dims[0] * dims[1]
    return total


def _statements(gd):
    from hybridplan.accumulators import statements

    data = gd.SerializeToString()
    return statements(data, body_memory(data), None)


def test_hosting_is_the_cores_decision():
    """The core decides which accumulators to host, the same from an analysis as from
    the bytes: as few as the budget needs, largest first; their bytes in the host peak,
    under the host budget and in the link traffic, their copies in the step time; and a
    GPU device model, whose rewrite cannot write hosted lists, gets no such plan."""
    traced = _workload("lstm").trace()
    gd = traced.graph_def
    a = hybridplan.analyze(traced, device="cpu")
    budget = a.budget_for(0.6)
    p = hybridplan.plan(a, budget, device="cpu", min_bytes=1 << 12)
    assert p.to_json() == hybridplan.plan(traced, budget, device="cpu", min_bytes=1 << 12).to_json()
    found = movable(gd)
    assert 0 < len(p.hosted_accumulators) < len(found), p.hosted_accumulators
    hosted = _hosted_bytes(p, gd)
    assert p.host_peak_bytes >= hosted
    for key in ("bytes_d2h", "bytes_h2d"):
        assert p.planned[key] >= p.original[key] + hosted, (key, p.planned[key], hosted)
    # Each element copied out in the forward loop (hidden behind its compute or not) and
    # back in the gradient loop (one iteration at a time: added to its compute).
    cpu = json.loads(_core.device_preset("cpu"))
    back = sum(
        count * (cpu["link_latency_s"] + 4 * dims[0] * dims[1] / cpu["h2d_bandwidth"])
        for n, k, _, _, _, dims, count, *_ in _statements(gd)
        if (n, k) in p.hosted_accumulators
    )
    added = p.planned["compute_time_s"] - p.original["compute_time_s"]
    assert added >= back * (1 - 1e-9), (added, back)
    assert p.planned["step_time_s"] >= p.planned["compute_time_s"]
    with pytest.raises(hybridplan.HostBudgetError):
        hybridplan.plan(a, budget, device="cpu", min_bytes=1 << 12, host_budget=hosted - 1)
    with pytest.raises(hybridplan.BudgetError) as e:
        hybridplan.plan(a, budget, device="v100-nvlink2", min_bytes=1 << 12)
    assert not isinstance(e.value, hybridplan.HostBudgetError)
    # Every list on the device when the budget allows: the plan's JSON has no record.
    roomy = hybridplan.plan(a, a.budget_for(1.0), device="cpu", min_bytes=1 << 12)
    assert not roomy.hosted_accumulators and "hosted_accumulators" not in roomy.report


def test_a_bad_accumulator_statement_is_a_typed_error():
    """The core checks the graph side of every statement: one naming a gradient-loop input
    that does not read the list is refused, naming the loop and output."""
    gd = _workload("lstm").trace().graph_def
    data = gd.SerializeToString()
    good = _statements(gd)
    _core.analyze(data, bodies=body_memory(data), hosting=good)
    fwd, k, grad, j, *rest = good[0]
    with pytest.raises(hybridplan.InvalidArgumentError, match=f"output {k} of loop '{fwd}'"):
        _core.analyze(data, bodies=body_memory(data), hosting=[(fwd, k, grad, j + 1, *rest)])


def test_loop_memory_is_its_accumulators():
    """The forward loop holds, per iteration, the values its gradient reads (64 of each
    pushed [8, 128] activation and [8, 32] input step); the kernel and recurrent kernel
    it pushes each iteration are the variables' buffers (``ReadVariableOp``), counted 0;
    the gradient loop pops them (counted 0) and holds only what it sets. Kept on the
    host, the accumulators hold no device bytes, and the graph analyses."""
    gd = _workload("lstm").trace().graph_def
    stated = {name: (scratch, held) for name, scratch, held in body_memory(gd.SerializeToString())}
    loops = {n.op: n for n in gd.node if n.op in WHILE_OPS}
    assert set(loops) == {"While", "StatelessWhile"}
    assert {n.name for n in loops.values()} <= set(stated)  # both stated: none refused
    forward_scratch, forward = stated[loops["While"].name]
    assert forward_scratch > 0
    assert all(count == SEQUENCE for *_, count in forward)
    shapes = sorted(tuple(dims) for _, _, _, dims, _ in forward)
    # No weight-shaped element ([32, 512], [128, 512]): the variables are not copied.
    assert all(dims in ((BATCH, UNITS), (BATCH, FEATURES)) for dims in shapes), shapes
    assert shapes.count((BATCH, FEATURES)) == 1  # the input step the gradient reads
    variant = tf.variant.as_datatype_enum
    types = loops["While"].attr["T"].list.type
    assert all(types[k] == variant for k, *_ in forward)
    _, backward = stated[loops["StatelessWhile"].name]
    assert all(count == SEQUENCE for *_, count in backward)
    assert len(backward) < len(forward)
    # The core takes them: the forward loop's lists hold their bytes until the gradient.
    a = hybridplan.analyze(gd)
    index = {n.name: i for i, n in enumerate(gd.node)}
    assert a.workspace[index[loops["While"].name]] == forward_scratch
    held = sum(4 * SEQUENCE * d[0] * d[1] for _, _, _, d, _ in forward)
    live = {t.name: t.bytes for t in a.live_at_peak(a.num_tensors)}
    in_loops = sum(b for name, b in live.items() if name.startswith(loops["While"].name + ":"))
    assert in_loops >= held - 4 * SEQUENCE * BATCH * UNITS, (in_loops, held)

    # Movable: every accumulator the gradient loop pops but the two of variables'
    # values; kept on the host, the forward loop's only list with device bytes is its
    # output sequence (read in the forward pass), and the step's nodes are unchanged.
    found = movable(gd)
    prefix = loops["While"].name + ":"
    gradient_inputs = [i for i in loops["StatelessWhile"].input if i.startswith(prefix)]
    assert len(found) == len(gradient_inputs) - 2, (found, gradient_inputs)
    assert {k for _, k in found} >= {k for k, *_ in forward if k != 3}
    hosted = host(gd, found, "cpu-emulation")
    assert [n.name for n in hosted.node] == [n.name for n in gd.node]
    restated = {n: h for n, _, h in body_memory(hosted.SerializeToString())}
    assert {k for k, *_ in restated[loops["While"].name]} == {3}
    # The rewrite writes them from a plan's record, for CPU emulation only.
    spec = {"swaps": [], "recomputes": []}
    spec["hosted_accumulators"] = [{"node": n, "output": k} for n, k in found]
    out = rewrite_with_summary(gd, spec, target="cpu-emulation").graph_def
    assert out.library == hosted.library
    with pytest.raises(hybridplan.UnsupportedGraphError, match="cpu-emulation"):
        rewrite_with_summary(gd, spec, target="gpu")
    ha = hybridplan.analyze(hosted)
    assert ha.activation_peak_bytes < a.activation_peak_bytes - 0.3 * (
        a.activation_peak_bytes - a.workspace_peak_bytes
    ), (ha.activation_peak_bytes, a.activation_peak_bytes)


def _value_loop(maximum_iterations: int | None):
    """A step whose loop runs until its values grow past 10 (a condition on values)."""
    keras.utils.set_random_seed(3)
    dense = keras.layers.Dense(32)

    def step(x, y):
        with tf.GradientTape() as tape:
            _, h = tf.while_loop(
                lambda i, h: tf.reduce_sum(tf.abs(h)) < 10.0,
                lambda i, h: (i + 1, h + tf.tanh(dense(h))),
                (0, x),
                maximum_iterations=maximum_iterations,
            )
            loss = tf.reduce_mean(tf.square(h - tf.cast(y[:, None], tf.float32)))
        grads = tape.gradient(loss, dense.trainable_variables)
        for v, g in zip(dense.trainable_variables, grads, strict=True):
            v.assign_sub(0.01 * g)
        return loss

    dense(tf.zeros([8, 32]))
    return hybridplan.trace_concrete(
        tf.function(step).get_concrete_function(
            tf.TensorSpec([8, 32]), tf.TensorSpec([8], tf.int32)
        )
    )


def test_loop_with_unknown_trip_count_is_refused():
    traced = _value_loop(None)  # no constant bounds the iterations
    gd = traced.graph_def
    assert any(n.op in WHILE_OPS for n in gd.node)
    assert not {name for name, *_ in body_memory(gd.SerializeToString())} & {
        n.name for n in gd.node if n.op in WHILE_OPS
    }
    with pytest.raises(hybridplan.UnsupportedGraphError, match="trip count must be a constant"):
        hybridplan.plan(traced, "1GiB", device="cpu")


def test_maximum_iterations_makes_the_trip_count_known():
    """The refusal's advice works: the same loop with ``maximum_iterations=5`` is stated
    (forward and gradient loops, 5 iterations: each list holds 5 [8, 32] values) and
    plans."""
    traced = _value_loop(5)
    gd = traced.graph_def
    loops = {n.name for n in gd.node if n.op in WHILE_OPS}
    stated = {name: held for name, _, held in body_memory(gd.SerializeToString())}
    assert loops and loops <= set(stated)
    forward = [n.name for n in gd.node if n.op == "While"]
    assert forward and stated[forward[0]]
    assert all(count == 5 and dims == [8, 32] for *_, dims, count in stated[forward[0]])
    hybridplan.plan(traced, "1GiB", device="cpu")
