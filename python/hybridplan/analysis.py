"""``hybridplan.analyze``: peak memory and what is live there, no TensorFlow needed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from . import _args, _core
from ._backend import workspace_rule
from ._graphio import GraphLike, graph_bytes
from .controlflow import body_memory
from .planning import workspace_overrides

__all__ = ["Analysis", "LiveTensor", "analyze"]


@dataclass(frozen=True)
class LiveTensor:
    """A tensor live at some point of the step."""

    name: str
    bytes: int
    dtype: str
    shape: tuple[int, ...]
    op: str


class Analysis:
    """Memory analysis of one training step (see :func:`analyze`).

    All sizes are bytes. ``timeline[p]`` is the device memory in use while
    the op at schedule position ``p`` runs, persistent bytes included.
    """

    def __init__(self, core: _core.CoreAnalysis):
        self._core = core

    @property
    def num_nodes(self) -> int:
        return self._core.num_nodes

    @property
    def num_tensors(self) -> int:
        return self._core.num_tensors

    @property
    def peak_bytes(self) -> int:
        """Peak device bytes over the step, persistent bytes included."""
        return self._core.peak_bytes

    @property
    def persistent_bytes(self) -> int:
        """Bytes of variables and optimizer slots."""
        return self._core.persistent_bytes

    @property
    def activation_peak_bytes(self) -> int:
        """Peak bytes minus persistent bytes."""
        return self.peak_bytes - self.persistent_bytes

    @property
    def workspace(self) -> np.ndarray:
        """Scratch bytes each GraphDef node holds while it runs, by node index."""
        return self._core.workspace

    @property
    def workspace_peak_bytes(self) -> int:
        """The most scratch any one op holds."""
        ws = self._core.workspace
        return int(ws.max()) if len(ws) else 0

    @property
    def tensor_peak_bytes(self) -> int:
        """Peak device bytes of the tensors alone (scratch left out), persistent included."""
        return self._core.tensor_peak_bytes

    @property
    def peak_position(self) -> int:
        return self._core.peak_position

    @property
    def loss(self) -> str | None:
        """The loss tensor the phases were derived from (``node:index``)."""
        return self._core.loss

    @property
    def timeline(self) -> np.ndarray:
        return self._core.timeline

    @property
    def order(self) -> np.ndarray:
        """GraphDef node index at each schedule position."""
        return self._core.order

    #: Phase names, indexed by the codes of :meth:`node_phases`.
    PHASES = ("forward", "backward", "update", "other")

    def node_phases(self) -> np.ndarray:
        """The phase code of every GraphDef node, by node index: 0 forward,
        1 backward, 2 update, 3 other (see :attr:`PHASES` and docs/how-it-works.md)."""
        return self._core.phase

    @property
    def phases(self) -> dict[str, int]:
        """Number of ops in each phase: forward, backward, update, other."""
        return dict(self._core.phase_counts())

    def live_at_peak(self, k: int = 10) -> list[LiveTensor]:
        """The ``k`` largest tensors live at the peak, largest first (``k >= 0``)."""
        k = _args.count(k, "k (how many tensors to list)", high=_args.U32_MAX)
        return [
            LiveTensor(name, nbytes, dtype, tuple(shape), op)
            for name, nbytes, dtype, shape, op in self._core.live_at_peak(k)
        ]

    def __repr__(self) -> str:
        return (
            f"Analysis(nodes={self.num_nodes}, peak_bytes={self.peak_bytes}, "
            f"persistent_bytes={self.persistent_bytes}, loss={self.loss!r})"
        )


def analyze(
    graph: GraphLike,
    *,
    loss: str | None = None,
    persistent_bytes: int | None = None,
    separate_buffers: bool = False,
    workspace: str | None = "auto",
    workspace_profile: Mapping[str, int] | None = None,
) -> Analysis:
    """Analyses the device memory of a training step.

    Args:
        graph: a ``GraphDef``, its serialized bytes, a path to a ``.pb`` or
            ``.pbtxt`` file, or a :class:`~hybridplan.tracing.Traced` step.
        loss: the loss tensor (``"node:0"``); inferred when omitted.
        persistent_bytes: bytes of variables and optimizer slots; read from
            the graph when omitted.
        separate_buffers: give every output a buffer of its own. By default the
            model follows TensorFlow's in-place forwarding: an element-wise op
            that is the last reader of an input buffer of its output's size
            writes its output there (docs/how-it-works.md).
        workspace: the kernels' scratch rule (``"auto"``: the CPU kernels of the
            running TensorFlow, oneDNN on or off; ``"none"``, ``"cpu-eigen:THREADS"``,
            ``"cpu-onednn"``, ``"gpu-cudnn:MIB"``): each op holds its scratch while
            it runs, on top of its inputs and outputs (docs/devices.md).
        workspace_profile: measured scratch bytes by node name, replacing the rule's
            for those nodes (``Profile.workspace``, see :func:`hybridplan.plan`).

    Raises:
        InvalidGraphError: malformed bytes, cycles, missing inputs.
        ShapeError: a tensor of unknown shape.
        InvalidArgumentError: an argument of the wrong type or out of range.

    Example:
        >>> a = hybridplan.analyze("step.pb")  # doctest: +SKIP
        >>> a.peak_bytes, a.live_at_peak(3)  # doctest: +SKIP
    """
    loss = _args.tensor_name(loss)
    persistent_bytes = _args.optional_count(persistent_bytes, "persistent_bytes")
    separate_buffers = _args.flag(separate_buffers, "separate_buffers")
    data, traced_loss = graph_bytes(graph)
    rule = workspace_rule(workspace)
    return Analysis(
        _core.analyze(
            data,
            loss=loss or traced_loss,
            persistent_bytes=persistent_bytes,
            separate_buffers=separate_buffers,
            workspace=rule,
            workspace_profile=workspace_overrides(workspace_profile),
            bodies=body_memory(data, rule),
        )
    )
