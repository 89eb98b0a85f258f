"""``tf.cond`` in the step: a functional ``If`` planned as one op of the schedule.

The claims under test: a Keras classifier whose forward pass holds ``tf.cond`` (forward
``If`` nodes, gradient ``StatelessIf`` nodes, their branches in the GraphDef's library)
is traced as TensorFlow traced it, planned at 60% of its activations, rewritten for CPU
emulation and run 3 steps next to the original: losses and weights equal bit for bit,
the measured device peak within the budget; the ``If`` nodes are never cloned and their
``variant`` outputs (the optionals that carry intermediates to the gradient) are never
swapped; the memory stated for them is their branches'; a branch holding a loop is
refused with a typed error naming the node.
"""

from __future__ import annotations

import keras
import pytest
import tensorflow as tf

import hybridplan
import hybridplan.testing
from hybridplan import trial
from hybridplan._graphio import graph_source
from hybridplan.controlflow import IF_OPS, body_memory
from hybridplan.models import from_keras


class _CondBlock(keras.layers.Layer):
    """``tf.cond`` on a tensor: two branches of different ops and memory."""

    def __init__(self, units: int, **kwargs):
        super().__init__(**kwargs)
        self.a, self.b = keras.layers.Dense(units), keras.layers.Dense(units)

    def call(self, h):
        return tf.cond(
            tf.reduce_mean(h) > -1.0,
            lambda: tf.nn.relu(self.a(h)) * 0.5 + tf.math.softplus(h),
            lambda: tf.sigmoid(self.b(h)),
        )


def _workload():
    keras.utils.set_random_seed(3)
    x = keras.Input((64,), batch_size=256)
    h = keras.layers.Dense(256, activation="tanh")(x)
    for _ in range(3):
        h = keras.layers.Dense(256, activation="relu")(h)
        h = keras.layers.Dense(256, activation="tanh")(h)
        h = _CondBlock(256)(h)
    model = keras.Model(x, keras.layers.Dense(10)(h))
    return from_keras(model, tf.TensorSpec([256, 64]), tf.TensorSpec([256], tf.int32), 10)


def test_cond_step_plans_at_60_percent_and_runs_bit_identical():
    w = _workload()
    gd = w.trace().graph_def
    ifs = {n.name: n for n in gd.node if n.op in IF_OPS}
    assert sum(n.op == "If" for n in ifs.values()) == 3  # forward, with optional outputs
    assert sum(n.op == "StatelessIf" for n in ifs.values()) == 3  # their gradients

    t = trial(w, fraction=0.6)
    print(t)  # the figures docs/control-flow.md states (pytest -s)
    assert t.same_losses and t.same_weights, (t.original.losses, t.planned.losses)
    assert t.within_budget, (t.planned.device_peak, t.activation_budget)
    assert t.planned.device_peak < t.original.device_peak
    assert t.inserted["swap_out"] + t.inserted["clones"] > 0
    # Never cloned, and their variant outputs never swapped (DeepCopy has no variant
    # kernel): the plan touches only ordinary tensors around them.
    names = [n.name for n in gd.node]
    swapped = {names[s["node"]] for s in t.plan.swaps if gd.node[s["node"]].op in IF_OPS}
    for name in swapped:
        outs = [s["output"] for s in t.plan.swaps if names[s["node"]] == name]
        dtypes = ifs[name].attr["Tout"].list.type
        assert all(dtypes[k] != tf.variant.as_datatype_enum for k in outs), (name, outs)
    cloned = {names[v] for rc in t.plan.recomputes for v in rc["nodes"]}
    assert not cloned & set(ifs), cloned & set(ifs)


def test_if_memory_is_its_branches():
    """The held bytes of a forward ``If``'s optional outputs are the intermediates its
    branches return in them; each node's scratch is its larger branch's."""
    gd = _workload().trace().graph_def
    stated = {name: (scratch, held) for name, scratch, held in body_memory(gd.SerializeToString())}
    # One walk of the bytes finds the calls (none here) and the control flow.
    assert graph_source(gd).control_flow is True
    assert graph_source(hybridplan.testing.synthetic_graphdef(1000)).control_flow is False
    ifs = [n for n in gd.node if n.op in IF_OPS]
    assert set(stated) == {n.name for n in ifs}  # every If stated: none refused
    for n in ifs:
        scratch, held = stated[n.name]
        assert scratch > 0
        variant = [
            k for k, t in enumerate(n.attr["Tout"].list.type) if t == tf.variant.as_datatype_enum
        ]
        assert sorted({k for k, *_ in held}) == variant, (n.name, held)
        for _, branch, dtype, dims, count in held:
            assert branch in (0, 1) and count == 1
            assert dtype == tf.float32.as_datatype_enum and all(d > 0 for d in dims)
    # The core takes them: each node's scratch is the stated one, and a forward If's
    # optionals, live from the If to its gradient, hold [256, 256] float activations
    # (the then-branch's Relu, or the else-branch's Sigmoid).
    a = hybridplan.analyze(gd)
    index = {n.name: i for i, n in enumerate(gd.node)}
    for name, (scratch, _) in stated.items():
        assert a.workspace[index[name]] == scratch
    live = {t.name: t.bytes for t in a.live_at_peak(a.num_tensors)}
    held = [live[f"{n.name}:1"] for n in ifs if n.op == "If" and f"{n.name}:1" in live]
    assert held and all(b == 256 * 256 * 4 for b in held), live


def test_branch_with_a_loop_is_refused():
    keras.utils.set_random_seed(3)
    dense = keras.layers.Dense(32)

    def looped(h):
        return tf.while_loop(lambda i, h: i < 3, lambda i, h: (i + 1, tf.tanh(dense(h))), (0, h))[1]

    def step(x, y):
        with tf.GradientTape() as tape:
            h = tf.cond(tf.reduce_sum(x) > 0, lambda: looped(x), lambda: tf.sigmoid(dense(x)))
            loss = tf.reduce_mean(tf.square(h - tf.cast(y[:, None], tf.float32)))
        grads = tape.gradient(loss, dense.trainable_variables)
        for v, g in zip(dense.trainable_variables, grads, strict=True):
            v.assign_sub(0.01 * g)
        return loss

    dense(tf.zeros([8, 32]))
    traced = hybridplan.trace_concrete(
        tf.function(step).get_concrete_function(
            tf.TensorSpec([8, 32]), tf.TensorSpec([8], tf.int32)
        )
    )
    gd = traced.graph_def
    assert sum(n.op in IF_OPS for n in gd.node) == 2  # forward and gradient conds
    # Each holds a loop (the gradient's, the loop's gradient) in a branch, which hides
    # memory: neither is stated.
    assert body_memory(gd.SerializeToString()) == []
    with pytest.raises(hybridplan.UnsupportedGraphError, match=r"\(op If\)|op If|'If'"):
        hybridplan.plan(traced, "1GiB", device="cpu")
