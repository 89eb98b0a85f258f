"""Session-wide test set-up.

TensorFlow fixes its logical devices when it initialises, and pytest runs every test
file in one process, so the CPU is split into a "device" (``/device:CPU:0``) and a "host"
(``/device:CPU:1``) once, here, before any test module builds a model or runs an op.
"""

from __future__ import annotations

import warnings

_CPU_EMULATION_DEVICES = 2


def pytest_configure(config):
    """Split the CPU into two logical devices (swap tests need a host to swap to)."""
    try:
        from hybridplan.runner import setup_cpu_emulation
    except ImportError:  # TensorFlow not installed: the TF-free tests still run
        return
    try:
        setup_cpu_emulation(_CPU_EMULATION_DEVICES)
    except Exception as exc:  # already initialised differently: tests needing it will fail
        warnings.warn(f"CPU emulation not set up: {exc}", RuntimeWarning, stacklevel=1)
