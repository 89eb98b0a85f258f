"""hybridplan.runner: a traced (or rewritten) GraphDef runs as the original step, bit for bit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import graph_pb2

from hybridplan.errors import HybridplanError, InvalidArgumentError, InvalidGraphError
from hybridplan.models import build
from hybridplan.runner import StepFn, compile_step, setup_cpu_emulation

STEPS = 3


@pytest.fixture(scope="module", autouse=True)
def op_determinism():
    from tensorflow.python.framework import config

    was = config.is_op_determinism_enabled()
    tf.config.experimental.enable_op_determinism()
    yield
    if not was:
        config.disable_op_determinism()


def _state(w):
    return [*w.model.get_weights(), *(v.numpy() for v in w.optimizer.variables)]


def _restore(w, state):
    n = len(w.model.get_weights())
    w.model.set_weights(state[:n])
    for var, value in zip(w.optimizer.variables, state[n:], strict=True):
        var.assign(value)


def _train(w, step):
    losses = [np.asarray(step(*w.batch(seed))) for seed in range(STEPS)]
    return losses, _state(w)


def _assert_same_training(w, run_a, run_b):
    """Run A then B from the same initial state; losses and every variable bit-identical."""
    start = _state(w)
    losses_a, state_a = _train(w, run_a)
    _restore(w, start)
    losses_b, state_b = _train(w, run_b)
    assert [loss.tobytes() for loss in losses_a] == [loss.tobytes() for loss in losses_b]
    assert len(state_a) == len(state_b) == len(start)
    for a, b in zip(state_a, state_b, strict=True):
        assert a.tobytes() == b.tobytes()
    moved = [not np.array_equal(s, a) for s, a in zip(start, state_a, strict=True)]
    assert sum(moved) >= len(w.model.trainable_variables), "the steps must update the weights"


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("small_cnn", {"optimizer": "sgd"}),
        ("small_cnn", {"optimizer": "adam"}),
        ("transformer", {"seq": 8, "d_model": 16, "heads": 2, "layers": 1, "vocab": 30}),
    ],
)
def test_unchanged_graph_is_bit_identical_to_tf_function(name, kwargs):
    w = build(name, **kwargs)
    traced = w.trace()
    before = traced.graph_def.SerializeToString()
    step = compile_step(traced)
    assert isinstance(step, StepFn)
    _assert_same_training(w, traced.concrete_function, step)
    assert traced.graph_def.SerializeToString() == before, "compile_step mutated the GraphDef"


def _with_identity_after_first(gd: graph_pb2.GraphDef, op: str) -> graph_pb2.GraphDef:
    """A rewritten copy: an Identity between the first `op` node and all its consumers."""
    out = graph_pb2.GraphDef()
    out.CopyFrom(gd)
    src = next(n for n in out.node if n.op == op)
    new = out.node.add()
    new.name, new.op = f"{src.name}_hp_copy", "Identity"
    new.input.append(src.name)
    new.attr["T"].CopyFrom(src.attr["T"])
    new.attr["_output_shapes"].CopyFrom(src.attr["_output_shapes"])
    for n in out.node:
        if n is not new:
            n.input[:] = [new.name if i in (src.name, f"{src.name}:0") else i for i in n.input]
    return out


def test_rewritten_graph_runs_on_the_real_variables():
    w = build("small_cnn", size=8)
    traced = w.trace()
    rewritten = _with_identity_after_first(traced.graph_def, "Relu")
    assert len(rewritten.node) == traced.num_nodes + 1
    step = compile_step(traced, rewritten)
    assert step.graph_def is rewritten
    _assert_same_training(w, compile_step(traced), step)
    ops = step.function.graph.get_operations()
    assert step.node_name(rewritten.node[-1].name) in {o.name for o in ops}


def test_run_returns_every_output_and_checks_arguments():
    w = build("small_cnn", size=8)
    traced = w.trace()
    step = compile_step(traced, name="")
    x, y = w.batch(0)
    outs = step.run(x, y)
    assert len(outs) == len(traced.outputs) and outs[traced.loss_index].shape == ()
    with pytest.raises(InvalidArgumentError, match="takes 2 tensor argument"):
        step(x)
    with pytest.raises(InvalidArgumentError, match="shape"):
        step(x[:1], y[:1])


def test_missing_names_are_invalid_graph_errors():
    w = build("small_cnn", size=8)
    traced = w.trace()
    out_node = traced.loss.split(":")[0]
    for drop in (traced.inputs[0], out_node):
        gd = graph_pb2.GraphDef()
        gd.CopyFrom(traced.graph_def)
        del gd.node[[n.name for n in gd.node].index(drop)]
        with pytest.raises(InvalidGraphError, match=drop):
            compile_step(traced, gd)


def test_setup_cpu_emulation_too_late_or_bad_count():
    tf.constant(1.0) + 1.0  # the runtime is initialised by now
    current = len(tf.config.list_logical_devices("CPU"))
    assert setup_cpu_emulation(current) == [d.name for d in tf.config.list_logical_devices("CPU")]
    with pytest.raises(HybridplanError, match="already initialised"):
        setup_cpu_emulation(current + 3)
    with pytest.raises(InvalidArgumentError):
        setup_cpu_emulation(0)


def test_setup_cpu_emulation_in_a_fresh_process():
    code = textwrap.dedent(
        """
        from hybridplan.runner import setup_cpu_emulation
        names = setup_cpu_emulation(2)
        assert setup_cpu_emulation(2) == names
        print(",".join(names))
        """
    )
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "/device:CPU:0,/device:CPU:1"


def test_a_step_with_a_cond_runs_bit_identical_and_imports_twice():
    """An optimizer whose update holds a ``tf.cond`` (Adam's moving average of the
    weights, written back every other step) puts functions in the step's library, which
    tracing has already registered under the same names: the GraphDef's copies are
    imported under names of their own, and the step trains as the traced function does,
    bit for bit. Compiling it a second time adds nothing that clashes."""
    import types

    import keras

    import hybridplan

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((8, 8, 3), batch_size=2),
            keras.layers.Conv2D(4, 3, activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(3),
        ]
    )
    optimizer = keras.optimizers.Adam(1e-2, use_ema=True, ema_overwrite_frequency=2)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    traced = hybridplan.trace_keras(
        model, optimizer, loss, tf.TensorSpec([2, 8, 8, 3]), tf.TensorSpec([2], tf.int32)
    )
    assert traced.graph_def.library.function, "the step should hold the cond's branches"

    def batch(seed):
        rng = np.random.default_rng(seed)
        return rng.standard_normal((2, 8, 8, 3)).astype("float32"), np.array([0, 2], "int32")

    w = types.SimpleNamespace(model=model, optimizer=optimizer, batch=batch)
    _assert_same_training(w, traced.concrete_function, compile_step(traced))
    _assert_same_training(w, traced.concrete_function, compile_step(traced))


def test_every_reference_to_a_library_function_is_renamed():
    """A function is referred to by a node's op, a function attribute or a list of them,
    in the graph or in a body, and by the gradient table: each follows the renaming."""
    from hybridplan.runner import _rename_functions

    gd = graph_pb2.GraphDef()
    for name in ("f", "g", "g_grad"):
        gd.library.function.add().signature.name = name
    gd.library.function[0].node_def.add(name="in_body", op="g")
    gd.library.gradient.add(function_name="g", gradient_func="g_grad")
    direct = gd.node.add(name="direct", op="f")
    call = gd.node.add(name="call", op="PartitionedCall")
    call.attr["f"].func.name = "g"
    case = gd.node.add(name="case", op="Case")
    case.attr["branches"].list.func.add(name="f")
    case.attr["branches"].list.func.add(name="g")
    _rename_functions(gd)
    names = [f.signature.name for f in gd.library.function]
    assert all(n.rsplit("_hp", 1)[0] in ("f", "g", "g_grad") for n in names), names
    f, g, g_grad = names
    assert direct.op == f and call.attr["f"].func.name == g
    assert [x.name for x in case.attr["branches"].list.func] == [f, g]
    assert gd.library.function[0].node_def[0].op == g
    assert (gd.library.gradient[0].function_name, gd.library.gradient[0].gradient_func) == (
        g,
        g_grad,
    )
