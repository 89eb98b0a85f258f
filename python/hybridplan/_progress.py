"""Progress bars for work that can take more than a couple of seconds.

One bar per command, advanced stage by stage (tracing, planning, rewriting,
writing). Shown on standard error when it is a terminal, never in a pipe or
a log, and silently absent when ``tqdm`` is not installed.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["stages"]


class _Stages:
    def __init__(self, bar: Any):
        self._bar = bar
        self._started = False

    def __call__(self, description: str) -> None:
        """Marks the previous stage done and names the next one."""
        if self._bar is None:
            return
        if self._started:
            self._bar.update()
        self._started = True
        self._bar.set_description_str(description)


@contextmanager
def stages(total: int, enabled: bool = True) -> Iterator[_Stages]:
    """``with stages(3) as stage: stage("tracing"); ...; stage("writing")``."""
    bar = None
    if enabled:
        try:
            from tqdm import tqdm

            # disable=None: off when stderr is not a terminal.
            bar = tqdm(total=total, file=sys.stderr, leave=False, disable=None)
        except ImportError:  # pragma: no cover - tqdm is in the [tf] extra
            bar = None
    s = _Stages(bar)
    try:
        yield s
    finally:
        if bar is not None:
            bar.update(total - bar.n)
            bar.close()
