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
the RSS peak is that run's (``VmHWM``; ``before`` is the peak after generating and
analysing the graph, before ``apply``; with ``--warm-gib`` the peak is ``apply``'s alone,
started again after the warm-up, whose own peak is printed beside it). Each part's page
faults and the kernel's CPU seconds in it (``getrusage``) come last: on a VM whose host
takes freed memory back, the first touch of memory is a fault to the host, and that time
is the kernel's (docs/scale.md, "Fresh memory"). ``--warm-gib G`` touches and frees G GiB
right before ``apply``, so that what it touches first was backed by the host moments
before::

    python benches/apply_once.py --nodes 1000000 --kind narrow --warm-gib 4
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def _rss_mib() -> float:
    """The process's peak resident memory (MiB) since it started or since `_reset_peak`."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


CLEAR_REFS = Path("/proc/self/clear_refs")


def _reset_peak() -> None:
    """Starts the peak of `_rss_mib` again from the memory held now (Linux: clear_refs 5)."""
    CLEAR_REFS.write_text("5")


def _gib(text: str) -> float:
    """A finite, non-negative number of GiB (argparse type)."""
    x = float(text)
    if not math.isfinite(x) or x < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a finite number of GiB, 0 or more")
    return x


def _clock() -> tuple[float, float, float, int]:
    """CPU and wall seconds, the kernel's CPU seconds and the page faults so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return time.process_time(), time.perf_counter(), r.ru_stime, r.ru_minflt + r.ru_majflt


def _since(t: tuple[float, float, float, int]) -> tuple[float, float, float, int]:
    now = _clock()
    return now[0] - t[0], now[1] - t[1], now[2] - t[2], now[3] - t[3]


def _touch_and_free(gib: float) -> None:
    """Touches ``gib`` GiB of new anonymous memory, a byte per page, and frees it."""
    import mmap

    import numpy as np

    size = int(gib * (1 << 30))
    if size <= 0:
        return
    m = mmap.mmap(-1, size)
    view = np.frombuffer(m, dtype=np.uint8)
    view[:: mmap.PAGESIZE] = 1
    del view
    m.close()


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
    ap.add_argument(
        "--warm-gib",
        type=_gib,
        default=0.0,
        help="touch and free this many GiB right before apply (the kernel then has that much "
        "memory the host backs: apply without the host's faults, docs/scale.md)",
    )
    args = ap.parse_args()
    if args.warm_gib > 0 and not os.access(CLEAR_REFS, os.W_OK):
        ap.error(f"--warm-gib needs {CLEAR_REFS} (Linux) to start the peak RSS again after it")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    # TensorFlow's import (seconds) is not the write-back's: done before the clocks run.
    from tensorflow.python.framework import op_def_registry  # noqa: F401

    import hybridplan
    from hybridplan._graphio import graph_source

    nodes = int(args.nodes)
    data = hybridplan.testing.synthetic_graphdef(nodes, args.kind)
    budget = hybridplan.analyze(data).peak_bytes // 2
    before = _rss_mib()
    warmed = ""
    if args.warm_gib > 0:
        _touch_and_free(args.warm_gib)
        warmed = f", warm-up peak {_rss_mib():.0f}"
        _reset_peak()  # the memory touched and freed is not apply's
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
        f"{plan_t[1] + write_t[1]:.2f} s | RSS peak {_rss_mib():.0f} MiB (before {before:.0f}"
        f"{warmed}) "
        f"| page faults plan {plan_t[3]:,} (kernel {plan_t[2]:.2f} s) write-back "
        f"{write_t[3]:,} (kernel {write_t[2]:.2f} s)"
    )


if __name__ == "__main__":
    main()
