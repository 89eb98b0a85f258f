"""hybridplan.models: every reference workload builds offline and traces at a small size."""

from __future__ import annotations

import functools

import keras
import numpy as np
import pytest
import tensorflow as tf

from hybridplan.errors import InvalidArgumentError
from hybridplan.models import WORKLOADS, Workload, build

SMALL = {
    "small_cnn": {},
    "small_resnet": {"size": 16, "batch": 4, "blocks": 2},
    "transformer": {"seq": 16, "d_model": 32, "heads": 2, "layers": 2, "vocab": 50},
    "unet3d": {"size": 16, "levels": 3, "base_filters": 4},
    "resnet50": {"size": 32},
    "deeplabv3plus": {"size": 64, "filters": 16},
    "resnet152": {"size": 32},
}
SLOW = {"resnet152"}  # ~25k nodes: 15-25 s to build and trace on 2 cores

# op types each model must contain (structure, not names)
SIGNATURE_OPS = {
    "small_cnn": {"Conv2D", "MaxPool", "MatMul"},
    "small_resnet": {"Conv2D", "AddV2", "Mean", "MatMul"},
    "transformer": {"Einsum", "Softmax", "GatherV2", "UnsortedSegmentSum"},
    "unet3d": {"Conv3D", "MaxPool3D", "Conv3DBackpropInputV2", "ConcatV2"},
    "resnet50": {"Conv2D", "MaxPool", "AddV2", "MatMul"},
    "deeplabv3plus": {"SpaceToBatchND", "ResizeBilinear", "ResizeBilinearGrad", "ConcatV2"},
    "resnet152": {"Conv2D", "MaxPool", "AddV2", "MatMul"},
}


@functools.cache
def _traced(name: str):
    """Build and trace a workload once per test session (tracing is the slow part)."""
    w = build(name, **SMALL[name])
    return w, w.trace()


def test_registry_names():
    assert set(WORKLOADS) == set(SMALL)


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in SMALL]
)
def test_builds_and_traces_at_small_size(name):
    w, traced = _traced(name)
    assert isinstance(w, Workload) and w.name == name
    assert w.x_spec.shape.is_fully_defined() and w.y_spec.shape.is_fully_defined()
    assert tuple(w.model.input_shape)[1:] == tuple(w.x_spec.shape)[1:]
    ops = {n.op for n in traced.graph_def.node}
    assert SIGNATURE_OPS[name] <= ops
    assert not {"PartitionedCall", "StatefulPartitionedCall", "While", "If"} & ops
    assert len(traced.captures) == len(w.model.variables) + len(w.optimizer.variables)
    assert traced.loss in traced.outputs
    assert traced.inputs == ["x", "y"]
    x, y = w.batch(0)
    assert x.shape == tuple(w.x_spec.shape) and x.dtype == w.x_spec.dtype.as_numpy_dtype
    assert y.shape == tuple(w.y_spec.shape) and y.dtype == w.y_spec.dtype.as_numpy_dtype


def test_deeplab_aspp_rates_and_output_size():
    w, traced = _traced("deeplabv3plus")
    assert tuple(w.model.output_shape) == (1, 64, 64, 21)
    gd = traced.graph_def
    nodes = {n.name: n for n in gd.node}
    # Atrous convolutions trace as SpaceToBatchND -> Conv2D -> BatchToSpaceND; the block
    # shape (second input, a Const) is the dilation rate.
    rates = set()
    for n in gd.node:
        if n.op == "SpaceToBatchND":
            block = tf.make_ndarray(nodes[n.input[1].split(":")[0]].attr["value"].tensor)
            rates.add(int(block[0]))
    assert rates == {6, 12, 18}


def test_unet3d_shapes_and_skips():
    w = build("unet3d", size=16, levels=3, base_filters=4, channels_in=2, classes=3)
    assert tuple(w.model.output_shape) == (1, 16, 16, 16, 3)
    assert tuple(w.x_spec.shape) == (1, 16, 16, 16, 2)
    concats = [layer for layer in w.model.layers if isinstance(layer, keras.layers.Concatenate)]
    assert len(concats) == 2  # one skip per level above the bottom
    assert any(isinstance(layer, keras.layers.Conv3DTranspose) for layer in w.model.layers)


def test_transformer_per_token_classification():
    w = build("transformer", seq=8, d_model=16, heads=2, layers=1, batch=3, vocab=20)
    assert tuple(w.model.output_shape) == (3, 8, 20)
    x, y = w.batch(1)
    assert x.dtype == np.int32 and 0 <= x.min() and x.max() < 20
    assert y.shape == (3, 8) and y.max() < 20
    mha = [layer for layer in w.model.layers if isinstance(layer, keras.layers.MultiHeadAttention)]
    assert len(mha) == 1


def test_batches_are_deterministic():
    w = build("small_cnn", size=8, classes=4)
    x0, y0 = w.batch(0)
    x0b, y0b = w.batch(0)
    x1, _ = w.batch(1)
    assert np.array_equal(x0, x0b) and np.array_equal(y0, y0b)
    assert not np.array_equal(x0, x1)
    assert y0.min() >= 0 and y0.max() < 4


def test_same_seed_same_weights_and_adam_option():
    a = build("small_cnn", size=8, seed=3)
    b = build("small_cnn", size=8, seed=3, optimizer="adam")
    for wa, wb in zip(a.model.get_weights(), b.model.get_weights(), strict=True):
        assert np.array_equal(wa, wb)
    assert isinstance(a.optimizer, keras.optimizers.SGD) and a.optimizer.momentum == 0.9
    assert isinstance(b.optimizer, keras.optimizers.Adam)
    traced = b.trace()
    # Adam keeps two slots per trainable variable
    n_trainable = len(b.model.trainable_variables)
    assert len(b.optimizer.variables) >= 2 * n_trainable
    assert len(traced.captures) == len(b.model.variables) + len(b.optimizer.variables)


@pytest.mark.parametrize(
    ("name", "kwargs", "match"),
    [
        ("vgg", {}, "unknown workload 'vgg'"),
        ("resnet50", {"size": 16}, "size >= 32"),
        ("deeplabv3plus", {"size": 100}, "multiple of 16"),
        ("unet3d", {"size": 20, "levels": 4}, "multiple of 8"),
        ("transformer", {"d_model": 30, "heads": 4}, "multiple of 4"),
        ("small_cnn", {"batch": 0}, "batch must be >= 1"),
        ("small_cnn", {"optimizer": "lamb"}, "optimizer must be"),
        ("small_cnn", {"depth": 3}, "bad arguments"),
    ],
)
def test_bad_arguments(name, kwargs, match):
    with pytest.raises(InvalidArgumentError, match=match):
        build(name, **kwargs)
