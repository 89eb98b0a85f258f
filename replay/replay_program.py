"""A replay program read and laid out for playing: pure Python, no PyTorch.

The replay (JSON, written by hybridplan's core, ``rust/core/src/replay.rs``) lists
the planned step as the simulator sees it. This module turns it into what a
player needs, and nothing here touches a device:

- ``load``: reads and checks a replay (version, fields, ids in range);
- ``issue_order``: the host's issue order of compute items and copies: the
  simulator's event order, each event held back until the events it waits on
  are issued (a CUDA event must be recorded before a stream waits on it);
- ``waits``: what each item waits on, exactly as the plan orders it: an op
  waits for the swap-ins it reads and for the swap-out of a tensor it releases;
  a swap-out for its producer and ``after``; a swap-in for its trigger and its
  swap-out;
- ``last_reads``: after which issued item each buffer may be dropped: its last
  reader (copies included), so that the allocator's peak is the plan's;
- ``conv_geometry``, ``reduce_axes``, ``matmul_transposes``: the kernel
  parameters the graph does not keep (strides, padding, axes), from shapes.

Rule: a key names one device buffer of the replayed step: ``("t", tensor)``
the original tensor, ``("i", swap, index)`` a swap-in copy, ``("c", recompute,
index, tensor)`` a clone's output. Complexity: O(ops + inputs + events), the
issue order O(events * held) with ``held`` the events held back at once
(a handful: only zero-length items tie with the copies they set off).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The replay format version this player reads (the core's ``replay::VERSION``).
VERSION = 1

KERNEL_CLASSES = (
    "conv",
    "conv_backprop_input",
    "conv_backprop_filter",
    "matmul",
    "batch_matmul",
    "batch_norm",
    "batch_norm_grad",
    "elementwise",
    "reduction",
    "softmax",
    "pool",
    "pool_grad",
)


class ReplayError(ValueError):
    """A replay this player cannot read: says what is wrong and what to do."""


_TOP = {
    "version": int,
    "device": dict,
    "strategy": str,
    "budget": int,
    "persistent_bytes": int,
    "predicted": dict,
    "tensors": list,
    "ops": list,
    "swaps": list,
    "clones": list,
    "timeline": list,
    "memory": list,
}
_OP = {
    "node": int,
    "name": str,
    "op": str,
    "phase": str,
    "inputs": list,
    "outputs": list,
    "time_s": (int, float),
    "start_s": (int, float),
    "end_s": (int, float),
}
_TENSOR = {"dtype": str, "shape": list, "bytes": int, "value_bytes": int, "owner": int}


def _check(obj: Any, fields: dict, where: str) -> None:
    if not isinstance(obj, dict):
        raise ReplayError(f"{where} is not an object")
    for k, t in fields.items():
        if k not in obj:
            raise ReplayError(f"{where} lacks the field {k!r}: write the replay again")
        if not isinstance(obj[k], t) or (isinstance(obj[k], bool) and t is int):
            raise ReplayError(f"{where}: {k!r} has the wrong type ({type(obj[k]).__name__})")


def load(source: str | Path | dict) -> dict:
    """Reads a replay from a path or a dict, checks it, and returns the dict.

    Raises ReplayError for another version, a missing field or an id out of range.
    """
    if isinstance(source, dict):
        r = source
    else:
        try:
            r = json.loads(Path(source).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ReplayError(f"cannot read a replay from {source}: {e}") from None
    if not isinstance(r, dict) or r.get("version") != VERSION:
        v = r.get("version") if isinstance(r, dict) else None
        raise ReplayError(
            f"replay version {v!r} is not {VERSION}: write it with `hybridplan replay` "
            "of the same project version as this player"
        )
    _check(r, _TOP, "the replay")
    nt, nops = len(r["tensors"]), len(r["ops"])
    for i, t in enumerate(r["tensors"]):
        _check(t, _TENSOR, f"tensor {i}")
    for i, o in enumerate(r["ops"]):
        _check(o, _OP, f"op {i}")
        for x in o["inputs"]:
            if not isinstance(x, dict) or x.get("from") not in ("device", "swap_in", "clone"):
                raise ReplayError(f"op {i}: an input read from an unknown place: {x!r}")
        for t in [x["tensor"] for x in o["inputs"]] + o["outputs"]:
            if not 0 <= t < nt:
                raise ReplayError(f"op {i} names tensor {t}, out of range ({nt} tensors)")
        if o.get("kernel") is not None and o["kernel"] not in KERNEL_CLASSES:
            raise ReplayError(f"op {i}: unknown kernel class {o['kernel']!r}")
    for e in r["timeline"]:
        if e.get("stream") not in ("compute", "d2h", "h2d"):
            raise ReplayError(f"timeline event on an unknown stream: {e!r}")
    if sum(e["stream"] == "compute" for e in r["timeline"]) != nops:
        raise ReplayError("the timeline's compute events do not match the ops")
    return r


def key_of(read: dict) -> tuple:
    """The buffer key an op input reads (see the module docs)."""
    if read["from"] == "device":
        return ("t", read["tensor"])
    if read["from"] == "swap_in":
        return ("i", read["swap"], read["index"])
    return ("c", read["recompute"], read["index"], read["tensor"])


def output_keys(op: dict) -> list[tuple]:
    """The buffer keys an op writes."""
    if op.get("clone") is not None:
        r, i = op["clone"]
        return [("c", r, i, t) for t in op["outputs"]]
    return [("t", t) for t in op["outputs"]]


@dataclass(frozen=True)
class Item:
    """One thing the host issues: ``("op", i)``, ``("out", swap)`` or ``("in", swap, j)``."""

    kind: str
    index: int
    swap_in: int | None = None

    @property
    def key(self) -> tuple:
        return (
            (self.kind, self.index)
            if self.swap_in is None
            else (self.kind, self.index, self.swap_in)
        )


@dataclass
class Layout:
    """A replay laid out for playing."""

    order: list[Item]
    waits: dict[tuple, list[tuple]]
    #: Key -> the issue position after which nothing reads it.
    drop_after: dict[tuple, int]
    #: Keys to drop after each issue position.
    drops: list[list[tuple]] = field(default_factory=list)
    op_of_node: dict[int, int] = field(default_factory=dict)
    #: Item key -> issue position.
    pos: dict[tuple, int] = field(default_factory=dict)
    #: Buffer owner (tensor) -> the last position reading it or an alias of it.
    owner_end: dict[int, int] = field(default_factory=dict)
    swapped: set[int] = field(default_factory=set)


def inplace_input(r: dict, lay: Layout, i: int) -> int | None:
    """The input slot op ``i`` writes its output into, by TensorFlow's rule as the
    core states it (``inplace`` of the op): the first listed slot whose buffer is
    read for the last time by this op, in this slot only, has the output's dtype
    and size, is no source's, and is not swapped out; ``None`` if none."""
    o = r["ops"][i]
    ip = o.get("inplace")
    if not ip:
        return None
    p = lay.pos[("op", i)]
    out = r["tensors"][ip["output"]]
    keys = [key_of(x) for x in o["inputs"]]
    for slot in ip["slots"]:
        k = keys[slot]
        t = r["tensors"][o["inputs"][slot]["tensor"]]
        if (
            keys.count(k) != 1
            or t["dtype"] != out["dtype"]
            or t["value_bytes"] != out["value_bytes"]
        ):
            continue
        if out["bytes"] == 0 or t["source"]:
            continue
        if k[0] == "t":
            tid = k[1]
            own = r["tensors"][tid]["owner"]
            if own != tid or own in lay.swapped or lay.owner_end.get(own) != p:
                continue
        elif lay.drop_after.get(k) != p:
            continue
        return slot
    return None


def waits(r: dict) -> tuple[dict[tuple, list[tuple]], dict[int, int]]:
    """What each item waits on (item keys), and the op index of each original node."""
    op_of_node = {o["node"]: i for i, o in enumerate(r["ops"]) if o.get("clone") is None}
    w: dict[tuple, list[tuple]] = {}
    releases: dict[int, list[int]] = {}
    for k, s in enumerate(r["swaps"]):
        if s.get("release") is not None:
            releases.setdefault(s["release"], []).append(k)
        last = max(op_of_node[s["producer"]], op_of_node[s["after"]])
        w[("out", k)] = [("op", last)]
        for j, si in enumerate(s["ins"]):
            w[("in", k, j)] = [("out", k), ("op", op_of_node[si["trigger"]])]
    for i, o in enumerate(r["ops"]):
        need = sorted(
            {("in", x["swap"], x["index"]) for x in o["inputs"] if x["from"] == "swap_in"}
        )
        if o.get("clone") is None:
            need += [("out", k) for k in releases.get(o["node"], [])]
        if need:
            w[("op", i)] = need
    return w, op_of_node


def issue_order(r: dict, w: dict[tuple, list[tuple]]) -> list[Item]:
    """The simulator's event order, each event held back until what it waits on
    (and, for ops, the op before it) is issued."""
    events = [
        Item("op", e["index"])
        if e["stream"] == "compute"
        else Item("out" if e["stream"] == "d2h" else "in", e["index"], e.get("swap_in"))
        for e in r["timeline"]
    ]
    done: set[tuple] = set()
    order: list[Item] = []
    held: list[Item] = []

    def ready(it: Item) -> bool:
        if it.kind == "op" and it.index > 0 and ("op", it.index - 1) not in done:
            return False
        return all(d in done for d in w.get(it.key, ()))

    for ev in events:
        held.append(ev)
        progress = True
        while progress:
            progress = False
            for it in list(held):
                if ready(it):
                    held.remove(it)
                    order.append(it)
                    done.add(it.key)
                    progress = True
    if held:
        raise ReplayError(
            f"the plan's waits form a cycle at {held[0].key}: the replay is inconsistent"
        )
    return order


def layout(r: dict) -> Layout:
    """Issue order, waits and buffer drops of a replay."""
    w, op_of_node = waits(r)
    order = issue_order(r, w)
    pos = {it.key: p for p, it in enumerate(order)}
    drop_after: dict[tuple, int] = {}

    def use(key: tuple, p: int) -> None:
        drop_after[key] = max(drop_after.get(key, p), p)

    for i, o in enumerate(r["ops"]):
        p = pos[("op", i)]
        for k in output_keys(o):
            use(k, p)
        for x in o["inputs"]:
            use(key_of(x), p)
    for k, s in enumerate(r["swaps"]):
        use(("t", s["tensor"]), pos[("out", k)])
        for j in range(len(s["ins"])):
            use(("i", k, j), pos[("in", k, j)])
    owner_end: dict[int, int] = {}
    for key, p in drop_after.items():
        if key[0] == "t":
            o = r["tensors"][key[1]]["owner"]
            owner_end[o] = max(owner_end.get(o, p), p)
    drops: list[list[tuple]] = [[] for _ in order]
    for key, p in sorted(drop_after.items(), key=lambda kv: (kv[1], str(kv[0]))):
        drops[p].append(key)
    swapped = {s["tensor"] for s in r["swaps"]}
    return Layout(order, w, drop_after, drops, op_of_node, pos, owner_end, swapped)


# ---- kernel parameters the graph does not keep, from shapes -----------------


def channels_last(x: list[int], filt: list[int]) -> bool:
    """NHWC (TensorFlow's default) unless only NCHW fits the filter's in-channels."""
    cin = filt[-2]
    return not (x[-1] != cin and x[1] == cin)


def conv_geometry(x: list[int], y: list[int], k: list[int]) -> tuple[list[int], list[int]]:
    """Strides and (symmetric, leading) padding of a convolution taking spatial
    sizes ``x`` to ``y`` with window ``k``: TensorFlow's SAME if it fits
    (``y = ceil(x / s)``), else VALID (``y = (x - k) // s + 1``). The padding is
    ``ceil(total / 2)``: the output may then be one larger, and is cropped."""
    strides, pads = [], []
    for xi, yi, ki in zip(x, y, k, strict=True):
        for s in range(1, max(xi, 1) + 1):
            if math.ceil(xi / s) == yi:
                total = max((yi - 1) * s + ki - xi, 0)
                strides.append(s)
                pads.append((total + 1) // 2)
                break
            if xi >= ki and (xi - ki) // s + 1 == yi:
                strides.append(s)
                pads.append(0)
                break
        else:
            strides.append(1)
            pads.append(0)
    return strides, pads


def reduce_axes(x: list[int], y: list[int]) -> list[int]:
    """The axes of ``x`` a reduction to shape ``y`` removes: ``y``'s dimensions
    (other than 1s kept by ``keep_dims``) matched to ``x``'s in order."""
    want = [d for d in y if d != 1]
    keep, j = set(), 0
    for i, d in enumerate(x):
        if j < len(want) and d == want[j]:
            keep.add(i)
            j += 1
    if j < len(want):
        return []  # not a reduction of x to y: the caller falls back
    return [i for i in range(len(x)) if i not in keep]


def matmul_transposes(a: list[int], b: list[int], out: list[int]) -> tuple[bool, bool] | None:
    """Whether ``a`` and ``b`` (their last two axes) must be transposed for
    ``a @ b`` to give ``out``; ``None`` when no choice fits."""
    m, n = out[-2], out[-1]
    for ta in (False, True):
        am, ak = (a[-1], a[-2]) if ta else (a[-2], a[-1])
        if am != m:
            continue
        for tb in (False, True):
            bk, bn = (b[-1], b[-2]) if tb else (b[-2], b[-1])
            if bk == ak and bn == n:
                return ta, tb
    return None


def predicted_kernel_times(r: dict) -> dict[str, list[float]]:
    """Predicted time of every op with a kernel class, by class."""
    out: dict[str, list[float]] = {}
    for o in r["ops"]:
        if o.get("kernel"):
            out.setdefault(o["kernel"], []).append(o["time_s"])
    return out


def median(xs: Iterable[float]) -> float:
    v = sorted(xs)
    if not v:
        return float("nan")
    h = len(v) // 2
    return v[h] if len(v) % 2 else (v[h - 1] + v[h]) / 2


def pool_geometry(x: list[int], y: list[int]) -> tuple[list[int], list[int], bool]:
    """Window, stride and ceil mode of a pooling taking spatial sizes ``x`` to ``y``
    (the graph keeps neither): per axis, the largest stride and then the smallest
    window (from the stride up to stride + 2) with ``(x - k) // s + 1 == y``
    (VALID, e.g. ResNet's 3x3 stride 2 after explicit padding); else the stride with
    ``ceil(x / s) == y``, window = stride, ceil mode (SAME). Where both could be,
    VALID is taken: the graph cannot tell them apart."""
    ks, ss, ceil = [], [], False
    for xi, yi in zip(x, y, strict=True):
        best = None
        for s in range(max(math.ceil(xi / max(yi, 1)), 1), 0, -1):
            for k in range(s, s + 3):
                if k <= xi and (xi - k) // s + 1 == yi:
                    best = (k, s)
                    break
            if best:
                break
        if best is None:
            s = next((s for s in range(1, xi + 1) if math.ceil(xi / s) == yi), 1)
            best, ceil = (s, s), True
        ks.append(best[0])
        ss.append(best[1])
    return ks, ss, ceil
