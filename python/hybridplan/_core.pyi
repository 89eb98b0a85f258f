"""Type stubs of the native core (``hybridplan._core``). Users import ``hybridplan``."""

from collections.abc import Callable
from typing import Any, NotRequired, TypedDict, final, type_check_only

import numpy as np
import numpy.typing as npt

__all__ = [
    "PLAN_SCHEMA_VERSION",
    "REPLAY_VERSION",
    "CoreAnalysis",
    "CorePlan",
    "__version__",
    "analyze",
    "checked_device",
    "device_preset",
    "device_presets",
    "dtypes",
    "export_problem",
    "function_call_ops",
    "has_node_op",
    "has_node_ops",
    "load_plan",
    "op_facts",
    "op_table",
    "plan",
    "ranked",
    "replay",
    "simulate_plan",
    "strategies",
    "synthetic_graphdef",
    "write_swaps",
]

__version__: str

# The plan schema (rust/core/src/schema.rs, where each field is documented): what
# CorePlan.report() and load_plan() return, what a saved plan holds and what
# hybridplan.rewriting takes. Node ids are positions in the analysed graph.
PLAN_SCHEMA_VERSION: int

@type_check_only
class Figures(TypedDict):
    peak_bytes: int
    step_time_s: float
    compute_time_s: float
    recompute_time_s: float
    stall_time_s: float
    bytes_d2h: int
    bytes_h2d: int
    swaps: int
    swap_ins: int
    clones: int
    host_peak_bytes: int
    pinned_bytes: int

@type_check_only
class NodeRef(TypedDict):
    node: int
    name: str

@type_check_only
class TensorRef(TypedDict):
    node: int
    output: int

@type_check_only
class ReadCount(TypedDict):
    node: int
    output: int
    reads: int

@type_check_only
class SwapInDecision(TypedDict):
    trigger: int
    trigger_name: str
    consumers: list[int]
    clone_consumers: list[int]
    follows: bool

@type_check_only
class SwapDecision(TypedDict):
    tensor: str
    node: int
    output: int
    bytes: int
    after: int
    ins: list[SwapInDecision]
    release: NodeRef | None
    gate: NodeRef | None
    reason: str

@type_check_only
class RecomputeDecision(TypedDict):
    nodes: list[int]
    names: list[str]
    trigger: int
    trigger_name: str
    consumers: list[int]
    clone_consumers: list[int]
    reason: str
    inputs: list[TensorRef]
    readers: list[ReadCount]

@type_check_only
class HostTimeline(TypedDict):
    time_s: list[float]
    bytes: list[int]

@type_check_only
class OptimalFigures(TypedDict):
    status: str
    objective_s: float | None
    mip_gap: float
    solve_time_s: float
    variables: NotRequired[int]
    binaries: NotRequired[int]
    constraints: NotRequired[int]
    separate_buffers: bool

@type_check_only
class PlanReport(TypedDict):
    schema_version: int
    strategy_requested: str
    strategy: str
    device: str
    budget: int
    persistent_bytes: int
    num_nodes: int
    loss: str | None
    workspace: str | None
    original: Figures
    planned: Figures
    swaps: list[SwapDecision]
    recomputes: list[RecomputeDecision]
    unknown_ops: list[str]
    evaluations: int
    swap_options: int
    recompute_options: int
    host_budget: int
    host_timeline: HostTimeline
    optimal: NotRequired[OptimalFigures]
    hosted_accumulators: NotRequired[list[HostedAccumulator]]

@type_check_only
class HostedAccumulator(TypedDict):
    node: str
    output: int

def load_plan(text: str) -> PlanReport: ...

@final
class CoreAnalysis:
    @property
    def num_nodes(self) -> int: ...
    @property
    def num_tensors(self) -> int: ...
    @property
    def peak_bytes(self) -> int: ...
    @property
    def peak_position(self) -> int: ...
    @property
    def tensor_peak_bytes(self) -> int: ...
    @property
    def workspace(self) -> npt.NDArray[np.uint64]: ...
    @property
    def persistent_bytes(self) -> int: ...
    @property
    def loss(self) -> str | None: ...
    @property
    def timeline(self) -> npt.NDArray[np.uint64]: ...
    @property
    def order(self) -> npt.NDArray[np.uint32]: ...
    @property
    def phase(self) -> npt.NDArray[np.uint8]: ...
    def phase_counts(self) -> dict[str, int]: ...
    def forwarded(self) -> list[tuple[str, str]]: ...
    def live_at_peak(self, k: int) -> list[tuple[str, int, str, list[int], str]]: ...
    def node_facts(self) -> dict[str, Any]: ...
    def tensor_facts(self) -> dict[str, npt.NDArray[Any]]: ...
    def with_separate_buffers(self, separate_buffers: bool) -> CoreAnalysis: ...

#: A loop accumulator that can be kept on the host (rust/core/src/hosting.rs):
#: (forward loop, output, gradient loop, input, dtype enum, element dims, count,
#: output sharing its elements or None, forward scratch, gradient scratch when hosted).
_Accumulator = tuple[str, int, str, int, int, list[int], int, int | None, int, int]

def analyze(
    data: bytes,
    loss: str | None = None,
    persistent_bytes: int | None = None,
    separate_buffers: bool = False,
    workspace: str | None = None,
    workspace_profile: list[tuple[str, int]] | None = None,
    bodies: list[tuple[str, int, list[tuple[int, int, int, list[int], int]]]] | None = None,
    hosting: list[_Accumulator] | None = None,
) -> CoreAnalysis: ...

@final
class CorePlan:
    @property
    def report_json(self) -> str: ...
    def report(self) -> PlanReport: ...
    def counts(self) -> tuple[int, int, int]: ...
    def rest(self) -> dict[str, Any]: ...
    def events(
        self,
    ) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.float64], npt.NDArray[np.float64]]: ...
    def timeline(self, which: int) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.uint64]]: ...

def plan(
    data: bytes | CoreAnalysis,
    budget: int,
    strategy: str = "hybrid",
    device: str = "v100-nvlink2",
    device_json: str | None = None,
    loss: str | None = None,
    persistent_bytes: int | None = None,
    min_bytes: int = 65536,
    profile: list[tuple[int, float]] | None = None,
    tflms: tuple[int, int, int] | None = None,
    select: tuple[list[str], list[str], list[str], list[str]] | None = None,
    separate_buffers: bool = False,
    workspace: str | None = None,
    workspace_profile: list[tuple[str, int]] | None = None,
    host_budget: int | None = None,
    bodies: list[tuple[str, int, list[tuple[int, int, int, list[int], int]]]] | None = None,
    hosting: list[_Accumulator] | None = None,
) -> CorePlan: ...
def device_preset(name: str) -> str: ...
def checked_device(text: str) -> str: ...
def device_presets() -> list[str]: ...
def dtypes() -> list[tuple[int, str, int, bool]]: ...
def strategies() -> list[tuple[str, str, bool]]: ...
def function_call_ops() -> list[str]: ...
def has_node_op(data: bytes, ops: list[str]) -> bool: ...
def has_node_ops(data: bytes, groups: list[list[str]]) -> list[bool]: ...
def op_facts(op: str) -> tuple[bool, bool, bool, str | None]: ...

# The name of a node standing for a tensor among commutative readers' inputs (the rule of
# rust/core/src/writeback.rs, `ranked`).
def ranked(producer: str, targets: list[str], siblings: list[str], tag: str) -> str: ...

# The swaps of a plan written into GraphDef bytes (rust/core/src/writeback.rs): the new
# graph's bytes, the input's node count, the swap-out and swap-in names, the slots
# rewired, the inputs before of every node changed (packed: node ids ascending, where
# each node's inputs begin among all of them, where each input begins in one string in
# characters, both with one entry more, and the string), the reads each tensor lost and
# gained, and (clone consumer, tensor, swap-in, where) for each clone consumer.
def write_swaps(
    data: bytes,
    swaps: Any,
    sig_of: Callable[[str], Any],
    swap_out_op: str,
    swap_in_op: str,
    device: str,
    host: str,
    pin_consumers: bool,
    prefix: str,
) -> tuple[
    bytes,
    int,
    list[str],
    list[str],
    int,
    tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint64], npt.NDArray[np.uint64], str],
    list[tuple[str, int]],
    list[tuple[str, int]],
    list[tuple[int, str, str, str]],
]: ...

# The core's op-type sets (rust/core/src/opkind.rs, where each is documented).
@type_check_only
class OpTable(TypedDict):
    conditionals: list[str]
    loops: list[str]
    accumulator_push: list[str]
    accumulator_pop: list[str]
    list_adds_element: dict[str, int]
    list_takes_element: list[str]
    list_holds_input: list[str]
    list_new: list[str]
    list_sums: list[str]
    optional_from_value: list[str]
    identities: list[str]
    arguments: list[str]
    feeds: list[str]
    less: list[str]
    logical_and: list[str]
    additions: list[str]
    constants: list[str]
    variable_reads: list[str]
    transfers: list[str]
    all_reduces: list[str]
    runtime_plumbing: list[str]
    replaces_one_node: list[str]

def op_table() -> OpTable: ...
def synthetic_graphdef(
    nodes: int, kind: str = "mixed", batch: int = 8, size: int = 32, channels: int = 64
) -> bytes: ...
def export_problem(
    data: bytes | CoreAnalysis,
    device: str = "v100-nvlink2",
    device_json: str | None = None,
    loss: str | None = None,
    persistent_bytes: int | None = None,
    min_bytes: int = 65536,
    profile: list[tuple[int, float]] | None = None,
    separate_buffers: bool = False,
    workspace: str | None = None,
    workspace_profile: list[tuple[str, int]] | None = None,
    bodies: list[tuple[str, int, list[tuple[int, int, int, list[int], int]]]] | None = None,
) -> str: ...
def simulate_plan(
    data: bytes | CoreAnalysis,
    plan_json: str,
    budget: int,
    strategy: str,
    device: str = "v100-nvlink2",
    device_json: str | None = None,
    loss: str | None = None,
    persistent_bytes: int | None = None,
    profile: list[tuple[int, float]] | None = None,
    separate_buffers: bool = False,
    workspace: str | None = None,
    workspace_profile: list[tuple[str, int]] | None = None,
    bodies: list[tuple[str, int, list[tuple[int, int, int, list[int], int]]]] | None = None,
) -> CorePlan: ...

REPLAY_VERSION: int

def replay(
    data: bytes | CoreAnalysis,
    report_json: str,
    device: str = "v100-nvlink2",
    device_json: str | None = None,
    loss: str | None = None,
    persistent_bytes: int | None = None,
    profile: list[tuple[int, float]] | None = None,
    separate_buffers: bool = False,
    workspace: str | None = None,
    workspace_profile: list[tuple[str, int]] | None = None,
    bodies: list[tuple[str, int, list[tuple[int, int, int, list[int], int]]]] | None = None,
) -> str: ...
