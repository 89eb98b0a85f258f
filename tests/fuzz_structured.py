"""Structure-aware fuzzing of the whole path: plan, apply (rewrite), re-analyse.

    python tests/fuzz_structured.py --execs 100000 --out fuzz-out/   # the long run
    python tests/fuzz_structured.py --replay 1234                   # one execution again

Seeds are valid training steps: the real TensorFlow fixture
(``rust/core/tests/fixtures/small_cnn.pb``) and small synthetic steps of every
kind (``hybridplan.testing.synthetic_graphdef``). Each execution copies a seed and
applies one to three mutations at the node level (what the byte-level fuzzer of
``rust/core/tests/fuzz.rs`` rarely reaches past the decoder):

- an op's type replaced by another (element-wise, reductions, control flow,
  stateful, random, variable reads, ``IdentityN``, ``NoOp`` ...);
- a dtype attribute changed (half, double, int, bool, string, resource, variant);
- an output shape changed (a dimension scaled, zeroed, made unknown, huge; a
  dimension added or dropped; unknown rank);
- an edge moved to another node's output, a control edge added, an input
  dropped, an output index changed;
- a node deleted, duplicated or renamed.

Then it draws the options: a strategy of ``STRATEGIES``, a budget between the
persistent bytes and the peak (or a tiny or huge one), ``separate_buffers``,
``min_bytes``, a profile of measured times for a random subset of nodes,
TFLMS parameters, an include/exclude selection of op types and scopes present
in the graph; and checks what the standards demand (docs/reliability.md):

- every call returns or raises a :class:`hybridplan.HybridplanError`;
- a returned plan's predicted peak is within its budget;
- the plan applies: ``hybridplan.applying.rewrite_plan`` (what ``apply`` and
  ``hybridplan plan -o`` call) writes it (an error here is a plan/apply
  disagreement), except on a graph TensorFlow itself refuses to import (a node
  without an attribute its op requires, a read of an output its op lacks, an op
  TensorFlow does not know): the core plans without TensorFlow's op registry,
  and ``rewrite_plan`` then raises ``InvalidGraphError`` in TensorFlow's words,
  counted apart;
- the rewritten GraphDef analyses (no cycle, no dangling input).

A finding is saved with its mutated graph and whether TensorFlow imports that
graph (``tensorflow_imports_input``).

Every execution is reproducible from its index (``--replay``): its random
generator is seeded with ``(--seed, index)``.

Complexity: O(graph) per execution (a few hundred nodes per seed).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from tensorflow.core.framework import graph_pb2, types_pb2

import hybridplan
import hybridplan.testing
from hybridplan.applying import rewrite_plan

ROOT = pathlib.Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "rust/core/tests/fixtures/small_cnn.pb"

OPS = [
    "Relu",
    "Identity",
    "IdentityN",
    "AddV2",
    "AddN",
    "Mul",
    "MatMul",
    "Conv2D",
    "Cast",
    "Sum",
    "Mean",
    "Reshape",
    "Const",
    "Placeholder",
    "NoOp",
    "ReadVariableOp",
    "AssignVariableOp",
    "VarHandleOp",
    "While",
    "If",
    "Switch",
    "Merge",
    "StatefulPartitionedCall",
    "RandomUniform",
    "StatelessRandomUniformV2",
    "FusedBatchNormV3",
    "BiasAddGrad",
    "ReluGrad",
    "Softmax",
    "Shape",
    "ZerosLike",
    "DeepCopy",
    "Unknown_Op",
]
DTYPES = [
    types_pb2.DT_FLOAT,
    types_pb2.DT_HALF,
    types_pb2.DT_DOUBLE,
    types_pb2.DT_BFLOAT16,
    types_pb2.DT_INT32,
    types_pb2.DT_INT64,
    types_pb2.DT_BOOL,
    types_pb2.DT_STRING,
    types_pb2.DT_RESOURCE,
    types_pb2.DT_VARIANT,
    0,
    999,
]
TARGETS = ["gpu", "cpu-emulation"]


def seeds() -> dict[str, bytes]:
    """The seed corpus: the real fixture and one small synthetic step per kind."""
    out = {"small_cnn": FIXTURE.read_bytes()}
    for kind in ("residual", "transformer", "mixed", "dag"):
        out[kind] = hybridplan.testing.synthetic_graphdef(120, kind, batch=2, size=8, channels=8)
    return out


# ----------------------------------------------------------------------------- mutations


def _inputs(n):
    return [i for i, s in enumerate(n.input) if not s.startswith("^")]


def mutate(rng: random.Random, gd: graph_pb2.GraphDef) -> list[str]:
    """Applies 1-3 node-level mutations in place; returns what was done."""
    done = []
    for _ in range(rng.randint(1, 3)):
        if not gd.node:
            break
        k = rng.randrange(9)
        i = rng.randrange(len(gd.node))
        n = gd.node[i]
        if k == 0:
            n.op = rng.choice(OPS)
            done.append(f"op {n.name} -> {n.op}")
        elif k == 1:
            keys = [a for a in ("T", "dtype", "DstT", "SrcT", "out_type") if a in n.attr]
            key = rng.choice(keys) if keys else "T"
            n.attr[key].type = rng.choice(DTYPES)
            done.append(f"dtype {n.name}.{key} -> {n.attr[key].type}")
        elif k == 2:
            shapes = n.attr["_output_shapes"].list.shape
            if not shapes:
                continue
            sh = shapes[rng.randrange(len(shapes))]
            r = rng.randrange(6)
            if r == 0 and sh.dim:
                d = sh.dim[rng.randrange(len(sh.dim))]
                d.size = rng.choice([0, -1, 1, 2 * max(1, d.size), 2**31, 2**40, -7])
            elif r == 1:
                sh.dim.add().size = rng.choice([1, 2, 3, 64])
            elif r == 2 and sh.dim:
                del sh.dim[rng.randrange(len(sh.dim))]
            elif r == 3:
                sh.unknown_rank = True
            elif r == 4:
                shapes.add()
            else:
                del shapes[rng.randrange(len(shapes))]
            done.append(f"shape {n.name} ({r})")
        elif k == 3:
            data = _inputs(n)
            src = gd.node[rng.randrange(len(gd.node))]
            text = src.name + (f":{rng.randrange(3)}" if rng.random() < 0.3 else "")
            if data:
                n.input[rng.choice(data)] = text
            else:
                n.input.insert(0, text)
            done.append(f"edge {text} -> {n.name}")
        elif k == 4:
            src = gd.node[rng.randrange(len(gd.node))]
            n.input.append("^" + src.name)
            done.append(f"control {src.name} -> {n.name}")
        elif k == 5 and n.input:
            j = rng.randrange(len(n.input))
            done.append(f"drop input {n.input[j]} of {n.name}")
            del n.input[j]
        elif k == 6:
            done.append(f"delete {n.name}")
            del gd.node[i]
        elif k == 7:
            c = gd.node.add()
            c.CopyFrom(n)
            if rng.random() < 0.7:
                c.name = n.name + "/dup"
            done.append(f"duplicate {n.name} as {c.name}")
        else:
            data = _inputs(n)
            if data:
                j = rng.choice(data)
                base = n.input[j].split(":")[0]
                n.input[j] = f"{base}:{rng.randrange(4)}"
                done.append(f"output index {n.input[j]} -> {n.name}")
    return done


# ----------------------------------------------------------------------------- options


def options(rng: random.Random, gd: graph_pb2.GraphDef, a: hybridplan.Analysis) -> dict:
    strategy = rng.choice(hybridplan.STRATEGIES)
    lo, hi = a.persistent_bytes, a.peak_bytes
    r = rng.random()
    if r < 0.8:
        budget = lo + int((hi - lo) * rng.uniform(0.2, 1.05))
    elif r < 0.9:
        budget = max(1, lo - 1)
    else:
        budget = hi * 4
    opts: dict = {
        "strategy": strategy,
        "budget": max(1, budget),
        "separate_buffers": rng.random() < 0.3,
        "min_bytes": rng.choice([0, 1, 1024, 1 << 16]),
    }
    if rng.random() < 0.3:
        idx = rng.sample(range(len(gd.node)), k=min(len(gd.node), rng.randint(1, 20)))
        opts["profile"] = {i: rng.choice([0.0, 1e-6, 1e-3, rng.uniform(0, 1e-2)]) for i in idx}
    if rng.random() < 0.2 and strategy in ("tflms", "swap", "hybrid-paper", "hybrid"):
        opts["tflms"] = {
            "threshold": rng.randrange(0, 200),
            "ahead": rng.randrange(0, 40),
            "groupby": rng.randrange(0, 40),
        }
    if rng.random() < 0.2 and gd.node:
        n = gd.node[rng.randrange(len(gd.node))]
        key = rng.choice(["include_types", "exclude_types", "include_scopes", "exclude_scopes"])
        value = n.op if key.endswith("types") else n.name.split("/")[0]
        opts[key] = [value]
    return opts


# ----------------------------------------------------------------------------- one execution


@dataclass
class Stats:
    execs: int = 0
    outcomes: Counter = field(default_factory=Counter)
    findings: list = field(default_factory=list)


def execute(
    index: int, seed: int, corpus: dict[str, bytes], stats: Stats, out: pathlib.Path | None
):
    """One execution; records its outcome and any finding in ``stats``."""
    rng = random.Random(seed * 1_000_003 + index)
    name = rng.choice(sorted(corpus))
    gd = graph_pb2.GraphDef.FromString(corpus[name])
    what = mutate(rng, gd)
    data = gd.SerializeToString()
    stats.execs += 1
    stage, opts = "analyze", {}
    try:
        sb = rng.random() < 0.3
        a = hybridplan.analyze(data, separate_buffers=sb)
        opts = options(rng, gd, a)
        stage = "plan"
        p = hybridplan.plan(data, device=rng.choice(["v100-nvlink2", "cpu"]), **opts)
        if p.planned["peak_bytes"] > p.budget:
            raise AssertionError(f"plan peak {p.planned['peak_bytes']} over budget {p.budget}")
        stage = "apply"
        try:
            new = rewrite_plan(gd, p, rng.choice(TARGETS)).graph_def
        except hybridplan.InvalidGraphError as e:
            if not str(e).startswith("TensorFlow does not accept this graph"):
                raise
            stats.outcomes["apply: InvalidGraphError (TensorFlow rejects the input too)"] += 1
            return
        stage = "re-analyze"
        hybridplan.analyze(
            new.SerializeToString(),
            loss=p.report.get("loss"),
            separate_buffers=opts["separate_buffers"],
        )
        stats.outcomes["planned, applied, re-analysed"] += 1
    except hybridplan.HybridplanError as e:
        if stage in ("apply", "re-analyze"):
            _finding(stats, out, index, name, what, opts, stage, e, data)
        else:
            stats.outcomes[f"{stage}: {type(e).__name__}"] += 1
    except Exception as e:
        _finding(stats, out, index, name, what, opts, stage, e, data)


def _finding(stats, out, index, seed_name, what, opts, stage, e, data) -> None:
    kind = f"{stage}: {type(e).__name__}"
    stats.outcomes["FINDING " + kind] += 1
    rec = {
        "index": index,
        "seed": seed_name,
        "mutations": what,
        "options": opts,
        "stage": stage,
        "error": f"{type(e).__name__}: {str(e)[:500]}",
    }
    if not isinstance(e, hybridplan.HybridplanError):
        rec["traceback"] = traceback.format_exc()[-2000:]
    rec["tensorflow_imports_input"] = tf_accepts(data)
    stats.findings.append(rec)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / f"finding_{index}.pb").write_bytes(data)
        with open(out / "findings.jsonl", "a") as f:
            f.write(json.dumps(rec, default=str) + "\n")


def tf_accepts(data: bytes) -> str:
    """Whether TensorFlow itself imports the mutated graph ("yes", or its error):
    a finding on a graph TensorFlow rejects is an input the core should refuse,
    not a plan that TensorFlow could run."""
    import tensorflow as tf

    try:
        with tf.Graph().as_default():
            tf.graph_util.import_graph_def(graph_pb2.GraphDef.FromString(data), name="")
        return "yes"
    except Exception as e:
        return f"no: {type(e).__name__}: {str(e)[:200]}"


def run(
    execs: int,
    seed: int = 0,
    start: int = 0,
    out: pathlib.Path | None = None,
    report_every: int = 0,
) -> Stats:
    corpus = seeds()
    stats = Stats()
    t0 = time.perf_counter()
    for i in range(start, start + execs):
        execute(i, seed, corpus, stats, out)
        if report_every and stats.execs % report_every == 0:
            _progress(stats, time.perf_counter() - t0, out)
    return stats


def _progress(stats: Stats, secs: float, out: pathlib.Path | None) -> None:
    line = {"execs": stats.execs, "seconds": round(secs), "outcomes": dict(stats.outcomes)}
    print(json.dumps(line), flush=True)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "progress.json").write_text(json.dumps(line, indent=1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--execs", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start", type=int, default=0, help="first execution index")
    ap.add_argument("--out", type=pathlib.Path, help="directory for findings and progress")
    ap.add_argument("--replay", type=int, help="run one execution index and print it")
    args = ap.parse_args()
    if args.replay is not None:
        stats = Stats()
        execute(args.replay, args.seed, seeds(), stats, None)
        print(
            json.dumps(
                {"outcomes": dict(stats.outcomes), "findings": stats.findings},
                indent=1,
                default=str,
            )
        )
        return 0
    t0 = time.perf_counter()
    stats = run(args.execs, args.seed, args.start, args.out, report_every=1000)
    _progress(stats, time.perf_counter() - t0, args.out)
    return 1 if stats.findings else 0


if __name__ == "__main__":
    sys.exit(main())
