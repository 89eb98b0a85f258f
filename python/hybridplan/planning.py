"""``hybridplan.plan``: choose swaps and recomputes under a budget (no TensorFlow needed)."""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from . import _args, _core
from ._args import parse_bytes
from ._backend import workspace_rule
from ._gc import gc_paused
from ._graphio import GraphLike, graph_source
from .accumulators import statements
from .controlflow import body_memory
from .errors import BudgetError, InvalidArgumentError

if TYPE_CHECKING:
    from ._core import Figures, PlanReport, RecomputeDecision, SwapDecision
    from .analysis import Analysis

__all__ = [
    "HOST_RESERVE",
    "STRATEGIES",
    "STRATEGY_RULES",
    "Plan",
    "device_model",
    "device_presets",
    "parse_bytes",
    "plan",
]

#: The planning strategies, in report order, and each one's rule in one line: the
#: core's ``Strategy::ALL`` (``rust/core/src/plan/planner.rs``).
STRATEGY_RULES: dict[str, str] = {name: rule for name, rule, _ in _core.strategies()}
STRATEGIES = tuple(STRATEGY_RULES)
#: The strategies that swap, so that TFLMS parameters set their swap plan.
_SWAPPING = frozenset(name for name, _, swaps in _core.strategies() if swaps)
#: The exact solver, for small graphs only (``hybridplan.optimal``); not in
#: ``STRATEGIES``, which every tool runs on graphs of any size.
OPTIMAL = "optimal"
#: TensorFlow's cap on pinned host memory when ``TF_GPU_HOST_MEM_LIMIT_IN_MB`` is unset.
PINNED_DEFAULT_LIMIT = 64 << 30
#: Fraction of the device memory kept free by ``budget="auto"`` (allocator
#: fragmentation, workspace of convolution kernels).
AUTO_RESERVE = 0.08


#: Host memory kept free by ``host_budget="auto"``: this fraction of the
#: machine's physical memory, at least ``HOST_RESERVE_MIN`` bytes (the Python
#: process, TensorFlow, the input pipeline, the page cache).
HOST_RESERVE = 0.2
HOST_RESERVE_MIN = 4 << 30


def physical_memory() -> int:
    """This machine's physical memory in bytes (0 when the OS does not say)."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return 0


def _has_local_gpu() -> bool:
    """Whether this machine has an NVIDIA GPU (the driver's /proc entry), without
    importing TensorFlow."""
    return os.path.isdir("/proc/driver/nvidia/gpus") and bool(
        os.listdir("/proc/driver/nvidia/gpus")
    )


def auto_host_budget(dev: dict) -> int | None:
    """The default host budget for a device model: this machine's physical memory
    less :data:`HOST_RESERVE` when the plan is for this machine (the ``cpu``
    device, or any device while this machine has a GPU); ``None`` (no bound)
    for a GPU model planned on a machine without a GPU, whose host memory is
    not known here: pass ``host_budget=`` for it."""
    if dev.get("name") != "cpu" and not _has_local_gpu():
        return None
    phys = physical_memory()
    if phys <= 0:
        return None
    return max(phys - max(int(phys * HOST_RESERVE), HOST_RESERVE_MIN), 1)


def _host_budget(host_budget: Any, dev: dict) -> int | None:
    if host_budget is None:
        return None
    if isinstance(host_budget, str) and host_budget.strip().lower() == "auto":
        return auto_host_budget(dev)
    return parse_bytes(host_budget, "host_budget")


def device_presets() -> list[str]:
    """Names of the built-in device models."""
    return list(_core.device_presets())


def device_model(base: str | None = None, **fields: Any) -> dict:
    """A device model as a dict, for ``device=``: a preset's fields (``base``)
    with the given ones replaced, or only the given ones when ``base`` is
    ``None`` (then every field must be given). Field names are those of
    ``docs/devices.md``; an unknown one is an error.

    Example:
        >>> slow = hybridplan.device_model("a100-pcie4", name="a100-gen3",
        ...                                h2d_bandwidth=12e9, d2h_bandwidth=12e9)
        >>> hybridplan.plan("step.pb", "auto", device=slow)  # doctest: +SKIP
    """
    known = set(json.loads(_core.device_preset("cpu")))
    unknown = sorted(set(fields) - known)
    if unknown:
        raise InvalidArgumentError(
            f"unknown device field(s) {', '.join(unknown)}: "
            f"the fields are {', '.join(sorted(known))}"
        )
    dev = json.loads(_core.device_preset(base)) if base is not None else {}
    dev.update(fields)
    return dev


def workspace_overrides(profile: Mapping[str, int] | None) -> list[tuple[str, int]] | None:
    """``workspace_profile`` as the core takes it: ``(node name, bytes)`` sorted by name.

    Raises:
        InvalidArgumentError: not a mapping of node names to byte counts in [0, 2^64).
    """
    if profile is None:
        return None
    if not isinstance(profile, Mapping):
        raise InvalidArgumentError(
            "workspace_profile must map GraphDef node names to scratch bytes "
            f"(Profile.workspace), got {type(profile).__name__}"
        )
    out = []
    for name, nbytes in sorted(profile.items()):
        ok = isinstance(nbytes, (int, np.integer)) and not isinstance(nbytes, bool)
        if not isinstance(name, str) or not ok or not 0 <= int(nbytes) < 2**64:
            raise InvalidArgumentError(
                f"workspace_profile: {name!r} -> {nbytes!r}: give a node name and a byte "
                "count >= 0 (Profile.workspace from hybridplan.profile)"
            )
        out.append((name, int(nbytes)))
    return out


def _device_args(device: str | dict | os.PathLike) -> tuple[str, str | None, dict]:
    if isinstance(device, dict):
        _check_device_fields(device)
        text = json.dumps(device)
        _core.checked_device(text)  # every field present and known: the core's reading
        return "custom", text, device
    if isinstance(device, (os.PathLike, Path)) or (
        isinstance(device, str) and device.lower().endswith((".json", ".toml"))
    ):
        text, fields = _device_file(Path(device))
        _check_device_fields(fields, f" in {device}")
        try:
            _core.checked_device(text)
        except InvalidArgumentError as e:
            message = str(e)
            if Path(device).suffix.lower() == ".toml":  # a position in the JSON made of it
                message = re.sub(r" at line \d+ column \d+", "", message)
            raise InvalidArgumentError(f"{message} (the device file {device})") from None
        return "custom", text, fields
    if not isinstance(device, str):
        raise InvalidArgumentError(
            "device must be a preset name, a dict or a path to a JSON or TOML file"
        )
    return device, None, json.loads(_core.device_preset(device))


def _check_device_fields(dev: Any, where: str = "") -> None:
    """Types and ranges of a device model's fields, each named when wrong (the core
    checks which fields are present and what makes the model consistent)."""
    if not isinstance(dev, dict):
        raise InvalidArgumentError(f"a device model must be a JSON object{where}, got {dev!r}")
    for k, v in dev.items():
        if k in ("name", "kernels"):
            if not isinstance(v, str):
                raise InvalidArgumentError(f"device field {k!r}{where} must be a string")
        elif k == "memory_bytes":
            _args.count(v, f"device field 'memory_bytes'{where}")
        else:
            _args.number(v, f"device field {k!r}{where}")


def _device_file(path: Path) -> tuple[str, dict]:
    """A device model file: JSON, or TOML (by its ``.toml`` suffix), with the
    fields of ``hybridplan.device_preset``'s JSON. Returns (JSON text, dict);
    the core checks the fields and names any that is missing."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise InvalidArgumentError(f"cannot read the device file {path}: {e}") from None
    try:
        if path.suffix.lower() == ".toml":
            import tomllib

            fields = tomllib.loads(raw.decode())
            return json.dumps(fields), fields
        text = raw.decode()
        return text, (json.loads(text) if text.strip() else {})
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        # json.JSONDecodeError and tomllib.TOMLDecodeError are ValueErrors.
        raise InvalidArgumentError(f"device file {path} is not valid: {e}") from None


def _names(what: str, value: Sequence[str] | str | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
        raise InvalidArgumentError(f"{what} must be a list of strings, got {value!r}")
    return list(value)


def _budget(budget: Any, dev: dict) -> int:
    if isinstance(budget, str) and budget.strip().lower() == "auto":
        mem = dev.get("memory_bytes", 0)
        if not isinstance(mem, int) or mem <= 0:
            raise InvalidArgumentError("budget='auto' needs a device with memory_bytes")
        return int(mem * (1 - AUTO_RESERVE))
    return parse_bytes(budget)


class Plan:
    """A plan: every decision, and the predicted figures before and after.

    ``report`` is the plan itself, in the plan schema (``rust/core/src/schema.rs``;
    typed as ``PlanReport`` in ``hybridplan/_core.pyi``), JSON-serialisable: what
    :meth:`save` writes, what :func:`hybridplan.rewrite` takes as it is. ``swaps``
    and ``recomputes`` list the decisions with tensor names, bytes, trigger ops and
    reasons; ``original`` and ``planned`` are the report's figures as they are
    (``Figures`` of the plan schema: a dict, ``plan.planned["peak_bytes"]``).

    A plan made by :func:`plan` holds the core's answer and builds ``report`` (a
    dict of every decision, millions of objects at 10^6 nodes) when it is first
    read. Until then :func:`hybridplan.rewrite` and :func:`hybridplan.apply` take
    the decisions from the core as planned; once ``report`` has been handed out,
    they take it as it then is (the caller may have edited it).
    """

    def __init__(
        self,
        report: PlanReport | None = None,
        timelines: tuple | None = None,
        events: tuple | None = None,
        *,
        core: Any = None,
    ):
        if report is None and core is None:
            raise InvalidArgumentError(
                "a Plan needs its report (a dict of the plan schema): make one with "
                "hybridplan.plan or read a saved one with Plan.load"
            )
        self._report = report
        self._core = core
        self._timelines = timelines
        self._events = events
        self._lock = threading.Lock()

    @property
    def report(self) -> PlanReport:
        report = self._report
        if report is None:
            with self._lock:  # one report for every thread that asks
                if self._report is None:
                    with gc_paused():  # 10^5 decisions are millions of objects, no cycles
                        self._report = self._core.report()
                    self._core = None  # the report is the plan from now on
                report = self._report
        return report

    @report.setter
    def report(self, report: PlanReport) -> None:
        if report is None:
            raise InvalidArgumentError("a Plan's report cannot be None: give the plan schema")
        with self._lock:
            self._report = report
            self._core = None

    def _planned(self) -> Any:
        """The core's plan (``_core.CorePlan``) when ``report`` was never handed out, so
        that the decisions are exactly as planned; else None."""
        return self._core if self._report is None else None

    def __getstate__(self) -> dict:
        # The core's answer and the lock do not pickle: the report does.
        report = self.report
        state = {k: v for k, v in self.__dict__.items() if k not in ("_core", "_lock")}
        return {**state, "_report": report}

    def __setstate__(self, state: dict) -> None:
        state = dict(state)
        if "_report" not in state:  # pickled when the report was a plain attribute
            state["_report"] = state.pop("report", None)
        self.__dict__.update(state)
        self.__dict__.setdefault("_timelines", None)
        self.__dict__.setdefault("_events", None)
        self._core = None
        self._lock = threading.Lock()

    @property
    def strategy(self) -> str:
        return self.report["strategy"]

    @property
    def budget(self) -> int:
        return self.report["budget"]

    @property
    def original(self) -> Figures:
        """Predicted figures of the original step (bytes, seconds)."""
        return self.report["original"]

    @property
    def planned(self) -> Figures:
        """Predicted figures of the planned step (bytes, seconds)."""
        return self.report["planned"]

    @property
    def host_budget(self) -> int | None:
        """The host memory budget planned under (bytes), ``None`` when unbounded."""
        hb = self.report["host_budget"]
        return None if hb >= 2**64 - 1 else hb

    @property
    def host_peak_bytes(self) -> int:
        """Most swapped bytes the planned step holds in host memory at once."""
        return self.planned["host_peak_bytes"]

    @property
    def pinned_bytes(self) -> int:
        """Pinned host memory the planned step needs on a GPU."""
        return self.planned["pinned_bytes"]

    def host_timeline(self) -> tuple[np.ndarray, np.ndarray]:
        """(time in s, swapped bytes held in host memory) of the planned step."""
        tl = self.report["host_timeline"]
        return (
            np.array(tl["time_s"], dtype=np.float64),
            np.array(tl["bytes"], dtype=np.uint64),
        )

    @property
    def pinned_note(self) -> str | None:
        """A warning when the pinned need exceeds TensorFlow's default cap on
        pinned host memory (``TF_GPU_HOST_MEM_LIMIT_IN_MB``, 64 GiB unset)."""
        limit_mb = os.environ.get("TF_GPU_HOST_MEM_LIMIT_IN_MB")
        try:
            limit = int(limit_mb) << 20 if limit_mb else PINNED_DEFAULT_LIMIT
        except ValueError:
            limit = PINNED_DEFAULT_LIMIT
        if self.pinned_bytes <= limit:
            return None
        need_mb = -(-self.pinned_bytes // (1 << 20))
        return (
            f"the step needs {self.pinned_bytes} bytes of pinned host memory, over "
            f"TensorFlow's cap of {limit} bytes: set TF_GPU_HOST_MEM_LIMIT_IN_MB={need_mb} "
            "or more before TensorFlow starts"
        )

    @property
    def swaps(self) -> list[SwapDecision]:
        return self.report["swaps"]

    @property
    def recomputes(self) -> list[RecomputeDecision]:
        return self.report["recomputes"]

    @property
    def is_empty(self) -> bool:
        """Nothing to write: no swap, no recompute, no loop accumulator kept on the host."""
        planned = self._planned()
        if planned is not None:
            return not any(planned.counts())
        return not self.swaps and not self.recomputes and not self.hosted_accumulators

    @property
    def hosted_accumulators(self) -> list[tuple[str, int]]:
        """The loop accumulators the plan keeps on the host (``(loop node, output)``,
        :mod:`hybridplan.accumulators`): planned with their elements copied to the host
        as the loop pushes them and back as its gradient loop pops them."""
        return [(h["node"], h["output"]) for h in self.report.get("hosted_accumulators", ())]

    def timeline(self, which: str = "planned") -> tuple[np.ndarray, np.ndarray]:
        """(time in s, device bytes in use) of the ``original`` or ``planned`` step."""
        if self._timelines is None:
            raise InvalidArgumentError("a plan loaded from JSON carries no timelines; re-plan it")
        return self._timelines[0 if which == "original" else 1]

    def events(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Stream events of the planned step: kind (0 op, 1 recompute clone,
        2 swap-out, 3 swap-in), start and end times in seconds."""
        if self._events is None:
            raise InvalidArgumentError("a plan loaded from JSON carries no events; re-plan it")
        return self._events

    def to_json(self) -> str:
        return json.dumps(self.report, indent=1, sort_keys=True)

    def save(self, path: str | os.PathLike) -> None:
        """Writes the plan as JSON (atomically)."""
        from ._files import atomic_write

        atomic_write(Path(path), self.to_json().encode())

    @classmethod
    def load(cls, path: str | os.PathLike) -> Plan:
        """Reads a plan written by :meth:`save`.

        Raises:
            PlanVersionError: the plan is in another version of the plan schema
                (saved by another hybridplan): re-plan the step.
            InvalidArgumentError: the file cannot be read or holds no plan.
        """
        try:
            text = Path(path).read_bytes().decode("utf-8")
        except OSError as e:
            raise InvalidArgumentError(f"cannot load a plan from {path}: {e.strerror}") from None
        except UnicodeDecodeError as e:
            raise InvalidArgumentError(
                f"{path} is not a plan: not valid JSON (not UTF-8 text: {e}); pass a file "
                "written by Plan.save or `hybridplan plan --json`"
            ) from None
        try:
            return cls(_core.load_plan(text))
        except InvalidArgumentError as e:
            raise type(e)(f"{path}: {e}") from None

    def __repr__(self) -> str:
        o, p = self.original, self.planned
        asked = self.report["strategy_requested"]
        if self.is_empty:
            return (
                f"Plan({asked!r}: the step already fits, peak {_size(o['peak_bytes'])} within the "
                f"budget {_size(self.budget)}; nothing to swap or recompute)"
            )
        by = f" (by {self.strategy!r})" if self.strategy != asked else ""
        lists = len(self.hosted_accumulators)
        from .report import fmt_count

        hosted = f", {fmt_count(lists, 'loop accumulator')} kept on the host" if lists else ""
        return (
            f"Plan({asked!r}{by}: peak {_size(o['peak_bytes'])} -> {_size(p['peak_bytes'])} within "
            f"the budget {_size(self.budget)}; predicted step {o['step_time_s'] * 1e3:.4g} -> "
            f"{p['step_time_s'] * 1e3:.4g} ms; {fmt_count(p['swaps'], 'tensor')} swapped, "
            f"{fmt_count(p['clones'], 'op')} recomputed{hosted}; host peak "
            f"{_size(p['host_peak_bytes'])})"
        )


def plan(
    graph: GraphLike | Analysis,
    budget: Any = "auto",
    *,
    strategy: str = "hybrid",
    device: str | dict | os.PathLike = "v100-nvlink2",
    loss: str | None = None,
    persistent_bytes: int | None = None,
    min_bytes: int = 1 << 16,
    profile: dict[int, float] | None = None,
    tflms: dict[str, int] | None = None,
    include_scopes: Sequence[str] | None = None,
    exclude_scopes: Sequence[str] | None = None,
    include_types: Sequence[str] | None = None,
    exclude_types: Sequence[str] | None = None,
    time_limit: float = 60.0,
    separate_buffers: bool = False,
    workspace: str | None = "auto",
    workspace_profile: Mapping[str, int] | None = None,
    host_budget: Any = "auto",
) -> Plan:
    """Plans which tensors to swap and which sub-graphs to recompute.

    A step with loops whose gradient is taken (a Keras LSTM or GRU): when no plan fits
    with the loops' accumulators on the device and the device model runs TensorFlow's
    CPU kernels (the ``cpu`` preset: the devices of the ``cpu-emulation`` rewrite), the
    core keeps the largest accumulators on the host, as few as fit
    (:attr:`Plan.hosted_accumulators`, ``docs/control-flow.md``).

    Args:
        graph: a ``GraphDef``, its bytes, a ``.pb``/``.pbtxt`` path, a traced step, or
            an :class:`~hybridplan.analysis.Analysis` from :func:`hybridplan.analyze`:
            that graph decoded once, with its build options (``loss``,
            ``persistent_bytes``, ``separate_buffers``, ``workspace``,
            ``workspace_profile``, which are then not given here), for planning
            one graph several times.
        budget: device bytes the step may use, persistent bytes included:
            an int, a string such as ``"16GiB"``, or ``"auto"`` (the device's
            memory less a reserve).
        strategy: one of :data:`STRATEGIES` (each one's rule in
            :data:`STRATEGY_RULES`: ``"hybrid"``, the default, is the fastest plan
            that fits); or
            ``"optimal"``: the exact mixed-integer optimum, for graphs of at most
            ``hybridplan.optimal.MAX_NODES`` nodes (needs scipy), its solver
            figures in ``report["optimal"]`` (see docs/optimality.md).
        device: a preset name (see :func:`device_presets`), a dict (see
            :func:`device_model`) or a JSON or TOML file with the same fields.
        loss: the loss tensor; inferred when omitted.
        min_bytes: buffers smaller than this are left alone.
        profile: measured op times, ``{GraphDef node index: seconds}``
            (see ``hybridplan.profile``), replacing the cost model's estimates.
        tflms: TFLMS's parameters ``{"threshold": ..., "ahead": ..., "groupby":
            ...}`` (schedule positions) for ``"tflms"``/``"swap"``: the swap plan is
            then exactly TFLMS's; without them they are tuned with the simulator.
        time_limit: seconds the ``"optimal"`` solver may take; it then returns
            its best plan with ``report["optimal"]["status"] == "time limit"``.
        include_scopes, exclude_scopes, include_types, exclude_types: which
            ops the planner may touch, as TFLMS offered. A scope matches node
            names at ``/`` boundaries (``"model/block1"`` matches
            ``"model/block1/conv"``, not ``"model/block10/conv"``); a type is an
            op type (``"Conv2D"``). With includes, only matching ops are
            selected; excludes always win. Only a selected op's outputs are
            swapped and only all-selected sub-graphs recomputed. An entry that
            matches no node is an error.
        separate_buffers: model every output in a buffer of its own, without
            TensorFlow's in-place forwarding (see :func:`hybridplan.analyze`).
            ``"optimal"`` always solves this model (its plan then fits the
            default model too, whose memory is never higher); pass True to
            compare other strategies with it on equal terms.
        workspace: the kernels' scratch rule, held by each op while it runs and
            counted against the budget: ``"auto"`` (as the device model's ``kernels``
            field says: for ``"cpu"``, the ``cpu`` preset and models made from it, the CPU
            kernels of the running TensorFlow, oneDNN on or off; for ``"gpu"``
            ``"gpu-cudnn:MIB"`` when ``TF_CUDNN_WORKSPACE_LIMIT_IN_MB`` is set, else
            ``"none"``), ``"none"``, ``"cpu-eigen:THREADS"``, ``"cpu-onednn"`` or
            ``"gpu-cudnn:MIB"`` (docs/devices.md). ``"optimal"`` models none.
        workspace_profile: measured scratch bytes by GraphDef node name, replacing the
            rule's for those nodes (``Profile.workspace`` from
            :func:`hybridplan.profile`, which tells a node's scratch, allocated and
            freed while it ran, from its outputs).
        host_budget: host bytes the swapped tensors may hold at once (each
            swap-out's buffer lives from the copy's start until its last
            swap-in ends): an int, a string such as ``"64GiB"``, ``None`` (no
            bound) or ``"auto"`` (the default: this machine's physical memory
            less :data:`HOST_RESERVE` when planning for this machine, i.e. the
            ``cpu`` device or any device on a machine with a GPU; no bound for
            a GPU model planned on a machine without one). A plan over it does
            not fit, so ``hybrid`` falls back to recomputation. Loop accumulators
            kept on the host count against it too (``docs/control-flow.md``).

    Raises:
        BudgetError: no plan fits; ``best_peak`` says the smallest peak reached.
        HostBudgetError: plans fit the device but none the host budget;
            ``best_host_peak`` says the smallest host peak reached.
        InvalidArgumentError: a bad budget, device or strategy.
        InvalidGraphError, ShapeError, UnsupportedGraphError: a bad graph.

    Example:
        >>> p = hybridplan.plan("step.pb", "16GiB", device="v100-nvlink2")  # doctest: +SKIP
    """
    if not isinstance(strategy, str):
        raise InvalidArgumentError(
            f"strategy must be a string, one of {', '.join(STRATEGIES)} or 'optimal', "
            f"got {strategy!r}"
        )
    loss = _args.tensor_name(loss)
    persistent_bytes = _args.optional_count(persistent_bytes, "persistent_bytes")
    min_bytes = parse_bytes(min_bytes, "min_bytes") if min_bytes else 0
    profile_items = _args.profile_items(profile)
    separate_buffers = _args.flag(separate_buffers, "separate_buffers")
    if strategy == OPTIMAL:
        time_limit = _args.number(time_limit, "time_limit (seconds)")
        if host_budget not in (None, "auto"):
            raise InvalidArgumentError("strategy='optimal' takes no host_budget")
        selection = (include_scopes, exclude_scopes, include_types, exclude_types)
        if tflms is not None or any(selection):
            raise InvalidArgumentError("strategy='optimal' takes no tflms parameters or selection")
        args = (loss, persistent_bytes, min_bytes, profile_items, time_limit, separate_buffers)
        return _optimal(graph, budget, device, *args)
    if strategy not in STRATEGIES:
        raise InvalidArgumentError(
            f"unknown strategy {strategy!r}: use one of {', '.join(STRATEGIES)}"
        )
    if tflms is not None and strategy not in _SWAPPING:
        raise InvalidArgumentError(
            f"tflms parameters set the swap plan, and strategy {strategy!r} swaps nothing: "
            "drop tflms or use strategy='swap'"
        )
    select = (
        _names("include_scopes", include_scopes),
        _names("exclude_scopes", exclude_scopes),
        _names("include_types", include_types),
        _names("exclude_types", exclude_types),
    )
    name, device_json, dev = _device_args(device)
    nbytes = _budget(budget, dev)
    tflms_args = _args.tflms_params(tflms)
    host = _host_budget(host_budget, dev)
    source, build = _source(
        graph,
        dev,
        loss=loss,
        persistent_bytes=persistent_bytes,
        separate_buffers=separate_buffers,
        workspace=workspace,
        workspace_profile=workspace_profile,
    )
    options: dict[str, Any] = {
        "strategy": strategy,
        "device": name,
        "device_json": device_json,
        "min_bytes": min_bytes,
        "profile": profile_items,
        "tflms": tflms_args,
        "select": select if any(select) else None,
        "host_budget": host,
    }
    core = _core.plan(source, nbytes, **options, **build)
    return Plan(None, (core.timeline(0), core.timeline(1)), core.events(), core=core)


def _source(
    graph: Any,
    dev: dict | None,
    *,
    loss: str | None,
    persistent_bytes: int | None,
    separate_buffers: bool,
    workspace: str | None,
    workspace_profile: Mapping[str, int] | None,
) -> tuple[Any, dict]:
    """What the core's planning functions take: an analysis as it is (its build options
    are its own: giving others is an error), or the graph's bytes and the build options
    (``workspace`` resolved for the device model ``dev``)."""
    from .analysis import Analysis

    if isinstance(graph, Analysis):
        given = [
            k
            for k, v in (
                ("loss", loss),
                ("persistent_bytes", persistent_bytes),
                ("separate_buffers", separate_buffers),
                ("workspace_profile", workspace_profile),
            )
            if v
        ]
        if workspace not in (None, "auto"):
            given.append("workspace")
        if given:
            raise InvalidArgumentError(
                f"{', '.join(given)}: an Analysis holds its build options; pass them to "
                "hybridplan.analyze instead"
            )
        return graph._core, {}
    given = graph_source(graph)
    data = given.data
    rule = workspace_rule(workspace, dev)
    bodies = body_memory(data, rule, given.control_flow)
    return data, {
        "loss": loss or given.loss,
        "persistent_bytes": persistent_bytes,
        "separate_buffers": separate_buffers,
        "workspace": rule,
        "workspace_profile": workspace_overrides(workspace_profile),
        "bodies": bodies,
        "hosting": statements(data, bodies, rule),
    }


def _optimal(
    graph: GraphLike | Analysis,
    budget: Any,
    device: str | dict | os.PathLike,
    loss: str | None,
    persistent_bytes: int | None,
    min_bytes: int,
    profile: list[tuple[int, float]] | None,
    time_limit: float,
    separate_buffers: bool,
) -> Plan:
    """The exact solver's plan (``hybridplan.optimal``), judged by the simulator like any other.

    The formulation gives every output a buffer of its own (no in-place forwarding,
    which depends on the plan); the simulator judges the plan in the caller's model,
    whose memory is never higher, so a plan that fits the formulation fits there."""
    from . import optimal

    name, device_json, dev = _device_args(device)
    nbytes = _budget(budget, dev)
    # One decode: the formulation's model (one buffer per output), and the caller's
    # model from it, scheduled again without decoding (CoreAnalysis.with_separate_buffers).
    source, build = _source(
        graph,
        None,
        loss=loss,
        persistent_bytes=persistent_bytes,
        separate_buffers=False,
        workspace=None,
        workspace_profile=None,
    )
    if build:  # bytes: analysed here, as the solver's model needs no workspace
        source = _core.analyze(source, **{**build, "separate_buffers": True})
    else:
        source = source.with_separate_buffers(True)
    judged = source if separate_buffers else source.with_separate_buffers(False)
    common: dict[str, Any] = dict(device=name, device_json=device_json, profile=profile)
    problem = json.loads(_core.export_problem(source, min_bytes=min_bytes, **common))
    try:
        chosen, figures = optimal.solve_problem(problem, nbytes, time_limit)
    except BudgetError as e:
        raise _with_best_peak(e, judged, nbytes, min_bytes, common) from None
    core = _core.simulate_plan(judged, json.dumps(chosen), nbytes, OPTIMAL, **common)
    report = core.report()
    if report["planned"]["peak_bytes"] > nbytes:
        raise BudgetError(  # the model's memory is an upper bound: never expected
            f"the optimal plan peaks at {report['planned']['peak_bytes']} bytes in the "
            f"simulator, over the budget of {nbytes}: please report it with the graph",
            nbytes,
            report["planned"]["peak_bytes"],
            OPTIMAL,
        )
    if not chosen["swaps"] and not chosen["recomputes"]:
        report["strategy"] = "none"
    report["optimal"] = cast("Any", figures | {"separate_buffers": True})
    return Plan(report, (core.timeline(0), core.timeline(1)), core.events())


def _with_best_peak(
    e: BudgetError, judged: Any, budget: int, min_bytes: int, common: dict
) -> BudgetError:
    """The exact formulation is infeasible: ``best_peak`` from the heuristics."""
    try:
        core = _core.plan(judged, budget, strategy="hybrid", min_bytes=min_bytes, **common)
    except BudgetError as h:
        return BudgetError(str(e), budget, h.best_peak, h.strategy)
    peak = core.report()["planned"]["peak_bytes"]
    return BudgetError(
        f"{e} (strategy='hybrid' fits with a peak of {peak} bytes: its plan lies outside "
        "the exact formulation's plan space, see docs/optimality.md)",
        budget,
        peak,
        "hybrid",
    )


def _size(n: int) -> str:
    """``N bytes (x.y MiB)``."""
    from .report import fmt_size

    return fmt_size(n)
