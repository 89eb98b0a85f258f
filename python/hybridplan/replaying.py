"""``hybridplan.replay``: a plan as a self-contained replay program (no TensorFlow needed).

The replay (JSON, ``version`` = ``hybridplan.REPLAY_VERSION``) lists the planned
step as the simulator sees it: the compute stream's ops with their types, kernel
classes, input and output tensors (dtype, shape, bytes) and predicted times; each
swap's bytes, producer, trigger and readers; each recompute's clones; every stream
event and the predicted memory timeline. ``replay/runner.py`` plays it on a
GPU with PyTorch alone. The format is written by the core (``rust/core/src/replay.rs``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from . import _core, planning
from ._graphio import GraphLike, graph_bytes
from .controlflow import body_memory
from .errors import InvalidArgumentError
from .planning import Plan, _device_args

__all__ = ["REPLAY_VERSION", "replay", "save_replay"]

#: The replay format version this hybridplan writes.
REPLAY_VERSION: int = _core.REPLAY_VERSION


def replay(
    graph: GraphLike,
    plan: Plan | str | os.PathLike | None = None,
    budget: Any = "auto",
    *,
    strategy: str = "hybrid",
    device: str | dict | os.PathLike = "v100-nvlink2",
    loss: str | None = None,
    persistent_bytes: int | None = None,
    profile: dict[int, float] | None = None,
    separate_buffers: bool = False,
    **plan_options: Any,
) -> dict:
    """The replay program of a plan of ``graph``, as a JSON-ready dict.

    Args:
        graph: a ``GraphDef``, its bytes, a ``.pb``/``.pbtxt`` path or a traced step.
        plan: the plan to replay: a :class:`hybridplan.Plan`, or the path of one
            saved with ``Plan.save``; ``None`` plans ``graph`` here with
            ``budget``, ``strategy`` and ``plan_options`` (see :func:`hybridplan.plan`).
        device: where the times are predicted (preset, dict or JSON/TOML file),
            as for :func:`hybridplan.plan`.
        profile: measured op times, ``{GraphDef node index: seconds}``.

    Raises:
        InvalidArgumentError: a plan made for another graph, or a bad device.
        BudgetError, InvalidGraphError, ShapeError, UnsupportedGraphError: as
            :func:`hybridplan.plan` when the plan is made here.

    Example:
        >>> r = hybridplan.replay("step.pb", budget="24GiB", device="h200-pcie5")  # doctest: +SKIP
        >>> r["predicted"]["step_time_s"], len(r["ops"]), len(r["swaps"])  # doctest: +SKIP
    """
    common: dict[str, Any] = dict(
        device=device,
        loss=loss,
        persistent_bytes=persistent_bytes,
        profile=profile,
        separate_buffers=separate_buffers,
    )
    if plan is None:
        plan = planning.plan(graph, budget, strategy=strategy, **common, **plan_options)
    elif not isinstance(plan, Plan):
        plan = Plan.load(plan)
    elif plan_options:
        raise InvalidArgumentError(
            f"planner options {sorted(plan_options)} apply only when the plan is made here"
        )
    name, device_json, _ = _device_args(device)
    data, traced_loss = graph_bytes(graph)
    text = _core.replay(
        data,
        plan.to_json(),
        device=name,
        device_json=device_json,
        loss=loss or traced_loss,
        persistent_bytes=persistent_bytes,
        profile=sorted(profile.items()) if profile else None,
        separate_buffers=separate_buffers,
        workspace=plan.report["workspace"],  # the rule the plan was made with
        bodies=body_memory(data, plan.report["workspace"]),
    )
    return json.loads(text)


def save_replay(replay_: dict, path: str | os.PathLike) -> None:
    """Writes a replay as JSON (atomically)."""
    from ._files import atomic_write

    atomic_write(Path(path), json.dumps(replay_, separators=(",", ":")).encode())
