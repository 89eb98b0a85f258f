"""A planned ``tf.distribute`` step, run in its own process (``test_distribute.py``).

TensorFlow fixes its logical devices when it starts, and the test session's
``conftest.py`` has already split the CPU in two; a strategy over two replicas
needs two replica devices and one more for the host. So each case runs here, in
a fresh interpreter, and prints one JSON line of facts (losses, weights, node
placements, measured peaks) for the test to judge.

    python tests/distribute_case.py mirrored
    TF_CONFIG=... python tests/distribute_case.py worker
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

STEPS = 3
BATCH = 4  # per replica
SIZE = 16


def _setup(num_cpus: int):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    # Not setup_cpu_emulation(): it lists the logical devices, which starts the
    # runtime, and MultiWorkerMirroredStrategy must configure collectives before that.
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(num_cpus)]
    )

    return tf


def _model(strategy):
    import keras

    keras.utils.set_random_seed(0)
    with strategy.scope():
        layers = [keras.Input((SIZE, SIZE, 3), batch_size=BATCH)]
        layers += [keras.layers.Conv2D(16, 3, padding="same", activation="relu") for _ in range(4)]
        layers += [keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(1)]
        model = keras.Sequential(layers)
        optimizer = keras.optimizers.SGD(0.01, momentum=0.9)
        optimizer.build(model.trainable_variables)
    return model, optimizer, keras.losses.MeanSquaredError(reduction="sum")


def _batch(seed: int, rows: int):
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, SIZE, SIZE, 3)).astype("float32")
    return x, rng.standard_normal((rows, 1)).astype("float32")


def _digest(arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(a.tobytes())
    return h.hexdigest()


def _activation_budgets(dt, fractions):
    """Per replica: (budget incl. persistent bytes, activation budget, analysed peak).

    The budget is the largest kernel scratch (no plan removes it, docs/devices.md) plus
    ``fraction`` of the rest of the analysed activation peak: below the unplanned peak
    under either CPU backend, so every replica's plan must move or recompute tensors.
    With oneDNN's kernels (no scratch) that is the fraction of the tensors' peak; with
    TensorFlow's own (a 27 MB im2col buffer in each ``Conv2DBackpropFilter`` here, far
    above these tensors) the peak is at such an op, and the plan must shrink the
    tensors live there."""
    import hybridplan
    from hybridplan import distributed

    devices = distributed.node_devices(dt.traced.graph_def, dt.traced.captures)
    out = []
    for r, dev in enumerate(dt.devices):
        members = [i for i, d in enumerate(devices) if distributed._same_device(d, dev)]
        sub = distributed.replica_subgraph(dt.traced.graph_def, members)
        a = hybridplan.analyze(sub.SerializeToString(), loss=dt.losses[r])
        budget = a.budget_for(fractions[r])
        out.append((budget, budget - a.persistent_bytes, a.activation_peak_bytes))
    return out


def _run(dt, step_fn, rows, initial):
    for v, x in zip(dt.traced.variables, initial, strict=True):
        v.assign(x)
    losses = [[float(t.numpy()) for t in step_fn(*_batch(s, rows))] for s in range(STEPS)]
    return losses, _digest(v.numpy() for v in dt.traced.variables)


def mirrored() -> dict:
    tf = _setup(3)
    from hybridplan import distributed
    from hybridplan.verification import verify

    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    model, optimizer, loss_fn = _model(strategy)
    spec_x, spec_y = tf.TensorSpec([BATCH, SIZE, SIZE, 3]), tf.TensorSpec([BATCH, 1])
    dt = distributed.trace_keras_distributed(strategy, model, optimizer, loss_fn, spec_x, spec_y)
    budgets = _activation_budgets(dt, (0.8, 0.85))
    # Replica 1 has a slow link (0.2 GB/s): swaps cannot hide there, so its plan
    # recomputes what replica 0 swaps.
    slow = distributed_device_model()
    result = distributed.apply_distributed(
        dt,
        {r: b[0] for r, b in enumerate(budgets)},
        host="/device:CPU:2",
        device={0: "cpu", 1: slow},
        target="cpu-emulation",
        min_bytes=256,
    )
    rows = BATCH * dt.num_replicas
    initial = [v.numpy() for v in dt.traced.variables]
    base = _run(dt, dt.run_original, rows, initial)  # the traced strategy step itself
    planned = distributed.DistributedStep(dt, result)
    for v, x in zip(dt.traced.variables, initial, strict=True):
        v.assign(x)
    report = verify(planned._step.run, result.inserted, *planned.arguments(*_batch(0, rows)))
    first = [float(t.numpy()) for t in report.outputs]
    rest = [[float(t.numpy()) for t in planned.run(*_batch(s, rows))] for s in range(1, STEPS)]
    new = ([first, *rest], _digest(v.numpy() for v in dt.traced.variables))

    def batches(seed):
        return _batch(seed, rows)

    # Measured on one executor, inline (measure_distributed's default, a GPU executor's
    # order): the CPU thread pool's own order varies from Session to Session.
    m_base = distributed.measure_distributed(dt, None, batches, STEPS, num_cpus=3)
    m_new = distributed.measure_distributed(dt, result.graph_def, batches, STEPS, num_cpus=3)
    # The values, in a Session: the step as given, on the thread pool.
    p_base, p_new = (
        distributed.measure_distributed(dt, g, batches, STEPS, num_cpus=3, order="pool")
        for g in (None, result.graph_def)
    )
    repeats = {
        which: [
            distributed.measure_distributed(dt, g, batches, 1, num_cpus=3).peak_bytes
            for _ in range(3)
        ]
        for which, g in (("repeat_base", None), ("repeat_planned", result.graph_def))
    }
    by_name = report.by_name()
    return {
        "devices": dt.devices,
        "base": base,
        "planned": new,
        "replicas": [
            {
                "device": rp.device,
                "host": rp.host,
                "budget": rp.budget,
                "activation_budget": budgets[rp.replica][1],
                "activation_peak": budgets[rp.replica][2],
                "predicted_peak": rp.plan.planned["peak_bytes"],
                "persistent": budgets[rp.replica][0] - budgets[rp.replica][1],
                "counts": rp.summary.counts if rp.summary else {},
                "inserted": [
                    {
                        "name": n,
                        "kind": kind,
                        "status": by_name[n].status,
                        "device": by_name[n].device,
                    }
                    for kind, names in _kinds(rp.summary)
                    for n in names
                ],
                "collectives_cloned": _collectives_cloned(dt, rp),
            }
            for rp in result.replicas
        ],
        "collective_devices": _collective_devices(dt.traced.graph_def, result.graph_def),
        "measured_base": m_base.peak_bytes,
        "measured_planned": m_new.peak_bytes,
        "measured_base_tensors": m_base.tensor_peak_bytes,
        "measured_planned_tensors": m_new.tensor_peak_bytes,
        **repeats,
        "inline": [m_base.inline, m_new.inline],
        "unattributed": [list(m_base.unattributed), list(m_new.unattributed)],
        "inline_values": [len(m.losses) + len(m.weights) for m in (m_base, m_new)],
        "pool_planned": p_new.peak_bytes,
        "pool_base": p_base.peak_bytes,
        "session_same": len(p_base.losses) == 1 + STEPS
        and _same(p_base.losses, p_new.losses)
        and _same(p_base.weights, p_new.weights),
    }


def distributed_device_model() -> dict:
    import hybridplan

    return hybridplan.device_model("cpu", name="slow-link", h2d_bandwidth=2e8, d2h_bandwidth=2e8)


def _kinds(summary):
    if summary is None:
        return []
    return [
        ("swap_out", summary.swap_out),
        ("swap_in", summary.swap_in),
        ("clone", summary.clones),
        ("gate", summary.gates),
        ("keeper", summary.keepers),
    ]


def _collectives_cloned(dt, rp) -> int:
    nodes = dt.traced.graph_def.node
    members = rp.members
    return sum(
        nodes[members[v]].op.startswith(("Collective", "Nccl"))
        for rc in rp.plan.recomputes
        for v in rc["nodes"]
    )


def _collective_devices(before, after) -> dict:
    """Each collective op's (device, inputs) before and after the rewrite."""

    def table(gd):
        return {
            n.name: [n.device, list(n.input)]
            for n in gd.node
            if n.op.startswith(("Collective", "Nccl"))
        }

    return {"before": table(before), "after": table(after)}


def _same(xs, ys) -> bool:
    import numpy as np

    return len(xs) == len(ys) and all(np.array_equal(x, y) for x, y in zip(xs, ys, strict=True))


def worker() -> dict:
    tf = _setup(2)
    from hybridplan import distributed

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    task = strategy.cluster_resolver.task_id
    model, optimizer, loss_fn = _model(strategy)
    spec_x, spec_y = tf.TensorSpec([BATCH, SIZE, SIZE, 3]), tf.TensorSpec([BATCH, 1])
    dt = distributed.trace_keras_distributed(strategy, model, optimizer, loss_fn, spec_x, spec_y)
    budgets = _activation_budgets(dt, (0.8,) * dt.num_replicas)
    result = distributed.apply_distributed(
        dt,
        {r: b[0] for r, b in enumerate(budgets)},
        host="/device:CPU:1",
        device="cpu",
        target="cpu-emulation",
        min_bytes=256,
    )
    initial = [v.numpy() for v in dt.traced.variables]
    rows = BATCH * dt.num_replicas

    def shard(seed):  # each worker trains on its own data
        return _batch(1000 * task + seed, rows)

    planned = distributed.DistributedStep(dt, result)
    out = {"task": task, "devices": dt.devices, "hosts": [r.host for r in result.replicas]}
    # Both workers run the same collectives in the same order: the traced strategy
    # step for 3 steps, then (from the same initial weights) the rewritten one.
    for key, step in (("base", dt.run_original), ("planned", planned.run)):
        for v, x in zip(dt.traced.variables, initial, strict=True):
            v.assign(x)
        losses = [[float(t.numpy()) for t in step(*shard(s))] for s in range(STEPS)]
        out[key] = (losses, _digest(v.numpy() for v in dt.traced.variables))
    out["counts"] = [r.summary.counts if r.summary else {} for r in result.replicas]
    inserted = set(result.inserted)
    out["swap_devices"] = sorted({n.device for n in result.graph_def.node if n.name in inserted})
    return out


if __name__ == "__main__":
    facts = {"mirrored": mirrored, "worker": worker}[sys.argv[1]]()
    print("RESULT " + json.dumps(facts), flush=True)
