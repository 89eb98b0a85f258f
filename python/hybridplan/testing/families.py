"""Small training-step GraphDefs (20 to ~100 nodes) for the exact solver and the gap table.

Four families, each a forward pass, its backward pass (written by a small
reverse-mode pass over the forward ops, as ``tape.gradient`` would) and one
``ResourceApplyGradientDescent`` per weight:

- ``chain``: dense layers (``MatMul`` + ``Relu``) one after another;
- ``residual``: a stem convolution and residual blocks (conv, relu, conv,
  ``Add`` with the shortcut, relu);
- ``unet``: a U-Net (conv + relu per level, ``MaxPool`` down,
  ``ResizeNearestNeighbor`` up, ``ConcatV2`` with the skip connection);
- ``dag``: random layered DAGs of dense layers, a node reading one or two
  earlier nodes (summed with ``Add``), seeded.

The bytes are written by :mod:`hybridplan.testing.encode` (no TensorFlow needed)
with ``_output_shapes`` and dtype attributes, which is all the planner reads.
``family(name, size, seed)`` gives ``(label, graph bytes, loss name)``;
``size`` 0..3 grows the graph from about 20 to about 100 nodes.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from .encode import FLOAT, INT32, RESOURCE, graph_def, int_field, len_field, node_def, varint

__all__ = ["FAMILIES", "family", "graphs"]

FAMILIES = ("chain", "residual", "unet", "dag")


# ----------------------------------------------------------------------------- the builder
class _Net:
    """Forward ops with a tape; ``finish`` writes the backward pass and the updates."""

    def __init__(self) -> None:
        self.nodes: list[bytes] = []
        self.shape: dict[str, tuple[int, ...]] = {}
        self.tape: list[tuple] = []
        self.consts: dict[tuple, str] = {}
        self.count = 0

    def op(
        self,
        name: str,
        op: str,
        inputs: list[str],
        shape: tuple[int, ...] | None,
        dtype: int = FLOAT,
        attrs: tuple[tuple[str, bytes], ...] = (),
    ) -> str:
        key = "dtype" if op in ("Placeholder", "Const", "ReadVariableOp") else "T"
        shapes = [] if shape is None else [shape]
        body = node_def(name, op, inputs, shapes, dtype, dtype_key=key, attrs=attrs)
        self.nodes.append(body)
        if shape is not None:
            self.shape[name] = shape
        return name

    def const(self, values: tuple[int, ...], dtype: int = INT32) -> str:
        key = (values, dtype)
        if key not in self.consts:
            shape = () if dtype == FLOAT else (len(values),)
            self.consts[key] = self.op(f"const_{len(self.consts)}", "Const", [], shape, dtype)
        return self.consts[key]

    def fresh(self, stem: str) -> str:
        self.count += 1
        return f"{stem}_{self.count}"

    def var(self, shape: tuple[int, ...]) -> tuple[str, str]:
        h = self.op(self.fresh("w"), "Placeholder", [], (), RESOURCE)
        return h, self.op(f"{h}/read", "ReadVariableOp", [h], shape)

    # forward ops --------------------------------------------------------------------------
    def dense(self, x: str, units: int) -> str:
        h, w = self.var((self.shape[x][1], units))
        y = self.op(self.fresh("dense"), "MatMul", [x, w], (self.shape[x][0], units))
        self.tape.append(("matmul", y, x, h, w))
        return y

    def conv(self, x: str, cout: int) -> str:
        b, hh, ww, cin = self.shape[x]
        h, w = self.var((3, 3, cin, cout))
        attrs = (
            ("strides", len_field(1, len_field(3, b"".join(varint(1) for _ in range(4))))),
            ("padding", len_field(2, b"SAME")),
        )
        y = self.op(self.fresh("conv"), "Conv2D", [x, w], (b, hh, ww, cout), attrs=attrs)
        self.tape.append(("conv", y, x, h, w))
        return y

    def relu(self, x: str) -> str:
        y = self.op(self.fresh("relu"), "Relu", [x], self.shape[x])
        self.tape.append(("relu", y, x))
        return y

    def add(self, a: str, b: str) -> str:
        y = self.op(self.fresh("add"), "Add", [a, b], self.shape[a])
        self.tape.append(("add", y, a, b))
        return y

    def pool(self, x: str) -> str:
        b, hh, ww, c = self.shape[x]
        y = self.op(self.fresh("pool"), "MaxPool", [x], (b, hh // 2, ww // 2, c))
        self.tape.append(("pool", y, x))
        return y

    def up(self, x: str) -> str:
        b, hh, ww, c = self.shape[x]
        size = self.const((2 * hh, 2 * ww))
        y = self.op(self.fresh("up"), "ResizeNearestNeighbor", [x, size], (b, 2 * hh, 2 * ww, c))
        self.tape.append(("up", y, x))
        return y

    def concat(self, a: str, b: str) -> str:
        sa, sb = self.shape[a], self.shape[b]
        axis = self.const((3,))
        y = self.op(self.fresh("concat"), "ConcatV2", [a, b, axis], (*sa[:3], sa[3] + sb[3]))
        self.tape.append(("concat", y, a, b))
        return y

    # backward pass -------------------------------------------------------------------------
    def finish(self, y: str) -> tuple[bytes, str]:
        """Loss = sum of ``y``; writes the gradients and the updates. Returns (bytes, loss)."""
        rank = len(self.shape[y])
        loss = self.op("loss", "Sum", [y, self.const(tuple(range(rank)))], ())
        grads: dict[str, list[str]] = {y: [self.op("seed", "OnesLike", [y], self.shape[y])]}
        lr = self.const((1,), FLOAT)
        updates: list[tuple[str, str]] = []
        for entry in reversed(self.tape):
            out = entry[1]
            if out not in grads:
                continue
            g = self._sum(out, grads.pop(out))
            for x, gx in self._grad(entry, g, updates):
                if x in self.shape and self._needs_grad(x):
                    grads.setdefault(x, []).append(gx)
        for h, gw in updates:
            self.op(self.fresh("apply"), "ResourceApplyGradientDescent", [h, lr, gw], None)
        self.op("out", "Identity", [loss], ())
        return graph_def(self.nodes), "loss:0"

    def _needs_grad(self, x: str) -> bool:
        return x != "x"

    def _sum(self, out: str, gs: list[str]) -> str:
        if len(gs) == 1:
            return gs[0]
        n = len(gs)
        attrs = (("N", int_field(3, n)),)
        return self.op(f"{out}/grad_sum", "AddN", gs, self.shape[out], attrs=attrs)

    def _grad(self, e: tuple, g: str, updates: list) -> Iterator[tuple[str, str]]:
        kind, y = e[0], e[1]
        if kind == "matmul":
            _, _, x, h, w = e
            ta = (("transpose_a", int_field(5, 1)),)
            gw = self.op(f"{y}/grad_w", "MatMul", [x, g], self.shape[w], attrs=ta)
            updates.append((h, gw))
            if self._needs_grad(x):
                tb = (("transpose_b", int_field(5, 1)),)
                yield x, self.op(f"{y}/grad_x", "MatMul", [g, w], self.shape[x], attrs=tb)
        elif kind == "conv":
            _, _, x, h, w = e
            fs, xs = self.const(self.shape[w]), self.const(self.shape[x])
            gw = self.op(f"{y}/grad_w", "Conv2DBackpropFilter", [x, fs, g], self.shape[w])
            updates.append((h, gw))
            if self._needs_grad(x):
                yield x, self.op(f"{y}/grad_x", "Conv2DBackpropInput", [xs, w, g], self.shape[x])
        elif kind == "relu":
            yield e[2], self.op(f"{y}/grad", "ReluGrad", [g, y], self.shape[y])
        elif kind == "add":
            yield e[2], g
            yield e[3], g
        elif kind == "pool":
            x = e[2]
            yield x, self.op(f"{y}/grad", "MaxPoolGrad", [x, y, g], self.shape[x])
        elif kind == "up":
            x = e[2]
            size = self.const(self.shape[x][1:3])
            yield x, self.op(f"{y}/grad", "ResizeNearestNeighborGrad", [g, size], self.shape[x])
        elif kind == "concat":
            a, b = e[2], e[3]
            sa, sb = self.shape[a], self.shape[b]
            begin_b = self.const((0, 0, 0, sa[3]))
            ga = self.op(f"{y}/grad_a", "Slice", [g, self.const((0,) * 4), self.const(sa)], sa)
            gb = self.op(f"{y}/grad_b", "Slice", [g, begin_b, self.const(sb)], sb)
            yield a, ga
            yield b, gb


# ----------------------------------------------------------------------------- the families
def chain(layers: int, batch: int = 4096, width: int = 256) -> tuple[bytes, str]:
    net = _Net()
    h = net.op("x", "Placeholder", [], (batch, width))
    for _ in range(layers):
        h = net.relu(net.dense(h, width))
    return net.finish(h)


def residual(blocks: int, batch: int = 8, size: int = 64, channels: int = 32) -> tuple[bytes, str]:
    net = _Net()
    x = net.op("x", "Placeholder", [], (batch, size, size, channels))
    h = net.relu(net.conv(x, channels))
    for _ in range(blocks):
        r = net.relu(net.conv(h, channels))
        h = net.relu(net.add(net.conv(r, channels), h))
    return net.finish(h)


def unet(levels: int, batch: int = 4, size: int = 64, channels: int = 16) -> tuple[bytes, str]:
    net = _Net()
    h = net.op("x", "Placeholder", [], (batch, size, size, channels))
    skips = []
    for i in range(levels):
        h = net.relu(net.conv(h, channels << i))
        skips.append(h)
        h = net.pool(h)
    h = net.relu(net.conv(h, channels << levels))
    for i in reversed(range(levels)):
        h = net.concat(net.up(h), skips[i])
        h = net.relu(net.conv(h, channels << i))
    return net.finish(h)


def dag(layers: int, seed: int, batch: int = 4096, width: int = 256) -> tuple[bytes, str]:
    rng = random.Random(seed)
    net = _Net()
    made = [[net.op("x", "Placeholder", [], (batch, width))]]
    for _ in range(layers):
        row = []
        for _ in range(rng.choice((1, 1, 2))):
            a = rng.choice(made[-1])
            if len(made) > 1 and rng.random() < 0.5:
                b = rng.choice(rng.choice(made[:-1]))
                a = net.add(a, b) if b != a else a
            row.append(net.relu(net.dense(a, width)))
        made.append(row)
    out = made[-1][0]
    for other in made[-1][1:]:
        out = net.add(out, other)
    # Every node without a reader feeds the loss, so the whole DAG is trained.
    read = {i for entry in net.tape for i in entry[2:3] + entry[3:4]}
    for row in made[1:-1]:
        for n in row:
            if n not in read:
                out = net.add(out, n)
    return net.finish(out)


# sizes 0..3: about 20, 45, 70 and 100 nodes (U-Nets: 50, 80, 110)
_SIZES = {
    "chain": (2, 5, 8, 12),
    "residual": (1, 2, 3, 5),
    "unet": (1, 2, 3),
    "dag": (2, 4, 6, 8),
}


def family(name: str, size: int, seed: int = 0) -> tuple[str, bytes, str]:
    """``(label, GraphDef bytes, loss tensor)`` of one graph of family ``name``."""
    k = _SIZES[name][size]
    if name == "chain":
        return f"chain-{k}", *chain(k)
    if name == "residual":
        return f"residual-{k}", *residual(k)
    if name == "unet":
        return f"unet-{k}", *unet(k)
    return f"dag-{k}-s{seed}", *dag(k, seed)


def graphs(sizes: tuple[int, ...] = (0, 1, 2, 3)) -> Iterator[tuple[str, str, bytes, str]]:
    """``(family, label, bytes, loss)`` for every family and size (DAGs: two seeds each)."""
    for name in FAMILIES:
        for size in (s for s in sizes if s < len(_SIZES[name])):
            for seed in (0, 1) if name == "dag" else (0,):
                yield (name, *family(name, size, seed))
