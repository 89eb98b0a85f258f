"""Function calls in the step: inlined from the GraphDef's library, planned, run.

The claims under test: a step that calls a nested ``tf.function`` (two levels), given
as the GraphDef TensorFlow traced (calls kept, bodies in the library, nothing traced
again), plans; ``apply`` returns the inlined, rewritten graph; it runs on CPU emulation
with the same losses and weights, bit for bit, as the original step with its calls; the
inlined nodes carry the names TensorFlow's own inliner gives them; what is not inlined
stays and is refused in the forward pass with a typed error.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import hybridplan
from hybridplan._graphio import graph_source
from hybridplan.inlining import CALL_OPS, inline_calls
from hybridplan.trialing import same_bits, side_by_side

X_SPEC = tf.TensorSpec([256, 64])
Y_SPEC = tf.TensorSpec([256], tf.int32)
_ALIVE: list = []


def _nested_step(**inner_options):
    """A step whose forward pass calls ``outer``, which calls ``inner``: two levels of
    ``tf.function``, each kept by TensorFlow as a call with its body in the library."""
    keras.utils.set_random_seed(3)
    d1, d2, d3 = (keras.layers.Dense(n) for n in (128, 128, 10))
    optimizer = keras.optimizers.SGD(0.01, momentum=0.9)

    @tf.function(**inner_options)
    def inner(h):
        for _ in range(4):  # one layer, four times: four activations kept for the gradient
            h = tf.nn.relu(d2(h)) * 0.5 + tf.math.softplus(h)
        return h

    @tf.function
    def outer(x):
        return d3(inner(tf.tanh(d1(x))))

    def step(x, y):
        with tf.GradientTape() as tape:
            logits = outer(x)
            loss = tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
            )
        variables = d1.trainable_variables + d2.trainable_variables + d3.trainable_variables
        grads = tape.gradient(loss, variables)
        optimizer.apply_gradients(zip(grads, variables, strict=True))
        return loss

    x0 = tf.zeros(X_SPEC.shape)
    d3(d2(d1(x0)))
    optimizer.build(d1.trainable_variables + d2.trainable_variables + d3.trainable_variables)
    cf = tf.function(step).get_concrete_function(X_SPEC, Y_SPEC)
    _ALIVE.append((d1, d2, d3, optimizer))  # the graph captures their variables
    return cf


def _batch(seed: int):
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal(X_SPEC.shape).astype(np.float32),
        rng.integers(0, 10, Y_SPEC.shape).astype(np.int32),
    )


def _calls(gd) -> list[str]:
    found = [n.name for n in gd.node if n.op in CALL_OPS]
    found += [n.name for f in gd.library.function for n in f.node_def if n.op in CALL_OPS]
    return found


def test_nested_calls_plan_from_the_graphdef_and_run_bit_identical():
    traced = hybridplan.trace_concrete(_nested_step())
    gd = traced.graph_def
    assert len(_calls(gd)) >= 3  # forward call, the nested call inside it, gradient call
    before = gd.SerializeToString(deterministic=True)
    data = gd.SerializeToString()  # what a pipeline receives: bytes, not a function
    # Calls inlined: their bodies may hold control flow, looked for in the inlined bytes.
    assert graph_source(data).control_flow is None

    a = hybridplan.analyze(data)
    budget = a.persistent_bytes + int(a.activation_peak_bytes * 0.7)
    r = hybridplan.apply(
        data,
        budget,
        device="cpu",
        target="cpu-emulation",
        min_bytes=1 << 12,
        loss=traced.loss_source,
    )
    assert r.report["inserted"]["swap_out"] + r.report["inserted"]["clones"] > 0
    assert r.plan.planned["peak_bytes"] <= budget
    assert not _calls(r.graph_def) and len(r.graph_def.library.function) == 0
    assert gd.SerializeToString(deterministic=True) == before  # input untouched
    # rewrite() of the graph with its calls inlines it first: the plan's indices match.
    again = hybridplan.rewrite(gd, r.plan, target="cpu-emulation")
    assert again == r.graph_def
    # The plan reaches inside the function bodies: it touches nodes the inlining made.
    # (It may also touch outer nodes, e.g. the optimizer's: which ones depends on the
    # node order, and Keras numbers its optimizers per process, so the test does not
    # pin them.)
    names = [n.name for n in r.graph_def.node]
    touched = [names[s["node"]] for s in r.plan.swaps] + [
        names[v] for rc in r.plan.recomputes for v in rc["nodes"]
    ]
    outer = {n.name for n in gd.node}
    assert set(touched) - outer, touched

    base, new = side_by_side(traced, r.graph_def, _batch, steps=3)
    assert same_bits(base, new), (base.losses, new.losses)
    assert len(base.losses) >= 3 and np.isfinite(base.losses).all()
    assert new.device_peak < base.device_peak, (new.device_peak, base.device_peak)


def test_inlined_names_are_tensorflows():
    """Grappler's function optimizer (TensorFlow's own inliner) names each body node
    ``<call>/<body node>``; the inlined graph holds exactly those nodes (its glue nodes,
    ``Func/...`` and the call's ``IdentityN``, aside)."""
    from tensorflow.core.protobuf import config_pb2, meta_graph_pb2, rewriter_config_pb2
    from tensorflow.python.framework import op_def_registry
    from tensorflow.python.grappler import tf_optimizer

    traced = hybridplan.trace_concrete(_nested_step())
    flat, kept = inline_calls(traced.graph_def)
    assert kept == []

    mg = meta_graph_pb2.MetaGraphDef()
    mg.graph_def.CopyFrom(traced.graph_def)
    for node in mg.graph_def.node:  # Grappler's import needs the default attributes
        for attr in op_def_registry.get(node.op).attr:
            if attr.name not in node.attr and attr.HasField("default_value"):
                node.attr[attr.name].CopyFrom(attr.default_value)
    mg.collection_def["train_op"].node_list.value.extend([t.split(":")[0] for t in traced.outputs])
    cfg = config_pb2.ConfigProto()
    rw = cfg.graph_options.rewrite_options
    rw.meta_optimizer_iterations = rewriter_config_pb2.RewriterConfig.ONE
    rw.optimizers.append("function")
    rw.min_graph_nodes = -1
    grappler = tf_optimizer.OptimizeGraph(cfg, mg)

    def body(gd):
        return {n.name for n in gd.node if not n.name.startswith("Func/")}

    lib = {f.signature.name: f for f in traced.graph_def.library.function}

    def call_names(nodes, prefix=""):  # a call's node keeps its name as an IdentityN
        for n in nodes:
            if n.op in CALL_OPS:
                yield prefix + n.name
                yield from call_names(lib[n.attr["f"].func.name].node_def, f"{prefix}{n.name}/")

    calls = set(call_names(traced.graph_def.node))
    assert len(calls) >= 4  # two levels, forward and gradient
    assert body(flat) - calls == body(grappler)
    # Every tensor read has its shape (the planner sizes each): from the library's
    # _output_shapes, the call's own for its IdentityN, the arguments' for the inputs.
    shapes = {n.name: len(n.attr["_output_shapes"].list.shape) for n in flat.node}
    for n in flat.node:
        for i in n.input:
            if not i.startswith("^"):
                name, _, k = i.partition(":")
                assert int(k or 0) < shapes[name], (n.name, i)


def test_noinline_call_is_kept_and_refused_in_the_forward_pass():
    traced = hybridplan.trace_concrete(_nested_step(experimental_attributes={"_noinline": True}))
    flat, kept = inline_calls(traced.graph_def)
    assert [reason for _, _, reason in kept if "_noinline" in reason]
    # The outer calls are inlined; the kept one stays a call, its function in the library.
    left = [n for n in flat.node if n.op in CALL_OPS]
    assert sorted(n.name for n in left) == sorted(name for name, _, _ in kept)
    assert {n.attr["f"].func.name for n in left} <= {
        f.signature.name for f in flat.library.function
    }
    with pytest.raises(hybridplan.UnsupportedGraphError, match=r"PartitionedCall.*_noinline"):
        hybridplan.plan(traced.graph_def, "1GiB", device="cpu", loss=traced.loss_source)


def _recursive_call_graph(depth: int):
    """``x -> call f0 -> relu`` where ``f{i}`` calls ``f{i+1}`` and the last calls ``f0``
    (every node shaped but the inlined ones: what TensorFlow's importer would infer)."""
    graph_pb2 = pytest.importorskip("tensorflow.core.framework.graph_pb2")

    def shaped(n):
        n.attr["_output_shapes"].list.shape.add().dim.add(size=4)

    g = graph_pb2.GraphDef()
    x = g.node.add(name="x", op="Placeholder")
    x.attr["dtype"].type = 1
    shaped(x)
    c = g.node.add(name="call", op="PartitionedCall", input=["x"])
    c.attr["f"].func.name = "f0"
    c.attr["Tin"].list.type.append(1)
    c.attr["Tout"].list.type.append(1)
    shaped(c)
    r = g.node.add(name="r", op="Relu", input=["call"])
    r.attr["T"].type = 1
    shaped(r)
    for i in range(depth):
        f = g.library.function.add()
        f.signature.name = f"f{i}"
        f.signature.input_arg.add(name="a", type=1)
        f.signature.output_arg.add(name="o", type=1)
        n = f.node_def.add(name="c", op="PartitionedCall", input=["a"])
        n.attr["f"].func.name = f"f{(i + 1) % depth}"
        n.attr["Tin"].list.type.append(1)
        n.attr["Tout"].list.type.append(1)
        f.ret["o"] = "c:output:0"
    return g


@pytest.mark.parametrize("depth", [1, 3])
def test_a_recursive_library_is_refused_not_imported(depth):
    """TensorFlow's importer does not return from a recursive library (the process dies):
    the shapes the inlined nodes lack are not inferred, and the step is refused with a
    typed error naming the cycle."""
    from hybridplan.inlining import recursive_function

    g = _recursive_call_graph(depth)
    cycle = [f"f{i}" for i in range(depth)] + ["f0"]
    assert recursive_function(g.library) == cycle
    with pytest.raises(hybridplan.UnsupportedGraphError, match="library is recursive"):
        hybridplan.analyze(g.SerializeToString())
    g.library.function[-1].node_def[0].attr["f"].func.name = "missing"  # the cycle cut
    assert recursive_function(g.library) is None


def test_a_graph_tensorflow_refuses_when_inferring_inlined_shapes_says_why():
    """A reader of an output the call does not have (``call:5`` of a one-output call):
    the inlined nodes' shapes cannot be inferred, and the error is TensorFlow's reason,
    not the first tensor left without a shape."""
    g = _recursive_call_graph(1)
    body = g.library.function[0]
    del body.node_def[:]
    n = body.node_def.add(name="id", op="Identity", input=["a"])
    n.attr["T"].type = 1
    body.ret["o"] = "id:output:0"
    assert hybridplan.analyze(g.SerializeToString()).peak_bytes > 0
    g.node[2].input[0] = "call:5"
    with pytest.raises(hybridplan.InvalidGraphError, match="invalid output 5"):
        hybridplan.analyze(g.SerializeToString())
