"""``hybridplan.trial``: plan a real step, run it next to the original on CPU
emulation, and say whether it computed the same thing in less memory.

Both steps run in TensorFlow Sessions with two logical CPU devices
(``/device:CPU:0`` stands for the accelerator, ``/device:CPU:1`` for the
host; see :func:`hybridplan.measure`), on copies of the model's variables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import BudgetError, InvalidArgumentError

__all__ = ["Trial", "same_bits", "side_by_side", "trial"]

#: Default budget: ``Analysis.budget_for(DEFAULT_FRACTION)``, the persistent bytes and
#: the largest kernel scratch of one op plus this fraction of the rest of the original's
#: activation peak.
DEFAULT_FRACTION = 0.7


@dataclass
class Trial:
    """What :func:`trial` ran and saw.

    Attributes:
        plan: the plan that was applied (``plan.budget`` includes persistent bytes).
        inserted: swap-out, swap-in and clone nodes written into the graph.
        activation_budget: the budget less the persistent bytes: what the device's
            activations and kernel scratch may use (variables are not counted by the
            measurement).
        predicted_peak: the plan's predicted activation peak, kernel scratch included
            (persistent bytes excluded): compared with the measured total peak.
        workspace: the workspace rule the plan was made with (``"cpu-eigen:..."`` when
            TensorFlow runs its own CPU kernels, ``"cpu-onednn"``), and
            predicted_scratch: the most scratch the model gives one op.
        original, planned: the two :class:`~hybridplan.measuring.Measurement` s.
        same_losses: every step's loss equal bit for bit.
        same_weights: every variable equal bit for bit after the steps.
        fraction: the fraction of the original's activation peak above the largest
            kernel scratch that the budget allowed (``Analysis.budget_for``; None when
            ``budget`` was given).
        note: how the budget was chosen, when :func:`trial` chose it.
    """

    plan: Any
    inserted: dict
    activation_budget: int
    predicted_peak: int
    original: Any
    planned: Any
    same_losses: bool
    same_weights: bool
    workspace: str = "none"
    predicted_scratch: int = 0
    fraction: float | None = None
    note: str = ""

    def __repr__(self) -> str:
        from .report import fmt_bytes

        same = "equal bit for bit" if self.same_losses and self.same_weights else "DIFFERENT"
        o, n = self.original.step_time, self.planned.step_time
        return (
            f"Trial({self.plan.strategy!r}: losses and weights {same}; measured activation "
            f"peak {fmt_bytes(self.planned.device_peak)} "
            f"{'within' if self.within_budget else 'OVER'} the activation budget "
            f"{fmt_bytes(self.activation_budget)}; tensors {self.peak_ratio:.0%} of the original's "
            f"{fmt_bytes(self.original.device_tensor_peak)}; step {o * 1e3:.1f} -> "
            f"{n * 1e3:.1f} ms)"
        )

    @property
    def within_budget(self) -> bool:
        """The measured device peak (tensors and scratch) is within the activation budget."""
        return self.planned.device_peak <= self.activation_budget

    @property
    def peak_ratio(self) -> float:
        """Measured device peak of the tensors (scratch left out), planned over original:
        what the plan changed (no plan changes a kernel's scratch)."""
        return self.planned.device_tensor_peak / max(1, self.original.device_tensor_peak)

    @property
    def ok(self) -> bool:
        return self.same_losses and self.same_weights and self.within_budget


def trial(
    workload: Any,
    budget: Any = None,
    *,
    fraction: float | None = None,
    strategy: str = "hybrid",
    steps: int = 3,
    min_bytes: int = 1 << 12,
    **plan_options: Any,
) -> Trial:
    """Traces ``workload`` (a :class:`hybridplan.models.Workload`, or the name of one
    :func:`hybridplan.models.build` makes at its defaults), plans it for
    the ``cpu`` device model under ``budget`` (bytes or a string, persistent
    bytes included) or, when ``budget`` is None, under ``Analysis.budget_for(fraction)``:
    the persistent bytes and the largest scratch one kernel takes (no plan removes it; 0
    with oneDNN's kernels, docs/devices.md) plus ``fraction`` of the rest of the
    original's activation peak (1 is the original's peak); rewrites it for CPU emulation
    and runs both
    steps ``steps`` times on the same batches, with Grappler as TensorFlow sets it by
    default (see :func:`side_by_side`).

    With neither ``budget`` nor ``fraction``, the fraction is 0.7, or, when no plan
    reaches 0.7 (a small model whose peak is mostly what no swap or recompute can
    free), the smallest fraction a plan reaches; ``Trial.note`` says which.

    Raises:
        BudgetError: no plan fits (for a ``fraction``, the message gives the smallest
            reachable one); InvalidArgumentError: bad arguments.
    """
    from . import _args
    from .analysis import analyze
    from .applying import apply

    if budget is not None and fraction is not None:
        raise InvalidArgumentError("give a budget or a fraction, not both")
    f = DEFAULT_FRACTION if fraction is None else _args.number(fraction, "fraction")
    if not 0 < f <= 1:
        raise InvalidArgumentError(f"fraction must be in (0, 1], got {f}")
    steps = _args.count(steps, "steps", low=1, high=10**6)
    if isinstance(workload, str):  # a registered model, built at its defaults
        from .models import build

        workload = build(workload)
    elif not callable(getattr(workload, "trace", None)):
        raise InvalidArgumentError(
            "workload must be a hybridplan.models.Workload (models.build, from_keras) or "
            f"a registered model's name, got {type(workload).__name__}"
        )
    traced = workload.trace()
    a = analyze(
        traced,
        workspace=plan_options.get("workspace", "auto"),
        workspace_profile=plan_options.get("workspace_profile"),
    )
    note = ""

    def run(b: Any) -> Any:
        return apply(
            traced,
            b,
            strategy=strategy,
            device="cpu",
            target="cpu-emulation",
            min_bytes=min_bytes,
            **plan_options,
        )

    if budget is not None:
        r = run(budget)
        f = None
    else:
        asked = a.budget_for(f)
        r, reached = _smallest_reachable(run, asked)
        if reached != asked:
            reach = a.fraction_of(reached)
            if fraction is not None:
                floor = a.persistent_bytes + a.workspace_peak_bytes
                raise BudgetError(
                    f"fraction={f:g} asks for {asked - floor} bytes above the variables and "
                    f"the largest kernel scratch ({floor} bytes), but the smallest a "
                    f"{strategy} plan reaches is {reached - floor} bytes, {reach:.1%} of the "
                    f"original's activation peak above the scratch: pass "
                    f"fraction={_ceil2(reach):g} or more, or omit it",
                    asked,
                    reached,
                    strategy,
                )
            f = reach
            note = (
                f"no plan reaches {DEFAULT_FRACTION:.0%} of the original's activation peak "
                f"above the kernel scratch; the budget is the smallest a plan reaches, "
                f"{reach:.1%} of it"
            )
    base, new = side_by_side(traced, r.graph_def, workload.batch, steps)
    return Trial(
        plan=r.plan,
        inserted=r.report["inserted"],
        activation_budget=r.plan.budget - a.persistent_bytes,
        predicted_peak=r.plan.planned["peak_bytes"] - a.persistent_bytes,
        original=base,
        planned=new,
        same_losses=_equal(base.losses, new.losses),
        same_weights=_equal(base.weights, new.weights),
        workspace=r.plan.report["workspace"] or "none",
        predicted_scratch=a.workspace_peak_bytes,
        fraction=f,
        note=note,
    )


#: Plans :func:`_smallest_reachable` tries before it gives up.
_REACH_TRIES = 8


def _smallest_reachable(run: Any, budget: int) -> tuple[Any, int]:
    """``run(budget)``, or, when no plan fits, ``run`` of the smallest peak the
    planner reached, repeated: a greedy planner given that peak as its budget may
    take other steps and reach a higher one (BudgetError.best_peak is a peak some
    plan reached, not always one the planner finds again). The budget grows at
    every try; at most ``_REACH_TRIES`` tries. Returns (result, budget used)."""
    for _ in range(_REACH_TRIES - 1):
        try:
            return run(budget), budget
        except BudgetError as e:
            if e.best_peak <= budget:
                raise
            budget = e.best_peak
    return run(budget), budget


def _ceil2(x: float) -> float:
    """``x`` rounded up to two decimals."""
    import math

    return math.ceil(x * 100 - 1e-9) / 100


def side_by_side(traced: Any, graph_def: Any, batches: Any, steps: int = 3) -> tuple[Any, Any]:
    """The :func:`hybridplan.measure` results of the original step and of ``graph_def``
    on the same batches, both optimised by Grappler as the process's ``tf.config.optimizer``
    options say (TensorFlow's defaults unless the caller changed them): the rewrite keeps
    every rewrite Grappler makes of the original (docs/how-it-works.md, "Numerics"). Both
    run inline, in a GPU executor's order; a swap plan's host copies run on the device
    and are charged to the host (``host_on_device``), so that it runs inline too
    (docs/accuracy.md)."""
    from .measuring import measure

    base = measure(traced, None, batches, steps=steps)
    new = measure(traced, graph_def, batches, steps=steps, host_on_device=True)
    return base, new


def same_bits(base: Any, new: Any) -> bool:
    """Whether two measured runs gave the same losses and weights, bit for bit."""
    return _equal(base.losses, new.losses) and _equal(base.weights, new.weights)


def _equal(xs: list, ys: list) -> bool:
    return len(xs) == len(ys) and all(np.array_equal(x, y) for x, y in zip(xs, ys, strict=True))
