"""``hybridplan.fit``: the largest input size (or batch) each strategy trains on a device.

The rule: a size fits a strategy when the strategy finds a plan for the step traced at
that size within the budget (the device's memory less :data:`FIT_RESERVE`, as
``budget="auto"``); "none" fits when the unplanned step's simulated peak is within it.

The search, shared by every strategy so that each traced graph is traced once and
planned once per strategy still undecided at that size:

* **Model.** At every size traced, each strategy's *smallest peak* is recorded: the
  unplanned peak for "none", else the ``best_peak`` of a plan asked for one byte, or
  the peak of the plan that fits at the budget when that is lower (or the
  ``best_peak`` of the plan that failed at the budget): a strategy fits at a size
  exactly when that figure is within the budget. It is taken as linear in ``size**dims``
  (2 for images, 3 for volumes, 1 for a batch) through the two sizes traced nearest
  the crossing with the budget (interpolated when they straddle it, else extrapolated;
  through the persistent bytes from one size).
* **Calibrate.** Trace at ``start``; say how many probes are left (two per distinct
  predicted crossing) and about how long, from the first probe's time.
* **Probe,** strategy by strategy from the smallest predicted crossing up (each probe
  also serves, as a nearer sample, the strategies that cross higher): probe below the
  crossing so that it lies in the middle of an interval the tolerance accepts, then at
  the top of that interval; when the model misses twice for a strategy, bisect its
  interval (geometric middle). Nothing failed yet: probe at the predicted crossing
  (double without a model, stop at ``limit``).

A size fits or fails only by the real plan at the budget; the model only picks sizes.
A failure at a size is taken as a failure at every larger one (memory grows with the
size), a fit at a size as a fit at every smaller one. Done when each strategy's interval
(largest size that fits, smallest that does not) is within ``tol`` of its size or one
multiple of the model.

Complexity: about two probes per distinct crossing when the model holds; at worst
O(log2(limit / start) + log2(1 / tol)) per strategy. Each probe is one trace and at most
two plans per strategy.
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
from .errors import BudgetError, HostBudgetError, InvalidArgumentError
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

    def __init__(self, build: Builder, common: dict, cache: Any, say: Any):
        self.build, self.common, self.say = build, common, say
        self.cache = cache
        self.results: dict[tuple[int, str], Any] = {}
        #: The smallest peak strategy s reaches at size n, fitting or not (bytes):
        #: the unplanned peak for "none", else the ``best_peak`` of a plan at 1 byte, or
        #: the peak of the plan that fits at the budget when lower (``_plan``).
        self.reach: dict[tuple[int, str], int] = {}
        #: (peak, persistent bytes) of the unplanned step at each size traced.
        self.peaks: dict[int, tuple[int, int]] = {}
        self.probes: list[tuple[int, float, float]] = []
        #: Seconds per probe that was traced (not read from the cache), trace and plans.
        self.traced: list[float] = []

    def graph(self, n: int) -> tuple[tuple[bytes, str | None], float]:
        """``(GraphDef bytes, loss name)`` at size ``n``, and the seconds it took to
        trace (0 when it came from the cache)."""
        from ._graphio import graph_bytes

        t0 = time.perf_counter()
        if isinstance(self.cache, dict) and n in self.cache:
            return self.cache[n], 0.0
        path = Path(self.cache) / f"{n}.pb" if isinstance(self.cache, (str, Path)) else None
        if path is not None and path.exists():
            loss = path.with_suffix(".loss").read_text() or None
            return (path.read_bytes(), loss), 0.0
        g = graph_bytes(self.build(n))
        if path is not None:
            from ._files import write_all

            # both or neither: a cache entry is never half-written
            write_all({path: g[0], path.with_suffix(".loss"): (g[1] or "").encode()})
        if isinstance(self.cache, dict):
            self.cache[n] = g
        return g, time.perf_counter() - t0

    def probe(self, n: int, which: Sequence[str], note: str = "") -> None:
        todo = [s for s in which if (n, s) not in self.results]
        if not todo:
            return
        self.say(f"{note}size {n}: tracing ...")
        g, t_trace = self.graph(n)
        t0 = time.perf_counter()
        # The unplanned peak on the device planned for (its scratch rule), as plan() sees it.
        a = analyze(g[0], loss=g[1], device=self.common["device"])
        self.peaks[n] = (a.peak_bytes, a.persistent_bytes)
        for s in todo:
            self.results[(n, s)] = self._plan(n, g, s)
        t_plan = time.perf_counter() - t0
        self.probes.append((n, t_trace, t_plan))
        if t_trace > 0:
            self.traced.append(t_trace + t_plan)
        fits = [s for s in todo if self.results[(n, s)] is not None]
        got = f"traced in {t_trace:.1f} s" if t_trace else "from the cache"
        self.say(
            f"{note}size {n}: {got}, planned {len(todo)} in {t_plan:.1f} s; "
            f"fits: {', '.join(fits) or 'none of them'}"
        )

    def _plan(self, n: int, g: tuple[bytes, str | None], s: str) -> Any:
        budget = self.common["budget"]
        data, loss = g
        if s == "none":
            # The unplanned step: planned at its own peak, nothing to do.
            peak = self.reach[(n, s)] = self.peaks[n][0]
            if peak > budget:
                return None
            return plan(data, peak, strategy="swap", loss=loss, **self.rest()).original
        try:
            found = plan(data, budget, strategy=s, loss=loss, **self.rest()).planned
        except HostBudgetError:
            found = None
        except BudgetError as e:
            # Exhausted: the smallest peak the strategy reaches at this size.
            self.reach[(n, s)] = e.best_peak
            return None
        # How far below the budget the strategy could go (the search's model): its
        # smallest peak, from a plan asked for one byte (planning is cheap next to a
        # trace), or the peak of the plan that fits if that is lower (a strategy's
        # rounds differ from budget to budget), so that at every size traced the
        # strategy fits exactly when this figure is within the budget. Only the model
        # uses it; whether a size fits is decided above.
        rest = {**self.rest(), "host_budget": None}
        try:
            least = plan(data, 1, strategy=s, loss=loss, **rest).planned["peak_bytes"]
        except BudgetError as e:
            least = e.best_peak
        if found is not None:
            least = min(least, found["peak_bytes"])
        self.reach[(n, s)] = least
        return found

    def predict(self, s: str, dims: int) -> float | None:
        """Where strategy ``s`` stops fitting: the size at which its smallest peak meets
        the budget, that peak taken as linear in ``size**dims`` (the activations) through
        the two sizes traced nearest the crossing (interpolated between the largest size
        below the budget and the smallest above, else extrapolated from the two nearest;
        from one size, through the persistent bytes). None: no crossing in sight."""
        budget = self.common["budget"]
        pts = sorted((n, r) for (n, t), r in self.reach.items() if t == s)
        below = [(n, r) for n, r in pts if r <= budget]
        above = [(n, r) for n, r in pts if r > budget]
        if below and above and below[-1][0] < above[0][0]:
            (n1, r1), (n2, r2) = below[-1], above[0]
        elif len(below) >= 2 and not above:
            (n1, r1), (n2, r2) = below[-2], below[-1]
        elif len(above) >= 2 and not below:
            (n1, r1), (n2, r2) = above[0], above[1]
        elif len(pts) == 1:
            n1, r1 = pts[0]
            pers = self.peaks[n1][1]
            if r1 <= pers or budget <= pers:
                return None
            return n1 * ((budget - pers) / (r1 - pers)) ** (1 / dims)
        else:
            return None
        u1, u2 = n1**dims, n2**dims
        if r2 <= r1:
            return None
        u = u1 + (budget - r1) * (u2 - u1) / (r2 - r1)
        return u ** (1 / dims) if u > 0 else None

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
    pr = _Prober(build, common, {} if cache is None else cache, say)
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

    def width(n: float) -> int:
        """The widest interval accepted at size ``n``: ``tol`` of it, in whole multiples."""
        return max(mult, mult * int(tol * n // mult))

    def settled(s: str) -> bool:
        lo, hi = ok[s], bad_at[s]
        if lo is None:
            return True  # not even the first size fits
        if hi is None:
            return lo + mult > limit
        return hi - lo <= max(mult, tol * lo)

    def down(x: float) -> int:
        return max(smallest, mult * math.floor(x / mult))

    def up(x: float) -> int:
        return max(smallest, mult * math.ceil(x / mult))

    misses: dict[str, int] = dict.fromkeys(names, 0)

    def choose(s: str) -> tuple[int, bool]:
        """The next size to probe for ``s`` and whether it is expected to fit."""
        lo, hi = ok[s] or lo0, bad_at[s]
        t = pr.predict(s, dims)
        if hi is None and t is None:
            return min(limit, max(down(lo * 2), lo + mult)), True  # no model: double
        if hi is None:
            top = limit + mult  # nothing failed: the limit is the last size to try
        else:
            top = hi
            if t is None or not lo < t < hi or misses[s] >= 2:
                t = math.sqrt(lo * hi)  # the model missed: bisect
        close_up = lo + width(lo)  # fails: settled
        if t <= close_up:
            return min(close_up, top - mult), False
        if hi is not None:
            close_down = up(hi / (1 + tol))  # fits: settled
            while hi - close_down > max(mult, tol * close_down):
                close_down += mult
            if t >= close_down:
                return max(close_down, lo + mult), True
        # Centre the predicted crossing in an interval the next probe can close.
        return min(max(down(t - width(t) / 2), lo + mult), top - mult), True

    # 1. Calibrate: one size, every strategy; the estimate: two probes per crossing.
    pr.probe(lo0, names)
    record(lo0)

    def left() -> str:
        """Probes left and their time at the mean rate of the sizes traced so far."""
        k = estimate()
        if not pr.traced:
            return f"~{k} probes left (time unknown: no size traced yet, all from the cache)"
        per = sum(pr.traced) / len(pr.traced)
        return f"~{k} probes left of ~{per:.0f} s each, ~{k * per:.0f} s"

    def estimate() -> int:
        """Probes left: per distinct predicted crossing, one when a size already traced
        lies within the tolerance below it, else two."""
        need: dict[int, int] = {}
        for s in names:
            if settled(s):
                continue
            t = pr.predict(s, dims)
            lo = ok[s] or lo0
            # Crossings within the tolerance of each other share their probes. From one
            # size the predictions are rough and bunch up: a finer grain then.
            one = sum(1 for n, x in pr.reach if x == s) <= 1
            grain = math.log1p(max(tol, 0.01) / (4 if one else 1))
            key = round(math.log(t) / grain) if t and t > 0 else -1
            need[key] = max(need.get(key, 0), 1 if t and t - lo <= width(lo) else 2)
        return sum(need.values())

    say(
        f"budget {nbytes} bytes on {dev.get('name', 'custom')}; {left()} "
        "(two per size where a strategy stops fitting)"
    )
    # 2. Per strategy, from the smallest predicted crossing up (each probe there gives
    # the strategies with larger crossings a sample nearer theirs): probe where the model
    # puts its crossing, then close the interval within the tolerance.
    for _ in range(400):
        todo = [s for s in names if not settled(s)]
        if not todo:
            break
        s = min(todo, key=lambda s: (pr.predict(s, dims) or math.inf, names.index(s)))
        n, expect = choose(s)
        pr.probe(n, open_at(n), note=f"[{len(pr.probes) + 1}; {left()}] ")
        record(n)
        fitted = pr.results.get((n, s)) is not None
        misses[s] = misses[s] + 1 if fitted != expect else 0
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
    cached = sum(1 for _, t_trace, _ in pr.probes if not t_trace)
    say(
        f"done in {seconds:.0f} s, {len(pr.probes) - cached} sizes traced, "
        f"{cached} read from the cache"
    )
    return Fit(over, str(dev.get("name", "custom")), nbytes, rows, pr.probes, seconds)
