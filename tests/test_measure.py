"""hybridplan.measure: per-device peaks from the executor's allocation records.

The claim under test: on CPU emulation, swapping an MLP's forward activations to the
host (``DeepCopy`` to ``/device:CPU:1``) lowers the device's measured peak well below the
original's, and the host holds exactly the swapped bytes. Measured with
``host_on_device=True`` the same swap plan runs inline (one executor) and the host copies
are tallied as host memory, not in the device's peak.
"""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import step_stats_pb2

import hybridplan
import hybridplan.testing
from hybridplan import _core
from hybridplan.errors import InvalidArgumentError
from hybridplan.measuring import (
    Measurement,
    device_key,
    measure,
    ran_inline,
    replay_step_stats,
)
from hybridplan.rewriting import rewrite_with_summary
from hybridplan.tracing import trace_keras
from test_rewrite import Structure, swap_plan

BATCH, WIDTH, LAYERS = 2048, 256, 6  # each activation 2 MiB, weights 256 KiB
STEPS = 3


@pytest.fixture(scope="module")
def mlp():
    keras.utils.set_random_seed(0)
    layers = [keras.layers.Dense(WIDTH, activation="relu") for _ in range(LAYERS)]
    model = keras.Sequential([keras.Input((WIDTH,)), *layers, keras.layers.Dense(8)])
    traced = trace_keras(
        model,
        keras.optimizers.SGD(0.01, momentum=0.9),
        keras.losses.MeanSquaredError(),
        tf.TensorSpec([BATCH, WIDTH]),
        tf.TensorSpec([BATCH, 8]),
    )
    rng = np.random.default_rng(0)
    batches = [
        (
            rng.standard_normal((BATCH, WIDTH), np.float32),
            rng.standard_normal((BATCH, 8), np.float32),
        )
        for _ in range(2)
    ]
    return traced, batches


@pytest.fixture(scope="module")
def swap_spec(mlp):
    """A hand-built plan swapping the MLP's six ReLU outputs to the host."""
    traced, _ = mlp
    s = Structure(traced.graph_def, traced.loss)
    relus = s.candidates("Relu")
    assert len(relus) == LAYERS
    plan = swap_plan(s, relus)
    # Swap each activation in one layer ahead of its use: with the trigger right before
    # the consumer the executor runs on and gradient buffers pile up while it waits.
    triggers = [swap["ins"][0]["trigger"] for swap in plan["swaps"]]
    for k, swap in enumerate(plan["swaps"][:-1]):
        swap["ins"][0]["trigger"] = triggers[k + 1]
        # Release node (as the planner sets them, plan/release.rs): the next layer's
        # forward MatMul waits for this copy, so the executor cannot run ahead of it.
        swap["gate"] = {"node": s.split(relus[k + 1])[0][0]}
    return plan


@pytest.fixture(scope="module")
def swapped(mlp, swap_spec):
    """The swap plan written into the step (``"cpu-emulation"``: copies to /device:CPU:1)."""
    traced, _ = mlp
    return rewrite_with_summary(traced.graph_def, swap_spec, target="cpu-emulation")


def test_a_swap_plan_on_the_thread_pool_copies_to_the_host_and_computes_the_same(mlp, swapped):
    traced, batches = mlp
    out = swapped
    weights = [v.numpy() for v in traced.variables]

    # A swap plan has two executors, so TensorFlow runs it on its thread pool even when
    # asked to run inline (Measurement.inline); the original is measured on the pool
    # too, so that only the swaps differ. With the pool the order (and the peak) varies
    # between Sessions even with one inter-op thread: each side is the best of three.
    def best(graph_def):
        runs = [measure(traced, graph_def, batches, steps=STEPS, order="pool") for _ in range(3)]
        return min(runs, key=lambda m: m.device_peak)

    base = best(None)
    swapped = best(out.graph_def)
    assert not base.inline and not swapped.inline
    assert not measure(traced, out.graph_def, batches, steps=1).inline  # the pool anyway

    assert all(np.array_equal(v.numpy(), w) for v, w in zip(traced.variables, weights, strict=True))
    assert [a.tobytes() for a in base.losses] == [a.tobytes() for a in swapped.losses]
    device, host = "/device:CPU:0", "/device:CPU:1"
    assert host not in base.peak_bytes
    swapped_bytes = LAYERS * BATCH * WIDTH * 4
    # At most one host copy per swap (fewer at once when a copy is freed before
    # the last swap-out runs: the executor's order varies from run to run).
    assert all(0 < p <= swapped_bytes for p in swapped.step_peaks[host])
    assert swapped_bytes in swapped.step_peaks[host] or max(swapped.step_peaks[host]) >= (
        swapped_bytes // 3
    )
    # The device's peak on the pool is not asserted here: the pool defers every ready
    # kernel but one to the end of the backward pass (docs/accuracy.md finding 11), so
    # what a swap frees depends on the kernels' order: 0.59 of the original with oneDNN's
    # kernels, and with TensorFlow's own (TF_ENABLE_ONEDNN_OPTS=0) the input gradients
    # (2 MiB each) pile up until the deferred weight gradients run and the swaps free
    # nothing (16.9 against 17.2 MB). The claim that the swaps lower the device's peak
    # is asserted in the order a GPU executor runs the step (inline, one executor):
    # test_host_on_device_runs_a_swap_plan_inline_with_the_copies_as_host_memory.
    print(
        f"\nMLP {LAYERS}x{WIDTH}, batch {BATCH}: device peak original "
        f"{base.step_peaks[device]} B, swapped {swapped.step_peaks[device]} B, "
        f"host {swapped.step_peaks[host]} B; step {base.step_time * 1e3:.1f} ms -> "
        f"{swapped.step_time * 1e3:.1f} ms"
    )


def test_original_peak_against_analyze(mlp):
    """Measured vs planned activation peak of the original graph (see the report)."""
    traced, batches = mlp
    m = measure(traced, None, batches, steps=STEPS, warmup=1)
    assert m.inline
    planned = hybridplan.analyze(traced).activation_peak_bytes
    ratio = m.device_peak / planned
    print(f"\nMLP measured device peak {m.device_peak} B, analyze {planned} B, ratio {ratio:.3f}")
    assert 0.5 < ratio < 1.5
    assert isinstance(m, Measurement) and len(m.step_times) == STEPS
    assert m.timeline_bytes.max() == m.device_peak
    assert np.all(np.diff(m.timeline_us) >= 0)
    seconds, in_use = m.timeline
    assert seconds[-1] == pytest.approx(m.timeline_us[-1] / 1e6) and in_use is m.timeline_bytes


def test_a_step_with_one_executor_runs_inline_and_repeats_its_peak(mlp):
    """order="inline" (the default) runs the original in the order nodes become ready
    (a GPU executor's order); the thread pool defers ready kernels and is no longer the
    default. Inline, the order and so the peak are the same (to 0.1%) in every step and every
    Session (docs/accuracy.md, finding 11); on the pool they vary between Sessions."""
    traced, batches = mlp
    runs = [measure(traced, None, batches, steps=2) for _ in range(2)]
    assert all(m.inline for m in runs)
    peaks = [p for m in runs for p in m.step_peaks["/device:CPU:0"]]
    # The same within 0.1%: a full-suite run once measured 16538668 against 16530476 B
    # in the other Session (an 8 KiB kernel scratch buffer); on the pool peaks differ by
    # megabytes between Sessions.
    assert max(peaks) <= 1.001 * min(peaks), peaks
    pool = measure(traced, None, batches, steps=1, order="pool")
    assert not pool.inline
    # Same arithmetic, whatever the order.
    assert [a.tobytes() for a in runs[0].losses] == [a.tobytes() for a in runs[1].losses]
    assert runs[0].losses[0].tobytes() == pool.losses[0].tobytes()


def test_ran_inline_means_one_device_ran_nodes():
    stats = step_stats_pb2.StepStats()
    stats.dev_stats.add(device="/job:localhost/replica:0/task:0/device:CPU:0").node_stats.add(
        node_name="a"
    )
    stats.dev_stats.add(device="/job:localhost/replica:0/task:0/device:CPU:1")  # no nodes
    assert ran_inline(stats)
    stats.dev_stats[1].node_stats.add(node_name="b")
    assert not ran_inline(stats)


def test_replay_groups_records_by_device_and_orders_them_by_time():
    stats = step_stats_pb2.StepStats()
    dev0 = stats.dev_stats.add(device="/job:localhost/replica:0/task:0/device:CPU:0")
    dev1 = stats.dev_stats.add(device="/job:localhost/replica:0/task:0/device:CPU:1")
    a = dev0.node_stats.add(node_name="a").memory.add(allocator_name="cpu")
    a.allocation_records.add(alloc_micros=100, alloc_bytes=50)
    a.allocation_records.add(alloc_micros=400, alloc_bytes=-50)
    b = dev0.node_stats.add(node_name="b").memory.add(allocator_name="cpu")
    b.allocation_records.add(alloc_micros=200, alloc_bytes=30)  # overlaps a: peak 80
    b.allocation_records.add(alloc_micros=500, alloc_bytes=-30)
    c = dev1.node_stats.add(node_name="c").memory.add(allocator_name="cpu")
    c.allocation_records.add(alloc_micros=300, alloc_bytes=1000)  # same allocator, other device
    out = replay_step_stats(stats)
    assert sorted(out) == ["/device:CPU:0", "/device:CPU:1"]
    times, in_use = out["/device:CPU:0"]
    assert times.tolist() == [0, 100, 300, 400]
    assert in_use.tolist() == [50, 80, 30, 0]
    assert out["/device:CPU:1"][1].tolist() == [1000]
    assert device_key("/job:localhost/replica:0/task:0/device:CPU:1") == "/device:CPU:1"


def test_bad_arguments(mlp):
    traced, batches = mlp
    with pytest.raises(InvalidArgumentError, match="steps"):
        measure(traced, None, batches, steps=0)
    with pytest.raises(InvalidArgumentError, match="no batches"):
        measure(traced, None, [], steps=1)
    with pytest.raises(InvalidArgumentError, match="order"):
        measure(traced, None, batches, steps=1, order="gpu")


def test_host_on_device_runs_a_swap_plan_inline_with_the_copies_as_host_memory(mlp, swapped):
    """``host_on_device=True``: the swap-outs run on the device, so the step has one
    executor and runs inline (a GPU executor's order, deterministic), and the bytes they
    allocate are tallied under the host, not the device; the arithmetic is unchanged."""
    traced, batches = mlp
    device, host = "/device:CPU:0", "/device:CPU:1"
    base = measure(traced, None, batches, steps=2)
    m = measure(traced, swapped.graph_def, batches, steps=2, host_on_device=True)
    assert base.inline and m.inline
    assert sorted(m.host_nodes) == sorted(swapped.summary.swap_out)
    # Every swap-out's copy (2 MiB each, all made before the first swap-in) is charged
    # to the host; each record goes to one device, so none of them is in the device's.
    swapped_bytes = LAYERS * BATCH * WIDTH * 4
    assert m.step_peaks[host] == [swapped_bytes] * 2
    # The original buffers are freed after their copies: the device holds about half
    # the original's peak (8.4 against 16.5 MB), the same in every step.
    assert max(m.step_peaks[device]) <= 1.001 * min(m.step_peaks[device])
    assert m.device_peak < 0.6 * base.device_peak
    assert [a.tobytes() for a in base.losses] == [a.tobytes() for a in m.losses]
    assert all(np.array_equal(a, b) for a, b in zip(base.weights, m.weights, strict=True))
    # A graph without nodes on other devices is measured as without the option.
    same = measure(traced, None, batches, steps=1, host_on_device=True)
    assert same.inline and same.host_nodes == () and host not in same.peak_bytes


def test_replay_charges_the_named_nodes_to_another_device():
    stats = step_stats_pb2.StepStats()
    dev0 = stats.dev_stats.add(device="/job:localhost/replica:0/task:0/device:CPU:0")
    a = dev0.node_stats.add(node_name="a").memory.add(allocator_name="cpu")
    a.allocation_records.add(alloc_micros=100, alloc_bytes=50)
    b = dev0.node_stats.add(node_name="step/copy").memory.add(allocator_name="cpu")
    b.allocation_records.add(alloc_micros=200, alloc_bytes=30)
    b.allocation_records.add(alloc_micros=300, alloc_bytes=-30)
    out = replay_step_stats(stats, {"step/copy": "/device:CPU:1"})
    assert out["/device:CPU:0"][1].tolist() == [50]
    assert out["/device:CPU:1"][1].tolist() == [30, 0]
    assert replay_step_stats(stats)["/device:CPU:0"][1].tolist() == [50, 80, 50]


def _recompute_spec(traced) -> dict:
    """A hand-built plan recomputing the second and fourth layers (MatMul, BiasAdd, ReLU)
    from the kept activation below each, for their backward readers."""
    s = Structure(traced.graph_def, traced.loss)
    relus = s.candidates("Relu")
    recomputes = []
    for k in (1, 3):
        relu = relus[k]
        (bias_add,) = [i for i in s.data_inputs(relu) if i in s.forward]
        matmul = next(i for i in s.data_inputs(bias_add) if s.gd.node[i].op == "MatMul")
        late = s.split(relu)[1]
        recomputes.append(
            {"nodes": [matmul, bias_add, relu], "trigger": s.trigger(late), "consumers": late}
        )
    return {"swaps": [], "recomputes": recomputes}


def _simulated_activation_peak(traced, spec: dict) -> int:
    """The core's simulated activation peak of a hand-built plan (a rewrite spec), on the
    ``cpu`` preset (the emulation's link: memcpy)."""
    data = traced.graph_def.SerializeToString()
    problem = json.loads(_core.export_problem(data, "cpu", None, traced.loss))
    swaps = [
        {
            "tensor": problem["nodes"][sw["node"]]["outputs"][sw["output"]],
            "after": sw["after"],
            "ins": sw["ins"],
            **({"release": sw["gate"]["node"]} if sw.get("gate") else {}),
        }
        for sw in spec["swaps"]
    ]
    plan = json.dumps({"swaps": swaps, "recomputes": spec["recomputes"]})
    core = _core.simulate_plan(data, plan, 1 << 40, "hand-built", "cpu", None, traced.loss)
    report = json.loads(core.report_json)
    return report["planned"]["peak_bytes"] - hybridplan.analyze(traced).persistent_bytes


def test_hand_built_plans_measure_within_ten_percent_of_the_simulator(mlp):
    """Issue 3's check: the simulated device peak of the original, of a hand-built swap
    plan and of a hand-built recompute plan, each against the peak replayed from the
    executor's allocation records, within 10%. Measured the way the target runs (inline,
    a GPU executor's order; the swap plan's host copies run on the device and are
    charged to the host), with the fed batch added to the measured side: the model
    counts it on the device, the Session's feed allocates it before the step
    (docs/accuracy.md, findings 2, 3 and 11).

    The swap plan triggers each swap-in right before its readers. Triggered a layer
    earlier (the ``swap_spec`` fixture), the model, whose copy engine starts a copy as
    soon as its trigger ends, predicts 13.1 MB and the emulation measures 10.6 (0.81):
    inline, the swap-in is one more node in the compute queue and starts later, so its
    copy lives shorter than on a device with a copy engine of its own."""
    traced, batches = mlp
    fed = sum(a.nbytes for a in batches[0])
    a = hybridplan.analyze(traced)
    s = Structure(traced.graph_def, traced.loss)
    swap_spec = swap_plan(s, s.candidates("Relu"))
    recompute_spec = _recompute_spec(traced)
    cases = {
        "original": (None, a.activation_peak_bytes),
        "swap": (swap_spec, _simulated_activation_peak(traced, swap_spec)),
        "recompute": (recompute_spec, _simulated_activation_peak(traced, recompute_spec)),
    }
    ratios = {}
    for name, (spec, predicted) in cases.items():
        gd = None
        if spec is not None:
            gd = rewrite_with_summary(traced.graph_def, spec, target="cpu-emulation").graph_def
        m = measure(traced, gd, batches, steps=2, host_on_device=True)
        assert m.inline, name
        ratios[name] = (m.device_peak + fed) / predicted
    print(
        "\nmeasured (+ fed batch) / simulated: "
        + ", ".join(f"{k} {v:.3f}" for k, v in ratios.items())
    )
    # The plans do cut the peak, so the check is not of three equal graphs.
    assert cases["swap"][1] < 0.7 * cases["original"][1]
    assert cases["recompute"][1] < 0.9 * cases["original"][1]
    for name, r in ratios.items():
        assert 0.9 <= r <= 1.1, (name, ratios)


def test_workspace_rule_is_the_running_tensorflows():
    """``auto`` asks TensorFlow which CPU kernels it runs: oneDNN's exactly when
    ``TF_ENABLE_ONEDNN_OPTS`` says so (this file runs under 0 and 1 in check.sh)."""
    import os

    from hybridplan._backend import cpu_workspace_rule, workspace_rule

    rule = cpu_workspace_rule()
    setting = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
    if setting in ("0", "1"):
        assert rule.startswith("cpu-onednn" if setting == "1" else "cpu-eigen:"), rule
    assert workspace_rule("auto", hybridplan.device_model("cpu")) == rule
    assert workspace_rule("auto") == rule  # an analysis: compared with CPU measurements
    assert workspace_rule(None, hybridplan.device_model("cpu")) == "none"
    with pytest.raises(hybridplan.InvalidArgumentError, match="workspace rule"):
        hybridplan.analyze(hybridplan.testing.synthetic_graphdef(200), workspace="tpu")


def test_onednn_leaves_the_types_this_cpu_lacks_to_tensorflows_kernels():
    """TensorFlow's ``IsDataTypeSupportedByOneDNNOnThisCPU`` from the CPU's flags: an
    AVX2-only CPU runs bfloat16 and float16 ops in TensorFlow's own kernels, an AVX-512
    one without AVX512-FP16 only float16 ones, a Sapphire Rapids neither."""
    from hybridplan._backend import onednn_own_kernel_types

    assert onednn_own_kernel_types({"avx2", "fma"}) == ["bfloat16", "half"]
    assert onednn_own_kernel_types({"avx512f", "avx512bw", "avx512_bf16"}) == ["half"]
    assert onednn_own_kernel_types({"avx512f", "avx512bw", "avx512_fp16"}) == []
    assert onednn_own_kernel_types({"avx2", "avx_ne_convert"}) == []
    g = hybridplan.testing.synthetic_graphdef(200)
    for spec in ("cpu-onednn:2:33554432:half", "cpu-onednn:2:33554432:bfloat16,half"):
        assert hybridplan.analyze(g, workspace=spec).peak_bytes > 0


def test_auto_workspace_follows_the_device_models_kernels_not_its_name(monkeypatch):
    """A model made from the ``cpu`` preset under another name (a slower link, as
    tests/distribute_case.py gives one replica) still runs TensorFlow's CPU kernels: its
    plan counts their scratch. Before the ``kernels`` field, ``auto`` went by the name
    and planned such a model without scratch."""
    from hybridplan._backend import cpu_workspace_rule

    monkeypatch.delenv("TF_CUDNN_WORKSPACE_LIMIT_IN_MB", raising=False)
    g = hybridplan.testing.synthetic_graphdef(200)
    slow = hybridplan.device_model("cpu", name="slow-link", h2d_bandwidth=2e8)
    assert slow["kernels"] == "cpu"
    budget = "100GiB"
    assert hybridplan.plan(g, budget, device=slow).report["workspace"] == cpu_workspace_rule()
    assert hybridplan.plan(g, budget, device="a100-pcie4").report["workspace"] == "none"
    monkeypatch.setenv("TF_CUDNN_WORKSPACE_LIMIT_IN_MB", "256")
    assert hybridplan.plan(g, budget, device="a100-pcie4").report["workspace"] == "gpu-cudnn:256"
    own = hybridplan.device_model("a100-pcie4", kernels="gpu-cudnn:64")
    assert hybridplan.plan(g, budget, device=own).report["workspace"] == "gpu-cudnn:64"
    unnamed = {k: v for k, v in hybridplan.device_model("cpu").items() if k != "kernels"}
    assert hybridplan.plan(g, budget, device=unnamed).report["workspace"] == "gpu-cudnn:256"
    with pytest.raises(hybridplan.InvalidArgumentError, match="kernels"):
        hybridplan.plan(g, budget, device=hybridplan.device_model("cpu", kernels="tpu"))


def test_measured_scratch_is_the_modelled_scratch():
    """The small ResNet's kernel scratch, measured (buffers a node allocated and freed
    while it ran) against the workspace rule of the kernels TensorFlow runs: with its
    own kernels a 28,311,552-byte im2col buffer in each 16-channel
    ``Conv2DBackpropFilter``, with oneDNN's a few KiB the rule leaves out. The total
    peak is the tensors' plus scratch at the op that holds it."""
    from hybridplan import models

    w = models.build("small_resnet")
    traced = w.trace()
    a = hybridplan.analyze(traced)
    m = measure(traced, None, w.batch, steps=1)
    predicted = a.workspace_peak_bytes
    assert predicted <= m.device_scratch <= predicted + (128 << 10), (m.scratch_bytes, predicted)
    assert m.device_tensor_peak <= m.device_peak
    assert m.device_peak <= m.device_tensor_peak + m.device_scratch
    predicted_total = a.peak_bytes - a.persistent_bytes
    assert abs(m.device_peak - predicted_total) <= 0.1 * m.device_peak, (
        m.device_peak,
        predicted_total,
    )
