"""Plan which activations of a TensorFlow training step to swap to host memory or
recompute so that it fits a device memory budget, and write the plan back into
its GraphDef as real ops.

Start with ``hybridplan demo``, or ``hybridplan trace resnet50 --size 2048 --batch 2
-o step.pb``, then ``hybridplan analyze step.pb`` and ``hybridplan compare step.pb
--budget 8GiB``; ``hybridplan COMMAND --help`` lists each command's options.

Exit codes: 0 success; 2 usage error; 3 bad input (unreadable or invalid
graph, bad argument); 4 unsupported graph; 5 no plan fits the budget;
6 (``trial``) the rewritten step differed from the original or its measured
peak exceeded the budget; 1 any other hybridplan error; 141 the output pipe
was closed (``hybridplan analyze step.pb | head``).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .errors import (
    BudgetError,
    HybridplanError,
    InvalidArgumentError,
    InvalidGraphError,
    UnsupportedGraphError,
)
from .planning import STRATEGIES, STRATEGY_RULES

__all__ = ["EXIT_BAD_INPUT", "EXIT_BUDGET", "EXIT_MISMATCH", "EXIT_UNSUPPORTED", "main"]

EXIT_BAD_INPUT = 3
EXIT_UNSUPPORTED = 4
EXIT_BUDGET = 5
EXIT_MISMATCH = 6


#: Input size and batch of each reference model when --size/--batch are omitted.
_MODEL_DEFAULTS = (
    "the model's own: resnet50/resnet152 224x224 batch 2, deeplabv3plus 512 batch 1, "
    "unet3d 32^3 batch 1, transformer 128 tokens batch 2, small_cnn 16 batch 2, "
    "small_resnet 32 batch 8"
)


class _Help(argparse.RawDescriptionHelpFormatter):
    """Every option's default after its help (unless the help states it, or there
    is none to state); descriptions keep their line breaks."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        d = action.default
        if "default" in text or d in (None, [], False, argparse.SUPPRESS):
            return text
        if not action.option_strings:
            return text
        return f"{text} (default: {d})"


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
        help="device memory the step may use, variables included, e.g. 16GiB, 32GB, "
        "123456789; 'auto' is the device's memory less an 8%% reserve",
    )
    p.add_argument(
        "--device",
        default="v100-nvlink2",
        help="device preset (cpu, v100-nvlink2, a100-pcie4, h100-pcie5, h200-pcie5, "
        "gh200-c2c) or a JSON/TOML device file",
    )
    _add_loss(p)
    _add_host_budget(p)
    _add_options(p)


def _add_loss(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--loss",
        help="loss tensor 'node:index' (default: inferred from the graph, the scalar that "
        "the gradients start from)",
    )


def _add_host_budget(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--host-budget",
        default="auto",
        help="host memory the swapped tensors may hold at once, e.g. 64GiB, 'none', or "
        "'auto' (this machine's memory less a reserve when planning for it, no bound for "
        "a GPU device planned on a machine without a GPU)",
    )


def _host_budget_arg(value: str) -> str | None:
    return None if value.strip().lower() == "none" else value


def _add_options(p: argparse.ArgumentParser) -> None:
    """Options of the planner shared by plan, compare and trial."""
    p.add_argument("--min-bytes", default="64KiB", help="leave smaller buffers alone")
    for flag, what in (
        ("--include-scope", "only touch ops in this name scope"),
        ("--exclude-scope", "never touch ops in this name scope"),
        ("--include-type", "only touch ops of this type (e.g. Conv2D)"),
        ("--exclude-type", "never touch ops of this type"),
    ):
        p.add_argument(
            flag, action="append", default=[], metavar="NAME", help=what + " (repeatable)"
        )


def _plan_options(args: argparse.Namespace) -> dict:
    from .planning import parse_bytes

    host = getattr(args, "host_budget", "auto")
    return {
        "host_budget": _host_budget_arg(host),
        "min_bytes": parse_bytes(args.min_bytes, "--min-bytes"),
        "include_scopes": args.include_scope,
        "exclude_scopes": args.exclude_scope,
        "include_types": args.include_type,
        "exclude_types": args.exclude_type,
    }


def _parser() -> argparse.ArgumentParser:
    doc = __doc__.replace("``", "").split("\n\n")  # the docstring's RST, as plain text
    ap = argparse.ArgumentParser(
        prog="hybridplan",
        description="\n\n".join(doc[:2]),
        epilog=doc[2],
        formatter_class=_Help,
    )
    from . import __version__

    ap.add_argument("--version", action="version", version=f"hybridplan {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add = _subparser_adder(sub)

    p = add("plan", help="plan a step and write the rewritten GraphDef")
    _add_plan_args(p)
    _add_strategy(p)
    p.add_argument(
        "-o",
        "--output",
        help="where to write the rewritten GraphDef (.pb); without it the plan is only printed",
    )
    p.add_argument(
        "--target",
        default="gpu",
        choices=["gpu", "cpu-emulation"],
        help="swap ops and devices of the rewrite: gpu (Identity copies between "
        "/device:GPU:0 and /device:CPU:0) or cpu-emulation (DeepCopy between two logical CPUs)",
    )
    p.add_argument("--report", metavar="DIR", help="write report.html, memory.png, streams.png")
    p.add_argument("--json", metavar="PLAN.json", help="write the plan as JSON")

    p = add(
        "replay",
        help="write a plan's replay program (JSON) for replay/runner.py",
        description="Plans the step (or reads --plan) and writes the replay program: the "
        "compute stream's ops with shapes and predicted times, every swap and clone, and the "
        "predicted timeline (docs/gpu.md).",
    )
    _add_plan_args(p)
    _add_strategy(p)
    p.add_argument("--plan", metavar="PLAN.json", help="replay this saved plan instead of planning")
    p.add_argument("-o", "--output", required=True, help="where to write the replay (.json)")

    p = add("analyze", help="peak memory, persistent bytes, largest tensors at the peak")
    p.add_argument("graph", help="train-step GraphDef: binary .pb or text .pbtxt")
    _add_loss(p)
    p.add_argument("--top", type=int, default=10, help="how many tensors to list")
    p.add_argument(
        "--device",
        help="device preset or JSON/TOML device file whose kernels' scratch to model, as "
        "plan takes it (default: this machine's CPU kernels, as measure sees them)",
    )

    p = add("compare", help="every strategy side by side (exit 5 when none fits)")
    _add_plan_args(p)

    p = add("trace", help="write the train-step GraphDef of a reference model")
    _add_model_args(p)
    p.add_argument("-o", "--output", required=True, help="output .pb")

    p = add(
        "trial",
        help="plan a reference model, run it next to the original on CPU emulation, measure",
        description="Traces a reference model, plans it for the 'cpu' device model, rewrites "
        "it for CPU emulation (two logical CPUs: device and host) and runs both steps: "
        "prints whether losses and weights match bit for bit and the measured peaks; "
        "--report draws the measured memory curve below the predicted ones.",
    )
    _add_model_args(p)
    p.add_argument(
        "--budget",
        help="device bytes incl. variables, e.g. 40MiB (default: from --fraction)",
    )
    p.add_argument(
        "--fraction",
        type=float,
        help="budget = variables + the largest kernel scratch of one op + this fraction of "
        "the rest of the original's activation peak (1: the original's peak; default: 0.7, "
        "or the smallest fraction any plan reaches when 0.7 is out of reach)",
    )
    _add_strategy(p)
    p.add_argument(
        "--steps",
        type=int,
        default=3,
        help="steps traced for memory, and as many timed, after one warm-up step: the "
        "losses and weights of all of them are compared",
    )
    p.add_argument("--report", metavar="DIR", help="write report.html with the measured curve")
    _add_options(p)
    p.set_defaults(min_bytes="4KiB")

    p = add(
        "fit",
        help="the largest input size (or batch) each strategy fits on a device",
        description="Traces a reference model at the sizes where each strategy's smallest "
        "peak is predicted to meet the budget (two per such size) and plans each traced "
        "step with every strategy still undecided there: prints the largest size (or batch) "
        "that fits the device's memory less a reserve, its predicted step time and "
        "throughput, per strategy and without a plan. Says how many probes are left and "
        "about how long they take, after the first trace and with each probe.",
    )
    p.add_argument("model", help=", ".join(_MODELS))
    p.add_argument("--device", default="v100-nvlink2", help="device preset or file")
    p.add_argument("--over", default="size", choices=["size", "batch"], help="what grows")
    p.add_argument(
        "--strategy",
        action="append",
        choices=STRATEGIES,
        help="strategies to search (repeat; default all); 'none' is always reported",
    )
    p.add_argument("--budget", help="device bytes (default: the device's memory less 8%%)")
    _add_host_budget(p)
    p.add_argument("--size", type=int, help="with --over batch: the input size")
    p.add_argument("--batch", type=int, help="with --over size: the batch size")
    p.add_argument("--start", type=int, help="smallest size (or batch) tried")
    p.add_argument("--limit", type=int, default=1 << 16, help="largest size (or batch) tried")
    p.add_argument("--tol", type=float, default=0.03, help="relative precision")
    p.add_argument("--cache", metavar="DIR", help="keep traced graphs here for later runs")

    p = add("demo", help="trace, plan and run a built-in example end to end")
    p.add_argument("--out", default="hybridplan-demo", help="report directory")
    p.add_argument("--quick", action="store_true", help="smaller model (for tests)")
    return ap


def _subparser_adder(sub: Any) -> Any:
    """``add(name, help=...)``: a sub-command whose description is its help and whose
    options show their defaults."""

    def add(name: str, **kw: Any) -> argparse.ArgumentParser:
        kw.setdefault("description", kw.get("help", "").capitalize() + ".")
        return sub.add_parser(name, formatter_class=_Help, **kw)

    return add


def _add_strategy(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--strategy",
        default="hybrid",
        choices=STRATEGIES,
        help="; ".join(f"{name}: {rule}" for name, rule in STRATEGY_RULES.items()),
    )


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help=", ".join(_MODELS))
    p.add_argument(
        "--size",
        type=int,
        help=f"input side (pixels, voxels) or sequence length (default: {_MODEL_DEFAULTS})",
    )
    p.add_argument("--batch", type=int, help="batch size (default: the model's, see --size)")


#: TensorFlow's start-up lines: absl's notice, then INFO/WARNING lines in glog
#: format (``I0000 00:00:17... cudart_stub.cc:31] Could not find cuda drivers``).
_TF_NOISE = re.compile(
    r"WARNING: All log messages before absl::InitializeLog\(\) is called"
    r"|[IW]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ \S+:\d+\] "
)


def quiet_tensorflow() -> None:
    """Imports TensorFlow without its start-up lines (the CUDA and oneDNN notices it
    writes before absl's logging starts, which ``TF_CPP_MIN_LOG_LEVEL`` cannot hide),
    unless the user set ``TF_CPP_MIN_LOG_LEVEL`` (then they see what they asked for)
    or TensorFlow is already loaded. Standard error is captured during the import;
    every line that is not one of those notices is written back."""
    import os
    import tempfile

    if "tensorflow" in sys.modules or "TF_CPP_MIN_LOG_LEVEL" in os.environ:
        return
    # Later C++ lines too (cuInit's "UNKNOWN ERROR (303)" on a machine without a GPU);
    # TensorFlow's real errors reach Python as exceptions.
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            import tensorflow  # noqa: F401
        except ImportError:
            pass  # the commands that need it say so
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            kept = [
                line
                for line in tmp.read().decode(errors="replace").splitlines()
                if not _TF_NOISE.match(line)
            ]
            if kept:
                print("\n".join(kept), file=sys.stderr)


def _needs_tensorflow(args: argparse.Namespace) -> bool:
    if args.command in ("trace", "trial", "demo"):
        return True
    text_graph = str(getattr(args, "graph", "")).endswith((".pbtxt", ".txt"))
    return text_graph or (args.command == "plan" and bool(args.output))


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if _needs_tensorflow(args):
            quiet_tensorflow()
        code = int(_COMMANDS[args.command](args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return code
    except BrokenPipeError:
        return _closed_pipe()
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


def _closed_pipe() -> int:
    """The reader of standard output went away (``| head``): stop quietly. Python
    would otherwise print a traceback when it flushes stdout at exit."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 141  # 128 + SIGPIPE, as a shell reports a process killed by it


def _fail(e: Exception, code: int) -> int:
    print(f"hybridplan: error: {' '.join(str(e).split())}", file=sys.stderr)
    return code


def _cmd_analyze(args: argparse.Namespace) -> int:
    from . import analyze
    from .report import fmt_bytes

    a = analyze(args.graph, loss=args.loss, device=args.device)
    top = a.live_at_peak(args.top)  # checks --top before anything is printed
    print(f"nodes: {a.num_nodes}   loss: {a.loss}")
    print(
        f"peak: {fmt_bytes(a.peak_bytes)}   persistent: {fmt_bytes(a.persistent_bytes)}   "
        f"activations at peak: {fmt_bytes(a.activation_peak_bytes)}"
        + (
            f"   largest kernel scratch: {fmt_bytes(a.workspace_peak_bytes)}"
            if a.workspace_peak_bytes
            else ""
        )
    )
    print("phases: " + ", ".join(f"{k} {v}" for k, v in a.phases.items()))
    print(f"largest tensors live at the peak (schedule position {a.peak_position}):")
    for t in top:
        print(f"  {fmt_bytes(t.bytes):>11}  {t.dtype:<8} {list(t.shape)!s:<22} {t.op:<22} {t.name}")
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    from . import plan
    from ._files import check_outputs, write_all
    from ._progress import stages
    from .report import report_files, summary_table

    outputs = [f for f in (args.output, args.json) if f]
    from .report import REPORT_FILES

    report = [args.report] if args.report else []
    within = [Path(d) / f for d in report for f in REPORT_FILES]
    check_outputs(outputs, report, inputs=[args.graph], within=within)
    files: dict[Path, bytes] = {}
    options = dict(strategy=args.strategy, device=args.device, loss=args.loss)
    with stages(2 if args.output else 1) as stage:
        if args.output:
            from .applying import apply

            # What hybridplan.apply does: the file read once, planned and rewritten.
            stage("planning and rewriting")
            r = apply(args.graph, args.budget, target=args.target, **options, **_plan_options(args))
            p = r.plan
            files[Path(args.output)] = r.graph_def.SerializeToString()
            stage("writing")
        else:
            stage("planning")
            p = plan(args.graph, args.budget, **options, **_plan_options(args))
    if args.json:
        files[Path(args.json)] = p.to_json().encode()
    if args.report:
        files.update(report_files({args.strategy: p}, args.strategy, args.report))
    write_all(files)  # every output or none
    print(summary_table({args.strategy: p}, p.budget))
    print(_plan_words(p))
    if files:
        print("wrote " + ", ".join(str(f) for f in files))
    if not args.output:
        print("no rewritten graph written: pass -o FILE.pb to write it")
    return 0


def _plan_words(p: Any) -> str:
    """One sentence on what the plan does."""
    from .report import fmt_bytes, fmt_count

    o, n = p.original, p.planned
    if p.is_empty:
        return (
            f"the step already fits: its peak {fmt_bytes(o['peak_bytes'])} is within the budget "
            f"{fmt_bytes(p.budget)}, so nothing is swapped or recomputed"
        )
    return (
        f"{p.strategy} plan: peak {fmt_bytes(o['peak_bytes'])} -> {fmt_bytes(n['peak_bytes'])} "
        f"(budget {fmt_bytes(p.budget)}), {fmt_count(n['swaps'], 'tensor')} swapped, "
        f"{fmt_count(n['clones'], 'op')} recomputed"
    )


def _cmd_replay(args: argparse.Namespace) -> int:
    from ._files import check_outputs
    from .replaying import replay, save_replay

    check_outputs([args.output], inputs=[args.graph, args.plan])
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
    from . import analyze, plan
    from ._backend import workspace_rule
    from ._progress import stages
    from .planning import _device_args
    from .report import fmt_size, summary_table

    plans: dict = {}
    budget = None
    failed: list[BudgetError] = []
    with stages(len(STRATEGIES) + 1) as stage:
        # One decode and analysis serves every strategy (the workspace rule the
        # device's plans use).
        stage("analysing")
        rule = workspace_rule("auto", _device_args(args.device)[2])
        a = analyze(args.graph, loss=args.loss, workspace=rule)
        for s in STRATEGIES:
            stage(f"planning: {s}")
            try:
                plans[s] = plan(
                    a, args.budget, strategy=s, device=args.device, **_plan_options(args)
                )
                budget = plans[s].budget
            except BudgetError as e:
                plans[s] = None
                failed.append(e)
                budget = e.budget or budget
    if any(plans.values()):
        print(summary_table(plans, budget))
        return 0
    # Nothing fits: the original's figures from a plan under its own peak (an empty
    # plan), and the smallest peak any strategy reached.
    original = plan(a, a.peak_bytes, strategy="recompute", device=args.device).report["original"]
    best = min(failed, key=lambda e: e.best_peak)
    print(summary_table(plans, budget, original=original, best=(best.best_peak, best.strategy)))
    print(
        f"hybridplan: error: no strategy fits the budget of {fmt_size(budget or 0)}; the "
        f"smallest peak reached is {fmt_size(best.best_peak)}, by strategy {best.strategy!r}",
        file=sys.stderr,
    )
    return EXIT_BUDGET


def _model_args(args: argparse.Namespace) -> dict:
    if args.model not in _MODELS:
        raise InvalidArgumentError(
            f"unknown model {args.model!r}: choose one of {', '.join(_MODELS)}"
        )
    return {k: v for k, v in (("size", args.size), ("batch", args.batch)) if v is not None}


def _cmd_trace(args: argparse.Namespace) -> int:
    from ._files import atomic_write, check_outputs
    from ._progress import stages

    kw = _model_args(args)
    check_outputs([args.output])
    with stages(3) as stage:
        stage(f"building {args.model}")
        from . import models

        w = models.build(args.model, **kw)
        stage("tracing the train step")
        traced = w.trace()
        stage("writing")
        atomic_write(Path(args.output), traced.graph_def.SerializeToString())
    # The loss the planner reads (analyze names the same tensor), not the Identity
    # the step returns it through.
    loss = getattr(traced, "loss_source", None) or traced.loss
    print(f"wrote {args.output}: {len(traced.graph_def.node)} nodes, loss {loss}")
    return 0


def _cmd_fit(args: argparse.Namespace) -> int:
    from .fitting import fit

    if args.model not in _MODELS:
        raise InvalidArgumentError(
            f"unknown model {args.model!r}: choose one of {', '.join(_MODELS)}"
        )
    fixed = {}
    if args.over == "size" and args.batch is not None:
        fixed["batch"] = args.batch
    if args.over == "batch" and args.size is not None:
        fixed["size"] = args.size
    f = fit(
        args.model,
        device=args.device,
        over=args.over,
        strategy=args.strategy,
        budget=args.budget,
        host_budget=_host_budget_arg(args.host_budget),
        start=args.start,
        limit=args.limit,
        tol=args.tol,
        cache=args.cache,
        **fixed,
    )
    print(f"{args.model} on {f.device}, budget {f.budget} bytes, over {f.over}:")
    print(f.table())
    cached = sum(1 for _, t_trace, _ in f.probes if not t_trace)
    fresh = len(f.probes) - cached
    print(f"{fresh} sizes traced, {cached} read from the cache, {f.seconds:.0f} s")
    return 0


def _cmd_trial(args: argparse.Namespace) -> int:
    from ._files import check_outputs
    from .runner import setup_cpu_emulation

    kw = _model_args(args)
    if args.report:
        check_outputs(dirs=[args.report])
    setup_cpu_emulation(2)  # before TensorFlow starts
    import tensorflow as tf

    from . import models
    from ._progress import stages
    from .report import fmt_bytes, summary_table, write_report
    from .trialing import trial

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
    persistent = t.plan.report["persistent_bytes"]
    lines = [
        *([t.note] if t.note else []),
        f"budget {fmt_bytes(t.plan.budget)} = variables and optimizer slots "
        f"{fmt_bytes(persistent)} + activations {fmt_bytes(t.activation_budget)}"
        + (
            (
                f" (kernel scratch {fmt_bytes(t.predicted_scratch)} + {t.fraction:.0%} of the "
                "rest of the original's activation peak)"
                if t.predicted_scratch
                else f" ({t.fraction:.0%} of the original's activation peak)"
            )
            if t.fraction
            else ""
        ),
        f"inserted: {t.inserted}",
        f"losses and weights over {len(t.planned.losses)} steps: "
        + ("equal bit for bit" if t.same_losses and t.same_weights else "DIFFERENT"),
        "device activation memory (variables excluded): "
        f"budget {fmt_bytes(t.activation_budget)}, predicted {fmt_bytes(t.predicted_peak)}, "
        f"measured {fmt_bytes(t.planned.device_peak)} "
        f"(original {fmt_bytes(t.original.device_peak)})",
        f"  of which tensors {fmt_bytes(t.planned.device_tensor_peak)} "
        f"({t.peak_ratio:.0%} of the original's {fmt_bytes(t.original.device_tensor_peak)}), "
        f"kernel scratch {fmt_bytes(t.planned.device_scratch)} "
        f"(modelled {fmt_bytes(t.predicted_scratch)}, workspace rule {t.workspace})",
        f"measured step time: {o * 1e3:.1f} ms -> {n * 1e3:.1f} ms ({n / o:.2f}x)",
    ]
    print(summary_table({args.strategy: t.plan}, t.plan.budget))
    print("\n".join(lines))
    if args.report:
        secs, used = t.planned.timeline
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
    from ._files import check_outputs
    from .demo import run_demo

    check_outputs(dirs=[args.out])
    return run_demo(args.out, quick=args.quick)


_COMMANDS = {
    "plan": _cmd_plan,
    "analyze": _cmd_analyze,
    "fit": _cmd_fit,
    "compare": _cmd_compare,
    "replay": _cmd_replay,
    "trace": _cmd_trace,
    "trial": _cmd_trial,
    "demo": _cmd_demo,
}

if __name__ == "__main__":
    sys.exit(main())
