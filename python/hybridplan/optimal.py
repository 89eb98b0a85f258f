"""``strategy="optimal"``: an exact mixed-integer plan for small graphs.

The core exports the problem (``_core.export_problem``): the ops on their
fixed schedule with their times, every buffer's live interval, the swap
candidates, which ops may be cloned, and the link. This module writes one
mixed-integer linear program over it, solves it with HiGHS
(``scipy.optimize.milp``), turns the solution into the ordinary plan format
and has the core's simulator judge it (``_core.simulate_plan``), exactly as
every other strategy's plan is judged.

# The plan space
Schedule positions are the stages; after each op there is a *slot* where
recompute clones may run. Every swap candidate (a buffer idle between an
early and a late read, the planners' rule) gets exactly one *source* for its
late reads: keep the original, swap it (out after its producer, one swap-in
triggered by any op between the last early read and the first late read), or
a clone of its producer in any slot in that window. A clone reads its inputs
from their original while that is still alive, else from the input's own
source, which must exist by then: a kept original (its life is extended), a
swap-in, or an earlier clone (chains of clones are recomputed segments).
Each forward op is cloned at most once; an op whose clone exists serves all
of its outputs' late reads. Triggers follow the planners' rule (never a
source, never fusible with a reader: ``plan/trigger.rs``).

# The model (every constraint the simulator's, over the fixed order)
- *Time*: each op starts after the previous item of the compute stream and
  after the swap-ins it reads; clones run in schedule order in their slot;
  the device-to-host engine serves swap-outs in producer order, the
  host-to-device engine swap-ins in trigger order, each copy ``latency +
  bytes / bandwidth``; a swap-out must end before its swap-in's trigger ends
  (so the host-to-device queue order is the trigger order, as in the
  simulator). The objective is the step's end: the last op or copy.
- *Memory* at every op and every slot: persistent bytes, every buffer's
  early life, late copies from their source's start to their last reader
  (clones included), clone outputs in their slot, and a swapped original
  until its swap-out ends (a binary per op: ``end > op start``).

# Where it and the simulator differ (see docs/optimality.md)
- The link is full duplex in the model: while both engines move data the
  simulator slows each by ``duplex_factor``; a plan that overlaps opposite
  copies is predicted faster than simulated.
- Memory is an upper bound: a swap-in's copy counts from its trigger's end
  (the simulator: from the copy's start, later when the engine is busy), and
  a slot counts every clone it runs together. So the simulator never finds a
  higher peak, and a plan the simulator would accept can be refused.

# Complexity
Building the model is O(C * N + R * N + E) for C candidates, R clonable
ops, N ops and E edges; the solver's time is exponential in the worst case,
so graphs above ``MAX_NODES`` are refused and the solver stops at
``time_limit`` seconds with its best plan (reported with its gap).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import BudgetError, HybridplanError, InvalidArgumentError

__all__ = ["MAX_NODES", "solve_problem"]

#: Largest graph (nodes) the exact solver takes.
MAX_NODES = 160
_US = 1e6  # seconds -> microseconds (the model's time unit)
_MIB = float(1 << 20)  # bytes -> MiB (the model's memory unit)


# ----------------------------------------------------------------------------- phase 1: facts
@dataclass
class _Facts:
    """The exported problem with what the model needs derived from it."""

    p: dict
    n: int
    pos: list[int]
    cost: list[float]  # op time at each position, microseconds
    early: dict[int, int]  # buffer -> last position reading its original
    cand: dict[int, list[int]]  # candidate -> late reader positions
    late_nodes: dict[int, list[int]]
    swap_slots: dict[int, list[int]]  # candidate -> allowed swap-in triggers
    clone_slots: dict[int, list[int]]  # clonable node -> allowed slots
    d_out: dict[int, float] = field(default_factory=dict)
    d_in: dict[int, float] = field(default_factory=dict)


def _facts(p: dict) -> _Facts:
    order = p["order"]
    n = len(order)
    pos = [0] * len(p["nodes"])
    for k, v in enumerate(order):
        pos[v] = k
    cost = [p["nodes"][v]["time_s"] * _US for v in order]
    ts = p["tensors"]
    early = {t: x["last_use"] for t, x in enumerate(ts) if x["owner"] == t and x["bytes"] > 0}
    cand, late_nodes = {}, {}
    for c in p["candidates"]:
        t = c["tensor"]
        early[t] = c["last_early"]
        cand[t] = [r for r, _ in c["late"]]
        late_nodes[t] = sorted({v for _, v in c["late"]})
    f = _Facts(p, n, pos, cost, early, cand, late_nodes, {}, {})
    for t in cand:
        lo, hi = early[t], cand[t][0] - 1
        f.swap_slots[t] = [j for j in range(lo, hi + 1) if _safe(f, j, late_nodes[t])]
        b = ts[t]["bytes"]
        f.d_out[t] = (p["link"]["latency_s"] + b / p["link"]["d2h_bytes_per_s"]) * _US
        f.d_in[t] = (p["link"]["latency_s"] + b / p["link"]["h2d_bytes_per_s"]) * _US
    f.clone_slots = _clone_slots(f)
    return f


def _safe(f: _Facts, j: int, readers: list[int]) -> bool:
    """The planners' trigger rule: not a source, shares no input with a reader, feeds none."""
    nodes = f.p["nodes"]
    v = f.p["order"][j]
    if nodes[v]["source"] or v in readers:
        return False
    ins = {t for r in readers for t in nodes[r]["inputs"]}
    if ins.intersection(nodes[v]["inputs"]):
        return False
    return not any(
        r in f.p["tensors"][o]["consumers"] for o in nodes[v]["outputs"] for r in readers
    )


def _clonable(f: _Facts, v: int) -> bool:
    node, ts = f.p["nodes"][v], f.p["tensors"]
    if not node["recomputable"]:
        return False
    for t in node["inputs"] + node["outputs"]:
        o = ts[t]["owner"]
        if o != t and ts[o]["bytes"] > 0:
            return False  # reads or makes an alias of a buffer: not modelled
    return any(ts[t]["bytes"] > 0 for t in node["outputs"])


def _clone_slots(f: _Facts) -> dict[int, list[int]]:
    """Slots where a clone of each clonable node can serve a late read or a
    later clone, in reverse schedule order (successors first)."""
    nodes, ts = f.p["nodes"], f.p["tensors"]
    slots: dict[int, list[int]] = {}
    for v in reversed(f.p["order"]):
        if not _clonable(f, v):
            continue
        outs = [t for t in nodes[v]["outputs"] if ts[t]["bytes"] > 0]
        lo = max(f.early[t] for t in outs)
        cands = [t for t in outs if t in f.cand]
        if cands:
            hi = min(f.cand[t][0] for t in cands) - 1
            readers = sorted({r for t in cands for r in f.late_nodes[t]})
            ok = [s for s in range(lo, hi + 1) if _safe(f, s, readers)]
        else:
            reach = [s for t in outs for w in ts[t]["consumers"] for s in slots.get(w, [])]
            ok = list(range(lo, max(reach) + 1)) if reach else []
        if ok:
            slots[v] = ok
    return slots


# ----------------------------------------------------------------------------- phase 2: model
class _Lp:
    """A sparse MILP under construction: variables, rows ``lo <= a.x <= hi``, cost."""

    def __init__(self) -> None:
        self.lb: list[float] = []
        self.ub: list[float] = []
        self.integer: list[int] = []
        self.rows: list[tuple[dict[int, float], float, float]] = []

    def var(self, lb: float = 0.0, ub: float = math.inf, integer: bool = False) -> int:
        self.lb.append(lb)
        self.ub.append(ub)
        self.integer.append(int(integer))
        return len(self.lb) - 1

    def row(self, coef: dict[int, float], lo: float = -math.inf, hi: float = math.inf) -> None:
        self.rows.append((coef, lo, hi))


def _geq(lp: _Lp, terms: list[tuple[int, float]], rhs: float) -> None:
    """sum(c * x) >= rhs, merging repeated variables."""
    coef: dict[int, float] = {}
    for i, c in terms:
        coef[i] = coef.get(i, 0.0) + c
    lp.row(coef, lo=rhs)


@dataclass
class _Vars:
    keep: dict[int, int] = field(default_factory=dict)  # buffer -> binary
    sw: dict[tuple[int, int], int] = field(default_factory=dict)  # (cand, trigger pos)
    rc: dict[tuple[int, int], int] = field(default_factory=dict)  # (node, slot)
    start: list[int] = field(default_factory=list)  # op start at each position
    end: int = -1


class _Model:
    """Writes the MILP of one problem and budget (phases: sources, reads, memory, time)."""

    def __init__(self, f: _Facts, budget: int):
        self.f, self.budget = f, budget
        self.lp = _Lp()
        self.v = _Vars()
        self.horizon = self._horizon()
        self.started: dict[int, dict[int, list[tuple[int, float]]]] = {}
        self.need: dict[int, dict[int, int]] = {}  # buffer -> point -> need var
        self.present: dict[int, dict[int, int]] = {}  # buffer -> point -> presence var
        self.held: dict[tuple[int, int], int] = {}  # (cand, pos) -> swap-out not done

    def _horizon(self) -> float:
        f = self.f
        clone = sum(f.p["nodes"][v]["time_s"] * _US for v in f.clone_slots)
        return sum(f.cost) + clone + sum(f.d_out.values()) + sum(f.d_in.values()) + 1.0

    def build(self) -> _Lp:
        self._sources()
        self._reads()
        self._memory()
        self._time()
        return self.lp

    # sources ----------------------------------------------------------------------------
    def _producer(self, t: int) -> int:
        return self.f.p["tensors"][t]["node"]

    def _sources(self) -> None:
        f, lp, v = self.f, self.lp, self.v
        for node, slots in f.clone_slots.items():
            for s in slots:
                v.rc[node, s] = lp.var(0, 1, True)
            lp.row({v.rc[node, s]: 1.0 for s in slots}, hi=1.0)
        self._useful_clones()
        for t in f.cand:
            for j in f.swap_slots[t]:
                v.sw[t, j] = lp.var(0, 1, True)
        for t in f.early:
            v.keep[t] = lp.var(0, 1, True)
            terms = {v.keep[t]: 1.0}
            terms.update({v.sw[t, j]: 1.0 for j in f.swap_slots.get(t, [])})
            p = self._producer(t)
            terms.update({v.rc[p, s]: 1.0 for s in f.clone_slots.get(p, [])})
            if t in f.cand:
                lp.row(terms, lo=1.0, hi=1.0)
            else:
                lp.row(terms, hi=1.0)
        # started[t][point]: the source of t's late copy exists at that point
        for t in f.early:
            ev: list[tuple[int, int]] = [(2 * j + 1, v.sw[t, j]) for j in f.swap_slots.get(t, [])]
            p = self._producer(t)
            ev += [(2 * s + 1, v.rc[p, s]) for s in f.clone_slots.get(p, [])]
            self.started[t] = {-1: [(v.keep[t], 1.0)]}
            for q, x in sorted(ev):
                self.started[t].setdefault(q, []).append((x, 1.0))

    def _useful_clones(self) -> None:
        """A clone that serves no late read must feed a later clone: the plan
        format has no clone without readers (and an idle clone would only
        delay the step to let copies finish)."""
        f, lp, v = self.f, self.lp, self.v
        ts, nodes = f.p["tensors"], f.p["nodes"]
        for node, slots in f.clone_slots.items():
            outs = [t for t in nodes[node]["outputs"] if t in f.early]
            if any(t in f.cand for t in outs):
                continue
            for s in slots:
                row = {v.rc[node, s]: 1.0}
                for t in outs:
                    for w in set(ts[t]["consumers"]):
                        for s2 in f.clone_slots.get(w, []):
                            if s2 >= s and f.early[t] <= s2:
                                row[v.rc[w, s2]] = row.get(v.rc[w, s2], 0.0) - 1.0
                lp.row(row, hi=0.0)

    def _started_at(self, t: int, q: int) -> list[tuple[int, float]]:
        return [x for k, xs in self.started[t].items() if k <= q for x in xs]

    # reads --------------------------------------------------------------------------------
    def _need(self, t: int, q: int) -> int:
        d = self.need.setdefault(t, {})
        if q not in d:
            d[q] = self.lp.var(0, 1)
        return d[q]

    def _reads(self) -> None:
        """Late reads and clone reads: the source must exist; the copy must be present."""
        f, lp, v = self.f, self.lp, self.v
        for t, rs in f.cand.items():
            for r in rs:
                lp.row({self._need(t, 2 * r): 1.0}, lo=1.0)
        nodes = f.p["nodes"]
        for (w, s), x in v.rc.items():
            for t in set(nodes[w]["inputs"]):
                if t not in f.early or f.early[t] > s:
                    continue  # no buffer, or the original is still alive then
                _geq(lp, [*self._started_at(t, 2 * s + 1), (x, -1.0)], 0.0)
                _geq(lp, [(self._need(t, 2 * s + 1), 1.0), (x, -1.0)], 0.0)
        for t, d in self.need.items():
            lo = 2 * f.early[t] + 1
            top = max(d)
            pts = list(range(lo, top + 1))
            need = [d.get(q) if q in d else self._need(t, q) for q in pts]
            for a, b in itertools.pairwise(need):
                _geq(lp, [(a, 1.0), (b, -1.0)], 0.0)  # needed later -> needed now
            pres = self.present.setdefault(t, {})
            for q, nq in zip(pts, need, strict=False):
                pres[q] = lp.var(0, 1)
                # present >= need + started - 1
                _geq(lp, [(pres[q], 1.0), (nq, -1.0), *_neg(self._started_at(t, q))], -1.0)
        for (w, s), x in v.rc.items():  # a clone's outputs exist in its slot
            for t in nodes[w]["outputs"]:
                if t in f.early:
                    q = 2 * s + 1
                    pres = self.present.setdefault(t, {})
                    if q not in pres:
                        pres[q] = lp.var(0, 1)
                    _geq(lp, [(pres[q], 1.0), (x, -1.0)], 0.0)

    # memory -------------------------------------------------------------------------------
    def _memory(self) -> None:
        f, lp, _v = self.f, self.lp, self.v
        ts = f.p["tensors"]
        base = np.zeros(2 * f.n)
        base += f.p["persistent_bytes"]
        for t, e in f.early.items():
            base[2 * ts[t]["produce"] : 2 * e + 1] += ts[t]["bytes"]
        terms: list[dict[int, float]] = [{} for _ in range(2 * f.n)]
        for t, pres in self.present.items():
            for q, x in pres.items():
                terms[q][x] = terms[q].get(x, 0.0) + ts[t]["bytes"] / _MIB
        for t in f.cand:
            slots = f.swap_slots[t]
            if not slots:
                continue
            for k in range(f.early[t] + 1, max(slots) + 1):
                h = self.held[t, k] = lp.var(0, 1, True)
                for q in (2 * k, 2 * k + 1):
                    terms[q][h] = terms[q].get(h, 0.0) + ts[t]["bytes"] / _MIB
        cap = (self.budget - 4096) / _MIB
        for q in range(2 * f.n):
            lp.row(terms[q], hi=cap - base[q] / _MIB)

    # time -----------------------------------------------------------------------------------
    def _time(self) -> None:
        f, lp, v, big = self.f, self.lp, self.v, self.horizon
        v.start = [lp.var(0, big) for _ in range(f.n)]
        by_slot: dict[int, list[int]] = {}
        for node, slots in f.clone_slots.items():
            for s in slots:
                by_slot.setdefault(s, []).append(node)
        swapped = {t: [(v.sw[t, j], 1.0) for j in f.swap_slots[t]] for t in f.cand}
        s_in = {t: lp.var(0, big) for t in f.cand}
        e_in = {t: lp.var(0, big) for t in f.cand}
        for t in f.cand:  # e_in = s_in + d_in * swapped
            lp.row(
                {e_in[t]: 1.0, s_in[t]: -1.0, **{x: -f.d_in[t] for x, _ in swapped[t]}},
                lo=0.0,
                hi=0.0,
            )
        readers: dict[int, list[int]] = {}
        for t, rs in f.cand.items():
            for r in rs:
                readers.setdefault(r, []).append(t)
        nodes = f.p["nodes"]
        prev_end: list[tuple[int, float]] = []  # terms of the previous item's end
        const = 0.0
        for k in range(f.n):
            a = v.start[k]
            if k > 0:
                _geq(lp, [(a, 1.0), *_neg(prev_end)], const)
            for t in readers.get(k, []):
                _geq(lp, [(a, 1.0), (e_in[t], -1.0)], 0.0)
            prev_end, const = [(v.start[k], 1.0)], f.cost[k]
            for w in sorted(by_slot.get(k, []), key=lambda u: f.pos[u]):
                x = v.rc[w, k]
                cs = lp.var(0, big)
                _geq(lp, [(cs, 1.0), *_neg(prev_end)], const)
                for t in set(nodes[w]["inputs"]):
                    if t in f.cand and f.early[t] <= k:  # waits for a swap-in it reads
                        _geq(lp, [(cs, 1.0), (e_in[t], -1.0), (x, -big)], -big)
                prev_end, const = [(cs, 1.0), (x, nodes[w]["time_s"] * _US)], 0.0
        v.end = lp.var(0, big)
        _geq(lp, [(v.end, 1.0), *_neg(prev_end)], const)
        self._no_stall_starts(by_slot)
        self._link(s_in, e_in, swapped)

    def _no_stall_starts(self, by_slot: dict[int, list[int]]) -> None:
        """least[k]: when op k would start with no stall (its ops and the
        clones before it). Swap-out ends are compared with it, not with the
        op's start, which the solver could move later at no cost where a
        stall follows and so pretend a copy had ended."""
        f, lp, v = self.f, self.lp, self.v
        nodes = f.p["nodes"]
        self.least = [lp.var(0, self.horizon) for _ in range(f.n)]
        lp.row({self.least[0]: 1.0}, lo=0.0, hi=0.0)
        for k in range(1, f.n):
            row = {self.least[k]: 1.0, self.least[k - 1]: -1.0}
            for w in by_slot.get(k - 1, []):
                row[v.rc[w, k - 1]] = -nodes[w]["time_s"] * _US
            lp.row(row, lo=f.cost[k - 1], hi=f.cost[k - 1])

    def _link(self, s_in: dict, e_in: dict, swapped: dict) -> None:
        f, lp, v, big = self.f, self.lp, self.v, self.horizon
        ts = f.p["tensors"]
        a = v.start
        # Device-to-host: swap-outs in producer order, FIFO, one at a time.
        free = None
        for t in sorted(f.cand, key=lambda t: (ts[t]["produce"], t)):
            if not f.swap_slots[t]:
                continue
            on = swapped[t]
            s_out, e_out = lp.var(0, big), lp.var(0, big)
            pk = ts[t]["produce"]
            # s_out >= producer end when swapped
            _geq(lp, [(s_out, 1.0), (a[pk], -1.0), *_scale(on, -big)], f.cost[pk] - big)
            if free is not None:
                _geq(lp, [(s_out, 1.0), (free, -1.0), *_scale(on, -big)], -big)
            lp.row({e_out: 1.0, s_out: -1.0, **{x: -f.d_out[t] for x, _ in on}}, lo=0.0, hi=0.0)
            nxt = lp.var(0, big)
            if free is not None:
                _geq(lp, [(nxt, 1.0), (free, -1.0)], 0.0)
            _geq(lp, [(nxt, 1.0), (e_out, -1.0), *_scale(on, -big)], -big)
            free = nxt
            for j in f.swap_slots[t]:  # the swap-out ends before the trigger ends
                _geq(lp, [(a[j], 1.0), (e_out, -1.0), (v.sw[t, j], -big)], -big - f.cost[j])
            for k in range(f.early[t] + 1, max(f.swap_slots[t]) + 1):
                # held[t, k] = 1 when the swap-out may end after op k starts
                h = self.held[t, k]
                _geq(lp, [(h, big), (e_out, -1.0), (self.least[k], 1.0), *_scale(on, -big)], -big)
        if free is not None:
            _geq(lp, [(v.end, 1.0), (free, -1.0)], 0.0)
        # Host-to-device: swap-ins in trigger order, FIFO, one at a time.
        free = None
        pairs = sorted((j, t) for t in f.cand for j in f.swap_slots[t])
        for j, t in pairs:
            x = v.sw[t, j]
            _geq(lp, [(s_in[t], 1.0), (a[j], -1.0), (x, -big)], f.cost[j] - big)
            if free is not None:
                _geq(lp, [(s_in[t], 1.0), (free, -1.0), (x, -big)], -big)
            nxt = lp.var(0, big)
            if free is not None:
                _geq(lp, [(nxt, 1.0), (free, -1.0)], 0.0)
            _geq(lp, [(nxt, 1.0), (e_in[t], -1.0), (x, -big)], -big)
            free = nxt
        if free is not None:
            _geq(lp, [(v.end, 1.0), (free, -1.0)], 0.0)


def _neg(terms: list[tuple[int, float]]) -> list[tuple[int, float]]:
    return [(i, -c) for i, c in terms]


def _scale(terms: list[tuple[int, float]], k: float) -> list[tuple[int, float]]:
    return [(i, c * k) for i, c in terms]


# ----------------------------------------------------------------------------- phase 3: solve
@dataclass
class _Solution:
    status: str
    x: np.ndarray
    objective_us: float
    gap: float
    seconds: float
    size: dict[str, int]


def _solve(lp: _Lp, objective: int, time_limit: float) -> _Solution | None:
    """HiGHS through scipy; None when the model is infeasible."""
    try:
        from scipy.optimize import Bounds, LinearConstraint, milp
        from scipy.sparse import coo_array
    except ImportError:
        raise InvalidArgumentError(
            "strategy='optimal' needs scipy (HiGHS): pip install 'hybridplan[optimal]'"
        ) from None
    import time

    rows, cols, vals, lo, hi = [], [], [], [], []
    for i, (coef, a, b) in enumerate(lp.rows):
        for j, c in coef.items():
            if c != 0.0:
                rows.append(i)
                cols.append(j)
                vals.append(c)
        lo.append(a)
        hi.append(b)
    nv = len(lp.lb)
    mat = coo_array((vals, (rows, cols)), shape=(len(lp.rows), nv)).tocsr()
    c = np.zeros(nv)
    c[objective] = 1.0
    t0 = time.perf_counter()
    res = milp(
        c,
        constraints=LinearConstraint(mat, lo, hi),
        integrality=np.array(lp.integer),
        bounds=Bounds(lp.lb, lp.ub),
        options={"time_limit": float(time_limit), "mip_rel_gap": 1e-6, "presolve": True},
    )
    seconds = time.perf_counter() - t0
    size = {"variables": nv, "binaries": int(sum(lp.integer)), "constraints": len(lp.rows)}
    if res.x is None:
        if res.status == 2:
            return None
        raise HybridplanError(
            f"the exact solver found no plan within time_limit={time_limit} s "
            f"({res.message}); raise time_limit or use strategy='hybrid'"
        )
    status = "optimal" if res.status == 0 else "time limit"
    gap = float(getattr(res, "mip_gap", 0.0) or 0.0)
    return _Solution(status, res.x, float(res.fun), gap, seconds, size)


# ----------------------------------------------------------------------------- phase 4: plan
def _to_plan(f: _Facts, v: _Vars, x: np.ndarray) -> dict:
    """The chosen sources in the core's plan format (swaps by tensor, recomputes
    by (trigger position, node position): the simulator's queue orders)."""
    order, nodes = f.p["order"], f.p["nodes"]
    sw = {t: j for (t, j), i in v.sw.items() if x[i] > 0.5}
    rc = {w: s for (w, s), i in v.rc.items() if x[i] > 0.5}
    swaps = {
        t: {
            "tensor": t,
            "after": f.p["tensors"][t]["node"],
            "ins": [{"trigger": order[j], "consumers": f.late_nodes[t], "clone_consumers": []}],
        }
        for t, j in sorted(sw.items())
    }
    recs = {
        w: {"nodes": [w], "trigger": order[s], "consumers": [], "clone_consumers": []}
        for w, s in rc.items()
    }
    for w in rc:
        for t in nodes[w]["outputs"]:
            recs[w]["consumers"] += f.late_nodes.get(t, [])
    for w, s in rc.items():
        for t in sorted(set(nodes[w]["inputs"])):
            if t not in f.early or f.early[t] > s:
                continue
            p = f.p["tensors"][t]["node"]
            if t in sw:
                swaps[t]["ins"][0]["clone_consumers"].append(w)
            elif p in rc:
                recs[p]["clone_consumers"].append(w)
    for r in recs.values():
        r["consumers"] = sorted(set(r["consumers"]))
        r["clone_consumers"] = sorted(set(r["clone_consumers"]))
    for sw_ in swaps.values():
        sw_["ins"][0]["clone_consumers"].sort()
    used = [w for w in rc if recs[w]["consumers"] or recs[w]["clone_consumers"]]
    used.sort(key=lambda w: (rc[w], f.pos[w]))
    return {"swaps": list(swaps.values()), "recomputes": [recs[w] for w in used]}


# ----------------------------------------------------------------------------- entry
def solve_problem(problem: dict, budget: int, time_limit: float) -> tuple[dict, dict]:
    """The optimal plan (core plan format) of an exported problem, and the solver's figures.

    Raises:
        InvalidArgumentError: the graph has more than ``MAX_NODES`` nodes, or
            scipy is missing.
        BudgetError: no plan of the plan space fits the budget.
        HybridplanError: no plan was found within ``time_limit`` seconds.
    """
    n = len(problem["order"])
    if n > MAX_NODES:
        raise InvalidArgumentError(
            f"strategy='optimal' solves graphs of at most {MAX_NODES} nodes exactly; "
            f"this one has {n}: use strategy='hybrid'"
        )
    if budget < problem["persistent_bytes"]:
        raise BudgetError(
            f"the budget of {budget} bytes is below the {problem['persistent_bytes']} "
            "persistent bytes (variables, optimizer slots)",
            budget,
            problem["persistent_bytes"],
            "optimal",
        )
    if problem["peak_bytes"] <= budget:
        fits = {"status": "fits", "objective_s": None, "mip_gap": 0.0, "solve_time_s": 0.0}
        return {"swaps": [], "recomputes": []}, fits
    f = _facts(problem)
    m = _Model(f, budget)
    lp = m.build()
    sol = _solve(lp, m.v.end, time_limit)
    if sol is None:
        raise BudgetError(
            f"no plan fits the budget of {budget} bytes: the exact formulation "
            "(keep, swap or recompute every candidate) is infeasible",
            budget,
            0,
            "optimal",
        )
    info: dict[str, Any] = {
        "status": sol.status,
        "objective_s": sol.objective_us / _US,
        "mip_gap": sol.gap,
        "solve_time_s": sol.seconds,
        **sol.size,
    }
    return _to_plan(f, m.v, sol.x), info
