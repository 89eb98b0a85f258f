"""``hybridplan.apply`` and the runnable integrations: plan, rewrite, run."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._gc import gc_paused
from ._graphio import GraphLike, graph_source, parse_graph_def
from .planning import Plan, plan

__all__ = ["PlannedStep", "Result", "apply", "function", "keras_step", "rewrite_plan"]


class _Deferred:
    """A report ``apply`` leaves to its first reader: the written plan's report with what
    the rewrite added. Built once, for every thread that asks."""

    def __init__(self, plan: Plan, written: Any, added: dict):
        self._plan, self._written, self._added = plan, written, added
        self._lock = threading.Lock()
        self._value: dict | None = None

    def __call__(self) -> dict:
        with self._lock:
            if self._value is None:
                if self._plan._planned() is self._written:  # its report still unread: shared
                    base = self._plan.report
                else:  # read, perhaps edited, since: the report of what was written
                    with gc_paused():
                        base = self._written.report()
                self._value = {**base, **self._added}
                self._plan = self._written = None
            return self._value


class _ReportField:
    """``Result.report``: the dict given, or the one a :class:`_Deferred` builds when the
    field is first read (then kept)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            raise AttributeError(self._name)  # a required field: no default
        value = obj.__dict__[self._name]
        if isinstance(value, _Deferred):
            value = obj.__dict__[self._name] = value()
        return value

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__[self._name] = value


@dataclass(frozen=True)
class Result:
    """What :func:`apply` returns.

    Attributes:
        graph_def: the rewritten ``GraphDef`` (a new object; the input is untouched).
        plan: the :class:`~hybridplan.planning.Plan` it implements.
        report: predicted figures before and after, the decisions, and what
            the rewrite inserted (``report["inserted"]``): the report of the plan as
            written, made when first read (as :attr:`Plan.report` is).
        summary: the rewrite's :class:`~hybridplan.rewriting.RewriteSummary`.
    """

    graph_def: Any
    plan: Plan
    report: dict = _ReportField()  # type: ignore[assignment]
    summary: Any = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "report": self.report}


def apply(
    graph_def: GraphLike,
    budget: Any = "auto",
    *,
    strategy: str = "hybrid",
    device: str | dict | os.PathLike = "v100-nvlink2",
    target: str = "gpu",
    loss: str | None = None,
    min_bytes: int = 1 << 16,
    profile: dict[int, float] | None = None,
    **plan_options: Any,
) -> Result:
    """Plans a training step under ``budget`` and writes the plan into a new GraphDef.

    ``graph_def`` may be a ``GraphDef``, its bytes, a path or a traced step.
    ``target`` picks the swap ops and devices: ``"gpu"`` (``Identity`` on
    ``/device:CPU:0`` and ``/device:GPU:0``) or ``"cpu-emulation"`` (two
    logical CPUs and ``DeepCopy``, so memory really moves on a CPU). When the
    step already fits, the GraphDef comes back unchanged and
    ``report["note"]`` says so. Further keyword arguments (``tflms``,
    ``include_scopes``, ``exclude_scopes``, ``include_types``,
    ``exclude_types``, ``persistent_bytes``) go to :func:`hybridplan.plan`.

    Raises:
        BudgetError, InvalidArgumentError, InvalidGraphError, ShapeError,
        UnsupportedGraphError: see :func:`hybridplan.plan`.

    Example:
        >>> r = hybridplan.apply("step.pb", "16GiB", device="v100-nvlink2")  # doctest: +SKIP
        >>> r.report["planned"]["peak_bytes"] <= r.plan.budget  # doctest: +SKIP
        True
    """
    from .rewriting import check_target

    # Checked first: with nothing to write (the step fits) the rewrite would never see it.
    check_target(target)
    # Inlined: plan and the rewrite take the bytes as they are, without scanning them again.
    given = graph_source(graph_def)
    data, traced_loss = given.data, given.loss
    p = plan(
        given,
        budget,
        strategy=strategy,
        device=device,
        loss=loss or traced_loss,
        min_bytes=min_bytes,
        profile=profile,
        **plan_options,
    )
    written = p._planned()  # the core's plan the rewrite writes, while the report is unread
    if p.is_empty:
        added = {
            "inserted": {"swap_out": 0, "swap_in": 0, "clones": 0},
            "note": "the step already fits the budget: nothing to plan, graph unchanged",
        }
        return Result(parse_graph_def(data), p, _report(p, written, added), None)
    # The bytes go to the rewrite, which parses them once and edits that copy: no other
    # parsed copy of the graph is made (at 10^6 nodes each costs about a GiB).
    out = rewrite_plan(given, p, target)
    report = _report(p, written, {"inserted": out.summary.counts})
    return Result(out.graph_def, p, report, out.summary)


def _report(p: Plan, written: Any, added: dict) -> Any:
    """``Result.report``: deferred while the plan's report is unread (``written``, the
    core's plan), else the report as it is now, with ``added``."""
    if written is None:
        return {**p.report, **added}
    return _Deferred(p, written, added)


def rewrite_plan(source: Any, p: Plan, target: str = "gpu") -> Any:
    """Writes the planner's plan ``p`` into a copy of ``source`` (the GraphDef it was
    planned from, its serialized bytes, or those as ``apply`` hands them on,
    ``_graphio.Inlined``): :func:`hybridplan.rewriting.rewrite_with_summary`.

    The core plans from the graph's structure and shapes, without TensorFlow's op
    registry; a graph TensorFlow itself would not import (a node without an
    attribute its op requires, a read of an output its op does not have, an op
    TensorFlow does not know) can get a plan that cannot be written. Then the
    error is the graph's, said in TensorFlow's words, not the plan's.

    Raises:
        InvalidGraphError: TensorFlow rejects ``source``.
        InvalidArgumentError, UnsupportedGraphError: see ``rewrite_with_summary``.
    """
    from .errors import InvalidArgumentError, InvalidGraphError, UnsupportedGraphError
    from .rewriting import rewrite_with_summary

    try:
        return rewrite_with_summary(source, p, target=target)
    except (InvalidArgumentError, UnsupportedGraphError) as e:
        problem = tensorflow_rejects(source)
        if problem is None:
            raise
        raise InvalidGraphError(
            f"TensorFlow does not accept this graph ({problem}), so the plan cannot be "
            f"written into it ({e}); export the step again with as_graph_def(add_shapes=True)"
        ) from None


def tensorflow_rejects(graph_def: Any) -> str | None:
    """TensorFlow's reason for refusing to import ``graph_def`` (a GraphDef or its
    bytes), or None when it imports. O(graph) in C++; called only on the error path."""
    import tensorflow as tf

    from ._graphio import Inlined

    if isinstance(graph_def, Inlined):
        graph_def = graph_def.data
    if isinstance(graph_def, (bytes, bytearray, memoryview)):
        graph_def = parse_graph_def(bytes(graph_def))

    try:
        with tf.Graph().as_default():
            tf.graph_util.import_graph_def(graph_def, name="")
    except Exception as e:  # any refusal is the answer asked for
        return " ".join(str(e).split())[:300]
    return None


class PlannedStep:
    """A planned, rewritten training step that runs on the model's real variables.

    Call it like the original step: ``loss = step(x, y)``. ``plan``,
    ``graph_def``, ``summary`` and ``traced`` say what runs.
    """

    def __init__(self, traced: Any, result: Result):
        from .runner import compile_step

        self.traced = traced
        self.plan = result.plan
        self.graph_def = result.graph_def
        self.summary = result.summary
        self.report = result.report
        self._step = compile_step(traced, result.graph_def)

    def __call__(self, *args: Any) -> Any:
        return self._step(*args)

    def run(self, *args: Any) -> list[Any]:
        """All outputs of one step."""
        return self._step.run(*args)


def function(
    step_fn: Callable[..., Any],
    *input_specs: Any,
    budget: Any = "auto",
    strategy: str = "hybrid",
    device: str | dict | os.PathLike = "v100-nvlink2",
    target: str = "gpu",
    loss: int | str | None = None,
    min_bytes: int = 1 << 16,
    **plan_options: Any,
) -> PlannedStep:
    """Traces ``step_fn`` (forward under a tape, gradients, ``apply_gradients``),
    plans it under ``budget`` and returns the rewritten step, ready to call.
    Further keyword arguments go to :func:`hybridplan.apply`.

    Example:
        >>> step = hybridplan.function(train_step, x_spec, y_spec, budget="16GiB")  # doctest: +SKIP
        >>> loss = step(x, y)  # doctest: +SKIP
    """
    from .tracing import trace

    traced = trace(step_fn, *input_specs, loss=loss)
    r = apply(
        traced,
        budget,
        strategy=strategy,
        device=device,
        target=target,
        min_bytes=min_bytes,
        **plan_options,
    )
    return PlannedStep(traced, r)


def keras_step(
    model: Any,
    optimizer: Any,
    loss_fn: Any,
    x_spec: Any,
    y_spec: Any,
    *,
    budget: Any = "auto",
    strategy: str = "hybrid",
    device: str | dict | os.PathLike = "v100-nvlink2",
    target: str = "gpu",
    min_bytes: int = 1 << 16,
    **plan_options: Any,
) -> PlannedStep:
    """The standard Keras train step (model, optimizer, loss), planned and rewritten.

    Training continues with the ordinary Keras objects: the step updates
    ``model``'s and ``optimizer``'s variables in place. Further keyword
    arguments go to :func:`hybridplan.apply`.
    """
    from .tracing import trace_keras

    traced = trace_keras(model, optimizer, loss_fn, x_spec, y_spec)
    r = apply(
        traced,
        budget,
        strategy=strategy,
        device=device,
        target=target,
        min_bytes=min_bytes,
        **plan_options,
    )
    return PlannedStep(traced, r)
