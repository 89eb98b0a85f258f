"""``hybridplan.fit``: the largest input size (or batch) each strategy trains on a device.

The rule: a size fits a strategy when the strategy finds a plan for the step traced at
that size within the budget (the device's memory less :data:`FIT_RESERVE`, as
``budget="auto"``); "none" fits when the unplanned step's simulated peak is within it.

The search, shared by every strategy so that each traced graph is planned once per
strategy and traced once:

1. **Calibrate.** Trace at ``start`` (the smallest size tried), time the trace and the
   planning, and extrapolate the unplanned peak to the size where it meets the budget
   (activations grow as ``size**dims``: 2 for images, 3 for volumes, 1 for a batch);
   say how many probes the search will take and about how long.
2. **Grow.** Double the size (from that guess) until every strategy fails or
   ``limit`` is reached.
3. **Bisect.** While a strategy's interval (largest size that fits, smallest that
   does not) is wider than the precision, probe its geometric midpoint, rounded to the
   model's multiple; a probe is planned for every strategy whose interval holds it.

A failure at a size is taken as a failure at every larger one (memory grows with the
size), a fit at a size as a fit at every smaller one.

Complexity: O(log2(limit / start) + log2(1 / tol)) probes, each one trace and at most
one plan per strategy.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .analysis import analyze
from .errors import BudgetError, InvalidArgumentError
from .planning import AUTO_RESERVE, STRATEGIES, _device_args, plan

__all__ = ["FIT_RESERVE", "Fit", "FitRow", "fit"]

#: Fraction of the device memory a fit leaves free (the same as ``budget="auto"``:
#: allocator fragmentation, convolution workspaces).
FIT_RESERVE = AUTO_RESERVE

#: The model's multiple and its dimensions per size unit, for the built-in workloads.
_SIZE_RULES: dict[str, tuple[int, int, int]] = {
    # name: (multiple, dims, smallest size)
    "resnet50": (32, 2, 32),
    "resnet152": (32, 2, 32),
    "deeplabv3plus": (16, 2, 64),
    "small_cnn": (2, 2, 4),
    "small_resnet": (1, 2, 4),
    "transformer": (1, 1, 8),
}


@dataclass(frozen=True)
class FitRow:
    """One strategy's largest size that fits (``size`` None: not even ``start``).

    ``step_time_s`` and ``peak_bytes`` are the simulator's at that size;
    ``throughput`` is samples per second (batch / step time), ``host_peak_bytes`` the
    swapped bytes held in host memory at once. ``fails_at`` is the smallest size
    tried that did not fit (None: none failed up to ``limit``)."""

    strategy: str
    size: int | None
    step_time_s: float | None
    throughput: float | None
    peak_bytes: int | None
    host_peak_bytes: int | None
    fails_at: int | None


@dataclass
class Fit:
    """What :func:`fit` found: a row per strategy (``"none"`` first), the probes made."""

    over: str
    device: str
    budget: int
    rows: list[FitRow]
    #: (size, seconds to trace, seconds to plan every strategy asked) per probe.
    probes: list[tuple[int, float, float]] = field(default_factory=list)
    seconds: float = 0.0

    def row(self, strategy: str) -> FitRow:
        for r in self.rows:
            if r.strategy == strategy:
                return r
        raise InvalidArgumentError(f"no row for strategy {strategy!r}")

    def table(self) -> str:
        """The rows as a Markdown table."""
        lines = [
            f"| strategy | largest {self.over} | step (s) | samples/s | peak (GiB) | host (GiB) |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for r in self.rows:
            if r.size is None:
                lines.append(f"| {r.strategy} | - | - | - | - | - |")
                continue
            lines.append(
                f"| {r.strategy} | {r.size} | {r.step_time_s:.4g} | {r.throughput:.4g} | "
                f"{r.peak_bytes / 2**30:.2f} | {(r.host_peak_bytes or 0) / 2**30:.2f} |"
            )
        return "\n".join(lines)


Builder = Callable[[int], Any]


def _builder(workload: str | Builder, over: str, fixed: dict) -> tuple[Builder, int, int, int]:
    """(size -> graph, multiple, dims, smallest) for a workload name or a builder."""
    if callable(workload):
        return workload, int(fixed.pop("multiple", 1)), int(fixed.pop("dims", 2)), 1
    if not isinstance(workload, str):
        raise InvalidArgumentError("fit takes a workload name or a callable size -> graph")
    from . import models

    if workload not in models.WORKLOADS:
        raise InvalidArgumentError(
            f"unknown workload {workload!r}; known: {sorted(models.WORKLOADS)}"
        )
    if over == "batch":
        mult, dims, smallest = 1, 1, 1
    elif workload == "unet3d":
        levels = int(fixed.get("levels", 4))
        mult, dims, smallest = 2 ** (levels - 1), 3, 2 ** (levels - 1)
    else:
        mult, dims, smallest = _SIZE_RULES.get(workload, (1, 2, 1))
    mult = int(fixed.pop("multiple", mult))

    def build(n: int) -> Any:
        return models.build(workload, **{over: n}, **fixed).trace()

    return build, mult, dims, smallest


def _default_batch(workload: str | Builder) -> int:
    """The builder's default batch (1 for a callable without one)."""
    import inspect

    if isinstance(workload, str):
        from . import models

        workload = models.WORKLOADS[workload]
    try:
        d = inspect.signature(workload).parameters.get("batch")
    except (TypeError, ValueError):
        return 1
    return int(d.default) if d is not None and isinstance(d.default, int) else 1


def _round(n: float, mult: int, smallest: int) -> int:
    return max(smallest, mult * max(1, round(n / mult)))


class _Prober:
    """Traces and plans, once per (size) and (size, strategy); remembers everything."""

    def __init__(self, build: Builder, names: list[str], common: dict, cache: Any, say: Any):
        self.build, self.names, self.common, self.say = build, names, common, say
        self.cache = cache
        self.results: dict[tuple[int, str], Any] = {}
        #: The smallest peak a strategy reached where it did not fit (bytes).
        self.reach: dict[tuple[int, str], int] = {}
        #: (peak, persistent bytes) of the unplanned step at each size traced.
        self.peaks: dict[int, tuple[int, int]] = {}
        self.probes: list[tuple[int, float, float]] = []

    def graph(self, n: int) -> tuple[tuple[bytes, str | None], float]:
        """``(GraphDef bytes, loss name)`` at size ``n``, and the seconds it took."""
        from ._graphio import graph_bytes

        t0 = time.perf_counter()
        if isinstance(self.cache, dict) and n in self.cache:
            return self.cache[n], 0.0
        path = Path(self.cache) / f"{n}.pb" if isinstance(self.cache, (str, Path)) else None
        if path is not None and path.exists():
            loss = path.with_suffix(".loss").read_text() or None
            g = (path.read_bytes(), loss)
        else:
            g = graph_bytes(self.build(n))
            if path is not None:
                from ._files import write_all

                # both or neither: a cache entry is never half-written
                write_all({path: g[0], path.with_suffix(".loss"): (g[1] or "").encode()})
        if isinstance(self.cache, dict):
            self.cache[n] = g
        return g, time.perf_counter() - t0

    def probe(self, n: int, which: Sequence[str]) -> None:
        todo = [s for s in which if (n, s) not in self.results]
        if not todo:
            return
        self.say(f"size {n}: tracing ...")
        g, t_trace = self.graph(n)
        t0 = time.perf_counter()
        # The unplanned peak on the device planned for (its scratch rule), as plan() sees it.
        a = analyze(g[0], loss=g[1], device=self.common["device"])
        self.peaks[n] = (a.peak_bytes, a.persistent_bytes)
        for s in todo:
            self.results[(n, s)] = self._plan(n, g, s)
        t_plan = time.perf_counter() - t0
        self.probes.append((n, t_trace, t_plan))
        fits = [s for s in todo if self.results[(n, s)] is not None]
        self.say(
            f"size {n}: traced in {t_trace:.1f} s, planned {len(todo)} in {t_plan:.1f} s; "
            f"fits: {', '.join(fits) or 'none of them'}"
        )

    def _plan(self, n: int, g: tuple[bytes, str | None], s: str) -> Any:
        budget = self.common["budget"]
        data, loss = g
        if s == "none":
            # The unplanned step: planned at its own peak, nothing to do.
            peak = self.peaks[n][0]
            if peak > budget:
                self.reach[(n, s)] = peak
                return None
            return plan(data, peak, strategy="swap", loss=loss, **self.rest()).original
        try:
            return plan(data, budget, strategy=s, loss=loss, **self.rest()).planned
        except BudgetError as e:
            self.reach[(n, s)] = e.best_peak
            return None

    def guess(self, s: str, lo: int, hi: int, dims: int) -> float:
        """Where strategy ``s`` stops fitting between ``lo`` (fits) and ``hi`` (does
        not): the fraction of the unplanned activations it kept at ``hi`` taken as
        constant, the activations as growing with ``size**dims``."""
        budget = self.common["budget"]
        reach = self.reach.get((hi, s))
        peak, pers = self.peaks[hi]
        act = peak - pers
        if reach is None or act <= 0 or reach <= pers or budget <= pers:
            return math.sqrt(lo * hi)
        kept = (reach - pers) / act
        return hi * ((budget - pers) / (kept * act)) ** (1 / dims)

    def rest(self) -> dict:
        return {k: v for k, v in self.common.items() if k != "budget"}


def fit(
    workload: str | Builder,
    *,
    device: str | dict = "v100-nvlink2",
    over: str = "size",
    strategy: str | Sequence[str] | None = None,
    budget: Any = None,
    host_budget: Any = "auto",
    start: int | None = None,
    limit: int = 1 << 16,
    tol: float = 0.03,
    cache: dict | str | Path | None = None,
    progress: bool = True,
    **fixed: Any,
) -> Fit:
    """The largest input size (or batch) for which each strategy finds a plan.

    Args:
        workload: a built-in workload name (``hybridplan.models``: ``"resnet50"``,
            ``"unet3d"`` ...) or a callable ``size -> graph`` (a traced step, a
            GraphDef or its bytes); pass ``multiple=``, ``dims=`` (how the activations
            grow with the size) and ``batch=`` (samples per step) for a callable.
        device: a device preset, dict or file (as :func:`hybridplan.plan`).
        over: ``"size"`` (image side, volume side, sequence length) or ``"batch"``.
        strategy: one strategy, several, or None for every one; ``"none"`` (no plan)
            is always reported first.
        budget: device bytes; None: the device's memory less :data:`FIT_RESERVE`.
        host_budget: as :func:`hybridplan.plan`.
        start: the smallest size tried (default: the model's smallest).
        limit: the largest size tried.
        tol: the search stops when a strategy's interval is within this fraction of
            its size (or one multiple of the model).
        cache: a dict or a directory of traced graphs by size, shared between calls
            (one trace serves every device and strategy).
        progress: print what is traced and planned to standard error.
        **fixed: the builder's other arguments (``batch=2`` when ``over="size"``...).

    Returns:
        :class:`Fit`: per strategy the largest size, its step time, throughput, peak
        and host peak; the probes and the seconds taken.

    Example:
        >>> f = hybridplan.fit("resnet50", device="v100-nvlink2", over="size")  # doctest: +SKIP
        >>> print(f.table())  # doctest: +SKIP
    """
    t_start = time.perf_counter()
    if over not in ("size", "batch"):
        raise InvalidArgumentError(f"over must be 'size' or 'batch', got {over!r}")
    if strategy is None:
        names = list(STRATEGIES)
    else:
        names = [strategy] if isinstance(strategy, str) else list(strategy)
    bad = [s for s in names if s not in STRATEGIES]
    if bad:
        raise InvalidArgumentError(f"unknown strategy {bad[0]!r}: use one of {STRATEGIES}")
    if not 0 <= tol < 1:
        raise InvalidArgumentError(f"tol must be in [0, 1), got {tol}")
    names = ["none", *[s for s in names if s != "none"]]
    _, _, dev = _device_args(device)
    if budget is None:
        mem = int(dev.get("memory_bytes", 0))
        if mem <= 0:
            raise InvalidArgumentError("fit needs budget= or a device with memory_bytes")
        nbytes = int(mem * (1 - FIT_RESERVE))
    else:
        from .planning import parse_bytes

        nbytes = parse_bytes(budget)
    build, mult, dims, smallest = _builder(workload, over, dict(fixed))
    default_batch = _default_batch(workload)
    lo0 = _round(start if start is not None else smallest, mult, smallest)
    if limit < lo0:
        raise InvalidArgumentError(f"limit {limit} is below the first size tried, {lo0}")

    def say(msg: str) -> None:
        if progress:
            print(f"fit: {msg}", file=sys.stderr, flush=True)

    common = {"budget": nbytes, "device": device, "host_budget": host_budget}
    pr = _Prober(build, names, common, {} if cache is None else cache, say)
    ok: dict[str, int | None] = dict.fromkeys(names)
    bad_at: dict[str, int | None] = dict.fromkeys(names)

    def record(n: int) -> None:
        for s in names:
            if (n, s) not in pr.results:
                continue
            if pr.results[(n, s)] is not None:
                if ok[s] is None or n > ok[s]:
                    ok[s] = n
            elif bad_at[s] is None or n < bad_at[s]:
                bad_at[s] = n

    def open_at(n: int) -> list[str]:
        """Strategies whose interval holds ``n`` (not settled by a probe before)."""
        return [
            s
            for s in names
            if (ok[s] is None or ok[s] < n) and (bad_at[s] is None or n < bad_at[s])
        ]

    # 1. Calibrate.
    pr.probe(lo0, names)
    record(lo0)
    (data0, loss0), _ = pr.graph(lo0)
    a0 = analyze(data0, loss=loss0, device=device)
    act0 = max(a0.peak_bytes - a0.persistent_bytes, 1)
    room = max(nbytes - a0.persistent_bytes, 1)
    guess = _round(min(limit, lo0 * (room / act0) ** (1 / dims)), mult, smallest)
    grow = max(0, math.ceil(math.log2(max(limit / max(guess, lo0), 1.0))))
    bisect = max(1, math.ceil(math.log2(max(1 / max(tol, 1e-6), 1.0))))
    n_probes = min(grow, 3) + 1 + bisect
    per = sum(t for _, t, _ in pr.probes) + sum(u for *_, u in pr.probes)
    say(
        f"budget {nbytes} bytes on {dev.get('name', 'custom')}; the unplanned peak meets it "
        f"near {over} {guess}; about {n_probes} more probes of ~{per:.0f} s each "
        f"(~{n_probes * per:.0f} s)"
    )
    # 2. Grow: from the guess (at least one multiple above the start), doubling.
    n = max(guess, lo0 + mult)
    while n <= limit:
        which = open_at(n)
        if not which:
            break
        pr.probe(n, which)
        record(n)
        if all(bad_at[s] is not None for s in names):
            break
        n = _round(n * 2, mult, smallest)
    # 3. Bisect the widest open interval first; every probe serves each interval holding it.
    for _ in range(200):
        widest, best = None, 0.0
        for s in names:
            lo, hi = ok[s], bad_at[s]
            if lo is None or hi is None:
                continue
            if hi - lo <= max(mult, tol * lo):
                continue
            w = hi / lo
            if w > best:
                widest, best = s, w
        if widest is None:
            break
        lo, hi = ok[widest], bad_at[widest]
        # The model's guess, pulled a fifth of the way towards the geometric middle
        # (the guess is a little optimistic where the strategy keeps more at smaller
        # sizes), so that an interval shrinks by a fifth at least.
        g = pr.guess(widest, lo, hi, dims)
        mid = math.sqrt(lo * hi)
        m = _round(min(max(0.8 * g + 0.2 * mid, lo), hi), mult, smallest)
        if m <= lo:
            m = lo + mult
        if m >= hi:
            bad_at[widest] = lo + mult  # no multiple strictly between
            continue
        pr.probe(m, open_at(m))
        record(m)
    rows = []
    for s in names:
        size = ok[s]
        fig = pr.results.get((size, s)) if size is not None else None
        if fig is None:
            rows.append(FitRow(s, None, None, None, None, None, bad_at[s]))
            continue
        samples = fixed.get("batch", default_batch) if over == "size" else size
        rows.append(
            FitRow(
                s,
                size,
                fig["step_time_s"],
                samples / fig["step_time_s"] if fig["step_time_s"] > 0 else float("inf"),
                fig["peak_bytes"],
                fig["host_peak_bytes"],
                bad_at[s],
            )
        )
    seconds = time.perf_counter() - t_start
    say(f"done in {seconds:.0f} s, {len(pr.probes)} sizes traced")
    return Fit(over, str(dev.get("name", "custom")), nbytes, rows, pr.probes, seconds)
