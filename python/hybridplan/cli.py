"""The ``hybridplan`` command line.

Exit codes: 0 success; 2 usage error; 3 bad input (unreadable or invalid
graph, bad argument); 4 unsupported graph; 5 no plan fits the budget;
1 any other hybridplan error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .errors import (
    BudgetError,
    HybridplanError,
    InvalidArgumentError,
    InvalidGraphError,
    UnsupportedGraphError,
)

__all__ = ["EXIT_BAD_INPUT", "EXIT_BUDGET", "EXIT_UNSUPPORTED", "main"]

EXIT_BAD_INPUT = 3
EXIT_UNSUPPORTED = 4
EXIT_BUDGET = 5


def _add_plan_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("graph", help="train-step GraphDef: binary .pb or text .pbtxt")
    p.add_argument(
        "--budget",
        default="auto",
        help="device memory the step may use, e.g. 16GiB, 32GB, or 'auto' (default)",
    )
    p.add_argument(
        "--device",
        default="v100-nvlink2",
        help="device preset or a JSON device file (default v100-nvlink2)",
    )
    p.add_argument("--loss", help="loss tensor 'node:index' (inferred when omitted)")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="hybridplan",
        description=__doc__.split("\n")[0],
        epilog="exit codes: 0 ok, 2 usage, 3 bad input, 4 unsupported graph, 5 budget unreachable",
    )
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("plan", help="plan a step and write the rewritten GraphDef")
    _add_plan_args(p)
    p.add_argument(
        "--strategy", default="hybrid", choices=["swap", "recompute", "hybrid-paper", "hybrid"]
    )
    p.add_argument("-o", "--output", help="where to write the rewritten GraphDef (.pb)")
    p.add_argument(
        "--target",
        default="gpu",
        choices=["gpu", "cpu-emulation"],
        help="which swap ops and devices the rewrite uses",
    )
    p.add_argument("--report", metavar="DIR", help="write report.html, memory.png, streams.png")
    p.add_argument("--json", metavar="PLAN.json", help="write the plan as JSON")

    p = sub.add_parser("analyze", help="peak memory, persistent bytes, largest tensors at the peak")
    p.add_argument("graph")
    p.add_argument("--loss")
    p.add_argument("--top", type=int, default=10, help="how many tensors to list (default 10)")

    p = sub.add_parser("compare", help="swap vs recompute vs hybrid side by side")
    _add_plan_args(p)

    p = sub.add_parser("trace", help="write the train-step GraphDef of a reference model")
    p.add_argument(
        "model", help="resnet50, resnet152, deeplabv3plus, unet3d, transformer, small_cnn"
    )
    p.add_argument("--size", type=int, help="input side (pixels, voxels) or sequence length")
    p.add_argument("--batch", type=int, help="batch size")
    p.add_argument("-o", "--output", required=True, help="output .pb")

    p = sub.add_parser("demo", help="trace, plan and run a built-in example end to end")
    p.add_argument(
        "--out", default="hybridplan-demo", help="report directory (default ./hybridplan-demo)"
    )
    p.add_argument("--quick", action="store_true", help="smaller model (for tests)")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep TensorFlow's start-up chatter out
    args = _parser().parse_args(argv)
    try:
        return int(_COMMANDS[args.command](args) or 0)
    except BudgetError as e:
        return _fail(e, EXIT_BUDGET)
    except UnsupportedGraphError as e:
        return _fail(e, EXIT_UNSUPPORTED)
    except (InvalidGraphError, InvalidArgumentError) as e:
        return _fail(e, EXIT_BAD_INPUT)
    except HybridplanError as e:
        return _fail(e, 1)
    except KeyboardInterrupt:
        print("hybridplan: interrupted", file=sys.stderr)
        return 130


def _fail(e: Exception, code: int) -> int:
    print(f"hybridplan: error: {' '.join(str(e).split())}", file=sys.stderr)
    return code


def _cmd_analyze(args: argparse.Namespace) -> int:
    from . import analyze
    from .report import fmt_bytes

    a = analyze(args.graph, loss=args.loss)
    print(f"nodes: {a.num_nodes}   loss: {a.loss}")
    print(
        f"peak: {fmt_bytes(a.peak_bytes)}   persistent: {fmt_bytes(a.persistent_bytes)}   "
        f"activations at peak: {fmt_bytes(a.activation_peak_bytes)}"
    )
    print("phases: " + ", ".join(f"{k} {v}" for k, v in a.phases.items()))
    print(f"largest tensors live at the peak (schedule position {a.peak_position}):")
    for t in a.live_at_peak(args.top):
        print(f"  {fmt_bytes(t.bytes):>11}  {t.dtype:<8} {list(t.shape)!s:<22} {t.op:<22} {t.name}")
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    from . import plan
    from .report import summary_table, write_report

    if args.output and not Path(args.output).parent.resolve().is_dir():
        raise InvalidArgumentError(
            f"the output directory {Path(args.output).parent} does not exist"
        )
    p = plan(args.graph, args.budget, strategy=args.strategy, device=args.device, loss=args.loss)
    print(summary_table({args.strategy: p}, p.budget))
    if args.output:
        from tensorflow.core.framework import graph_pb2

        from ._files import atomic_write
        from ._graphio import graph_bytes
        from .rewriting import rewrite

        gd = graph_pb2.GraphDef.FromString(graph_bytes(args.graph)[0])
        new = rewrite(gd, p.rewrite_spec(), target=args.target)
        atomic_write(Path(args.output), new.SerializeToString())
        print(f"wrote {args.output}")
    if args.json:
        p.save(args.json)
        print(f"wrote {args.json}")
    if args.report:
        files = write_report({args.strategy: p}, args.strategy, args.report)
        print("wrote " + ", ".join(str(f) for f in files.values()))
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from . import plan
    from .planning import STRATEGIES, parse_bytes
    from .report import summary_table

    plans = {}
    budget = None
    for s in STRATEGIES:
        try:
            plans[s] = plan(args.graph, args.budget, strategy=s, device=args.device, loss=args.loss)
            budget = plans[s].budget
        except BudgetError as e:
            plans[s] = None
            budget = e.budget or budget
    print(summary_table(plans, budget if budget else parse_bytes(args.budget)))
    return 0


def _cmd_trace(args: argparse.Namespace) -> int:
    from . import models
    from ._files import atomic_write

    kw = {k: v for k, v in (("size", args.size), ("batch", args.batch)) if v is not None}
    if args.model not in models.WORKLOADS:
        raise InvalidArgumentError(
            f"unknown model {args.model!r}: choose one of {', '.join(models.WORKLOADS)}"
        )
    if not Path(args.output).parent.resolve().is_dir():
        raise InvalidArgumentError(
            f"the output directory {Path(args.output).parent} does not exist"
        )
    print(f"tracing {args.model} {kw} ...", file=sys.stderr)
    traced = models.build(args.model, **kw).trace()
    atomic_write(Path(args.output), traced.graph_def.SerializeToString())
    print(f"wrote {args.output}: {len(traced.graph_def.node)} nodes, loss {traced.loss}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(args.out, quick=args.quick)


_COMMANDS = {
    "plan": _cmd_plan,
    "analyze": _cmd_analyze,
    "compare": _cmd_compare,
    "trace": _cmd_trace,
    "demo": _cmd_demo,
}

if __name__ == "__main__":
    sys.exit(main())
