"""Plays a hybridplan replay program on a GPU with PyTorch alone, and measures it.

Usage::

    python replay/runner.py replay.json [--device cuda|cpu] [--repeats 3] [-o out.json]

What it does (``play``):
- the compute stream runs each op as a real kernel of the same shapes where its
  kernel class is known (convolution forward and both backward kernels, matmul and
  batched matmul, fused batch norm and its gradient, element-wise ops, reductions,
  softmax, pooling and its gradient), and otherwise a timed busy kernel of the op's
  predicted time (``torch.cuda._sleep``, calibrated); ops the model costs at zero
  run nothing;
- swap-outs and swap-ins are real asynchronous copies to and from pinned host
  memory on a device-to-host and a host-to-device stream, ordered with CUDA events
  exactly as the plan orders them (``replay_program.waits``); a copy's source is
  kept from reuse until it has run (``Tensor.record_stream``);
- allocations are real and buffers are dropped after their last reader, so the
  peak is the caching allocator's (``torch.cuda.max_memory_allocated``);
- it reports the measured step time (median of ``repeats`` steps after one warm-up),
  per-op kernel times, copy times and peak device memory, next to the prediction.

``--device cpu`` is a dry run for tests: the same order, buffers and kernels on the
CPU, copies synchronous, no streams, no pinned memory, no busy kernels; the peak is
the player's own count of the bytes it holds.

Needs PyTorch and numpy; never TensorFlow or hybridplan's compiled core.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import replay_program as rp

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # the pure-Python parts stay importable
    torch = None  # type: ignore[assignment]

_DTYPES = {
    "float32": "float32",
    "float16": "float16",
    "bfloat16": "bfloat16",
    "float64": "float64",
    "int32": "int32",
    "int64": "int64",
    "int8": "int8",
    "uint8": "uint8",
    "int16": "int16",
    "bool": "bool",
    "complex64": "complex64",
}


def torch_dtype(name: str) -> Any:
    """The torch dtype of a TensorFlow dtype name; None for handles (resource, variant)."""
    n = _DTYPES.get(name)
    return None if n is None else getattr(torch, n)


def _shape(t: dict) -> list[int]:
    return [max(int(d), 1) for d in t["shape"]]


# ---- kernels ----------------------------------------------------------------


def _nc(x: Any) -> Any:
    """NHWC / NDHWC view as NCHW / NCDHW (no copy)."""
    return x.movedim(-1, 1)


def _nlast(x: Any) -> Any:
    return x.movedim(1, -1)


def _conv_fn(rank: int) -> Any:
    return F.conv2d if rank == 4 else F.conv3d


def k_conv(ins: list, outs: list[tuple]) -> list:
    x, w = ins[0], ins[1]
    (oshape, _) = outs[0]
    nhwc = rp.channels_last(list(x.shape), list(w.shape))
    xs = list(x.shape[1:-1]) if nhwc else list(x.shape[2:])
    ys = oshape[1:-1] if nhwc else oshape[2:]
    ks = list(w.shape[:-2])
    strides, pads = rp.conv_geometry(xs, ys, ks)
    wt = w.permute(w.dim() - 1, w.dim() - 2, *range(w.dim() - 2))  # HWIO -> OIHW
    xin = _nc(x) if nhwc else x
    y = _conv_fn(x.dim())(xin, wt, stride=strides, padding=pads)
    y = y[(slice(None), slice(None), *(slice(0, s) for s in ys))]
    return [_nlast(y) if nhwc else y]


def k_conv_backprop_input(ins: list, outs: list[tuple]) -> list:
    w, dy = ins[1], ins[2]
    (xshape, _) = outs[0]
    nhwc = rp.channels_last(xshape, list(w.shape))
    xs = xshape[1:-1] if nhwc else xshape[2:]
    ys = list(dy.shape[1:-1]) if nhwc else list(dy.shape[2:])
    strides, pads = rp.conv_geometry(xs, ys, list(w.shape[:-2]))
    wt = w.permute(w.dim() - 1, w.dim() - 2, *range(w.dim() - 2))
    size = [xshape[0], xshape[-1], *xs] if nhwc else xshape
    dyn = _nc(dy) if nhwc else dy
    grad = torch.nn.grad.conv2d_input if dy.dim() == 4 else torch.nn.grad.conv3d_input
    dx = grad(size, wt, dyn, stride=strides, padding=pads)
    return [_nlast(dx) if nhwc else dx]


def k_conv_backprop_filter(ins: list, outs: list[tuple]) -> list:
    x, dy = ins[0], ins[2]
    (wshape, _) = outs[0]
    nhwc = rp.channels_last(list(x.shape), wshape)
    xs = list(x.shape[1:-1]) if nhwc else list(x.shape[2:])
    ys = list(dy.shape[1:-1]) if nhwc else list(dy.shape[2:])
    strides, pads = rp.conv_geometry(xs, ys, wshape[:-2])
    size = [wshape[-1], wshape[-2], *wshape[:-2]]
    grad = torch.nn.grad.conv2d_weight if x.dim() == 4 else torch.nn.grad.conv3d_weight
    xn, dyn = (_nc(x), _nc(dy)) if nhwc else (x, dy)
    dw = grad(xn, size, dyn, stride=strides, padding=pads)  # OIHW
    return [dw.permute(*range(2, dw.dim()), 1, 0)]


def k_matmul(ins: list, outs: list[tuple]) -> list:
    a, b = ins[0], ins[1]
    t = rp.matmul_transposes(list(a.shape), list(b.shape), outs[0][0])
    if t is None:
        raise ValueError("matmul shapes do not fit")
    a = a.transpose(-1, -2) if t[0] else a
    b = b.transpose(-1, -2) if t[1] else b
    return [torch.matmul(a, b)]


def _bn_args(x: Any, scale: Any) -> tuple:
    nhwc = x.shape[-1] == scale.shape[0]
    return (_nc(x) if nhwc else x), nhwc


def k_batch_norm(ins: list, outs: list[tuple]) -> list:
    x, scale, offset = ins[0], ins[1], ins[2]
    xn, nhwc = _bn_args(x, scale)
    y = F.batch_norm(xn, None, None, scale, offset, training=True)
    return [_nlast(y) if nhwc else y]


def k_batch_norm_grad(ins: list, outs: list[tuple]) -> list:
    dy, x, scale = ins[0], ins[1], ins[2]
    xn, nhwc = _bn_args(x, scale)
    dyn = _nc(dy) if nhwc else dy
    c = scale.shape[0]
    mean = torch.zeros(c, device=x.device, dtype=torch.float32)
    invstd = torch.ones(c, device=x.device, dtype=torch.float32)
    dx, dscale, doffset = torch.ops.aten.native_batch_norm_backward(
        dyn, xn, scale, None, None, mean, invstd, True, 1e-3, [True, True, True]
    )
    return [_nlast(dx) if nhwc else dx, dscale, doffset]


def k_elementwise(ins: list, outs: list[tuple], into: Any = None) -> list:
    """Into ``into`` (an input's buffer, written in place) when given."""
    (oshape, odt) = outs[0]
    xs = [x for x in ins if x is not None]
    same = [x for x in xs if x.dtype == odt]
    cond = [x for x in xs if x.dtype == torch.bool and odt != torch.bool]
    if cond and len(same) >= 2:
        return [torch.where(cond[0], same[0], same[1])]
    if not same:
        return [xs[0].to(odt).expand(oshape)]
    if into is not None and list(into.shape) == oshape and into.dtype == odt:
        if len(same) == 1:
            torch.mul(same[0], 1, out=into)
        else:
            torch.add(same[0], same[1], out=into)
        for x in same[2:]:
            into.add_(x)
        return [into]
    y = same[0] * 1 if len(same) == 1 else torch.add(same[0], same[1])
    for x in same[2:]:
        y = y.add_(x)
    return [y.expand(oshape) if list(y.shape) != oshape else y]


def k_reduction(ins: list, outs: list[tuple]) -> list:
    x = ins[0]
    (oshape, _) = outs[0]
    n = 1
    for d in oshape:
        n *= d
    if n == 1:
        return [x.sum().reshape(oshape).to(outs[0][1])]
    if list(x.shape) == oshape:  # over no axes: a copy
        return [x.clone()]
    axes = rp.reduce_axes(list(x.shape), oshape)
    if not axes:
        raise ValueError(f"not a reduction of {list(x.shape)} to {oshape}")
    return [x.sum(dim=axes).reshape(oshape).to(outs[0][1])]


def k_softmax(ins: list, outs: list[tuple]) -> list:
    x = ins[0]
    p = torch.softmax(x, dim=-1)
    if len(outs) == 2:  # (loss, backprop) of a cross-entropy
        return [p.sum(dim=-1), p]
    return [p]


def k_pool(ins: list, outs: list[tuple]) -> list:
    x = ins[0]
    (oshape, _) = outs[0]
    k, s, ceil = rp.pool_geometry(list(x.shape[1:-1]), oshape[1:-1])
    fn = {4: F.max_pool2d, 5: F.max_pool3d}[x.dim()]
    y = fn(_nc(x), k, s, ceil_mode=ceil)
    y = y[(slice(None), slice(None), *(slice(0, d) for d in oshape[1:-1]))]
    return [_nlast(y)]


def k_pool_grad(ins: list, outs: list[tuple]) -> list:
    grad = ins[-1]
    (xshape, odt) = outs[0]
    dx = torch.empty([xshape[0], xshape[-1], *xshape[1:-1]], device=grad.device, dtype=odt)
    k, s, ceil = rp.pool_geometry(xshape[1:-1], list(grad.shape[1:-1]))
    fn = (
        torch.ops.aten.avg_pool2d_backward
        if grad.dim() == 4
        else torch.ops.aten.avg_pool3d_backward
    )
    out = fn(_nc(grad), dx, k, s, [0] * len(s), ceil, True, None)
    return [_nlast(out)]


KERNELS = {
    "conv": k_conv,
    "conv_backprop_input": k_conv_backprop_input,
    "conv_backprop_filter": k_conv_backprop_filter,
    "matmul": k_matmul,
    "batch_matmul": k_matmul,
    "batch_norm": k_batch_norm,
    "batch_norm_grad": k_batch_norm_grad,
    "elementwise": k_elementwise,
    "reduction": k_reduction,
    "softmax": k_softmax,
    "pool": k_pool,
    "pool_grad": k_pool_grad,
}


# ---- the player ---------------------------------------------------------------


class Player:
    """Plays one replay on one device (see the module docs)."""

    def __init__(self, replay: dict, device: str = "cuda"):
        if torch is None:
            raise RuntimeError("the player needs PyTorch: pip install torch")
        self.r = rp.load(replay)
        self.lay = rp.layout(self.r)
        self.dev = torch.device(device)
        self.cuda = self.dev.type == "cuda"
        self.tensors = self.r["tensors"]
        self.fallbacks: dict[str, str] = {}
        #: Op types whose kernel gave another shape or dtype than the replay's (replaced).
        self.misshapen: dict[str, str] = {}
        #: CPU dry run: swapped tensors whose copy came back different.
        self.corrupted: list[int] = []
        self._sums: dict[int, Any] = {}
        self._vars: dict[int, Any] = {}
        self.cycles_per_s = self._calibrate_sleep() if self.cuda else 0.0
        self._setup()

    # -- set-up: persistent bytes, sources, host buffers of the swaps ----------
    def _setup(self) -> None:
        r = self.r
        self.persistent = torch.empty(r["persistent_bytes"], dtype=torch.uint8, device=self.dev)
        self._carve = 0
        self.fixed: dict[int, Any] = {}  # sources and variable reads, for the whole step
        for o in r["ops"]:
            if o.get("clone") is None and not o["inputs"]:
                for t in o["outputs"]:
                    self.fixed[t] = self._make(t)
        self.host: dict[int, Any] = {}
        for s in r["swaps"]:
            t = self.tensors[s["tensor"]]
            dt = torch_dtype(t["dtype"])
            self.host[s["tensor"]] = torch.empty(
                _shape(t), dtype=dt, device="cpu", pin_memory=self.cuda
            )
        if self.cuda:
            self.compute = torch.cuda.current_stream(self.dev)
            self.d2h = torch.cuda.Stream(self.dev)
            self.h2d = torch.cuda.Stream(self.dev)

    def _make(self, t: int) -> Any:
        """A buffer for tensor ``t`` with values that keep kernels finite."""
        spec = self.tensors[t]
        dt = torch_dtype(spec["dtype"])
        if dt is None:
            return None
        shape = _shape(spec)
        if spec["bytes"] == 0 and spec["owner"] == t and spec["value_bytes"] > 0:
            return self._from_persistent(shape, dt)
        if dt.is_floating_point:
            return torch.rand(shape, dtype=dt, device=self.dev) + 0.5
        return torch.ones(shape, dtype=dt, device=self.dev)

    def _from_persistent(self, shape: list[int], dt: Any) -> Any:
        """A variable's value: a view into the persistent block (no new memory)."""
        n = 1
        for d in shape:
            n *= d
        size = torch.empty((), dtype=dt).element_size()
        nbytes = n * size
        start = (self._carve + size - 1) // size * size
        if start + nbytes > self.persistent.numel():
            return torch.full(shape, 0.5, dtype=dt, device=self.dev)
        self._carve = start + nbytes
        v = self.persistent[start : start + nbytes].view(dt).view(shape)
        if dt.is_floating_point:
            v.fill_(0.5)
        return v

    def _calibrate_sleep(self) -> float:
        """Clock cycles per second of ``torch.cuda._sleep`` (for busy kernels)."""
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1_000_000)
        s.record()
        torch.cuda._sleep(10_000_000)
        e.record()
        e.synchronize()
        return 10_000_000 / (s.elapsed_time(e) / 1e3)

    # -- one op ------------------------------------------------------------------
    def _run_op(self, i: int, env: dict) -> None:
        o = self.r["ops"][i]
        ins = []
        for x in o["inputs"]:
            k = rp.key_of(x)
            ins.append(env[k] if k in env else self.fixed.get(x["tensor"]))
        keys = rp.output_keys(o)
        if o.get("clone") is None and not o["inputs"]:
            for k in keys:
                env[k] = self.fixed.get(k[-1])
            return
        outs = [
            (_shape(self.tensors[t]), torch_dtype(self.tensors[t]["dtype"])) for t in o["outputs"]
        ]
        made = None
        kind = o.get("kernel")
        if kind is not None and all(x is not None for x in ins[: _needed(kind)]):
            try:
                slot = rp.inplace_input(self.r, self.lay, i) if kind == "elementwise" else None
                if slot is not None:
                    made = k_elementwise(ins, outs, into=ins[slot])
                else:
                    made = KERNELS[kind](ins, outs)
            except (RuntimeError, ValueError, IndexError, TypeError) as e:
                self.fallbacks.setdefault(o["op"], f"{kind}: {e}"[:200])
                made = None
        if made is None:
            made = self._stand_in(o, ins, outs)
        for j, (k, t) in enumerate(zip(keys, o["outputs"], strict=True)):
            y = made[j] if j < len(made) else None
            spec = outs[j]
            if spec[1] is None:
                env[k] = None
                continue
            if y is not None and (list(y.shape) != spec[0] or y.dtype != spec[1]):
                self.misshapen.setdefault(
                    o["op"], f"{list(y.shape)} {y.dtype} for {spec[0]} {spec[1]}"
                )
                y = None
            if y is None:
                y = self._alloc_like(t, spec, ins, o)
            env[k] = y

    def _alloc_like(self, t: int, spec: tuple, ins: list, op: dict) -> Any:
        tt = self.tensors[t]
        if tt["bytes"] == 0 and tt["owner"] != t:  # an alias: a view of its input
            for x in ins:
                if x is not None and x.numel() == _numel(spec[0]) and x.dtype == spec[1]:
                    return x.reshape(spec[0])
        if tt["bytes"] == 0 and tt["value_bytes"] > 0 and tt["owner"] == t:
            # A variable's value (a read of its handle): one view per variable.
            handle = op["inputs"][0]["tensor"] if op["inputs"] else -t - 1
            if handle not in self._vars:
                self._vars[handle] = self._from_persistent(spec[0], spec[1])
            v = self._vars[handle]
            if list(v.shape) == spec[0] and v.dtype == spec[1]:
                return v
            return self._from_persistent(spec[0], spec[1])
        return torch.empty(spec[0], dtype=spec[1], device=self.dev)

    def _stand_in(self, o: dict, ins: list, outs: list[tuple]) -> list:
        """An op with no kernel of its class: its outputs, after a busy kernel of
        its predicted time on a GPU."""
        if self.cuda and o["time_s"] > 0:
            torch.cuda._sleep(max(int(o["time_s"] * self.cycles_per_s), 1))
        return []

    # -- one step ------------------------------------------------------------------
    def step(self, timed: bool) -> dict:
        """Plays the step once; with ``timed``, records per-item events."""
        env: dict[tuple, Any] = {}
        ev: dict[tuple, Any] = {}
        spans: dict[tuple, tuple] = {}
        peak = self._held_bytes(env)
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats(self.dev)
            base = torch.cuda.memory_allocated(self.dev)
            t0 = torch.cuda.Event(enable_timing=True)
            t0.record(self.compute)
            for s in (self.d2h, self.h2d):
                s.wait_event(t0)
        wall0 = time.perf_counter()
        for p, it in enumerate(self.lay.order):
            stream = self._stream(it)
            if self.cuda:
                for d in self.lay.waits.get(it.key, ()):
                    stream.wait_event(ev[d])
                a = torch.cuda.Event(enable_timing=timed)
                a.record(stream)
                with torch.cuda.stream(stream):
                    self._issue(it, env)
                b = torch.cuda.Event(enable_timing=timed)
                b.record(stream)
                ev[it.key] = b
                if timed:
                    spans[it.key] = (a, b)
            else:
                self._issue(it, env)
            if not self.cuda:  # the allocator counts on a GPU
                peak = max(peak, self._held_bytes(env))
            for k in self.lay.drops[p]:
                x = env.pop(k, None)
                if self.cuda and x is not None:
                    x.record_stream(self.compute)
        result: dict[str, Any] = {"tracked_peak_bytes": peak}
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            for s in (self.d2h, self.h2d):
                self.compute.wait_stream(s)
            end.record(self.compute)
            end.synchronize()
            result["step_time_s"] = t0.elapsed_time(end) / 1e3
            result["peak_bytes"] = torch.cuda.max_memory_allocated(self.dev)
            result["base_bytes"] = base
            if timed:
                result["spans"] = {
                    k: (t0.elapsed_time(a) / 1e3, t0.elapsed_time(b) / 1e3)
                    for k, (a, b) in spans.items()
                }
        else:
            result["step_time_s"] = time.perf_counter() - wall0
        result["left"] = sorted(str(k) for k in env)
        return result

    def _stream(self, it: rp.Item) -> Any:
        if not self.cuda:
            return None
        return {"op": self.compute, "out": self.d2h, "in": self.h2d}[it.kind]

    def _issue(self, it: rp.Item, env: dict) -> None:
        if it.kind == "op":
            self._run_op(it.index, env)
            return
        s = self.r["swaps"][it.index]
        host = self.host[s["tensor"]]
        if it.kind == "out":
            src = env[("t", s["tensor"])]
            host.copy_(src, non_blocking=self.cuda)
            if self.cuda:
                src.record_stream(self.d2h)
            else:
                self._sums[it.index] = src.clone()
        else:
            dst = torch.empty(host.shape, dtype=host.dtype, device=self.dev)
            dst.copy_(host, non_blocking=self.cuda)
            if not self.cuda and not _same_bits(dst, self._sums[it.index]):
                self.corrupted.append(it.index)
            env[("i", it.index, it.swap_in)] = dst

    def _held_bytes(self, env: dict) -> int:
        """Bytes of distinct storages the step holds (persistent block and sources included)."""
        seen, total = set(), 0
        for x in [self.persistent, *self.fixed.values(), *env.values()]:
            if x is None:
                continue
            st = x.untyped_storage()
            if st.data_ptr() in seen:
                continue
            seen.add(st.data_ptr())
            total += st.nbytes()
        return total


def _same_bits(a: Any, b: Any) -> bool:
    """Bit-for-bit equal (NaNs included)."""
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _needed(kind: str) -> int:
    """Inputs a kernel class reads (the rest may be handles or sizes)."""
    return {"conv": 2, "matmul": 2, "batch_matmul": 2, "batch_norm": 3, "batch_norm_grad": 3}.get(
        kind, 1
    )


def play(replay: dict | str | Path, device: str = "cuda", repeats: int = 3) -> dict:
    """Plays a replay ``repeats`` times after one warm-up; measured next to predicted."""
    pl = Player(replay if isinstance(replay, dict) else rp.load(replay), device)
    pl.step(timed=False)
    runs = [pl.step(timed=(k == repeats - 1)) for k in range(max(repeats, 1))]
    last = runs[-1]
    r = pl.r
    out: dict[str, Any] = {
        "device": device,
        "strategy": r["strategy"],
        "predicted": r["predicted"],
        "measured": {
            "step_time_s": statistics.median(x["step_time_s"] for x in runs),
            "step_times_s": [x["step_time_s"] for x in runs],
            "tracked_peak_bytes": last["tracked_peak_bytes"],
        },
        "fallbacks": pl.fallbacks,
        "misshapen": pl.misshapen,
        "corrupted": pl.corrupted,
        "left": last["left"],
        "ops": len(r["ops"]),
        "swaps": len(r["swaps"]),
        "clones": sum(len(c["nodes"]) for c in r["clones"]),
    }
    if pl.cuda:
        out["measured"]["peak_bytes"] = last["peak_bytes"]
        out["per_op"] = _per_op(r, last["spans"])
        out["copies"] = _copies(r, last["spans"])
    return out


def _per_op(r: dict, spans: dict) -> list[dict]:
    rows = []
    for i, o in enumerate(r["ops"]):
        a, b = spans[("op", i)]
        rows.append(
            {
                "node": o["node"],
                "op": o["op"],
                "kernel": o.get("kernel"),
                "clone": o.get("clone") is not None,
                "predicted_s": o["time_s"],
                "measured_s": b - a,
                "predicted_start_s": o["start_s"],
                "measured_start_s": a,
            }
        )
    return rows


def _copies(r: dict, spans: dict) -> list[dict]:
    rows = []
    for k, s in enumerate(r["swaps"]):
        a, b = spans[("out", k)]
        rows.append(
            {
                "dir": "d2h",
                "bytes": s["bytes"],
                "predicted_s": s["end_s"] - s["start_s"],
                "measured_s": b - a,
            }
        )
        for j, si in enumerate(s["ins"]):
            a, b = spans[("in", k, j)]
            rows.append(
                {
                    "dir": "h2d",
                    "bytes": s["bytes"],
                    "predicted_s": si["end_s"] - si["start_s"],
                    "measured_s": b - a,
                }
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("replay")
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu (dry run)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("-o", "--output", help="write the results JSON here")
    args = ap.parse_args(argv)
    if torch is None:
        print(
            "runner.py: PyTorch is not installed: it runs the replay on a GPU (or --device "
            "cpu); pip install torch",
            file=sys.stderr,
        )
        return 2
    res = play(args.replay, args.device, args.repeats)
    text = json.dumps(res, indent=1)
    if args.output:
        Path(args.output).write_text(text)
    m, p = res["measured"], res["predicted"]
    print(
        f"{res['strategy']}: step {m['step_time_s']:.4g} s measured, {p['step_time_s']:.4g} s "
        f"predicted; peak {m.get('peak_bytes', m['tracked_peak_bytes'])} measured, "
        f"{p['peak_bytes']} predicted"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
