"""``hybridplan.analyze``: peak memory and what is live there, no TensorFlow needed."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _args, _core
from ._backend import workspace_rule
from ._graphio import GraphLike, graph_source
from .accumulators import statements
from .controlflow import body_memory
from .errors import InvalidArgumentError
from .planning import _device_args, workspace_overrides

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

    def budget_for(self, fraction: float) -> int:
        """The device budget (bytes, persistent bytes included) that asks a plan to keep
        ``fraction`` of the activation peak above the kernels' scratch::

            persistent + scratch + int(fraction * (activation_peak - scratch))

        where ``scratch`` is :attr:`workspace_peak_bytes`, the most scratch one op holds,
        which no plan removes. ``fraction=1`` gives the original's own peak and ``0`` the
        floor no plan goes under, so every fraction in (0, 1) asks for less than the
        step uses now, on any backend (with no scratch, oneDNN's CPU kernels or a GPU
        without a workspace limit, it is ``persistent + fraction * activation_peak``).
        :func:`hybridplan.trial`, the CLI's ``--fraction``, the demo, the tests and the
        benchmarks all budget with it; :meth:`fraction_of` is its inverse.

        Raises:
            InvalidArgumentError: ``fraction`` is not a number in [0, 1].
        """
        f = _args.number(fraction, "fraction", low=-math.inf)
        if not 0 <= f <= 1:
            raise InvalidArgumentError(f"fraction must be in [0, 1], got {f}")
        scratch = self.workspace_peak_bytes
        return self.persistent_bytes + scratch + int(f * self._reducible())

    def fraction_of(self, budget: Any) -> float:
        """The fraction :meth:`budget_for` maps to ``budget`` (bytes, persistent bytes
        included, or a size string such as ``"8GiB"``): where it lies between the floor
        (0) and the original's peak (1); below 0 for a budget under the floor, above 1
        for one over the peak.

        Raises:
            InvalidArgumentError: ``budget`` is not a byte count.
        """
        floor = self.persistent_bytes + self.workspace_peak_bytes
        return (_args.parse_bytes(budget) - floor) / max(1, self._reducible())

    def _reducible(self) -> int:
        """The activation peak less the largest kernel scratch: what plans act on."""
        return max(0, self.activation_peak_bytes - self.workspace_peak_bytes)

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

    def node_facts(self) -> dict[str, Any]:
        """What the core's op table and cost model say of every GraphDef node, by node
        index (arrays; ``kernel_class`` a list): ``flops`` (from shapes, the cost
        model's), ``aliased_input`` (the input slot whose buffer the output shares; -1
        none, -2 output i shares input i), ``forward_output`` (the output an
        element-wise op may write into an input's buffer, -1 none) with the input slots
        it tries, ``forward_slot_start`` to ``forward_slot_end``; ``collective``,
        ``takes_handle`` (input 0 is a resource handle), ``never_clone`` (never
        recomputed), ``kernel_class`` and ``workspace`` (scratch bytes under the
        analysis's rule)."""
        return dict(self._core.node_facts())

    def tensor_facts(self) -> dict[str, np.ndarray]:
        """Every tensor's buffer in the liveness model, by tensor id (arrays):
        ``node``, ``index`` (its producer and output), ``dtype`` (TensorFlow's code),
        ``bytes`` (device bytes its buffer holds: 0 for an alias, a handle or a variable
        read), ``value_bytes``, ``owner`` (the tensor whose buffer it shares),
        ``written_into`` (for a buffer an op wrote in place into another, that
        buffer's owner, else 2**32 - 1), ``produce``, ``last_use`` and ``buffer_end``
        (schedule positions: see :attr:`order`). The tensor timeline is the sum over
        the buffers (``bytes > 0``, not ``written_into``) of ``bytes`` from ``produce``
        to ``buffer_end``, plus :attr:`persistent_bytes`."""
        return dict(self._core.tensor_facts())

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
    device: str | dict | os.PathLike | None = None,
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
        workspace: the kernels' scratch rule (``"auto"``: the rule of ``device``'s
            kernels, as :func:`hybridplan.plan` takes it; without a device, the CPU
            kernels of the running TensorFlow, oneDNN on or off; ``"none"``,
            ``"cpu-eigen:THREADS"``, ``"cpu-onednn"``, ``"gpu-cudnn:MIB"``): each op
            holds its scratch while it runs, on top of its inputs and outputs
            (docs/devices.md).
        workspace_profile: measured scratch bytes by node name, replacing the rule's
            for those nodes (``Profile.workspace``, see :func:`hybridplan.plan`).
        device: the device the step is planned for (a preset name, a dict or a JSON or
            TOML file, as for :func:`hybridplan.plan`): with ``workspace="auto"`` its
            ``kernels`` field picks the rule, so that an analysis for a GPU (``"none"``,
            or ``"gpu-cudnn:MIB"`` under ``TF_CUDNN_WORKSPACE_LIMIT_IN_MB``) models the
            memory the plan for that GPU is judged by. None (the default): this
            machine's CPU kernels, to compare with what :func:`hybridplan.measure` sees.

    Raises:
        InvalidGraphError: malformed bytes, cycles, missing inputs.
        ShapeError: a tensor of unknown shape.
        InvalidArgumentError: an argument of the wrong type or out of range, an unknown
            device.

    Example:
        >>> a = hybridplan.analyze("step.pb")  # doctest: +SKIP
        >>> a.peak_bytes, a.live_at_peak(3)  # doctest: +SKIP
    """
    loss = _args.tensor_name(loss)
    persistent_bytes = _args.optional_count(persistent_bytes, "persistent_bytes")
    separate_buffers = _args.flag(separate_buffers, "separate_buffers")
    dev = None if device is None else _device_args(device)[2]
    given = graph_source(graph)
    data = given.data
    rule = workspace_rule(workspace, dev)
    bodies = body_memory(data, rule, given.control_flow)
    return Analysis(
        _core.analyze(
            data,
            loss=loss or given.loss,
            persistent_bytes=persistent_bytes,
            separate_buffers=separate_buffers,
            workspace=rule,
            workspace_profile=workspace_overrides(workspace_profile),
            bodies=bodies,
            hosting=statements(data, bodies, rule),
        )
    )
