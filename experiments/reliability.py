"""The table of bad inputs and what each gets, for docs/reliability.md.

    python experiments/reliability.py

Each row feeds one bad input to the public API and prints the exception
class and its one-line message (or "ok").
"""

from __future__ import annotations

import math
import os
import pathlib
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from tensorflow.core.framework import graph_pb2

import hybridplan
import hybridplan.testing

ROOT = pathlib.Path(__file__).parents[1]
FIXTURE = (ROOT / "rust/core/tests/fixtures/small_cnn.pb").read_bytes()


def node(gd, name, op, inputs=(), shapes=((),), dtype=1):
    n = gd.node.add()
    n.name, n.op = name, op
    n.input.extend(inputs)
    n.attr["T"].type = dtype
    for s in shapes:
        sh = n.attr["_output_shapes"].list.shape.add()
        if s is None:
            sh.unknown_rank = True
        else:
            for d in s:
                sh.dim.add().size = d
    return n


def graph(*specs):
    gd = graph_pb2.GraphDef()
    for s in specs:
        node(gd, *s)
    return gd.SerializeToString()


def cases():
    tmp = pathlib.Path(tempfile.mkdtemp())
    while_gd = graph_pb2.GraphDef.FromString(FIXTURE)
    loop = next(n for n in while_gd.node if n.op == "Relu")  # a forward op becomes a While
    loop.op = "While"
    loop.attr["body"].func.name = "loop_body"
    yield "empty bytes", lambda: hybridplan.analyze(b"")
    yield "truncated GraphDef", lambda: hybridplan.analyze(FIXTURE[: len(FIXTURE) // 2])
    yield "garbage bytes", lambda: hybridplan.analyze(b"\xff\x13garbage\x00")
    yield (
        "a different message (a NodeDef)",
        lambda: hybridplan.analyze(
            graph_pb2.GraphDef.FromString(FIXTURE).node[5].SerializeToString()
        ),
    )
    yield "declared length past the end", lambda: hybridplan.analyze(b"\x0a\xff\xff\xff\xff\x0f")
    nested = _nested(100_000)
    yield "unknown field nested 10^5 deep", lambda: hybridplan.analyze(nested)
    yield "10 MB node name", lambda: hybridplan.analyze(graph(("n" * 10_000_000, "Relu")))
    yield "no nodes", lambda: hybridplan.analyze(graph_pb2.GraphDef())
    yield (
        "cycle",
        lambda: hybridplan.analyze(
            graph(
                ("a", "Relu", ["c"], [[4]]),
                ("b", "Relu", ["a"], [[4]]),
                ("c", "Relu", ["b"], [[4]]),
            )
        ),
    )
    yield (
        "input from a missing node",
        lambda: hybridplan.analyze(graph(("a", "Relu", ["zz"], [[4]]))),
    )
    yield (
        "input from a missing output",
        lambda: hybridplan.analyze(graph(("a", "Relu", [], [[4]]), ("b", "Relu", ["a:3"], [[4]]))),
    )
    yield (
        "duplicate node names",
        lambda: hybridplan.analyze(graph(("a", "Relu", [], [[4]]), ("a", "Relu", [], [[4]]))),
    )
    yield "unknown dtype", lambda: hybridplan.analyze(graph(("a", "Relu", [], [[4]], 77)))
    yield "unknown rank", lambda: hybridplan.analyze(graph(("a", "Relu", [], [None])))
    yield "partial shape", lambda: hybridplan.analyze(graph(("a", "Relu", [], [[-1, 4]])))
    yield (
        "size past 2^64 bytes",
        lambda: hybridplan.analyze(graph(("a", "Relu", [], [[2**40, 2**40]]))),
    )
    yield "negative dimension", lambda: hybridplan.analyze(graph(("a", "Relu", [], [[-7]])))
    yield "op with no outputs only", lambda: hybridplan.analyze(graph(("a", "NoOp", [], [])))
    yield (
        "no loss, no backward: plan",
        lambda: hybridplan.plan(
            graph(("x", "Placeholder", [], [[1000]]), ("y", "Relu", ["x"], [[1000]])), 4096
        ),
    )
    yield "While in the forward pass: plan", lambda: hybridplan.plan(while_gd, "1GiB")
    yield "budget 0", lambda: hybridplan.plan(FIXTURE, 0)
    yield "budget -1", lambda: hybridplan.plan(FIXTURE, -1)
    yield "budget NaN", lambda: hybridplan.plan(FIXTURE, math.nan)
    yield "budget 'lots'", lambda: hybridplan.plan(FIXTURE, "lots")
    yield "budget below the variables", lambda: hybridplan.plan(FIXTURE, 1000)
    yield (
        "budget no plan meets",
        lambda: hybridplan.plan(
            hybridplan.testing.synthetic_graphdef(3000),
            hybridplan.analyze(hybridplan.testing.synthetic_graphdef(3000)).persistent_bytes + 10,
        ),
    )
    yield "unknown device preset", lambda: hybridplan.plan(FIXTURE, "1GiB", device="tpu")
    (tmp / "dev.json").write_text('{"name": "x", "flops_f32": 1e12}')
    yield (
        "device file missing fields",
        lambda: hybridplan.plan(FIXTURE, "1GiB", device=tmp / "dev.json"),
    )
    (tmp / "dev.toml").write_text('name = "x"\nflops_f32 = [1e12')
    yield (
        "TOML device file with a syntax error",
        lambda: hybridplan.plan(FIXTURE, "1GiB", device=tmp / "dev.toml"),
    )
    yield "unknown strategy", lambda: hybridplan.plan(FIXTURE, "1GiB", strategy="fast")
    yield (
        "include scope matching no node",
        lambda: hybridplan.plan(FIXTURE, 1000, include_scopes=["no/such/scope"]),
    )
    yield (
        "a scope both included and excluded",
        lambda: hybridplan.plan(FIXTURE, 1000, include_scopes=["a"], exclude_scopes=["a/"]),
    )
    yield (
        "tflms parameters with strategy recompute",
        lambda: hybridplan.plan(FIXTURE, 1000, strategy="recompute", tflms={"threshold": 2}),
    )
    yield "tflms with an unknown key", lambda: hybridplan.plan(FIXTURE, "1GiB", tflms={"x": 1})
    yield "missing file", lambda: hybridplan.analyze("/no/such.pb")
    yield "a directory", lambda: hybridplan.analyze(tmp)
    yield "not a graph at all (an int)", lambda: hybridplan.analyze(42)
    yield "synthetic graph of 2^56 nodes", lambda: hybridplan.testing.synthetic_graphdef(2**56)
    yield "synthetic batch -1", lambda: hybridplan.testing.synthetic_graphdef(100, batch=-1)
    yield "persistent_bytes=-1", lambda: hybridplan.analyze(FIXTURE, persistent_bytes=-1)
    yield "live_at_peak(-1)", lambda: hybridplan.analyze(FIXTURE).live_at_peak(-1)
    yield "profile={-1: 1e-3}", lambda: hybridplan.plan(FIXTURE, "1GiB", profile={-1: 1e-3})
    yield "profile=[1, 2]", lambda: hybridplan.plan(FIXTURE, "1GiB", profile=[1, 2])
    yield (
        "tflms threshold 2^40",
        lambda: hybridplan.plan(FIXTURE, "1GiB", tflms={"threshold": 2**40}),
    )
    yield (
        "device memory_bytes=2^70",
        lambda: hybridplan.plan(
            FIXTURE, "auto", device=hybridplan.device_model("cpu", memory_bytes=2**70)
        ),
    )
    yield (
        "device flops_f32=NaN",
        lambda: hybridplan.plan(
            FIXTURE, "1GiB", device=hybridplan.device_model("cpu", flops_f32=math.nan)
        ),
    )
    yield "separate_buffers=1", lambda: hybridplan.plan(FIXTURE, "1GiB", separate_buffers=1)
    yield "loss=5", lambda: hybridplan.plan(FIXTURE, "1GiB", loss=5)
    partial = tmp / "partial.json"
    partial.write_text('{"swaps": [')
    yield "Plan.load of a partial JSON file", lambda: hybridplan.Plan.load(partial)
    binary = tmp / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00binary")
    yield "Plan.load of binary bytes", lambda: hybridplan.Plan.load(binary)
    old = tmp / "old.json"
    old.write_text('{"strategy": "hybrid", "budget": 1, "swaps": [], "recomputes": []}')
    yield (
        "Plan.load of a plan saved before the plan schema was versioned",
        lambda: hybridplan.Plan.load(old),
    )
    yield (
        "rewrite(gd, None)",
        lambda: hybridplan.rewrite(graph_pb2.GraphDef.FromString(FIXTURE), None),
    )


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _nested(depth: int) -> bytes:
    """An unknown length-delimited field (number 111) nested ``depth`` deep."""
    lengths = [0]
    for _ in range(depth - 1):
        lengths.append(2 + len(_varint(lengths[-1])) + lengths[-1])
    return b"".join(b"\xfa\x06" + _varint(n) for n in reversed(lengths))


def main() -> None:
    print("| input | result |\n|---|---|")
    for label, fn in cases():
        try:
            fn()
            result = "ok"
        except Exception as e:  # the table shows whatever comes out
            msg = " ".join(str(e).split())
            result = f"`{type(e).__name__}`: {msg[:220]}{'...' if len(msg) > 220 else ''}"
        print(f"| {label} | {result.replace('|', '/')} |")


if __name__ == "__main__":
    main()
