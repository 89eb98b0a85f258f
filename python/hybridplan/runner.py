"""Run a (possibly rewritten) training-step GraphDef on the real variables.

:func:`compile_step` imports the GraphDef into a ``tf.compat.v1.wrap_function`` graph:
each argument placeholder is fed by a new argument, each captured placeholder by the
eager handle it stood for (``graph.capture(handle)``), so the step's update ops write
into the real Keras / ``tf.Variable`` objects, exactly as the original ``tf.function``.

:func:`setup_cpu_emulation` splits the host CPU into logical devices, so that a machine
without an accelerator has a "device" (``/device:CPU:0``) and a "host"
(``/device:CPU:1``) to swap between.

Example::

    traced = trace_keras(model, opt, loss_fn, x_spec, y_spec)
    step = compile_step(traced)            # or compile_step(traced, rewritten_graph_def)
    loss = step(x, y)                      # one training step; weights updated in place
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from hybridplan.errors import HybridplanError, InvalidArgumentError, InvalidGraphError
from hybridplan.tracing import Traced

__all__ = ["StepFn", "compile_step", "setup_cpu_emulation"]


class StepFn:
    """A compiled training step: ``step(*args)`` runs it once and returns the loss.

    Attributes:
        traced: the :class:`~hybridplan.tracing.Traced` step it was built from.
        graph_def: the GraphDef it runs (never mutated: a copy is imported).
        function: the ``tf.compat.v1.wrap_function`` object; calling it returns every
            output of the step, in the order of ``traced.outputs``.
        name: the import scope of the GraphDef's nodes inside ``function``.
    """

    def __init__(self, traced: Traced, graph_def: Any, function: Any, name: str) -> None:
        self.traced = traced
        self.graph_def = graph_def
        self.function = function
        self.name = name
        self._loss_index = traced.loss_index

    def node_name(self, node: str) -> str:
        """The name GraphDef node ``node`` has inside :attr:`function`'s graph."""
        return f"{self.name}/{node}" if self.name else node

    def run(self, *args: Any) -> list[tf.Tensor]:
        """Run one step and return all outputs (eager tensors) in ``traced.outputs`` order.

        Args:
            *args: the step's arguments, structured as at tracing time (nests are
                flattened); arrays are converted to the traced dtypes.
        """
        flat = tf.nest.flatten(list(args))
        specs = self.traced.input_specs
        if len(flat) != len(specs):
            raise InvalidArgumentError(
                f"the step takes {len(specs)} tensor argument(s) "
                f"({[s.name for s in specs]}); got {len(flat)}"
            )
        tensors = [tf.convert_to_tensor(a, dtype=s.dtype) for a, s in zip(flat, specs, strict=True)]
        for tensor, spec in zip(tensors, specs, strict=True):
            if not spec.shape.is_compatible_with(tensor.shape):
                raise InvalidArgumentError(
                    f"argument {spec.name!r} has shape {tensor.shape}; the step was traced "
                    f"for {spec.shape}"
                )
        return list(self.function(*tensors))

    def __call__(self, *args: Any) -> tf.Tensor:
        """Run one training step (updating the variables) and return the loss tensor."""
        return self.run(*args)[self._loss_index]


def compile_step(traced: Traced, graph_def: Any = None, *, name: str = "step") -> StepFn:
    """Make a callable that runs ``graph_def`` as a training step on the real variables.

    Args:
        traced: the traced step, giving the argument placeholders, the outputs and the
            captured handles.
        graph_def: the GraphDef to run; defaults to ``traced.graph_def``. A rewritten graph
            (extra swap or recompute nodes, devices, control edges) must keep the names of
            the argument placeholders and outputs. It is copied, never mutated.
        name: import scope: node ``n`` of the GraphDef runs as ``f"{name}/{n}"`` (what
            run metadata and profiles show). ``""`` keeps the names, except that TensorFlow
            silently renames a node whose name clashes with the wrapper's own nodes.

    Returns:
        A :class:`StepFn`; ``step(x, y)`` runs one step and returns the loss.

    Raises:
        InvalidGraphError: the GraphDef lacks an argument placeholder or an output node,
            or TensorFlow rejects it on import.

    Example::

        step = compile_step(traced)
        for i in range(3):
            print(float(step(*workload.batch(i))))
    """
    source = traced.graph_def if graph_def is None else graph_def
    _check_names(traced, source)
    present = {node.name for node in source.node}
    captures = [(handle, ph) for handle, ph in traced.captures if ph in present]

    def body(*args: tf.Tensor) -> list[tf.Tensor]:
        graph = tf.compat.v1.get_default_graph()
        input_map = {f"{ph}:0": arg for ph, arg in zip(traced.inputs, args, strict=True)}
        for handle, ph in captures:
            input_map[f"{ph}:0"] = graph.capture(handle)
        gd = tf.compat.v1.GraphDef()
        gd.CopyFrom(source)  # import_graph_def writes default attributes into its input
        _rename_functions(gd)
        return list(
            tf.graph_util.import_graph_def(
                gd, input_map=input_map, return_elements=list(traced.outputs), name=name
            )
        )

    signature = [
        tf.TensorSpec(s.shape, s.dtype, name=f"arg_{i}") for i, s in enumerate(traced.input_specs)
    ]
    try:
        function = tf.compat.v1.wrap_function(body, signature=signature)
    except (ValueError, TypeError, tf.errors.OpError) as exc:
        raise InvalidGraphError(f"TensorFlow rejected the step GraphDef on import: {exc}") from exc
    return StepFn(traced, source, function, name)


def _rename_functions(graph_def: Any) -> None:
    """Renames, in place, every function of ``graph_def``'s library and every reference
    to it (a node that runs it as its op or through a function attribute, in the graph
    and in function bodies, as ``inlining._refs`` reads them, and the gradient table) to
    ``<name>_hp<digest of the library>``.

    Tracing registers the step's functions (a ``tf.cond``'s branches, a loop's body: an
    optimizer's conditional update, a loss scale, an RNN) in the eager context under
    their names; the GraphDef's copies of them are not byte for byte the same (shapes
    written in, a rewrite's nodes), and importing a function under a registered name with
    another definition is refused ("Attempting to add a duplicate function"). Names
    change no value. The same library gets the same names, so importing it twice adds
    nothing. O(size of the GraphDef)."""
    import hashlib

    library = graph_def.library
    if not library.function:
        return
    tag = hashlib.sha256(library.SerializeToString(deterministic=True)).hexdigest()[:12]
    new = {f.signature.name: f"{f.signature.name}_hp{tag}" for f in library.function}

    def rename(nodes: Any) -> None:
        for node in nodes:
            node.op = new.get(node.op, node.op)
            for value in node.attr.values():
                if value.HasField("func") and value.func.name in new:
                    value.func.name = new[value.func.name]
                for f in value.list.func:
                    if f.name in new:
                        f.name = new[f.name]

    rename(graph_def.node)
    for f in library.function:
        f.signature.name = new[f.signature.name]
        rename(f.node_def)
    for g in library.gradient:
        g.function_name = new.get(g.function_name, g.function_name)
        g.gradient_func = new.get(g.gradient_func, g.gradient_func)


def _check_names(traced: Traced, graph_def: Any) -> None:
    present = {node.name for node in graph_def.node}
    missing = [n for n in traced.inputs if n not in present]
    missing += [t for t in traced.outputs if t.rsplit(":", 1)[0] not in present]
    if missing:
        raise InvalidGraphError(
            f"the GraphDef lacks the step's argument placeholder(s) / output node(s) {missing}; "
            "a rewrite must keep the names of the traced inputs and outputs"
        )


def setup_cpu_emulation(num_devices: int = 2) -> list[str]:
    """Split the host CPU into ``num_devices`` logical CPU devices.

    With two devices, ``/device:CPU:0`` stands for the accelerator and ``/device:CPU:1``
    for the host, so swap plans can be run and measured on a machine without one. Must
    run before TensorFlow initialises its runtime (before the first op or device
    listing); calling it again with the same number is harmless.

    Args:
        num_devices: number of logical CPU devices (>= 1).

    Returns:
        The logical device names, e.g. ``["/device:CPU:0", "/device:CPU:1"]``.

    Raises:
        InvalidArgumentError: ``num_devices`` < 1.
        HybridplanError: TensorFlow is already initialised with a different split.

    Example::

        from hybridplan.runner import setup_cpu_emulation
        setup_cpu_emulation(2)       # first thing in the program
    """
    if num_devices < 1:
        raise InvalidArgumentError(f"num_devices must be >= 1, got {num_devices}")
    cpu = tf.config.list_physical_devices("CPU")[0]
    wanted = [tf.config.LogicalDeviceConfiguration() for _ in range(num_devices)]
    try:
        tf.config.set_logical_device_configuration(cpu, wanted)
    except RuntimeError as exc:
        current = tf.config.list_logical_devices("CPU")
        if len(current) == num_devices:
            return [d.name for d in current]
        raise HybridplanError(
            f"cannot split the CPU into {num_devices} logical devices: TensorFlow is already "
            f"initialised with {len(current)}. Call setup_cpu_emulation() at the start of the "
            "program, before any TensorFlow op runs or any model is built"
        ) from exc
    return [d.name for d in tf.config.list_logical_devices("CPU")]
