"""hybridplan.trace: one flat GraphDef per training step, and the names around it."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import graph_pb2

import hybridplan
from hybridplan.errors import (
    InvalidArgumentError,
    InvalidGraphError,
    ShapeError,
    UnsupportedGraphError,
)
from hybridplan.tracing import Traced, trace, trace_keras

X_SPEC = tf.TensorSpec([2, 8, 8, 3], tf.float32)
Y_SPEC = tf.TensorSpec([2], tf.int32)


def _cnn():
    keras.utils.set_random_seed(1)
    model = keras.Sequential(
        [
            keras.Input((8, 8, 3)),
            keras.layers.Conv2D(4, 3),
            keras.layers.BatchNormalization(),
            keras.layers.ReLU(),
            keras.layers.Flatten(),
            keras.layers.Dense(3),
        ]
    )
    optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
    optimizer.build(model.trainable_variables)
    return model, optimizer, keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _step(model, optimizer, loss_fn, head=None, returns=None):
    """A tf.function training step; `head` post-processes the logits."""

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            if head is not None:
                logits = head(logits)
            loss = loss_fn(y, logits)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss if returns is None else returns(loss, y)

    return step


@pytest.fixture(scope="module")
def cnn_traced():
    model, optimizer, loss_fn = _cnn()
    return model, optimizer, trace(_step(model, optimizer, loss_fn), X_SPEC, Y_SPEC)


def _ops(gd) -> set[str]:
    return {n.op for n in gd.node}


def test_small_cnn_graph_has_forward_gradient_and_update_ops(cnn_traced):
    model, _, traced = cnn_traced
    gd = traced.graph_def
    assert isinstance(traced, Traced)
    assert len(gd.library.function) == 0
    assert {"Conv2D", "Relu", "MatMul"} <= _ops(gd)  # forward
    assert {"Conv2DBackpropFilter", "ReluGrad", "BiasAddGrad"} <= _ops(gd)  # gradient
    # update: every trainable variable's captured placeholder is written by an assign op
    by_handle = {id(h): name for h, name in traced.captures}
    assigns = {"AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp"}
    written = {n.input[0] for n in gd.node if n.op in assigns}
    for var in model.trainable_variables:
        assert by_handle[id(var.value.handle)] in written
    assert traced.num_nodes == len(gd.node) > 150
    nodes = {n.name: n for n in gd.node}
    for op in traced.concrete_function.graph.get_operations():
        shapes = nodes[op.name].attr["_output_shapes"].list.shape
        assert len(shapes) == len(op.outputs)


def test_loss_inputs_outputs_and_captures(cnn_traced):
    model, optimizer, traced = cnn_traced
    cf = traced.concrete_function
    assert traced.outputs == [t.name for t in cf.outputs]
    assert traced.loss == cf.outputs[0].name == traced.outputs[traced.loss_index]
    nodes = {n.name: n for n in traced.graph_def.node}
    out = nodes[traced.loss.split(":")[0]]
    assert any(i.startswith("^") for i in out.input), "fetching the loss must run the updates"
    assert nodes[traced.loss_source.split(":")[0]].op != "Identity"
    assert traced.inputs == ["x", "y"]
    assert [nodes[n].op for n in traced.inputs] == ["Placeholder", "Placeholder"]
    assert [s.shape for s in traced.input_specs] == [X_SPEC.shape, Y_SPEC.shape]
    # one capture per variable: model weights, BN statistics, momenta, iterations, lr
    n_vars = len(model.variables) + len(optimizer.variables)
    assert len(traced.captures) == len(traced.variables) == n_vars
    assert {id(v) for v in traced.variables} == {
        id(v.value) for v in [*model.variables, *optimizer.variables]
    }
    for handle, name in traced.captures:
        assert nodes[name].op == "Placeholder"
        assert nodes[name].attr["dtype"].type == tf.resource.as_datatype_enum
        assert handle.dtype == tf.resource


def test_serialized_is_the_graph_def(cnn_traced):
    _, _, traced = cnn_traced
    data = traced.serialized()
    assert isinstance(data, bytes) and data == traced.serialized()
    assert graph_pb2.GraphDef.FromString(data) == traced.graph_def


def test_trace_keras_names_and_builds_optimizer():
    model, _, loss_fn = _cnn()
    optimizer = keras.optimizers.Adam()  # not built: trace_keras builds its slots
    traced = trace_keras(model, optimizer, loss_fn, X_SPEC, Y_SPEC)
    assert optimizer.built
    assert traced.inputs == ["x", "y"]
    assert len(traced.captures) == len(model.variables) + len(optimizer.variables)
    assert "AssignSubVariableOp" in _ops(traced.graph_def)


def test_plain_function_and_array_specs_and_dict_output():
    model, optimizer, loss_fn = _cnn()
    step = _step(model, optimizer, loss_fn, returns=lambda loss, y: {"n": tf.size(y), "loss": loss})
    x = np.zeros(X_SPEC.shape, np.float32)
    y = np.zeros(Y_SPEC.shape, np.int32)
    traced = trace(step.python_function, x, y)  # plain Python function, array "specs"
    assert len(traced.outputs) == 2
    assert traced.loss == traced.concrete_function.structured_outputs["loss"].name
    by_key = trace(step, X_SPEC, Y_SPEC, loss="loss")
    assert by_key.loss == by_key.concrete_function.structured_outputs["loss"].name


def test_loss_selection_errors():
    model, optimizer, loss_fn = _cnn()
    pair = _step(model, optimizer, loss_fn, returns=lambda loss, y: (tf.size(y), loss))
    with pytest.raises(InvalidArgumentError, match="float"):
        trace(pair, X_SPEC, Y_SPEC)  # first output is an int
    assert trace(pair, X_SPEC, Y_SPEC, loss=1).loss_index == 1
    with pytest.raises(InvalidArgumentError, match="tensor output"):
        trace(pair, X_SPEC, Y_SPEC, loss=5)
    keyed = _step(model, optimizer, loss_fn, returns=lambda loss, y: {"total": loss})
    with pytest.raises(InvalidArgumentError, match="'loss'"):
        trace(keyed, X_SPEC, Y_SPEC)


@pytest.mark.parametrize(
    "spec",
    [tf.TensorSpec([None, 8, 8, 3]), tf.TensorSpec([2, None, 8, 3]), tf.TensorSpec(None)],
)
def test_unknown_dimension_is_a_shape_error(spec):
    model, optimizer, loss_fn = _cnn()
    with pytest.raises(ShapeError, match=r"input spec 0 .*unknown.*tf\.TensorSpec\(\[") as err:
        trace(_step(model, optimizer, loss_fn), spec, Y_SPEC)
    assert isinstance(err.value, InvalidGraphError) and isinstance(err.value, ValueError)
    with pytest.raises(ShapeError, match="input spec 1"):
        trace_keras(model, optimizer, loss_fn, X_SPEC, tf.TensorSpec([None], tf.int32))


def test_bad_spec_type():
    model, optimizer, loss_fn = _cnn()
    with pytest.raises(InvalidArgumentError, match="TensorSpec"):
        trace(_step(model, optimizer, loss_fn), [2, 8, 8, 3], Y_SPEC)


def test_nested_tf_function_is_inlined():
    model, optimizer, loss_fn = _cnn()

    @tf.function
    def head(t):
        return tf.math.softplus(t) * 2.0

    nested = tf.function(_step(model, optimizer, loss_fn, head).python_function)
    raw = nested.get_concrete_function(X_SPEC, Y_SPEC).graph.as_graph_def()
    assert "PartitionedCall" in _ops(raw) and len(raw.library.function) > 0  # what TF gives
    traced = trace(nested, X_SPEC, Y_SPEC)
    assert len(traced.graph_def.library.function) == 0
    assert not {"PartitionedCall", "StatefulPartitionedCall"} & _ops(traced.graph_def)
    assert "Softplus" in _ops(traced.graph_def)  # its gradient is Sigmoid*grad
    assert not tf.config.functions_run_eagerly()  # the global switch is restored


def test_nested_function_with_tensor_control_flow_is_rejected():
    model, optimizer, loss_fn = _cnn()

    @tf.function
    def head(t):
        if tf.reduce_sum(t) > 0:  # autograph makes this a tf.cond
            t = t * 2.0
        return t

    with pytest.raises(UnsupportedGraphError, match=r"'PartitionedCall' \(op PartitionedCall\)"):
        trace(_step(model, optimizer, loss_fn, head), X_SPEC, Y_SPEC)
    assert not tf.config.functions_run_eagerly()


@pytest.mark.parametrize(
    ("head", "op"),
    [
        (lambda t: tf.cond(tf.reduce_sum(t) > 0, lambda: t * 2.0, lambda: t), "If"),
        (
            lambda t: tf.while_loop(lambda i, v: i < 2, lambda i, v: (i + 1, v * 1.5), (0, t))[1],
            "While",  # bounded by the constant 2: stated (tests/test_loops.py)
        ),
    ],
)
def test_functional_control_flow_is_kept_for_the_planner(head, op):
    """``trace`` keeps functional control flow as TensorFlow traced it (it is not a call
    to inline); the planner plans a ``tf.cond`` and a loop of constant trip count (a
    loop it cannot state is refused: tests/test_loops.py)."""
    model, optimizer, loss_fn = _cnn()
    traced = trace(_step(model, optimizer, loss_fn, head), X_SPEC, Y_SPEC)
    assert any(n.op.endswith(op) for n in traced.graph_def.node)
    assert not tf.config.functions_run_eagerly()
    hybridplan.plan(traced, "1GiB", device="cpu")


def test_keras_train_step_with_nested_data_spec():
    model, optimizer, loss_fn = _cnn()
    model.compile(optimizer=optimizer, loss=loss_fn, metrics=["accuracy"])
    traced = trace(model.train_step, (X_SPEC, Y_SPEC))  # Keras 3: train_step(data)
    structured = traced.concrete_function.structured_outputs
    assert set(structured) == {"loss", "accuracy"}
    assert traced.loss == structured["loss"].name
    assert len(traced.inputs) == 2 and len(traced.graph_def.library.function) == 0


def _regressor(units: int):
    keras.utils.set_random_seed(3)
    return keras.Sequential([keras.Input((6,)), keras.layers.Dense(8), keras.layers.Dense(units)])


@pytest.mark.parametrize(
    ("loss", "units", "y"),
    [
        ("mse", 1, np.linspace(-1, 1, 16, dtype=np.float32).reshape(16, 1)),
        ("mean_absolute_error", 1, np.linspace(-1, 1, 16, dtype=np.float32).reshape(16, 1)),
        (keras.losses.mean_squared_error, 1, np.linspace(0, 2, 16, dtype=np.float32)[:, None]),
        (keras.losses.MeanSquaredError(), 1, np.linspace(0, 2, 16, dtype=np.float32)[:, None]),
        (
            lambda t, p: keras.losses.mean_squared_error(t, p),  # named "<lambda>"
            1,
            np.linspace(0, 2, 16, dtype=np.float32)[:, None],
        ),
        ("crossentropy", 3, (np.arange(16) % 3).astype(np.int32)),
        ("sparse_categorical_crossentropy", 3, (np.arange(16) % 3).astype(np.int32)),
    ],
    ids=[
        "mse",
        "mae-name",
        "mse-function",
        "mse-object",
        "mse-lambda",
        "crossentropy",
        "sparse-ce",
    ],
)
def test_trace_keras_step_equals_train_on_batch(loss, units, y):
    """A loss given by name, function (a lambda too) or object trains as
    model.compile(loss=...) does.

    Before the fix a name gave per-example losses whose gradient is the batch sum's: the
    update was batch-size (16) times train_on_batch's.
    """
    x = np.linspace(-1, 1, 16 * 6, dtype=np.float32).reshape(16, 6)
    ours, theirs = _regressor(units), _regressor(units)
    theirs.set_weights(ours.get_weights())
    before = [w.copy() for w in ours.get_weights()]
    traced = trace_keras(
        ours,
        keras.optimizers.SGD(0.1),
        loss,
        tf.TensorSpec(x.shape, tf.float32),
        tf.TensorSpec(y.shape, tf.as_dtype(y.dtype)),
    )
    loss_value = traced.concrete_function(tf.constant(x), tf.constant(y))
    theirs.compile(keras.optimizers.SGD(0.1), loss)
    expected_loss = theirs.train_on_batch(x, y)
    assert np.asarray(loss_value).shape == ()
    np.testing.assert_allclose(float(np.asarray(loss_value)), expected_loss, rtol=1e-5)
    steps = [
        (o - b, t - b)
        for b, o, t in zip(before, ours.get_weights(), theirs.get_weights(), strict=True)
    ]
    assert max(np.abs(expected).max() for _, expected in steps) > 1e-4
    for moved, expected in steps:
        np.testing.assert_allclose(moved, expected, rtol=1e-4, atol=1e-7)


def test_trace_keras_rejects_an_unknown_loss():
    with pytest.raises(InvalidArgumentError, match="not a loss Keras knows"):
        trace_keras(
            _regressor(1),
            keras.optimizers.SGD(0.1),
            "msq",
            tf.TensorSpec([4, 6]),
            tf.TensorSpec([4, 1]),
        )
    with pytest.raises(InvalidArgumentError, match=r"pass a keras\.losses\.Loss"):
        trace_keras(
            _regressor(1),
            keras.optimizers.SGD(0.1),
            5,
            tf.TensorSpec([4, 6]),
            tf.TensorSpec([4, 1]),
        )


def test_distributed_loss_must_sum_per_example():
    """Under a strategy each replica sums its per-example losses over the global batch."""
    from hybridplan.distributed import _per_example_loss

    assert _per_example_loss("mse") is keras.losses.mean_squared_error
    summed = keras.losses.MeanSquaredError(reduction="sum")
    assert _per_example_loss(summed) is summed
    with pytest.raises(InvalidArgumentError, match="reduction='sum'"):
        _per_example_loss(keras.losses.MeanSquaredError())
    with pytest.raises(InvalidArgumentError, match="not a loss Keras knows"):
        _per_example_loss("msq")


@pytest.mark.parametrize("optimizer", [None, "adam"])
def test_trace_keras_rejects_what_is_no_optimizer(optimizer):
    with pytest.raises(InvalidArgumentError, match="Keras optimizer instance"):
        trace_keras(_regressor(1), optimizer, "mse", tf.TensorSpec([4, 6]), tf.TensorSpec([4, 1]))
