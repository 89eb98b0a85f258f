"""hybridplan.trial: a planned step run next to the original on CPU emulation.

The claims under test, measured (not predicted): the rewritten step computes
the same losses and weights bit for bit, its device peak stays within the
budget, and the budget can be well below the original's peak.
"""

from __future__ import annotations

import pytest

from hybridplan import models
from hybridplan.trial import trial


def test_measured_peak_within_budget_and_below_60_percent():
    t = trial(models.build("small_resnet"), fraction=0.5, strategy="hybrid")
    assert t.same_losses and t.same_weights
    assert t.inserted["swap_out"] + t.inserted["clones"] > 0
    assert t.planned.device_peak <= t.activation_budget, (t.planned.device_peak, t)
    assert t.peak_ratio < 0.6, t.peak_ratio


@pytest.mark.slow
def test_pooling_gradients_keep_their_forward_op():
    """A 3D U-Net planned at half its activation peak swaps many tensors; a
    swapped max-pooling output read by its gradient would change the weights
    (oneDNN's workspace pairing, opkind.rs): the plan must not do that."""
    t = trial(models.build("unet3d", size=32, batch=1, levels=3), fraction=0.5)
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


def test_from_keras_rejects_a_batch_left_open():
    import keras
    import tensorflow as tf

    from hybridplan.errors import InvalidArgumentError

    net = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    with pytest.raises(InvalidArgumentError, match="fully defined"):
        models.from_keras(net, tf.TensorSpec([None, 4]), tf.TensorSpec([8], tf.int32), 3)
    w = models.from_keras(net, tf.TensorSpec([8, 4]), tf.TensorSpec([8], tf.int32), 3)
    x, y = w.batch(0)
    assert x.shape == (8, 4) and y.shape == (8,) and y.max() < 3


def test_budget_and_fraction_are_exclusive():
    from hybridplan.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="not both"):
        trial(models.build("small_cnn"), "1MiB", fraction=0.5)
    with pytest.raises(InvalidArgumentError, match="fraction"):
        trial(models.build("small_cnn"), fraction=1.5)
