"""``hybridplan.apply`` and the runnable integrations: plan, rewrite, run."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._graphio import GraphLike, graph_bytes
from .planning import Plan, plan

__all__ = ["PlannedStep", "Result", "apply", "function", "keras_step"]


@dataclass(frozen=True)
class Result:
    """What :func:`apply` returns.

    Attributes:
        graph_def: the rewritten ``GraphDef`` (a new object; the input is untouched).
        plan: the :class:`~hybridplan.planning.Plan` it implements.
        report: predicted figures before and after, the decisions, and what
            the rewrite inserted (``report["inserted"]``).
        summary: the rewrite's :class:`~hybridplan.rewriting.RewriteSummary`.
    """

    graph_def: Any
    plan: Plan
    report: dict
    summary: Any


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
    from tensorflow.core.framework import graph_pb2

    from .rewriting import rewrite_with_summary

    data, traced_loss = graph_bytes(graph_def)
    p = plan(
        data,
        budget,
        strategy=strategy,
        device=device,
        loss=loss or traced_loss,
        min_bytes=min_bytes,
        profile=profile,
        **plan_options,
    )
    report = dict(p.report)
    if p.is_empty:
        report["inserted"] = {"swap_out": 0, "swap_in": 0, "clones": 0}
        report["note"] = "the step already fits the budget: nothing to plan, graph unchanged"
        return Result(graph_pb2.GraphDef.FromString(data), p, report, None)
    # The bytes go to the rewrite, which parses them once and edits that copy: no other
    # parsed copy of the graph is made (at 10^6 nodes each costs about a GiB).
    out = rewrite_with_summary(data, p.rewrite_spec(), target=target)
    report["inserted"] = out.summary.counts
    return Result(out.graph_def, p, report, out.summary)


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
