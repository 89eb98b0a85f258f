"""TensorFlow's own memory optimizer (Grappler) against hybridplan on the same graphs.

    python experiments/grappler_compare.py             # 10^4 and 10^5 nodes
    python experiments/grappler_compare.py --quick     # 10^4 only, one run of each
    python experiments/grappler_compare.py --sizes 10000 --repeat 3 --json out.json

Input: ``hybridplan.testing.synthetic_graphdef(n, kind)`` (forward, backward under
``gradient_tape/``, SGD-momentum updates; every shape known). The budget is half the
peak ``hybridplan.analyze`` finds (a larger fraction if ``plan`` raises ``BudgetError``;
the table says so).

**Grappler.** ``tf_optimizer.OptimizeGraph(config, metagraph, cluster=...)`` with

- a virtual cluster of one GPU whose ``memory_size`` is that budget (the other fields
  from the ``v100-nvlink2`` preset: 900 GB/s, 80 SMs, 1530 MHz) and one CPU;
- every node on ``/job:localhost/replica:0/task:0/device:GPU:0``, the ops' default
  attributes filled in (``OptimizeGraph`` fails with only "Failed to import metagraph"
  otherwise), a ``train_op`` collection naming the fetch (``Identity``, the step's output);
- ``memory_optimization`` = ``HEURISTICS`` (recompute, swap and the AddN scheduling pass),
  ``SWAPPING_HEURISTICS`` or ``RECOMPUTATION_HEURISTICS``,
  ``memory_optimizer_target_node_name_scope = "gradient_tape/"``, every other Grappler
  pass ``OFF``, one meta-optimizer iteration, no model pruning. (Naming the pass in
  ``RewriterConfig.optimizers`` instead would build it at level ``MANUAL``, which only
  acts on ``_recompute_hint`` / ``_swap_to_host`` attributes: nothing happens.)

``grappler`` is the wall time of the ``OptimizeGraph`` call from Python (MetaGraphDef
serialisation, GrapplerItem import, the pass, the result parsed back); ``pass`` the
memory optimizer's own time as Grappler logs it. ``prep`` (defaults, devices, the
MetaGraphDef) is reported apart and counted in neither.

**hybridplan.** ``hybridplan.plan(bytes, budget, strategy="hybrid", device="v100-nvlink2")``
(``core``) and ``hybridplan.apply(bytes, ...)`` (``apply``: plan + parse + rewrite).

**What Grappler inserted**, counted by the names and ops its memory optimizer gives them
(``memory_optimizer.cc``): swap pairs ``swap_out_<consumer>_<input>``
(``_CopyFromGpuToHost``) / ``swap_in_...`` (``_CopyFromHostToGpu``), one pair per swapped
*consumer input*, so one tensor read by three backward ops makes three pairs; recomputed
nodes ``Recomputed/<name>`` and their ``RecomputeTrigger/<name>`` ``NoOp``s; AddN nodes
the scheduling pass turned into ``TemporaryVariable`` accumulations.

**Judging the result with hybridplan's analysis.** ``hybridplan.analyze`` has no notion
of devices: every output of every node counts as device memory, and ``Identity`` aliases
its input. Run on a swapped graph as is, it therefore says nothing about the swaps (it
does not even credit hybridplan's own: its rewritten graph analyses to the original
peak). The table's ``analysed`` columns use a *device view* of each rewritten graph, made
here in Python:

- the output of each swap-out (Grappler's ``_CopyFromGpuToHost``, hybridplan's ``Identity``
  on the host) is given a scalar shape: it lives in host memory;
- hybridplan's swap-in ``Identity`` is renamed ``_CopyFromHostToGpu`` so that it is a new
  device buffer, as Grappler's is, rather than an alias of the original tensor;
- nodes the rewrite added run as soon as their inputs (data and control) have run, as
  TensorFlow's executor runs them: each is listed right after the last of its inputs
  (``analyze`` schedules the lowest-listed ready node first); the other nodes keep the
  input graph's order. Shapes of added nodes without ``_output_shapes`` come from their
  data input (``TemporaryVariable``: its ``shape``).

It then is the peak of the step under the same liveness rules hybridplan plans with, if
the graph ran in that order. What it cannot say: transfer times and stalls (a swap-in
that is late costs time, not memory, in this view), whether Grappler's triggers really
delay the swap-ins that long on a GPU, TensorFlow's allocator (fragmentation, the
``_CopyFromHostToGpu`` staging). ``hybridplan device view`` is the same view of
hybridplan's own rewritten graph, to show how far the view agrees with hybridplan's
simulator on a plan it made.

**Judging the result with hybridplan's simulator.** ``grappler_plan`` turns Grappler's
rewrite into a plan in the core's format (its swap pairs into swaps with their triggers
and readers, its ``Recomputed/`` clones into recomputes with their triggers, chains of
added nodes followed to the original node they wait for last), and
``_core.simulate_plan`` simulates it on the original graph exactly as it simulates
hybridplan's own plans: the ``simulated peak`` and ``step time`` columns, with transfers
on the link and stalls. What the format cannot say (Grappler's swaps of its own clones'
outputs) is left out and counted under the row; leaving a swap out keeps its tensor on
the device, so those rows overstate Grappler's peak by at most the bytes counted.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import re
import statistics
import sys
import tempfile
import time
from typing import Any

# Grappler logs each pass's own time at VLOG(1) of meta_optimizer.cc; read at TF start-up.
os.environ.setdefault("TF_CPP_VMODULE", "meta_optimizer=1")
# ... and only if INFO lines are not filtered out (a TF_CPP_MIN_LOG_LEVEL of 1 or more would).
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0"

DEFAULT_SIZES = (10_000, 100_000)
LEVELS = ("HEURISTICS", "SWAPPING_HEURISTICS", "RECOMPUTATION_HEURISTICS")
FRACTIONS = (0.5, 0.6, 0.7, 0.8, 0.9)
DEVICE = "v100-nvlink2"
GPU = "/job:localhost/replica:0/task:0/device:GPU:0"
CPU = "/job:localhost/replica:0/task:0/device:CPU:0"
SCOPE = "gradient_tape/"
FETCH = "Identity"
HOST_COPY = "_CopyFromGpuToHost"
DEVICE_COPY = "_CopyFromHostToGpu"
PASSES_OFF = (
    "layout_optimizer",
    "constant_folding",
    "shape_optimization",
    "remapping",
    "common_subgraph_elimination",
    "arithmetic_optimization",
    "dependency_optimization",
    "loop_optimization",
    "function_optimization",
    "debug_stripper",
    "scoped_allocator_optimization",
    "pin_to_host_optimization",
    "implementation_selector",
    "auto_mixed_precision",
    "auto_mixed_precision_mkl",
    "auto_mixed_precision_onednn_bfloat16",
    "auto_mixed_precision_cpu",
    "use_plugin_optimizers",
    "experimental_conditional_code_motion",
)


# --------------------------------------------------------------------------- Grappler set-up


def grappler_metagraph(gd: Any, fetch: str = FETCH) -> Any:
    """A MetaGraphDef Grappler can import: defaults filled in, every node on the GPU."""
    from tensorflow.core.protobuf import meta_graph_pb2
    from tensorflow.python.framework import op_def_registry

    mg = meta_graph_pb2.MetaGraphDef()
    mg.graph_def.CopyFrom(gd)
    op_defs: dict[str, Any] = {}
    for node in mg.graph_def.node:
        node.device = GPU
        od = op_defs.get(node.op)
        if od is None:
            od = op_defs[node.op] = op_def_registry.get(node.op)
        for attr in od.attr:
            if attr.name not in node.attr and attr.HasField("default_value"):
                node.attr[attr.name].CopyFrom(attr.default_value)
    mg.collection_def["train_op"].node_list.value.append(fetch)
    return mg


def grappler_cluster(memory_bytes: int) -> Any:
    """A virtual cluster: one GPU of ``memory_bytes`` (V100-like otherwise) and one CPU."""
    from tensorflow.core.protobuf import device_properties_pb2 as dp
    from tensorflow.python.grappler import cluster as gcluster

    gpu = dp.DeviceProperties(
        type="GPU",
        vendor="NVIDIA",
        model="Tesla V100-SXM2-32GB",
        frequency=1530,
        num_cores=80,
        environment={"architecture": "7.0", "cuda": "12000", "cudnn": "9000"},
        num_registers=65536,
        l1_cache_size=24576,
        l2_cache_size=6291456,
        shared_memory_size_per_multiprocessor=98304,
        memory_size=memory_bytes,
        bandwidth=900_000_000,  # KB/s
    )
    cpu = dp.DeviceProperties(
        type="CPU", frequency=2000, num_cores=16, memory_size=512 << 30, bandwidth=100_000_000
    )
    return gcluster.Cluster(
        devices=[dp.NamedDevice(name=GPU, properties=gpu), dp.NamedDevice(name=CPU, properties=cpu)]
    )


def grappler_config(level: str) -> Any:
    from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2

    rc_cls = rewriter_config_pb2.RewriterConfig
    cfg = config_pb2.ConfigProto()
    rc = cfg.graph_options.rewrite_options
    for field in PASSES_OFF:
        setattr(rc, field, rc_cls.OFF)
    rc.memory_optimization = getattr(rc_cls, level)
    rc.memory_optimizer_target_node_name_scope = SCOPE
    rc.meta_optimizer_iterations = rc_cls.ONE
    rc.min_graph_nodes = -1
    rc.disable_model_pruning = True
    rc.disable_tfg_optimizer = True
    return cfg


@contextlib.contextmanager
def _capture_fd2():
    """Collects what C++ writes to file descriptor 2 (Grappler's LOG(INFO) lines)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        box: dict[str, str] = {}
        try:
            yield box
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            box["text"] = tmp.read().decode(errors="replace")


_PASS_TIME = re.compile(r"memory_optimizer: Graph size after: .*?time = ([0-9.]+)ms")


def run_grappler(mg: Any, level: str, memory_bytes: int) -> tuple[Any, float, float | None]:
    """(optimized GraphDef, wall seconds of OptimizeGraph, the pass's own seconds)."""
    from tensorflow.python.grappler import tf_optimizer

    cfg = grappler_config(level)
    cluster = grappler_cluster(memory_bytes)
    with _capture_fd2() as log:
        t0 = time.perf_counter()
        out = tf_optimizer.OptimizeGraph(cfg, mg, verbose=True, cluster=cluster)
        wall = time.perf_counter() - t0
    cluster.Shutdown()
    m = _PASS_TIME.search(log["text"])
    return out, wall, float(m.group(1)) / 1e3 if m else None


# --------------------------------------------------------------------------- what Grappler did


def _node_name(inp: str) -> str:
    return inp.lstrip("^").split(":")[0]


def grappler_counts(original: Any, out: Any) -> dict[str, int]:
    """What Grappler's memory optimizer inserted, by its own names and ops, and the bytes
    of the distinct tensors it swaps (shapes from the input graph, dtype from ``T``)."""
    from tensorflow.python.framework import dtypes

    known = {n.name for n in original.node}
    orig = {n.name: n for n in original.node}
    by_name = {n.name: n for n in out.node}
    ops: collections.Counter[str] = collections.Counter()
    swapped: dict[str, int] = {}  # tensor -> dtype enum
    for n in out.node:
        if n.name in known:
            continue
        ops[n.op] += 1
        if n.op == HOST_COPY and n.name.startswith("swap_out_"):
            src = n.input[0] if ":" in n.input[0] else n.input[0] + ":0"
            swapped[src] = n.attr["T"].type
    swapped_bytes = 0
    for tensor, dtype in swapped.items():
        shape = _shape_of(by_name, orig, tensor)
        elems = 1
        for d in shape.dim:
            elems *= max(d.size, 1)
        swapped_bytes += elems * dtypes.as_dtype(dtype).size
    return {
        "added": sum(ops.values()),
        "swap_out": sum(1 for n in out.node if n.name.startswith("swap_out_")),
        "swap_in": sum(1 for n in out.node if n.name.startswith("swap_in_")),
        "swapped_tensors": len(swapped),
        "swapped_bytes": swapped_bytes,
        "swapped_clone_tensors": sum(1 for t in swapped if t.startswith("Recomputed/")),
        "recomputed": sum(1 for n in out.node if n.name.startswith("Recomputed/")),
        "recompute_triggers": sum(1 for n in out.node if n.name.startswith("RecomputeTrigger/")),
        "addn_rewritten": ops.get("TemporaryVariable", 0),
    }


# --------------------------------------------------------------------------- simulated plans


def _last_original(name: str, by_name: dict[str, Any], rank: dict[str, int], memo: dict) -> int:
    """The largest ``rank`` among the original nodes an added node waits for (data and
    control inputs), through any chain of added nodes; -1 if none. Iterative (chains
    can be long), memoised in ``memo``: O(added nodes + their inputs) over all calls."""
    stack = [name]
    while stack:
        cur = stack[-1]
        if cur in memo:
            stack.pop()
            continue
        if cur in rank:
            memo[cur] = rank[cur]
            stack.pop()
            continue
        preds = [_node_name(i) for i in by_name[cur].input]
        todo = [q for q in preds if q not in memo and q not in rank]
        if todo:
            stack.extend(todo)
            continue
        memo[cur] = max((memo.get(q, rank.get(q, -1)) for q in preds), default=-1)
        stack.pop()
    return memo[name]


def _add_count(skipped: dict[str, int], what: str) -> None:
    skipped[what] = skipped.get(what, 0) + 1


def grappler_plan(problem: dict, out: Any) -> tuple[dict, dict[str, int]]:
    """Grappler's rewrite as a plan in the core's format (``plan/mod.rs``), so that
    hybridplan's simulator can judge it like its own plans, and what did not fit.

    An added node's *trigger* is the original node it waits for last (in hybridplan's
    schedule), through every chain of added nodes (Grappler chains its
    ``RecomputeTrigger`` ``NoOp``s).

    - A ``swap_out_*`` / ``swap_in_*`` pair is a swap of the copied tensor with one
      swap-in, triggered by the swap-in's trigger, read by the original nodes reading the
      swap-in. Pairs of one tensor are one swap; the earliest original node with a control
      edge from the swap-out is its release node.
    - A ``Recomputed/<name>`` clone is a recompute of ``<name>`` run after its trigger
      (its ``RecomputeTrigger``, the clones and swap-ins it reads); a clone or swap-in
      read by a clone lists that clone's original as a clone consumer.
    - Not expressible, counted in the second value and left out (the reader keeps
      the original): a swap of a clone's output, a reader that hybridplan's schedule
      puts before the trigger.
    O(nodes + edges) of both graphs."""
    nodes = problem["nodes"]
    id_of = {n["name"]: i for i, n in enumerate(nodes)}
    pos = [0] * len(nodes)
    for p, v in enumerate(problem["order"]):
        pos[v] = p
    by_name = {n.name: n for n in out.node}
    skipped: dict[str, int] = {}
    pos_of = {n["name"]: pos[i] for i, n in enumerate(nodes)}
    trig_memo: dict[str, int] = {}

    def trigger(name: str) -> int:
        """The original node an added node waits for last (-1: none)."""
        p = _last_original(name, by_name, pos_of, trig_memo)
        return problem["order"][p] if p >= 0 else -1

    readers: dict[str, list[int]] = collections.defaultdict(list)
    clone_reads: dict[str, set[int]] = collections.defaultdict(set)  # added node -> clones
    released: dict[str, list[int]] = collections.defaultdict(list)
    for n in out.node:
        if n.name.startswith("Recomputed/"):
            for i in n.input:
                if not i.startswith("^") and _node_name(i) not in id_of:
                    clone_reads[_node_name(i)].add(id_of[n.name.removeprefix("Recomputed/")])
        if n.name not in id_of:
            continue
        for i in n.input:
            src = _node_name(i)
            if i.startswith("^"):
                if src.startswith("swap_out_"):
                    released[src].append(id_of[n.name])
            elif src not in id_of:
                readers[src].append(id_of[n.name])

    def late_readers(name: str, trig: int) -> list[int]:
        ok = sorted({c for c in readers.get(name, []) if pos[c] > pos[trig]})
        for _ in range(len(set(readers.get(name, []))) - len(ok)):
            _add_count(skipped, "reader not after its trigger in hybridplan's schedule")
        return ok

    swaps: dict[int, dict] = {}
    for n in out.node:
        if n.op != DEVICE_COPY or not n.name.startswith("swap_in_"):
            continue
        s_out = by_name[_node_name(next(i for i in n.input if not i.startswith("^")))]
        name, _, k = s_out.input[0].partition(":")
        if name not in id_of:
            _add_count(skipped, "swap of a clone's output")
            continue
        prod = id_of[name]
        trig = trigger(n.name)
        sw = swaps.setdefault(nodes[prod]["outputs"][int(k or 0)], {"after": prod, "ins": {}})
        sw.setdefault("release", []).extend(released.get(s_out.name, []))
        sw["ins"].setdefault(trig, [set(), set()])
        sw["ins"][trig][0].update(late_readers(n.name, trig))
        sw["ins"][trig][1].update(clone_reads.get(n.name, ()))
    plan_swaps = []
    for t, sw in sorted(swaps.items()):
        seen: set[int] = set()
        ins = []
        seen_clones: set[int] = set()
        for trig in sorted(sw["ins"], key=lambda v: pos[v]):
            cons = sorted(sw["ins"][trig][0] - seen)
            clones = sorted(sw["ins"][trig][1] - seen_clones)
            seen |= set(cons)
            seen_clones |= set(clones)
            if cons or clones:
                ins.append({"trigger": trig, "consumers": cons, "clone_consumers": clones})
        if ins:
            entry: dict[str, Any] = {"tensor": t, "after": sw["after"], "ins": ins}
            late = [v for v in sw["release"] if pos[v] > pos[sw["after"]]]
            if late:
                entry["release"] = entry["gate"] = min(late, key=lambda v: pos[v])
            plan_swaps.append(entry)

    plan_rc = []
    for n in out.node:
        if not n.name.startswith("Recomputed/"):
            continue
        v = id_of[n.name.removeprefix("Recomputed/")]
        trig = trigger(n.name)
        plan_rc.append((pos[trig], pos[v], v, trig, n.name))
    plan_rc.sort()
    clone_of = {name: v for _, _, v, _, name in plan_rc}
    clone_readers = {name: clone_reads.get(name, set()) for name in clone_of}
    recomputes = []
    for _, _, v, trig, name in plan_rc:
        cons = late_readers(name, trig)
        if cons or clone_readers[name]:
            recomputes.append(
                {
                    "nodes": [v],
                    "trigger": trig,
                    "consumers": cons,
                    "clone_consumers": sorted(clone_readers[name]),
                }
            )
    return {"swaps": plan_swaps, "recomputes": recomputes}, skipped


def simulated(hybridplan: Any, data: bytes, problem: dict, out: Any, budget: int) -> dict:
    """Grappler's rewrite judged by hybridplan's simulator (``_core.simulate_plan``):
    the planned peak and step time, or what went wrong."""
    from hybridplan import _core

    plan, skipped = grappler_plan(problem, out)
    res: dict[str, Any] = {
        "skipped": skipped,
        "swaps": len(plan["swaps"]),
        "recomputes": len(plan["recomputes"]),
    }
    try:
        core = _core.simulate_plan(data, json.dumps(plan), budget, "grappler", device=DEVICE)
    except Exception as e:  # report what the simulator said instead of failing the bench
        res["error"] = f"{type(e).__name__}: {str(e)[:160]}"
        return res
    planned = json.loads(core.report_json)["planned"]
    res.update(peak=planned["peak_bytes"], step_s=planned["step_time_s"])
    return res


# --------------------------------------------------------------------------- device view


def _shape_of(by_name: dict[str, Any], original: dict[str, Any], tensor: str) -> Any:
    """The TensorShapeProto of ``node:k``: from the input graph's ``_output_shapes`` (a
    ``Recomputed/<name>`` clone has its original's), else ``shape``, else the node's first
    data input (``TemporaryVariable``, ``Assign``, ...)."""
    for _ in range(64):
        name, _, k = tensor.partition(":")
        src = original.get(name) or original.get(name.removeprefix("Recomputed/"))
        node = src if src is not None else by_name[name]
        if "_output_shapes" in node.attr and int(k or 0) < len(
            node.attr["_output_shapes"].list.shape
        ):
            return node.attr["_output_shapes"].list.shape[int(k or 0)]
        if "shape" in node.attr and node.attr["shape"].HasField("shape"):
            return node.attr["shape"].shape
        data = [i for i in by_name[name].input if not i.startswith("^")]
        if not data:
            break
        tensor = data[0]
    raise ValueError(f"no shape for {tensor}")


def device_view(original: Any, rewritten: Any, host_out: set[str], device_in: set[str]) -> Any:
    """The rewritten graph as ``hybridplan.analyze`` should see it on a device (see the
    module docstring): host copies get a scalar shape, swap-ins become device copies, and
    added nodes are listed right after the last of their inputs. O(nodes + edges)."""
    from tensorflow.core.framework import graph_pb2, tensor_shape_pb2

    order = {n.name: i for i, n in enumerate(original.node)}
    orig = {n.name: n for n in original.node}
    by_name = {n.name: n for n in rewritten.node}
    base: dict[str, int] = {}

    def base_of(name: str) -> int:
        return _last_original(name, by_name, order, base)

    keyed = []
    for seq, n in enumerate(rewritten.node):
        if n.name in order:
            keyed.append(((order[n.name], 0, 0), n))
        else:
            keyed.append(((base_of(n.name), 1, seq), n))
    keyed.sort(key=lambda kv: kv[0])
    view = graph_pb2.GraphDef()
    view.versions.CopyFrom(rewritten.versions)
    scalar = tensor_shape_pb2.TensorShapeProto()
    for _, n in keyed:
        m = view.node.add()
        m.CopyFrom(n)
        if n.name in order:
            if "_output_shapes" not in m.attr:  # Grappler's output has none
                m.attr["_output_shapes"].CopyFrom(orig[n.name].attr["_output_shapes"])
            continue
        if n.name in host_out:
            m.op = HOST_COPY
            m.attr["_output_shapes"].list.ClearField("shape")
            m.attr["_output_shapes"].list.shape.add().CopyFrom(scalar)
        elif n.name in device_in:
            m.op = DEVICE_COPY
            src = by_name[_node_name(n.input[0])]
            shape = _shape_of(by_name, orig, src.input[0])
            m.attr["_output_shapes"].list.ClearField("shape")
            m.attr["_output_shapes"].list.shape.add().CopyFrom(shape)
        elif "_output_shapes" not in n.attr:
            lst = m.attr["_output_shapes"].list
            if n.op != "NoOp":
                lst.shape.add().CopyFrom(_shape_of(by_name, orig, n.name))
            else:
                lst.ClearField("shape")
    return view


def analysed_peak(
    hybridplan: Any, original: Any, rewritten: Any, host: set[str], dev: set[str], loss: Any
) -> int | str:
    """Peak of the device view by ``hybridplan.analyze``, or what went wrong (as text)."""
    try:
        view = device_view(original, rewritten, host, dev)
        return hybridplan.analyze(view.SerializeToString(), loss=loss).peak_bytes
    except Exception as e:  # report what the analysis said instead of failing the bench
        return f"{type(e).__name__}: {str(e)[:120]}"


# --------------------------------------------------------------------------- one size


def _choose_budget(hybridplan: Any, data: bytes, peak: int) -> tuple[int, float]:
    for frac in FRACTIONS:
        budget = peak // 2 if frac == 0.5 else int(peak * frac)
        try:
            hybridplan.plan(data, budget, strategy="hybrid", device=DEVICE)
        except hybridplan.BudgetError:
            continue
        return budget, frac
    raise SystemExit(f"no budget in {FRACTIONS} of the peak {peak} could be planned")


def _timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - t0, out


def bench_size(nodes: int, kind: str, levels: list[str], repeat: int, g_repeat: int) -> dict:
    from tensorflow.core.framework import graph_pb2

    import hybridplan

    data = hybridplan.testing.synthetic_graphdef(nodes, kind)
    analysis = hybridplan.analyze(data)
    n = analysis.num_nodes
    budget, frac = _choose_budget(hybridplan, data, analysis.peak_bytes)
    gd = graph_pb2.GraphDef.FromString(data)

    core_t, apply_t = [], []
    for _ in range(repeat):
        t, plan = _timed(hybridplan.plan, data, budget, strategy="hybrid", device=DEVICE)
        core_t.append(t)
        t, result = _timed(hybridplan.apply, data, budget, strategy="hybrid", device=DEVICE)
        apply_t.append(t)
    hp_out = result.graph_def
    summary = result.summary
    host_out = set(summary.swap_out) if summary else set()
    device_in = set(summary.swap_in) if summary else set()
    hp_view_peak = analysed_peak(hybridplan, gd, hp_out, host_out, device_in, None)
    hp = {
        "core_s": statistics.median(core_t),
        "apply_s": statistics.median(apply_t),
        "core_runs": core_t,
        "apply_runs": apply_t,
        "planned_peak": plan.planned["peak_bytes"],
        "original_step_s": plan.original["step_time_s"],
        "planned_step_s": plan.planned["step_time_s"],
        "swaps": len(plan.swaps),
        "recomputes": len(plan.recomputes),
        "clones": plan.planned["clones"],
        "swapped_bytes": sum(x["bytes"] for x in plan.swaps),
        "inserted": dict(result.report.get("inserted", {})),
        "view_peak": hp_view_peak,
    }

    from hybridplan import _core

    problem = json.loads(_core.export_problem(data, min_bytes=1))
    t_prep, mg = _timed(grappler_metagraph, gd)
    grappler = {}
    for level in levels:
        runs = []
        for _ in range(g_repeat):
            out, wall, pass_s = run_grappler(mg, level, budget)
            host = {x.name for x in out.node if x.op == HOST_COPY}
            dev = {x.name for x in out.node if x.op == DEVICE_COPY}
            runs.append(
                {
                    "wall_s": wall,
                    "pass_s": pass_s,
                    "view_peak": analysed_peak(hybridplan, gd, out, host, dev, analysis.loss),
                    "simulated": simulated(hybridplan, data, problem, out, budget),
                    "out_nodes": len(out.node),
                    **grappler_counts(gd, out),
                }
            )
            del out
        grappler[level] = {
            "wall_s": statistics.median(r["wall_s"] for r in runs),
            "pass_s": (
                statistics.median(r["pass_s"] for r in runs)
                if all(r["pass_s"] is not None for r in runs)
                else None
            ),
            "runs": runs,
            "counts": runs[-1],
        }
    return {
        "name": f"{kind} {nodes:.0e}".replace("e+0", "e"),
        "nodes": n,
        "peak": analysis.peak_bytes,
        "persistent": analysis.persistent_bytes,
        "budget": budget,
        "fraction": frac,
        "prep_s": t_prep,
        "repeat": repeat,
        "grappler_repeat": g_repeat,
        "hybridplan": hp,
        "grappler": grappler,
    }


# --------------------------------------------------------------------------- report


def _s(x: float) -> str:
    return f"{x * 1e3:.1f} ms" if x < 1 else f"{x:.2f} s"


def _gib(x: int | str) -> str:
    return f"{x / 2**30:.3f}" if isinstance(x, int) else f"({x})"


def _us_node(t: float, n: int) -> str:
    return f"{t / n * 1e6:.2f}"


def _spread(runs: list[dict], key: str) -> str:
    vals = sorted({r[key] for r in runs})
    return f"{vals[0]:,}" if len(vals) == 1 else f"{vals[0]:,}-{vals[-1]:,}"


def _peaks(runs: list[dict]) -> str:
    vals = [r["view_peak"] for r in runs]
    if not all(isinstance(v, int) for v in vals):
        return "; ".join(sorted({_gib(v) for v in vals}))
    lo, hi = min(vals), max(vals)
    return _gib(lo) if lo == hi else f"{_gib(lo)}-{_gib(hi)}"


def _opt_s(x: float | None) -> str:
    return "-" if x is None else _s(x)


def _ratio(x: float | None, base: float) -> str:
    return "-" if x is None else f"{x / base:,.1f}x"


def _sim(sims: list[dict], key: str) -> str:
    vals = [x[key] for x in sims if key in x]
    if not vals:
        return "-"
    fmt = _gib if key == "peak" else (lambda v: f"{v:.4g}")
    lo, hi = min(vals), max(vals)
    return fmt(lo) if lo == hi else f"{fmt(lo)}-{fmt(hi)}"


def tables(rows: list[dict]) -> str:
    out = [
        "Times (medians; runs: hybridplan / Grappler):",
        "",
        "| graph | nodes | method | runs | wall | us/node | pass (logged) "
        "| wall / hybridplan core | wall / hybridplan apply | pass / hybridplan core |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        n, hp = r["nodes"], r["hybridplan"]
        for label, key in (("hybridplan plan (core)", "core_s"), ("hybridplan apply", "apply_s")):
            out.append(
                f"| {r['name']} | {n:,} | {label} | {r['repeat']} | {_s(hp[key])} "
                f"| {_us_node(hp[key], n)} | - | - | - | - |"
            )
        for level, g in r["grappler"].items():
            out.append(
                f"| {r['name']} | {n:,} | Grappler {level} | {r['grappler_repeat']} "
                f"| {_s(g['wall_s'])} | {_us_node(g['wall_s'], n)} | {_opt_s(g['pass_s'])} "
                f"| {g['wall_s'] / hp['core_s']:,.1f}x | {g['wall_s'] / hp['apply_s']:,.1f}x "
                f"| {_ratio(g['pass_s'], hp['core_s'])} |"
            )
    out += [
        "",
        "Ratios: Grappler's time over hybridplan's on the same graph (so also per node). "
        "wall: the OptimizeGraph call from Python; pass: the memory optimizer's own time "
        "as Grappler logs it.",
        "",
        "What each inserted and the device peak (GiB) by hybridplan's analysis "
        "(device view; see the docstring):",
        "",
        "| graph | method | swap pairs (tensors) | GiB swapped | recomputed nodes "
        "| AddN rewritten | nodes after | analysed peak | simulated peak | step time (s) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        hp = r["hybridplan"]
        ins = hp["inserted"]
        out.append(
            f"| {r['name']} | original | - | - | - | - | {r['nodes']:,} | {_gib(r['peak'])} "
            f"| - | {hp['original_step_s']:.4g} |"
        )
        out.append(
            f"| {r['name']} | budget ({r['fraction']:.1f} x peak) | | | | | | "
            f"{_gib(r['budget'])} | | |"
        )
        out.append(
            f"| {r['name']} | hybridplan hybrid | {ins.get('swap_out', 0)} ({hp['swaps']}) "
            f"| {_gib(hp['swapped_bytes'])} | {ins.get('clones', 0)} | - "
            f"| {r['nodes'] + sum(ins.values()):,} | {_gib(hp['view_peak'])} "
            f"| {_gib(hp['planned_peak'])} | {hp['planned_step_s']:.4g} |"
        )
        for level, g in r["grappler"].items():
            runs = g["runs"]
            gib = [x["swapped_bytes"] for x in runs]
            gib_s = _gib(min(gib)) + ("" if min(gib) == max(gib) else f"-{_gib(max(gib))}")
            sims = [x.get("simulated", {}) for x in runs]
            out.append(
                f"| {r['name']} | Grappler {level} | {_spread(runs, 'swap_out')} "
                f"({_spread(runs, 'swapped_tensors')}) | {gib_s} | {_spread(runs, 'recomputed')} "
                f"| {_spread(runs, 'addn_rewritten')} | {_spread(runs, 'out_nodes')} "
                f"| {_peaks(runs)} | {_sim(sims, 'peak')} | {_sim(sims, 'step_s')} |"
            )
            left = collections.Counter()
            for x in sims:
                left.update(x.get("skipped", {}))
            for x in sims:
                if "error" in x:
                    left[f"not simulated: {x['error']}"] += 1
            if left:
                out.append(
                    "| | (left out of the simulated plan, over the runs: "
                    + "; ".join(f"{k}: {v}" for k, v in sorted(left.items()))
                    + ") | | | | | | | | |"
                )
            if any(x["swapped_clone_tensors"] for x in runs):
                out.append(
                    f"| | (of which recomputed clones: "
                    f"{_spread(runs, 'swapped_clone_tensors')} tensors) | | | | | | | | |"
                )
    out += [
        "",
        "Swap pairs: one per swapped consumer input (Grappler) or per swap-in (hybridplan); "
        "in brackets the distinct tensors swapped; GiB swapped: their total size. "
        "A range means Grappler's runs differed. "
        "Simulated peak and step time: hybridplan's simulator on the original graph with the "
        "plan (hybridplan's own; Grappler's rewrite turned into the same plan format, "
        "`grappler_plan`), the `v100-nvlink2` preset.",
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="10^4 only, one run of each")
    ap.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES))
    ap.add_argument(
        "--kind", default="mixed", choices=("mixed", "residual", "transformer", "dag", "narrow")
    )
    ap.add_argument("--levels", nargs="+", default=list(LEVELS), choices=LEVELS)
    ap.add_argument("--repeat", type=int, default=3, help="hybridplan runs (median)")
    ap.add_argument(
        "--grappler-repeat",
        type=int,
        default=None,
        help="Grappler runs per level (default: 3 below 10^5 nodes, else 1)",
    )
    ap.add_argument("--json", help="also write the raw figures to this file")
    args = ap.parse_args(argv)
    sizes = [10_000] if args.quick else args.sizes
    rows = []
    for n in sizes:
        if args.quick:
            rep, g_rep = 1, 1
        else:
            rep = args.repeat
            g_rep = args.grappler_repeat or (3 if n < 100_000 else 1)
        rows.append(bench_size(n, args.kind, args.levels, rep, g_rep))
        print(f"done: {rows[-1]['name']}", file=sys.stderr)
    print(tables(rows))
    print(
        "\nprep (defaults, devices, MetaGraphDef; not counted): "
        + ", ".join(f"{r['name']} {_s(r['prep_s'])}" for r in rows)
    )
    load = os.getloadavg()
    print(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
