"""One ``apply`` on a synthetic step, or its write-back alone, with the writer of now or
the one before issue 18's write-back work (tests/_rewriting_reference.py): CPU and wall
time of planning and write-back, and the process's peak RSS. Run old and new alternately
in one session to compare them on a loaded machine (docs/scale.md, section 3)::

    python benches/apply_once.py --nodes 1000000 --kind narrow --writer reference
    python benches/apply_once.py --nodes 1000000 --kind narrow --writer current

``--callgrind``: count the instructions of the write-back alone (the parse of the bytes and
the edits; with ``reference``, the parse ``apply`` did, then the copy and the edits) under
``valgrind --tool=callgrind --instr-atstart=no``, which this script switches on and off
around it::

    valgrind --tool=callgrind --instr-atstart=no python benches/apply_once.py \\
        --nodes 100000 --kind narrow --writer current --callgrind

The budget is half the analysed peak, as in benches/e2e.py. Each run is one process, so
the RSS peak is that run's (``getrusage``; ``before`` is the peak after generating and
analysing the graph, before ``apply``).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _clock() -> tuple[float, float]:
    return time.process_time(), time.perf_counter()


def _since(t: tuple[float, float]) -> tuple[float, float]:
    c, w = _clock()
    return c - t[0], w - t[1]


def _write_back(writer: str, data: bytes, spec: Any):
    from tensorflow.core.framework import graph_pb2

    if writer == "reference":  # what apply did: parse the bytes, then copy and edit
        import _rewriting_reference as reference

        return reference.rewrite_with_summary(
            graph_pb2.GraphDef.FromString(data), reference.spec_of(spec)
        )
    from hybridplan.rewriting import rewrite_with_summary

    return rewrite_with_summary(data, spec)  # what apply does now (data: Inlined)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=float, default=1e6)
    ap.add_argument("--kind", default="narrow")
    ap.add_argument("--writer", choices=("current", "reference"), default="current")
    ap.add_argument("--callgrind", action="store_true", help="instructions of the write-back")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    # TensorFlow's import (seconds) is not the write-back's: done before the clocks run.
    from tensorflow.python.framework import op_def_registry  # noqa: F401

    import hybridplan
    from hybridplan._graphio import graph_source

    nodes = int(args.nodes)
    data = hybridplan.testing.synthetic_graphdef(nodes, args.kind)
    budget = hybridplan.analyze(data).peak_bytes // 2
    before = _rss_mib()
    t = _clock()
    given = graph_source(data)  # as apply: the bytes are scanned once
    plan = hybridplan.plan(given, budget)
    plan_t = _since(t)
    # The reference writer takes the report's dicts (decoded here, off the clocks); the
    # current one, as apply, the Plan: the decisions as the core planned them.
    spec = plan.report if args.writer == "reference" else plan
    data = given.data if args.writer == "reference" else given
    if args.callgrind:
        ctl = ["callgrind_control", "-i"]
        subprocess.run([*ctl, "on", str(os.getpid())], check=True, capture_output=True)
    t = _clock()
    out = _write_back(args.writer, data, spec)
    write_t = _since(t)
    if args.callgrind:
        subprocess.run([*ctl, "off", str(os.getpid())], check=True, capture_output=True)
    print(
        f"{args.writer} {args.kind} {nodes}: swaps {len(plan.swaps)} recomputes "
        f"{len(plan.recomputes)}, nodes after {len(out.graph_def.node)} | plan cpu "
        f"{plan_t[0]:.2f} s wall {plan_t[1]:.2f} s | write-back cpu {write_t[0]:.2f} s wall "
        f"{write_t[1]:.2f} s | apply cpu {plan_t[0] + write_t[0]:.2f} s wall "
        f"{plan_t[1] + write_t[1]:.2f} s | RSS peak {_rss_mib():.0f} MiB (before {before:.0f})"
    )


if __name__ == "__main__":
    main()
