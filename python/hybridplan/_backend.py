"""Which kernels TensorFlow runs here, and so which workspace rule the core applies.

The core sizes each op's kernel scratch by a rule named for the backend that runs it
(``rust/core/src/workspace.rs``): ``"cpu-eigen:THREADS"`` (TensorFlow's own CPU kernels:
oneDNN off), ``"cpu-onednn"`` (with the float types oneDNN does not run on this CPU,
whose ops keep TensorFlow's own kernels), ``"gpu-cudnn:MIB"`` or ``"none"``. :func:`workspace_rule`
picks it: for the ``cpu`` device (CPU emulation) from the running TensorFlow, for a GPU
from ``TF_CUDNN_WORKSPACE_LIMIT_IN_MB`` (docs/devices.md, "Kernel workspace").
"""

from __future__ import annotations

import os

from .errors import InvalidArgumentError

#: The L3 size the core assumes when none is known (``workspace::DEFAULT_L3``).
DEFAULT_L3 = 32 << 20

__all__ = [
    "cpu_workspace_rule",
    "onednn_enabled",
    "onednn_own_kernel_types",
    "onednn_rule",
    "workspace_rule",
]


def onednn_enabled() -> bool:
    """Whether TensorFlow runs oneDNN's CPU kernels in this process (``IsMKLEnabled``).
    Once TensorFlow is imported, its own answer (``_pywrap_util_port``); before, its rule
    read here without importing it (:func:`onednn_rule`), so a ``.pb`` file is analysed
    without TensorFlow."""
    import sys

    if "tensorflow" in sys.modules:
        try:
            from tensorflow.python.util import _pywrap_util_port
        except ImportError:  # a TensorFlow without the port module: its rule
            return onednn_rule()
        return bool(_pywrap_util_port.IsMklEnabled())
    return onednn_rule()


#: The ``/proc/cpuinfo`` flags of the x86 features for which TensorFlow turns oneDNN on
#: by default on Linux (``DefaultOneDnnPolicy``, tensorflow/core/util/util.cc).
ONEDNN_DEFAULT_FLAGS = frozenset(
    {"avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16"}
)


def onednn_rule(env: str | None = None, flags: set[str] | None = None) -> bool:
    """TensorFlow's rule for oneDNN (``IsMklEnabled``, tensorflow/core/util/util.cc):
    ``TF_ENABLE_ONEDNN_OPTS`` (``env``; default: this process's) when it is ``0``,
    ``false``, ``1`` or ``true`` in any case; else on for Linux on x86-64 CPUs with one
    of :data:`ONEDNN_DEFAULT_FLAGS` (``flags``; default: this CPU's) and on an Arm
    Neoverse V1; off elsewhere. The rule of TensorFlow's PyPI wheels (built with
    oneDNN, ``INTEL_MKL``); a build without oneDNN, or Intel's with ``ENABLE_MKL``,
    decides otherwise, and its own answer is taken once it is imported
    (:func:`onednn_enabled`)."""
    import platform
    import sys

    env = os.environ.get("TF_ENABLE_ONEDNN_OPTS") if env is None else env
    if env is not None:
        value = env.lower()
        if value in ("0", "false"):
            return False
        if value in ("1", "true"):
            return True
    if not sys.platform.startswith("linux"):
        return False
    if platform.machine() in ("aarch64", "arm64"):  # an Arm Neoverse V1: maker Arm, part 0xd40
        return _cpu_id("CPU implementer") == "0x41" and _cpu_id("CPU part") == "0xd40"
    flags = cpu_flags() if flags is None else flags
    return bool(flags and ONEDNN_DEFAULT_FLAGS & flags)


def _cpu_id(field: str) -> str | None:
    """Field ``field`` (``CPU implementer``, ``CPU part``) of the first CPU in
    ``/proc/cpuinfo`` (Arm: the fields of ``MIDR_EL1`` TensorFlow reads), or None."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(field):
                    return line.split(":", 1)[1].strip().lower()
    except OSError:
        pass
    return None


def intra_op_threads() -> int:
    """The intra-op threads a Session here runs a kernel with (its config leaves them at
    0): ``TF_NUM_INTRAOP_THREADS`` when set, else the cores this process may run on."""
    env = os.environ.get("TF_NUM_INTRAOP_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def l3_cache_bytes() -> int | None:
    """The L3 cache of CPU 0 as Linux reports it (``/sys/devices/system/cpu/cpu0/cache/
    index3/size``, what Eigen's ``CacheSizes`` reads with ``cpuid``), or None."""
    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index3/size") as f:
            text = f.read().strip()
    except OSError:
        return None
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    digits = text.rstrip("KMGkmg")
    return int(digits) * scale if digits.isdigit() else None


def cpu_flags() -> set[str] | None:
    """The CPU's feature flags as Linux reports them (``flags`` of ``/proc/cpuinfo``,
    the ``cpuid`` bits TensorFlow's ``TestCPUFeature`` reads), or None."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


def onednn_own_kernel_types(flags: set[str] | None = None) -> list[str]:
    """The float types oneDNN does not run on this CPU, whose ops TensorFlow leaves to
    its own kernels with oneDNN on: TensorFlow's ``IsDataTypeSupportedByOneDNNOnThisCPU``
    (tensorflow/core/util/util.cc, oneDNN v3): ``bfloat16`` needs AVX512F or
    AVX-NE-CONVERT, ``half`` AVX512BW with AVX512-FP16 or AMX-FP16, or AVX-NE-CONVERT.
    ``float32`` always runs in oneDNN. Without the flags: none (oneDNN runs every type)."""
    flags = cpu_flags() if flags is None else flags
    if flags is None:
        return []
    ne_convert = "avx_ne_convert" in flags
    bf16 = "avx512f" in flags or ne_convert
    f16 = ("avx512bw" in flags and bool({"avx512_fp16", "amx_fp16"} & flags)) or ne_convert
    return [t for t, ok in (("bfloat16", bf16), ("half", f16)) if not ok]


def cpu_workspace_rule() -> str:
    """The rule of the CPU kernels this TensorFlow runs: ``"cpu-eigen:THREADS[:L3_BYTES]"``
    with oneDNN off; with it on ``"cpu-onednn"``, or ``"cpu-onednn:THREADS:L3:TYPES"``
    when some float types run TensorFlow's own kernels here
    (:func:`onednn_own_kernel_types`)."""
    l3 = l3_cache_bytes()
    if onednn_enabled():
        own = onednn_own_kernel_types()
        if not own:
            return "cpu-onednn"
        return f"cpu-onednn:{intra_op_threads()}:{l3 or DEFAULT_L3}:{','.join(own)}"
    return f"cpu-eigen:{intra_op_threads()}" + (f":{l3}" if l3 else "")


def workspace_rule(workspace: str | None, device: dict | None = None) -> str:
    """Resolves ``workspace`` (``"auto"``, None or a rule) for ``device`` (a device
    model as a dict, as :func:`hybridplan.device_model` returns it).

    ``"auto"`` follows the device model's ``kernels`` field: ``"cpu"`` (the ``cpu``
    preset and every model made from it; also no device at all: an analysis, compared
    with CPU measurements) gets :func:`cpu_workspace_rule`; ``"gpu"`` (the GPU presets,
    and a model that does not say) gets ``"gpu-cudnn:MIB"`` when
    ``TF_CUDNN_WORKSPACE_LIMIT_IN_MB`` is set, else ``"none"`` (TensorFlow's cuDNN
    autotuner then takes its scratch, up to 4 GiB per convolution, from memory outside
    the budget, falling back to other algorithms when it is short); any other value is a
    rule by name. None means ``"none"``.
    """
    if workspace is None:
        return "none"
    if not isinstance(workspace, str):
        raise InvalidArgumentError(
            f"workspace must be a string ('auto', 'none', 'cpu-eigen:THREADS', 'cpu-onednn' "
            f"or 'gpu-cudnn:MIB'), got {type(workspace).__name__}"
        )
    if workspace != "auto":
        return workspace
    kernels = "cpu" if device is None else device.get("kernels", "gpu")
    if kernels == "cpu":
        return cpu_workspace_rule()
    if kernels == "gpu":
        limit = os.environ.get("TF_CUDNN_WORKSPACE_LIMIT_IN_MB", "").strip()
        return f"gpu-cudnn:{limit}" if limit else "none"
    return str(kernels)
