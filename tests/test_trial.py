"""hybridplan.trial: a planned step run next to the original on CPU emulation.

The claims under test, measured (not predicted): the rewritten step computes
the same losses and weights bit for bit, its device peak stays within the
budget, and the budget can be well below the original's peak.
"""

from __future__ import annotations

import pytest

from hybridplan import models
from hybridplan.trialing import same_bits, side_by_side, trial


def test_measured_peak_within_budget_and_below_60_percent():
    t = trial(models.build("small_resnet"), fraction=0.5, strategy="hybrid")
    assert t.same_losses and t.same_weights
    assert t.inserted["swap_out"] + t.inserted["clones"] > 0
    assert t.planned.device_peak <= t.activation_budget, (t.planned.device_peak, t)
    assert t.peak_ratio < 0.6, t.peak_ratio


#: The rewriting tests below plan as if no kernel held scratch (``workspace="none"``):
#: what they test is the rewrite of a plan with clones, the same plan whichever CPU
#: kernels TensorFlow runs. With TensorFlow's own kernels (oneDNN off) a 28 MB
#: convolution-gradient buffer dominates these small models' memory, and a budget that
#: counts it leaves the forward activations nothing to recompute (docs/devices.md).
REWRITE_ONLY = {"workspace": "none"}


def _swish_cnn():
    """Four convolution -> batch norm -> swish blocks: Grappler's remapper fuses a swish
    (``Sigmoid`` -> ``Mul``) into one kernel only when the ``Sigmoid``'s output has a
    single reader, and the fused kernel rounds differently."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    layers = keras.layers
    inp = keras.Input((32, 32, 3))
    h = inp
    for filters in (8, 16, 16, 32):
        h = layers.Conv2D(filters, 3, padding="same", use_bias=False)(h)
        h = layers.Activation("swish")(layers.BatchNormalization()(h))
    out = layers.Dense(10)(layers.GlobalAveragePooling2D()(h))
    x, y = tf.TensorSpec([4, 32, 32, 3]), tf.TensorSpec([4], tf.int32)
    return models.from_keras(keras.Model(inp, out), x, y, 10)


def test_recomputed_swish_stays_bit_identical():
    """Before gates and keepers (rewriting.py), a recompute moved the backward read of
    each ``Sigmoid`` to its clone: the original then had one reader and was fused, the
    clone (a control input of its own, protected from Grappler) was not, and the losses
    changed."""
    t = trial(_swish_cnn(), fraction=0.9, strategy="recompute", **REWRITE_ONLY)
    assert t.inserted["clones"] > 0 and t.inserted["keepers"] > 0
    assert t.same_losses and t.same_weights


def _elu_cnn():
    """Four ``Conv2D(use_bias=True, activation="elu")``: each runs fused (convolution,
    bias and activation in one kernel) in the original step."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    layers = keras.layers
    inp = keras.Input((24, 24, 3))
    h = inp
    for filters in (8, 16, 16, 16):
        h = layers.Conv2D(filters, 3, padding="same", use_bias=True, activation="elu")(h)
    out = layers.Dense(10)(layers.GlobalAveragePooling2D()(h))
    x, y = tf.TensorSpec([4, 24, 24, 3]), tf.TensorSpec([4], tf.int32)
    return models.from_keras(keras.Model(inp, out), x, y, 10)


def test_recomputed_first_layer_fuses_like_its_original():
    """The first convolution reads only the fed batch and a variable read: its clone
    must read the batch through a gate too, or it carries a control edge and the
    remapper leaves it unfused (``Conv2D``, ``BiasAdd``, ``Elu``) while the original runs
    as one fused kernel (found in review)."""
    t = trial(_elu_cnn(), fraction=0.95, strategy="recompute", **REWRITE_ONLY)
    assert t.inserted["clones"] > 0
    assert t.same_losses and t.same_weights


def test_a_recompute_never_reads_a_tensor_fused_away():
    """On a slow link `hybrid` recomputes a layer's ``BiasAdd`` and ``Elu``; a clone
    reading the ``Conv2D`` output (its only reader is the ``BiasAdd``) would stop the
    original's fusion. The planner starts such a recompute at the convolution instead
    (``plan/options.rs``, ``fused_away``)."""

    from hybridplan.analysis import analyze
    from hybridplan.applying import apply
    from hybridplan.planning import device_model

    w = _elu_cnn()
    traced = w.trace()
    a = analyze(traced, **REWRITE_ONLY)
    slow = device_model("cpu", h2d_bandwidth=5e7, d2h_bandwidth=5e7)
    budget = a.persistent_bytes + int(a.activation_peak_bytes * 0.85)
    r = apply(
        traced, budget, strategy="hybrid", device=slow, target="cpu-emulation", **REWRITE_ONLY
    )
    assert r.report["inserted"]["clones"] > 0
    assert same_bits(*side_by_side(traced, r.graph_def, w.batch))


def test_verify_accepts_clones_fused_like_their_originals():
    """Clones are unprotected so that they fuse as their originals do: verify() counts
    such a clone absorbed (its original is gone too), not missing, whether it is given
    the rewrite's summary or only the inserted names."""
    from hybridplan.analysis import analyze
    from hybridplan.planning import plan
    from hybridplan.rewriting import rewrite_with_summary
    from hybridplan.runner import compile_step
    from hybridplan.verification import verify

    w = _swish_cnn()
    traced = w.trace()
    a = analyze(traced, **REWRITE_ONLY)
    budget = a.persistent_bytes + int(a.activation_peak_bytes * 0.9)
    spec = plan(traced, budget, strategy="recompute", device="cpu", **REWRITE_ONLY).report
    out = rewrite_with_summary(traced.graph_def, spec, target="cpu-emulation")
    for expected in (out.summary, out.summary.inserted):
        report = verify(compile_step(traced, out.graph_def), expected, *w.batch(0))
        assert report.ok, report.describe()
        assert report.absorbed and not report.missing


def test_rewrite_needs_no_graph_search_when_the_plan_says_what_clones_read():
    """The core's plan lists each recompute's outside inputs and its outputs' readers;
    without them the rewrite finds both in the graph, to the same result."""
    from hybridplan.analysis import analyze
    from hybridplan.planning import plan
    from hybridplan.rewriting import rewrite

    traced = _swish_cnn().trace()
    a = analyze(traced, **REWRITE_ONLY)
    budget = a.persistent_bytes + int(a.activation_peak_bytes * 0.9)
    spec = plan(traced, budget, strategy="recompute", device="cpu", **REWRITE_ONLY).report
    assert spec["recomputes"] and all(r["inputs"] and r["readers"] for r in spec["recomputes"])
    bare = {
        **spec,
        "recomputes": [{**r, "inputs": None, "readers": None} for r in spec["recomputes"]],
    }
    with_info = rewrite(traced.graph_def, spec, target="cpu-emulation")
    found = rewrite(traced.graph_def, bare, target="cpu-emulation")
    assert with_info.SerializeToString(deterministic=True) == found.SerializeToString(
        deterministic=True
    )


def test_rebuilt_backward_broadcasts_stay_bit_identical():
    """``hybrid`` may rebuild a backward tensor from small inputs (plan/rebuild.rs): a
    batch-norm moment gradient's ``Tile`` and the ``RealDiv`` reading it, cloned just
    before their late reader. Such clones of backward ops, built here by hand on the
    small ResNet (no plan for a CPU-sized model chooses them), compute the same bits."""

    from hybridplan.analysis import analyze
    from hybridplan.rewriting import rewrite_with_summary

    w = models.build("small_resnet")
    traced = w.trace()
    gd = traced.graph_def
    order = list(analyze(traced).order)
    pos = {v: i for i, v in enumerate(order)}
    readers: dict[str, list[int]] = {}
    for i, n in enumerate(gd.node):
        for text in n.input:
            if not text.startswith("^"):
                readers.setdefault(text.split(":")[0], []).append(i)
    recomputes = []
    for i, n in enumerate(gd.node):
        if n.op != "Tile" or "gradient_tape" not in n.name or len(readers[n.name]) != 1:
            continue
        (div,) = readers[n.name]
        late = max(readers.get(gd.node[div].name, []), key=pos.get, default=None)
        if gd.node[div].op != "RealDiv" or late is None or pos[late] - 1 <= pos[div]:
            continue
        trigger = order[pos[late] - 1]
        recomputes.append({"nodes": [i, div], "trigger": trigger, "consumers": [late]})
    assert len(recomputes) >= 2
    out = rewrite_with_summary(gd, {"swaps": [], "recomputes": recomputes}, target="cpu-emulation")
    assert same_bits(*side_by_side(traced, out.graph_def, w.batch))


@pytest.mark.slow
def test_a_keras_application_recomputed_stays_bit_identical():
    """EfficientNetB0 with 200 clones: the same fusion question on a real model."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    net = keras.applications.EfficientNetB0(weights=None, input_shape=(64, 64, 3), classes=10)
    x, y = tf.TensorSpec([2, 64, 64, 3]), tf.TensorSpec([2], tf.int32)
    t = trial(models.from_keras(net, x, y, 10), fraction=0.85, strategy="recompute", **REWRITE_ONLY)
    assert t.inserted["clones"] >= 100
    assert t.same_losses and t.same_weights


@pytest.mark.slow
def test_pooling_gradients_keep_their_forward_op():
    """A 3D U-Net planned at ``budget_for(0.6)`` swaps many tensors; a swapped
    max-pooling output read by its gradient would change the weights (oneDNN's workspace
    pairing, opkind.rs): the plan must not do that. (0.5 is out of reach with
    TensorFlow's own kernels: no plan takes the tensors live beside the largest im2col
    buffer under 53.7% of what they were.)"""
    t = trial(models.build("unet3d", size=32, batch=1, levels=3), fraction=0.6)
    assert t.inserted["swap_out"] >= 10
    assert t.same_losses and t.same_weights
    assert t.peak_ratio < 0.7, t.peak_ratio


@pytest.mark.slow
def test_a_keras_application_outside_the_reference_models_stays_bit_identical():
    """EfficientNetB0 (swish activations, squeeze-excite, depthwise convolutions):
    before release gates (plan/release.rs), a release edge on the ``Sigmoid`` of a
    swish gradient kept Grappler's remapper from fusing it and the losses changed in
    the 6th digit."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    net = keras.applications.EfficientNetB0(weights=None, input_shape=(64, 64, 3), classes=10)
    x, y = tf.TensorSpec([2, 64, 64, 3]), tf.TensorSpec([2], tf.int32)
    t = trial(models.from_keras(net, x, y, 10), fraction=0.6)
    assert t.inserted["swap_out"] >= 10
    assert t.same_losses and t.same_weights


def test_every_public_name_resolves():
    import hybridplan

    for name in hybridplan.__all__:
        assert getattr(hybridplan, name) is not None, name
    assert hybridplan.models is models


def test_from_keras_rejects_a_batch_left_open_and_several_inputs():
    import keras
    import tensorflow as tf

    from hybridplan.errors import InvalidArgumentError

    net = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    with pytest.raises(InvalidArgumentError, match="fully defined"):
        models.from_keras(net, tf.TensorSpec([None, 4]), tf.TensorSpec([8], tf.int32), 3)
    with pytest.raises(InvalidArgumentError, match="trace_keras"):
        two = (tf.TensorSpec([8, 4]), tf.TensorSpec([8, 4]))
        models.from_keras(net, two, tf.TensorSpec([8], tf.int32), 3)
    w = models.from_keras(net, tf.TensorSpec([8, 4]), tf.TensorSpec([8], tf.int32), 3)
    x, y = w.batch(0)
    assert x.shape == (8, 4) and y.shape == (8,) and y.max() < 3


def test_budget_and_fraction_are_exclusive():
    from hybridplan.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="not both"):
        trial(models.build("small_cnn"), "1MiB", fraction=0.5)
    with pytest.raises(InvalidArgumentError, match="fraction"):
        trial(models.build("small_cnn"), fraction=1.5)


def test_an_unreachable_fraction_names_the_smallest_reachable_one():
    """small_cnn's tensors are mostly buffers no plan can free: ``budget_for(0.3)`` is out
    of reach with either CPU backend's kernels, and the error says which fraction is
    reachable (it used to say only bytes)."""
    from hybridplan import BudgetError

    with pytest.raises(BudgetError, match=r"pass fraction=0\.\d+ or more, or omit it") as e:
        trial(models.build("small_cnn"), fraction=0.3)
    assert e.value.best_peak > e.value.budget


def test_the_default_fraction_falls_back_to_a_reachable_one_and_prints_briefly():
    """The README's short example, as written there, on the model it suggests: no
    fraction, the smallest reachable one when 0.7 is out of reach; print(t) is a
    sentence, not every weight array."""
    t = trial(models.build("small_cnn"))
    assert t.same_losses and t.same_weights
    if t.predicted_scratch == 0:
        # oneDNN's kernels: 0.7 of the tensors is out of reach, the fallback is taken.
        assert 0.7 < t.fraction < 1 and "no plan reaches 70%" in t.note
    else:
        # TensorFlow's own: a plan only needs to shrink the tensors beside the largest
        # scratch, and reaches 0.7.
        assert t.fraction == 0.7 and not t.note
    text = repr(t)
    assert text.startswith("Trial('hybrid': losses and weights equal bit for bit")
    assert len(text) < 400 and "array(" not in text


def test_trial_takes_a_registered_model_s_name():
    """As the CLI's ``trial MODEL`` does: a name is the model at its defaults; anything
    else that is not a workload is a typed error, before any work."""
    from hybridplan.errors import InvalidArgumentError

    t = trial("small_cnn", fraction=0.9)
    assert t.same_losses and t.same_weights and t.within_budget, t
    for bad, message in ((5, "must be a hybridplan.models.Workload"), ("nosuch", "unknown")):
        with pytest.raises(InvalidArgumentError, match=message):
            trial(bad)
