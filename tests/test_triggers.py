"""Triggers: the ops whose completion starts a swap-in or a unit's recompute clones.

A trigger only times its copy or its clones if TensorFlow runs it where the schedule
puts it. A *dead* op (neither the loss nor any variable write depends on it) below
another dead op is not: Grappler prunes its readers and hands its control edges to its
inputs, up the dead chain, and clones meant to wait for the MLP's
``.../div_no_nan/div_no_nan_2`` (the gradient of a mean loss with respect to its
constant denominator, two dead ops below the loss) ran right after the loss, 30% of the
step early (docs/accuracy.md, finding 11; rust/core/src/dead.rs). A dead op reading live
ops only (an optimizer's unread ``Identity`` on a gradient) never triggers either: kept
alive by the control edge, it changed the bits of a momentum (tests/test_apply.py).
"""

from __future__ import annotations

import keras
import tensorflow as tf

import hybridplan
from hybridplan.errors import BudgetError


def _mlp() -> hybridplan.Traced:
    keras.utils.set_random_seed(0)
    dense = [keras.layers.Dense(256, activation="relu") for _ in range(6)]
    model = keras.Sequential([keras.Input((256,)), *dense, keras.layers.Dense(8)])
    return hybridplan.trace_keras(
        model,
        keras.optimizers.SGD(0.01, momentum=0.9),
        keras.losses.MeanSquaredError(),
        tf.TensorSpec([1024, 256]),
        tf.TensorSpec([1024, 8]),
    )


def _dead(graph_def, loss_node: str) -> set[str]:
    """Names of the dead ops (neither the loss nor a variable write depends on them,
    by data or control edges) that are not sources. An ``Identity`` chain out of the loss
    is the loss under other names (what the step returns): live."""
    inputs = {n.name: [i.lstrip("^").split(":")[0] for i in n.input] for n in graph_def.node}
    writes = [n.name for n in graph_def.node if n.op.startswith(("Assign", "ResourceApply"))]
    names = {loss_node}
    identities = [n.name for n in graph_def.node if n.op == "Identity" and inputs[n.name]]
    while grown := {v for v in identities if v not in names and inputs[v][0] in names}:
        names |= grown
    live, stack = set(), [*names, *writes]
    while stack:
        v = stack.pop()
        if v not in live:
            live.add(v)
            stack.extend(inputs[v])
    sources = {v for v, ins in inputs.items() if not ins}
    return {v for v in inputs if v not in live and v not in sources}


def test_no_plan_triggers_on_a_dead_op():
    """At 0.8 of its activation peak the recompute plan used to take ``div_no_nan_2``
    as the trigger of one unit, and the ones at 0.8 and 0.9 took the optimizer's unread
    ``sgd/Identity_k``; now no trigger of any plan is a dead op."""
    traced = _mlp()
    a = hybridplan.analyze(traced)
    nodes = traced.graph_def.node
    dead = _dead(traced.graph_def, a.loss.split(":")[0])
    assert "gradient_tape/mean_squared_error/div_no_nan/div_no_nan_2" in dead
    # An optimizer's unread Identity on a gradient: dead, reading live ops only
    # (found by structure: the optimizer's name scope depends on what ran before).
    assert any(
        n.op == "Identity" and not {i.lstrip("^").split(":")[0] for i in n.input} & dead
        for n in nodes
        if n.name in dead
    )
    checked = 0
    for strategy in ("recompute", "swap", "hybrid"):
        for f in (0.7, 0.8, 0.9):
            try:
                p = hybridplan.plan(
                    traced,
                    a.persistent_bytes + int(f * a.activation_peak_bytes),
                    strategy=strategy,
                    device="cpu",
                    min_bytes=4096,
                )
            except BudgetError:
                continue
            triggers = [r["trigger"] for r in p.recomputes]
            triggers += [i["trigger"] for s in p.swaps for i in s["ins"]]
            checked += len(triggers)
            bad = [nodes[t].name for t in triggers if nodes[t].name in dead]
            assert not bad, (strategy, f, bad)
    assert checked >= 3, checked
