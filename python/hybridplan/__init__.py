"""hybridplan: train networks whose activations do not fit in accelerator memory.

hybridplan reads a TensorFlow training step's graph, plans in a Rust core
which activations to swap to host memory and which to recompute, and writes
the plan back into the graph as real TensorFlow ops.

The planning functions (``analyze``, ``plan``) need no TensorFlow; the ones
that trace, rewrite and run graphs import it on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from .analysis import Analysis, LiveTensor, analyze
from .errors import (
    BudgetError,
    HostBudgetError,
    HybridplanError,
    InvalidArgumentError,
    InvalidGraphError,
    PlanVersionError,
    ShapeError,
    UnsupportedGraphError,
)
from .planning import (
    STRATEGIES,
    Plan,
    device_model,
    device_presets,
    parse_bytes,
    plan,
)
from .replaying import REPLAY_VERSION, replay, save_replay

__all__ = [
    "REPLAY_VERSION",
    "STRATEGIES",
    "Analysis",
    "BudgetError",
    "Fit",
    "HostBudgetError",
    "HybridplanError",
    "InvalidArgumentError",
    "InvalidGraphError",
    "LiveTensor",
    "Plan",
    "PlanVersionError",
    "PlannedStep",
    "Profile",
    "Result",
    "ShapeError",
    "Traced",
    "Trial",
    "UnsupportedGraphError",
    "analyze",
    "apply",
    "calibrate",
    "compile_step",
    "device_model",
    "device_presets",
    "fit",
    "function",
    "keras_step",
    "measure",
    "parse_bytes",
    "plan",
    "profile",
    "replay",
    "rewrite",
    "save_replay",
    "trace",
    "trace_concrete",
    "trace_keras",
    "trial",
    "verify",
]

__version__ = "0.1.0"

# Attributes that need TensorFlow, imported on first use.
_LAZY = {
    "trace": "tracing",
    "trace_concrete": "tracing",
    "trace_keras": "tracing",
    "Traced": "tracing",
    "apply": "applying",
    "function": "applying",
    "keras_step": "applying",
    "PlannedStep": "applying",
    "Result": "applying",
    "rewrite": "rewriting",
    "compile_step": "runner",
    "verify": "verification",
    "measure": "measuring",
    "profile": "profiling",
    "Profile": "profiling",
    "calibrate": "profiling",
    "fit": "fitting",
    "Fit": "fitting",
    "trial": "trialing",
    "Trial": "trialing",
}
# Submodules importable as attributes, loaded on first use: ``hybridplan.models`` and
# ``hybridplan.runner`` (both need TensorFlow; the docs call
# ``hybridplan.runner.setup_cpu_emulation``) and ``hybridplan.testing`` (graphs for tests
# and experiments, not in ``__all__``).
_SUBMODULES = {"models", "runner", "testing"}


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'hybridplan' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)


def __dir__() -> list[str]:
    """The public names (``__all__``), the lazily loaded ones included."""
    return list(__all__)
