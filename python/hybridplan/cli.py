"""The ``hybridplan`` command line.

Exit codes: 0 success; 2 usage error; 3 bad input (unreadable or invalid
graph, bad argument); 4 unsupported graph; 5 no plan fits the budget;
6 (``trial``) the rewritten step differed from the original or its measured
peak exceeded the budget; 1 any other hybridplan error.
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
from .planning import STRATEGIES

__all__ = ["EXIT_BAD_INPUT", "EXIT_BUDGET", "EXIT_MISMATCH", "EXIT_UNSUPPORTED", "main"]

EXIT_BAD_INPUT = 3
EXIT_UNSUPPORTED = 4
EXIT_BUDGET = 5
EXIT_MISMATCH = 6


#: Reference models of ``hybridplan.models`` (listed here so --help needs no TensorFlow).
_MODELS = (
    "resnet50",
    "resnet152",
    "deeplabv3plus",
    "unet3d",
    "transformer",
    "small_cnn",
    "small_resnet",
)


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
        help="device preset or a JSON/TOML device file (default v100-nvlink2)",
    )
    p.add_argument("--loss", help="loss tensor 'node:index' (inferred when omitted)")
    _add_options(p)


def _add_options(p: argparse.ArgumentParser) -> None:
    """Options of the planner shared by plan, compare and trial."""
    p.add_argument(
        "--min-bytes", default="64KiB", help="leave smaller buffers alone (default 64KiB)"
    )
    for flag, what in (
        ("--include-scope", "only touch ops in this name scope"),
        ("--exclude-scope", "never touch ops in this name scope"),
        ("--include-type", "only touch ops of this type (e.g. Conv2D)"),
        ("--exclude-type", "never touch ops of this type"),
    ):
        p.add_argument(flag, action="append", default=[], metavar="NAME", help=what + " (repeat)")


def _plan_options(args: argparse.Namespace) -> dict:
    from .planning import parse_bytes

    return {
        "min_bytes": parse_bytes(args.min_bytes, "--min-bytes"),
        "include_scopes": args.include_scope,
        "exclude_scopes": args.exclude_scope,
        "include_types": args.include_type,
        "exclude_types": args.exclude_type,
    }


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="hybridplan",
        description=__doc__.split("\n")[0],
        epilog="exit codes: 0 ok, 2 usage, 3 bad input, 4 unsupported graph, "
        "5 budget unreachable, 6 trial: result differs or over budget",
    )
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("plan", help="plan a step and write the rewritten GraphDef")
    _add_plan_args(p)
    p.add_argument("--strategy", default="hybrid", choices=STRATEGIES)
    p.add_argument("-o", "--output", help="where to write the rewritten GraphDef (.pb)")
    p.add_argument(
        "--target",
        default="gpu",
        choices=["gpu", "cpu-emulation"],
        help="which swap ops and devices the rewrite uses",
    )
    p.add_argument("--report", metavar="DIR", help="write report.html, memory.png, streams.png")
    p.add_argument("--json", metavar="PLAN.json", help="write the plan as JSON")

    p = sub.add_parser(
        "replay",
        help="write a plan's replay program (JSON) for experiments/gpu/runner.py",
        description="Plans the step (or reads --plan) and writes the replay program: the "
        "compute stream's ops with shapes and predicted times, every swap and clone, and the "
        "predicted timeline (docs/gpu.md).",
    )
    _add_plan_args(p)
    p.add_argument("--strategy", default="hybrid", choices=STRATEGIES)
    p.add_argument("--plan", metavar="PLAN.json", help="replay this saved plan instead of planning")
    p.add_argument("-o", "--output", required=True, help="where to write the replay (.json)")

    p = sub.add_parser("analyze", help="peak memory, persistent bytes, largest tensors at the peak")
    p.add_argument("graph")
    p.add_argument("--loss")
    p.add_argument("--top", type=int, default=10, help="how many tensors to list (default 10)")

    p = sub.add_parser("compare", help="swap vs recompute vs hybrid side by side")
    _add_plan_args(p)

    p = sub.add_parser("trace", help="write the train-step GraphDef of a reference model")
    p.add_argument("model", help=", ".join(_MODELS))
    p.add_argument("--size", type=int, help="input side (pixels, voxels) or sequence length")
    p.add_argument("--batch", type=int, help="batch size")
    p.add_argument("-o", "--output", required=True, help="output .pb")

    p = sub.add_parser(
        "trial",
        help="plan a reference model, run it next to the original on CPU emulation, measure",
        description="Traces a reference model, plans it for the 'cpu' device model, rewrites "
        "it for CPU emulation (two logical CPUs: device and host) and runs both steps: "
        "prints whether losses and weights match bit for bit and the measured peaks; "
        "--report draws the measured memory curve next to the predicted ones.",
    )
    p.add_argument("model", help=", ".join(_MODELS))
    p.add_argument("--size", type=int, help="input side (pixels, voxels) or sequence length")
    p.add_argument("--batch", type=int, help="batch size")
    p.add_argument(
        "--budget", help="device bytes incl. variables (default: see --fraction), e.g. 40MiB"
    )
    p.add_argument(
        "--fraction",
        type=float,
        help="budget = variables + this fraction of the original's activation peak (0.7)",
    )
    p.add_argument("--strategy", default="hybrid", choices=STRATEGIES)
    p.add_argument("--steps", type=int, default=3, help="steps measured (default 3)")
    p.add_argument("--report", metavar="DIR", help="write report.html with the measured curve")
    _add_options(p)
    p.set_defaults(min_bytes="4KiB")

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


def _check_out_dir(path: str) -> None:
    if not Path(path).parent.resolve().is_dir():
        raise InvalidArgumentError(f"the output directory {Path(path).parent} does not exist")


def _cmd_plan(args: argparse.Namespace) -> int:
    from . import plan
    from ._progress import stages
    from .report import summary_table, write_report

    if args.output:
        _check_out_dir(args.output)
    with stages(3 if args.output else 1) as stage:
        stage("planning")
        p = plan(
            args.graph,
            args.budget,
            strategy=args.strategy,
            device=args.device,
            loss=args.loss,
            **_plan_options(args),
        )
        if args.output:
            from tensorflow.core.framework import graph_pb2

            from ._files import atomic_write
            from ._graphio import graph_bytes
            from .rewriting import rewrite

            stage("rewriting")
            gd = graph_pb2.GraphDef.FromString(graph_bytes(args.graph)[0])
            new = rewrite(gd, p.rewrite_spec(), target=args.target)
            stage("writing")
            atomic_write(Path(args.output), new.SerializeToString())
    print(summary_table({args.strategy: p}, p.budget))
    if args.output:
        print(f"wrote {args.output}")
    if args.json:
        p.save(args.json)
        print(f"wrote {args.json}")
    if args.report:
        files = write_report({args.strategy: p}, args.strategy, args.report)
        print("wrote " + ", ".join(str(f) for f in files.values()))
    return 0


def _cmd_replay(args: argparse.Namespace) -> int:
    from .replaying import replay, save_replay

    _check_out_dir(args.output)
    options = {} if args.plan else _plan_options(args)
    r = replay(
        args.graph,
        args.plan,
        args.budget,
        strategy=args.strategy,
        device=args.device,
        loss=args.loss,
        **options,
    )
    save_replay(r, args.output)
    p = r["predicted"]
    print(
        f"wrote {args.output}: {len(r['ops'])} ops, {len(r['swaps'])} swaps, "
        f"{len(r['clones'])} recomputes; predicted step {p['step_time_s']:.4g} s, "
        f"peak {p['peak_bytes']} bytes on {r['device']['name']}"
    )
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from . import plan
    from ._progress import stages
    from .planning import parse_bytes
    from .report import summary_table

    plans = {}
    budget = None
    with stages(len(STRATEGIES)) as stage:
        for s in STRATEGIES:
            stage(f"planning: {s}")
            try:
                plans[s] = plan(
                    args.graph,
                    args.budget,
                    strategy=s,
                    device=args.device,
                    loss=args.loss,
                    **_plan_options(args),
                )
                budget = plans[s].budget
            except BudgetError as e:
                plans[s] = None
                budget = e.budget or budget
    print(summary_table(plans, budget if budget else parse_bytes(args.budget)))
    return 0


def _model_args(args: argparse.Namespace) -> dict:
    if args.model not in _MODELS:
        raise InvalidArgumentError(
            f"unknown model {args.model!r}: choose one of {', '.join(_MODELS)}"
        )
    return {k: v for k, v in (("size", args.size), ("batch", args.batch)) if v is not None}


def _cmd_trace(args: argparse.Namespace) -> int:
    from ._files import atomic_write
    from ._progress import stages

    kw = _model_args(args)
    _check_out_dir(args.output)
    with stages(3) as stage:
        stage(f"building {args.model}")
        from . import models

        w = models.build(args.model, **kw)
        stage("tracing the train step")
        traced = w.trace()
        stage("writing")
        atomic_write(Path(args.output), traced.graph_def.SerializeToString())
    print(f"wrote {args.output}: {len(traced.graph_def.node)} nodes, loss {traced.loss}")
    return 0


def _cmd_trial(args: argparse.Namespace) -> int:
    from .runner import setup_cpu_emulation

    kw = _model_args(args)
    if args.report:
        Path(args.report).mkdir(parents=True, exist_ok=True)
    setup_cpu_emulation(2)  # before TensorFlow starts
    import tensorflow as tf

    from . import models
    from ._progress import stages
    from .report import fmt_bytes, summary_table, write_report
    from .trial import trial

    tf.config.experimental.enable_op_determinism()
    with stages(2) as stage:
        stage(f"building {args.model}")
        w = models.build(args.model, **kw)
        stage("tracing, planning, running both steps")
        t = trial(
            w,
            args.budget,
            fraction=args.fraction,
            strategy=args.strategy,
            steps=args.steps,
            **_plan_options(args),
        )
    o, n = t.original.step_time, t.planned.step_time
    lines = [
        f"inserted: {t.inserted}",
        f"losses and weights over {len(t.planned.losses)} steps: "
        + ("equal bit for bit" if t.same_losses and t.same_weights else "DIFFERENT"),
        "device activation memory (variables excluded): "
        f"budget {fmt_bytes(t.activation_budget)}, predicted {fmt_bytes(t.predicted_peak)}, "
        f"measured {fmt_bytes(t.planned.device_peak)} "
        f"({t.peak_ratio:.0%} of the original's {fmt_bytes(t.original.device_peak)})",
        f"measured step time: {o * 1e3:.1f} ms -> {n * 1e3:.1f} ms ({n / o:.2f}x)",
    ]
    print(summary_table({args.strategy: t.plan}, t.plan.budget))
    print("\n".join(lines))
    if args.report:
        secs, used = t.planned.timeline
        persistent = t.plan.report["persistent_bytes"]
        files = write_report(
            {args.strategy: t.plan},
            args.strategy,
            args.report,
            measured=(secs, used + persistent),
            notes=lines,
        )
        print("wrote " + ", ".join(str(f) for f in files.values()))
    if not t.ok:
        print(
            "hybridplan: error: "
            + (
                "the rewritten step's measured peak exceeds the budget"
                if t.same_losses and t.same_weights
                else "the rewritten step computed something different from the original"
            ),
            file=sys.stderr,
        )
        return EXIT_MISMATCH
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(args.out, quick=args.quick)


_COMMANDS = {
    "plan": _cmd_plan,
    "analyze": _cmd_analyze,
    "compare": _cmd_compare,
    "replay": _cmd_replay,
    "trace": _cmd_trace,
    "trial": _cmd_trial,
    "demo": _cmd_demo,
}

if __name__ == "__main__":
    sys.exit(main())
