"""Type stubs of the native core (``hybridplan._core``). Users import ``hybridplan``."""

from typing import final

import numpy as np
import numpy.typing as npt

__all__ = [
    "REPLAY_VERSION",
    "CoreAnalysis",
    "CorePlan",
    "__version__",
    "analyze",
    "device_preset",
    "device_presets",
    "export_problem",
    "plan",
    "replay",
    "simulate_plan",
    "synthetic_graphdef",
]

__version__: str

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

def analyze(
    data: bytes,
    loss: str | None = None,
    persistent_bytes: int | None = None,
    separate_buffers: bool = False,
    workspace: str | None = None,
    workspace_profile: list[tuple[str, int]] | None = None,
    bodies: list[tuple[str, int, list[tuple[int, int, int, list[int], int]]]] | None = None,
) -> CoreAnalysis: ...

@final
class CorePlan:
    @property
    def report_json(self) -> str: ...
    def events(
        self,
    ) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.float64], npt.NDArray[np.float64]]: ...
    def timeline(self, which: int) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.uint64]]: ...

def plan(
    data: bytes,
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
) -> CorePlan: ...
def device_preset(name: str) -> str: ...
def device_presets() -> list[str]: ...
def synthetic_graphdef(
    nodes: int, kind: str = "mixed", batch: int = 8, size: int = 32, channels: int = 64
) -> bytes: ...
def export_problem(
    data: bytes,
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
    data: bytes,
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
    data: bytes,
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
