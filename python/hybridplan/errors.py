"""The exception hierarchy of hybridplan.

Every error the package raises on purpose is a :class:`HybridplanError`.
Errors from the Rust core are mapped onto these classes in one place
(``rust/py/src/errors.rs``).
"""

from __future__ import annotations

__all__ = [
    "BudgetError",
    "HostBudgetError",
    "HybridplanError",
    "InvalidArgumentError",
    "InvalidGraphError",
    "PlanVersionError",
    "ShapeError",
    "UnsupportedGraphError",
]


class HybridplanError(Exception):
    """Base class of every error hybridplan raises."""


class InvalidGraphError(HybridplanError, ValueError):
    """The input is not a valid training-step graph (malformed bytes, cycles,
    missing inputs, duplicate names...)."""


class ShapeError(InvalidGraphError):
    """A tensor's shape or dtype is unknown, so its size cannot be planned.
    Trace the step with concrete input shapes."""


class UnsupportedGraphError(HybridplanError):
    """The graph holds something the planner cannot plan soundly (control
    flow, function calls it cannot inline)."""


class BudgetError(HybridplanError):
    """No plan fits the memory budget. ``best_peak`` is the smallest peak any
    strategy reached (bytes) and ``strategy`` the strategy that reached it."""

    def __init__(self, message: str, budget: int = 0, best_peak: int = 0, strategy: str = ""):
        super().__init__(message)
        self.budget = budget
        self.best_peak = best_peak
        self.strategy = strategy


class HostBudgetError(BudgetError):
    """Plans fit the device's memory budget, but none the host memory budget
    (the swapped tensors held in host memory at once). ``host_budget`` is that
    budget and ``best_host_peak`` the smallest host peak reached (bytes), also
    given as ``budget`` and ``best_peak``."""

    def __init__(
        self, message: str, host_budget: int = 0, best_host_peak: int = 0, strategy: str = ""
    ):
        super().__init__(message, host_budget, best_host_peak, strategy)
        self.host_budget = host_budget
        self.best_host_peak = best_host_peak


class InvalidArgumentError(HybridplanError, ValueError):
    """An argument is invalid (budget, device, options)."""


class PlanVersionError(InvalidArgumentError):
    """A saved plan in another version of the plan schema than this hybridplan reads
    (``rust/core/src/schema.rs``; plans saved before versions existed carry none):
    re-plan the step and save the new plan."""
