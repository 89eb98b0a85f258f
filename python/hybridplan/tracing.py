"""Trace a TensorFlow training step into one flat GraphDef.

The step is a function whose body runs the forward pass under ``tf.GradientTape``,
calls ``tape.gradient`` and ``optimizer.apply_gradients`` and returns the loss.
Tracing it for fully defined input specs gives ONE ``FuncGraph`` holding the forward,
gradient and update ops; :func:`trace` returns its ``GraphDef`` (with ``_output_shapes``)
together with the names the rest of hybridplan needs: the argument placeholders, the
output tensors, the loss tensor and the captured variable placeholders.

Nested ``tf.function`` calls would appear as ``PartitionedCall`` nodes whose bodies live
in the graph's function library. :func:`trace` removes them by tracing the step again
with ``tf.config.run_functions_eagerly(True)``, under which a nested ``tf.function`` is
called as plain Python while the outer step is still traced into a graph, so its ops
land in the outer graph. Functional control flow (``While``, ``If``, ``Case``) cannot be
flattened this way and is rejected with :class:`~hybridplan.errors.UnsupportedGraphError`.

Example::

    traced = trace(step, tf.TensorSpec([2, 32, 32, 3]), tf.TensorSpec([2], tf.int32))
    traced.loss          # "Identity:0"
    traced.inputs        # ["x", "y"]
    traced.num_nodes     # forward + gradient + update ops
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf

from hybridplan import _core
from hybridplan.errors import InvalidArgumentError, ShapeError, UnsupportedGraphError
from hybridplan.inlining import CALL_OPS

__all__ = ["Traced", "keras_loss", "trace", "trace_concrete", "trace_keras"]


@dataclass
class Traced:
    """One traced training step: a flat GraphDef and the names that connect it to Python.

    Attributes:
        graph_def: the step's ``GraphDef``, built with ``add_shapes=True`` (every node
            carries an ``_output_shapes`` attribute); its function library is empty.
        loss: tensor name (``"node:index"``) of the loss among :attr:`outputs`. This is
            the step's output ``Identity`` (which has the update ``NoOp`` as a control
            input), what a caller fetches.
        loss_source: tensor name of the forward-pass value the loss output returns: the
            first producer that is not an ``Identity`` when following the loss output's
            data input back. This is where the forward pass ends.
        inputs: node names of the argument placeholders, in argument order (nested
            arguments flattened with ``tf.nest``).
        outputs: tensor names of the step's outputs, in ``tf.nest.flatten`` order of the
            returned structure. Fetching them also runs the variable updates.
        captures: ``(eager value, placeholder node name)`` pairs, one per captured value;
            for a variable the eager value is its resource handle.
        concrete_function: the ``ConcreteFunction`` the graph was taken from.
        variables: the ``tf.Variable`` objects behind the captured handles (model
            weights, optimizer slots, iteration counter), in capture order.
        input_specs: the fully defined ``tf.TensorSpec`` of every argument placeholder, in
            the order of :attr:`inputs`.
    """

    graph_def: tf.compat.v1.GraphDef
    loss: str
    inputs: list[str]
    outputs: list[str]
    captures: list[tuple[Any, str]]
    concrete_function: Any
    variables: list[tf.Variable]
    input_specs: list[tf.TensorSpec] = field(default_factory=list)
    loss_source: str = ""

    def serialized(self) -> bytes:
        """The GraphDef as protobuf wire bytes (what the planning core reads)."""
        return bytes(self.graph_def.SerializeToString(deterministic=True))

    @property
    def num_nodes(self) -> int:
        """Number of nodes in :attr:`graph_def`."""
        return len(self.graph_def.node)

    @property
    def loss_index(self) -> int:
        """Position of :attr:`loss` in :attr:`outputs`."""
        return self.outputs.index(self.loss)


def trace(
    step_fn: Callable[..., Any],
    *input_specs: Any,
    loss: int | str | None = None,
) -> Traced:
    """Trace one training step into a flat GraphDef.

    Args:
        step_fn: a ``tf.function`` or a plain Python function (wrapped in one). It must run
            the forward pass under ``tf.GradientTape``, call ``tape.gradient`` and
            ``optimizer.apply_gradients``, and return the loss, or a tuple/list whose first
            entry is the loss, or a dict with a ``"loss"`` entry. Variables that the step
            creates while tracing (an unbuilt Keras 3 optimizer's slots) are created once,
            eagerly, and become captures like the others.
        *input_specs: one fully defined ``tf.TensorSpec`` (or array/tensor, whose shape and
            dtype are used) per positional argument; nested structures are allowed.
        loss: which output is the loss when the default rule does not fit: an index into
            the tensor outputs (the order of :attr:`Traced.outputs`) or a key of a returned
            dict.

    Returns:
        A :class:`Traced` step.

    Raises:
        ShapeError: an input spec has an unknown rank or dimension.
        InvalidArgumentError: ``loss`` names no output, or the loss is not a float tensor.
        UnsupportedGraphError: the step contains functional control flow (``While``,
            ``If``, ...) or a function call that could not be inlined.

    Example::

        traced = trace(step, tf.TensorSpec([8, 784]), tf.TensorSpec([8], tf.int32))
    """
    specs = [_to_spec(s, i) for i, s in enumerate(input_specs)]
    python_fn = getattr(step_fn, "python_function", step_fn)
    cf = tf.function(python_fn).get_concrete_function(*specs)
    graph_def = cf.graph.as_graph_def(add_shapes=True)
    call = _first_function_call(graph_def)
    if call is not None:
        cf, graph_def = _trace_inlined(python_fn, specs, call)
    return _make_traced(cf, graph_def, loss)


def trace_concrete(concrete_function: Any, loss: int | str | None = None) -> Traced:
    """The :class:`Traced` step of a ``ConcreteFunction`` exactly as TensorFlow traced it.

    Unlike :func:`trace`, nothing is traced again: nested ``tf.function`` calls stay
    ``PartitionedCall`` / ``StatefulPartitionedCall`` nodes with their bodies in the
    GraphDef's library, as a pipeline that receives the GraphDef sees them.
    :func:`hybridplan.plan` and :func:`hybridplan.apply` inline them from the library
    (:mod:`hybridplan.inlining`), so ``apply`` returns the inlined, rewritten graph.

    Args:
        concrete_function: ``step.get_concrete_function(*specs)`` of a training step
            (see :func:`trace` for what the step does and returns).
        loss: which output is the loss, as for :func:`trace`.

    Raises:
        InvalidArgumentError: ``loss`` names no output, or the loss is not a float tensor.

    Example::

        traced = trace_concrete(step.get_concrete_function(x_spec, y_spec))
        hybridplan.apply(traced, budget, target="cpu-emulation").graph_def  # calls inlined
    """
    graph_def = concrete_function.graph.as_graph_def(add_shapes=True)
    return _make_traced(concrete_function, graph_def, loss)


def trace_keras(
    model: Any,
    optimizer: Any,
    loss_fn: Any,
    x_spec: Any,
    y_spec: Any,
) -> Traced:
    """Trace the standard Keras training step of ``model``.

    The step is ``loss = loss_fn(y, model(x, training=True))`` (plus ``model.losses``,
    the regularisation terms), ``tape.gradient`` over ``model.trainable_variables`` and
    ``optimizer.apply_gradients``. The model and the optimizer's slot variables are built
    first, so that every variable is a capture of the traced graph.

    Args:
        model: a Keras 3 model.
        optimizer: a Keras optimizer instance.
        loss_fn: a Keras loss instance, a loss function, or a name, meaning what it
            means in ``model.compile(loss=...)``: a name or a plain function is wrapped
            as Keras wraps it (``keras.losses.LossFunctionWrapper``, averaged over the
            batch), so ``"mse"`` trains on the batch mean, not on the per-example sum
            (:func:`keras_loss`).
        x_spec: ``tf.TensorSpec`` (or array) of the model input, fully defined.
        y_spec: ``tf.TensorSpec`` (or array) of the target, fully defined.

    Returns:
        The traced step; it returns the loss and updates the model's weights.

    Raises:
        ShapeError: a spec has an unknown dimension.

    Example::

        traced = trace_keras(model, keras.optimizers.SGD(0.1), "mse",
                             tf.TensorSpec([4, 10]), tf.TensorSpec([4, 1]))
    """

    x_sig = _to_spec(x_spec, 0)
    y_sig = _to_spec(y_spec, 1)
    loss_fn = keras_loss(loss_fn)
    if not callable(getattr(optimizer, "apply_gradients", None)):
        raise InvalidArgumentError(
            f"optimizer is a {type(optimizer).__name__} ({optimizer!r}); pass a Keras "
            "optimizer instance, e.g. keras.optimizers.Adam(1e-3), and keep it: the step "
            "updates its slots (a name such as 'adam' would make one you cannot reach)"
        )
    if not model.built:
        model.build(tuple(x_sig.shape))
    if not getattr(optimizer, "built", False):
        optimizer.build(model.trainable_variables)

    def train_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss_value = loss_fn(y, model(x, training=True))
            if model.losses:
                loss_value = loss_value + tf.add_n(model.losses)
        grads = tape.gradient(loss_value, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss_value

    return trace(train_step, x_sig, y_sig)


def keras_loss(identifier: Any) -> Callable[[Any, Any], Any]:
    """The loss ``model.compile(loss=identifier)`` would train on, as a callable.

    Keras resolves a name with ``keras.losses.get`` (``"crossentropy"``/``"ce"`` pick the
    binary, sparse or categorical cross-entropy from the shapes) and wraps anything that
    is not a ``keras.losses.Loss`` in ``keras.losses.LossFunctionWrapper``, whose default
    reduction averages over the batch. A ``Loss`` instance is used as it is, with its own
    reduction.

    Raises:
        InvalidArgumentError: ``identifier`` is neither a ``Loss``, a callable nor a name
            Keras knows.

    Example::

        keras_loss("mse")(y_true, y_pred)   # a scalar: the batch mean, as in model.fit
    """
    import keras

    if isinstance(identifier, keras.losses.Loss):
        return identifier
    if isinstance(identifier, str) and identifier.lower() in ("crossentropy", "ce"):
        return _shape_picked_crossentropy(identifier)
    try:
        fn = keras.losses.get(identifier) if isinstance(identifier, str) else identifier
    except ValueError as e:
        raise InvalidArgumentError(
            f"loss {identifier!r} is not a loss Keras knows ({e}); pass a keras.losses.Loss, "
            'a function loss_fn(y_true, y_pred) or a name such as "mse"'
        ) from None
    if isinstance(fn, keras.losses.Loss):
        return fn
    if not callable(fn):
        raise InvalidArgumentError(
            f"loss is a {type(identifier).__name__} ({identifier!r}); pass a keras.losses.Loss, "
            'a function loss_fn(y_true, y_pred) or a name such as "mse"'
        )
    name = identifier if isinstance(identifier, str) else getattr(fn, "__name__", "loss")
    # The name becomes a TensorFlow name scope, which a lambda's "<lambda>" is not.
    name = re.sub(r"[^A-Za-z0-9_.\-]", "", str(name)).lstrip("_-") or "loss"
    return _loss_function_wrapper()(fn, name=name)


def _shape_picked_crossentropy(name: str) -> Callable[[Any, Any], Any]:
    """Keras' ``"crossentropy"``: binary, sparse or categorical by the tensors' shapes."""
    import keras

    def loss(y_true: Any, y_pred: Any) -> Any:
        t_rank, p_rank = len(y_true.shape), len(y_pred.shape)
        p_last = y_pred.shape[-1]
        if p_last == 1:
            fn = keras.losses.binary_crossentropy
        elif t_rank < p_rank or y_true.shape[-1] == 1:
            fn = keras.losses.sparse_categorical_crossentropy
        else:
            fn = keras.losses.categorical_crossentropy
        return _loss_function_wrapper()(fn, name=name)(y_true, y_pred)

    return loss


def _loss_function_wrapper() -> Any:
    """Keras' own ``LossFunctionWrapper``: what ``compile`` wraps a loss function in.

    Keras 3 does not export it; its rank matching and batch-mean reduction are what a
    name means, so the class itself is used rather than a copy of its rules.
    """
    from keras.src.losses.losses import LossFunctionWrapper

    return LossFunctionWrapper


# --------------------------------------------------------------------------- specs


def _to_spec(spec: Any, position: int) -> Any:
    """A nest of fully defined ``tf.TensorSpec``; raises ShapeError on unknown dims."""

    def one(s: Any) -> tf.TensorSpec:
        if isinstance(s, tf.TensorSpec):
            out = s
        elif hasattr(s, "shape") and hasattr(s, "dtype"):
            out = tf.TensorSpec(tf.TensorShape(s.shape), tf.as_dtype(s.dtype))
        else:
            raise InvalidArgumentError(
                f"input spec {position} is a {type(s).__name__}; pass a tf.TensorSpec "
                "(or an array or tensor whose shape and dtype are used)"
            )
        if not out.shape.is_fully_defined():
            raise ShapeError(
                f"input spec {position} has shape {out.shape} with an unknown rank or "
                "dimension; hybridplan sizes every activation in bytes, so give every "
                f"dimension, e.g. tf.TensorSpec({_example_shape(out.shape)}, tf.{out.dtype.name})"
            )
        return out

    return tf.nest.map_structure(one, spec)


def _example_shape(shape: tf.TensorShape) -> list[int]:
    if shape.rank is None:
        return [2, 32]
    return [d if d is not None else 2 for d in shape.as_list()]


# --------------------------------------------------------------------------- nesting


def _first_function_call(graph_def: Any) -> Any | None:
    """The first node that calls a function of the library (a call op, or the function
    as the op), or None. Functional control flow (``If``, ``While``, ...) is not a call:
    it stays in the graph, and the planner plans it or refuses it (docs/control-flow.md)."""
    library = {f.signature.name for f in graph_def.library.function}
    for node in graph_def.node:
        if node.op in library or node.op in CALL_OPS:
            return node
    return None


def _trace_inlined(python_fn: Callable[..., Any], specs: list[Any], call: Any) -> Any:
    """Trace again with nested tf.functions run as Python; reject what remains nested."""
    before = tf.config.functions_run_eagerly()
    try:
        tf.config.run_functions_eagerly(True)
        cf = tf.function(python_fn).get_concrete_function(*specs)
    except Exception as exc:  # the nested body may need autograph, lost when inlined
        raise UnsupportedGraphError(
            f"node {call.name!r} (op {call.op}) calls a nested tf.function, and tracing the "
            "step again with nested tf.functions run as plain Python (no autograph) failed "
            f"with {type(exc).__name__}: {exc}. A nested function whose Python control flow "
            "depends on tensor values becomes tf.cond/tf.while_loop, which hybridplan does "
            "not schedule; make that control flow static, or call a plain Python function"
        ) from exc
    finally:
        tf.config.run_functions_eagerly(before)
    graph_def = cf.graph.as_graph_def(add_shapes=True)
    node = _first_function_call(graph_def)
    if node is not None:
        raise UnsupportedGraphError(
            f"node {node.name!r} (op {node.op}) runs a function body (functional control "
            "flow or a non-inlinable call) that hybridplan cannot schedule; keep the "
            "training step free of tf.while_loop / tf.cond on tensors (use Python control "
            "flow on static values) or unroll the loop"
        )
    return cf, graph_def


# --------------------------------------------------------------------------- result


def _make_traced(cf: Any, graph_def: Any, loss: int | str | None) -> Traced:
    internal_of = {id(internal): (external, internal) for external, internal in cf.graph.captures}
    arg_tensors = [t for t in cf.inputs if id(t) not in internal_of]
    captures = [(ext, internal.op.name) for ext, internal in cf.graph.captures]
    outputs = [t.name for t in cf.outputs]
    loss_tensor = _find_loss(cf.structured_outputs, loss)
    if loss_tensor.name not in outputs:
        raise InvalidArgumentError(f"loss tensor {loss_tensor.name} is not a step output")
    if not loss_tensor.dtype.is_floating:
        raise InvalidArgumentError(
            f"the loss {loss_tensor.name} has dtype {loss_tensor.dtype.name}, not a float; "
            "return the loss first (or in a dict under 'loss'), or pass loss=<index or key>"
        )
    return Traced(
        graph_def=graph_def,
        loss=loss_tensor.name,
        inputs=[t.op.name for t in arg_tensors],
        outputs=outputs,
        captures=captures,
        concrete_function=cf,
        variables=_variables_in_capture_order(cf),
        input_specs=[tf.TensorSpec(t.shape, t.dtype, name=t.op.name) for t in arg_tensors],
        loss_source=_through_identities(loss_tensor).name,
    )


#: Ops whose output 0 is input 0 unchanged (the core's ``opkind::IDENTITIES``).
_IDENTITIES = frozenset(_core.op_table()["identities"])


def _through_identities(tensor: tf.Tensor) -> tf.Tensor:
    """Follow ``Identity`` ops back to the tensor they forward (bounded by graph size)."""
    for _ in range(len(tensor.graph.get_operations()) + 1):
        if tensor.op.type not in _IDENTITIES:
            break
        tensor = tensor.op.inputs[0]
    return tensor


def _find_loss(structured: Any, loss: int | str | None) -> tf.Tensor:
    if isinstance(loss, str):
        if not isinstance(structured, dict) or loss not in structured:
            raise InvalidArgumentError(f"loss={loss!r}: the step returns no dict entry {loss!r}")
        return _only_tensor(structured[loss], f"entry {loss!r}")
    if loss is None and isinstance(structured, dict):
        if "loss" not in structured:
            raise InvalidArgumentError(
                f"the step returns a dict without a 'loss' key (keys: {sorted(structured)}); "
                "pass loss=<key>"
            )
        return _only_tensor(structured["loss"], "entry 'loss'")
    flat = [t for t in tf.nest.flatten(structured, expand_composites=True) if tf.is_tensor(t)]
    index = 0 if loss is None else loss
    if not flat or not -len(flat) <= index < len(flat):
        raise InvalidArgumentError(
            f"loss={loss!r}: the step returns {len(flat)} tensor output(s); return the loss"
        )
    return flat[index]


def _only_tensor(value: Any, what: str) -> tf.Tensor:
    flat = [t for t in tf.nest.flatten(value, expand_composites=True) if tf.is_tensor(t)]
    if len(flat) != 1:
        raise InvalidArgumentError(f"the step's {what} is not a single tensor")
    return flat[0]


def _variables_in_capture_order(cf: Any) -> list[tf.Variable]:
    by_handle = {id(v.handle): v for v in cf.graph.variables}
    found = [by_handle.get(id(external)) for external, _ in cf.graph.captures]
    return [v for v in found if v is not None]
