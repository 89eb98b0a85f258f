"""Reference workloads: Keras 3 models with an optimizer, a loss and input specs.

Every builder works offline (``weights=None``), for any input size and batch, and
returns a :class:`Workload`: the model, its optimizer (SGD with momentum by default,
``optimizer="adam"`` for Adam), the loss, fully defined input specs, a deterministic
batch generator and :meth:`Workload.trace`.

=================  ==========================================================
``resnet50``       ``keras.applications.ResNet50``, image classification
``resnet152``      ``keras.applications.ResNet152``, image classification
``deeplabv3plus``  ResNet-50 backbone, ASPP (rates 6/12/18 + image pooling),
                   decoder with the low-level skip; per-pixel classification
``unet3d``         3D U-Net (two Conv3D+BN+ReLU per level, skip concatenation)
``transformer``    encoder stack (MultiHeadAttention, LayerNorm, MLP);
                   per-token classification
``small_cnn``      two Conv+BN+ReLU blocks and a Dense head, for quick tests
=================  ==========================================================

Example::

    from hybridplan.models import build
    w = build("resnet50", size=64, batch=2)
    traced = w.trace()
    x, y = w.batch(0)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

import keras
import numpy as np
import tensorflow as tf

from hybridplan.errors import InvalidArgumentError
from hybridplan.tracing import Traced, trace_keras

__all__ = [
    "WORKLOADS",
    "Workload",
    "build",
    "deeplabv3plus",
    "from_keras",
    "resnet50",
    "resnet152",
    "small_cnn",
    "small_resnet",
    "transformer",
    "unet3d",
]

#: an optimizer name ("sgd": SGD with momentum 0.9, "adam") or a Keras optimizer
OptimizerArg: TypeAlias = "str | keras.optimizers.Optimizer"


@dataclass
class Workload:
    """A model with everything needed to trace and run its training step.

    Attributes:
        name: registry name, e.g. ``"resnet50"``.
        model: the Keras model (built, random weights).
        optimizer: the Keras optimizer (its slot variables are built on first trace).
        loss_fn: called as ``loss_fn(y_true, y_pred)``.
        x_spec: fully defined ``tf.TensorSpec`` of the input batch.
        y_spec: fully defined ``tf.TensorSpec`` of the target batch.
        y_classes: targets are integers in ``[0, y_classes)``.
        x_vocab: for an integer input, tokens are in ``[0, x_vocab)``; None for floats.
    """

    name: str
    model: keras.Model
    optimizer: keras.optimizers.Optimizer
    loss_fn: Any
    x_spec: tf.TensorSpec
    y_spec: tf.TensorSpec
    y_classes: int
    x_vocab: int | None = None

    def batch(self, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """A deterministic random batch ``(x, y)`` as numpy arrays matching the specs.

        Float inputs are standard normal; integer inputs and targets are uniform.
        """
        rng = np.random.default_rng(seed)
        x_shape = tuple(self.x_spec.shape.as_list())
        if self.x_vocab is None:
            x = rng.standard_normal(x_shape).astype(self.x_spec.dtype.as_numpy_dtype)
        else:
            x = rng.integers(0, self.x_vocab, x_shape).astype(self.x_spec.dtype.as_numpy_dtype)
        y_shape = tuple(self.y_spec.shape.as_list())
        y = rng.integers(0, self.y_classes, y_shape).astype(self.y_spec.dtype.as_numpy_dtype)
        return x, y

    def trace(self) -> Traced:
        """Trace the standard training step (see :func:`hybridplan.tracing.trace_keras`)."""
        return trace_keras(self.model, self.optimizer, self.loss_fn, self.x_spec, self.y_spec)


# --------------------------------------------------------------------------- helpers


def _optimizer(optimizer: OptimizerArg, learning_rate: float | None = None) -> Any:
    if isinstance(optimizer, keras.optimizers.Optimizer):
        return optimizer
    if optimizer == "sgd":
        return keras.optimizers.SGD(learning_rate=learning_rate or 0.01, momentum=0.9)
    if optimizer == "adam":
        return keras.optimizers.Adam(learning_rate=learning_rate or 1e-3)
    raise InvalidArgumentError(
        f"optimizer must be 'sgd', 'adam' or a keras optimizer, got {optimizer!r}"
    )


def _positive(**values: int) -> None:
    for key, value in values.items():
        if value < 1:
            raise InvalidArgumentError(f"{key} must be >= 1, got {value}")


def _multiple(what: str, value: int, factor: int) -> None:
    if value % factor:
        raise InvalidArgumentError(f"{what} must be a multiple of {factor}, got {value}")


def _sparse_ce() -> keras.losses.Loss:
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _image_classifier(
    name: str, model: Any, optimizer: OptimizerArg, batch: int, size: int, classes: int
) -> Workload:
    """A workload on ``batch`` RGB images of ``size``x``size`` with integer class labels."""
    return _workload(
        name,
        model,
        optimizer,
        tf.TensorSpec([batch, size, size, 3], tf.float32, name="x"),
        tf.TensorSpec([batch], tf.int32, name="y"),
        classes,
    )


def _workload(
    name: str,
    model: keras.Model,
    optimizer: OptimizerArg,
    x_spec: tf.TensorSpec,
    y_spec: tf.TensorSpec,
    classes: int,
    x_vocab: int | None = None,
) -> Workload:
    return Workload(
        name=name,
        model=model,
        optimizer=_optimizer(optimizer),
        loss_fn=_sparse_ce(),
        x_spec=x_spec,
        y_spec=y_spec,
        y_classes=classes,
        x_vocab=x_vocab,
    )


# --------------------------------------------------------------------------- ResNet


def _resnet(
    name: str,
    app: Callable[..., keras.Model],
    size: int,
    batch: int,
    classes: int,
    optimizer: OptimizerArg,
    seed: int,
) -> Workload:
    _positive(size=size, batch=batch, classes=classes)
    if size < 32:
        raise InvalidArgumentError(f"{name} needs size >= 32, got {size}")
    keras.utils.set_random_seed(seed)
    model = app(
        weights=None, input_shape=(size, size, 3), classes=classes, classifier_activation=None
    )
    return _image_classifier(name, model, optimizer, batch, size, classes)


def resnet50(
    size: int = 224,
    batch: int = 2,
    classes: int = 1000,
    optimizer: OptimizerArg = "sgd",
    seed: int = 0,
) -> Workload:
    """ResNet-50 (``keras.applications``, random weights) on ``size``x``size`` RGB images.

    Args:
        size: image height and width in pixels (>= 32).
        batch: images per step.
        classes: output classes (logits; sparse categorical cross-entropy).
        optimizer: ``"sgd"`` (momentum 0.9), ``"adam"`` or a Keras optimizer.
        seed: weight initialisation seed (sets Keras' global seed).
    """
    app = keras.applications.ResNet50
    return _resnet("resnet50", app, size, batch, classes, optimizer, seed)


def resnet152(
    size: int = 224,
    batch: int = 2,
    classes: int = 1000,
    optimizer: OptimizerArg = "sgd",
    seed: int = 0,
) -> Workload:
    """ResNet-152 (``keras.applications``, random weights); arguments as :func:`resnet50`."""
    app = keras.applications.ResNet152
    return _resnet("resnet152", app, size, batch, classes, optimizer, seed)


# --------------------------------------------------------------------------- DeepLabV3+


def _conv_bn_relu(x: Any, filters: int, kernel: int = 3, dilation: int = 1) -> Any:
    x = keras.layers.Conv2D(
        filters, kernel, padding="same", dilation_rate=dilation, use_bias=False
    )(x)
    x = keras.layers.BatchNormalization()(x)
    return keras.layers.ReLU()(x)


def _aspp(x: Any, filters: int) -> Any:
    """Atrous spatial pyramid pooling: 1x1, 3x3 at rates 6/12/18, and image pooling."""
    height, width = int(x.shape[1]), int(x.shape[2])
    pooled = keras.layers.GlobalAveragePooling2D(keepdims=True)(x)
    pooled = _conv_bn_relu(pooled, filters, kernel=1)
    pooled = keras.layers.UpSampling2D((height, width), interpolation="bilinear")(pooled)
    branches = [pooled, _conv_bn_relu(x, filters, kernel=1)]
    branches += [_conv_bn_relu(x, filters, dilation=rate) for rate in (6, 12, 18)]
    merged = keras.layers.Concatenate()(branches)
    return _conv_bn_relu(merged, filters, kernel=1)


def deeplabv3plus(
    size: int = 512,
    batch: int = 1,
    classes: int = 21,
    optimizer: OptimizerArg = "sgd",
    seed: int = 0,
    filters: int = 256,
) -> Workload:
    """DeepLabV3+ for semantic segmentation, ResNet-50 backbone (random weights).

    The encoder is ``keras.applications.ResNet50`` up to the stage-4 output (stride 16,
    as in Keras' DeepLabV3+ example; stage 5 is not used);
    ASPP with dilation rates 6/12/18 and image pooling; the decoder upsamples 4x
    (bilinear), concatenates the stride-4 low-level features (stage 2, reduced to 48
    channels), applies two 3x3 convolutions and upsamples bilinearly to the input size.
    The loss is per-pixel sparse categorical cross-entropy.

    Args:
        size: image height and width in pixels, a multiple of 16 (>= 32).
        batch: images per step.
        classes: segmentation classes.
        optimizer: ``"sgd"`` (momentum 0.9), ``"adam"`` or a Keras optimizer.
        seed: weight initialisation seed (sets Keras' global seed).
        filters: channels of the ASPP and decoder convolutions.
    """
    _positive(size=size, batch=batch, classes=classes, filters=filters)
    _multiple("deeplabv3plus size", size, 16)
    if size < 32:
        raise InvalidArgumentError(f"deeplabv3plus needs size >= 32, got {size}")
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((size, size, 3), batch_size=batch)
    backbone = keras.applications.ResNet50(weights=None, include_top=False, input_tensor=inputs)
    # Layer names here only pick the backbone's outputs (model I/O), as Keras' own
    # DeepLabV3+ example does; nothing about the traced graph is decided by name.
    high = backbone.get_layer("conv4_block6_out").output  # stride 16
    low = backbone.get_layer("conv2_block3_out").output  # stride 4
    x = _aspp(high, filters)
    x = keras.layers.UpSampling2D(4, interpolation="bilinear")(x)
    low = _conv_bn_relu(low, 48, kernel=1)
    x = keras.layers.Concatenate()([x, low])
    x = _conv_bn_relu(x, filters)
    x = _conv_bn_relu(x, filters)
    x = keras.layers.UpSampling2D(4, interpolation="bilinear")(x)
    outputs = keras.layers.Conv2D(classes, 1)(x)
    model = keras.Model(inputs, outputs, name="deeplabv3plus")
    return _workload(
        "deeplabv3plus",
        model,
        optimizer,
        tf.TensorSpec([batch, size, size, 3], tf.float32, name="x"),
        tf.TensorSpec([batch, size, size], tf.int32, name="y"),
        classes,
    )


# --------------------------------------------------------------------------- 3D U-Net


def _conv3d_bn_relu(x: Any, filters: int) -> Any:
    x = keras.layers.Conv3D(filters, 3, padding="same", use_bias=False)(x)
    x = keras.layers.BatchNormalization()(x)
    return keras.layers.ReLU()(x)


def unet3d(
    size: int = 32,
    batch: int = 1,
    base_filters: int = 8,
    levels: int = 4,
    channels_in: int = 1,
    classes: int = 2,
    optimizer: OptimizerArg = "sgd",
    seed: int = 0,
) -> Workload:
    """3D U-Net (Çiçek et al. 2016) for volumetric segmentation, random weights.

    Analysis path: per level ``i`` two Conv3D(3x3x3)+BatchNorm+ReLU with
    ``base_filters * 2**i`` and twice that many filters, then MaxPool3D(2) (not on the
    bottom level). Synthesis path, per level: Conv3DTranspose(2, stride 2) keeping the
    channel count, concatenation with the analysis path's output at the same level (the
    skip connection), two Conv3D+BN+ReLU with ``base_filters * 2**(i+1)`` filters. A
    1x1x1 Conv3D gives per-voxel logits; the loss is per-voxel sparse categorical
    cross-entropy.

    Args:
        size: edge of the cubic volume in voxels, a multiple of ``2**(levels-1)``.
        batch: volumes per step.
        base_filters: filters of the first level (doubled per level).
        levels: resolution levels, including the bottom one (>= 1).
        channels_in: input channels.
        classes: segmentation classes.
        optimizer: ``"sgd"`` (momentum 0.9), ``"adam"`` or a Keras optimizer.
        seed: weight initialisation seed (sets Keras' global seed).
    """
    _positive(size=size, batch=batch, base_filters=base_filters, levels=levels)
    _positive(channels_in=channels_in, classes=classes)
    _multiple("unet3d size", size, 2 ** (levels - 1))
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((size, size, size, channels_in), batch_size=batch)
    x = inputs
    skips = []
    for level in range(levels):
        filters = base_filters * 2**level
        x = _conv3d_bn_relu(x, filters)
        x = _conv3d_bn_relu(x, filters * 2)
        if level < levels - 1:
            skips.append(x)
            x = keras.layers.MaxPool3D(2)(x)
    for level in reversed(range(levels - 1)):
        filters = base_filters * 2 ** (level + 1)
        x = keras.layers.Conv3DTranspose(filters * 2, 2, strides=2)(x)
        x = keras.layers.Concatenate()([skips[level], x])
        x = _conv3d_bn_relu(x, filters)
        x = _conv3d_bn_relu(x, filters)
    outputs = keras.layers.Conv3D(classes, 1)(x)
    model = keras.Model(inputs, outputs, name="unet3d")
    return _workload(
        "unet3d",
        model,
        optimizer,
        tf.TensorSpec([batch, size, size, size, channels_in], tf.float32, name="x"),
        tf.TensorSpec([batch, size, size, size], tf.int32, name="y"),
        classes,
    )


# --------------------------------------------------------------------------- Transformer


class _PositionEmbedding(keras.layers.Layer):
    """Adds a learned embedding of the token position to a (batch, seq, d) tensor."""

    def build(self, input_shape: Any) -> None:
        self.table = self.add_weight(
            shape=(int(input_shape[1]), int(input_shape[2])),
            initializer=keras.initializers.RandomNormal(stddev=0.02),
            name="table",
        )

    def call(self, x: Any) -> Any:
        return x + self.table


def _encoder_block(x: Any, d_model: int, heads: int) -> Any:
    attn = keras.layers.MultiHeadAttention(heads, d_model // heads)(x, x)
    x = keras.layers.LayerNormalization(epsilon=1e-6)(keras.layers.Add()([x, attn]))
    h = keras.layers.Dense(4 * d_model, activation="gelu")(x)
    h = keras.layers.Dense(d_model)(h)
    return keras.layers.LayerNormalization(epsilon=1e-6)(keras.layers.Add()([x, h]))


def transformer(
    seq: int = 128,
    d_model: int = 128,
    heads: int = 4,
    layers: int = 2,
    batch: int = 2,
    vocab: int = 1000,
    optimizer: OptimizerArg = "sgd",
    seed: int = 0,
) -> Workload:
    """Transformer encoder with per-token classification (a masked-LM-like head).

    Token embedding plus learned position embedding, ``layers`` post-norm encoder blocks
    (MultiHeadAttention, residual, LayerNormalization, GELU MLP of width ``4*d_model``,
    residual, LayerNormalization) and a Dense head over the vocabulary. Inputs are int32
    token ids; targets are one token id per position.

    Args:
        seq: tokens per sequence.
        d_model: model width, a multiple of ``heads``.
        heads: attention heads.
        layers: encoder blocks.
        batch: sequences per step.
        vocab: vocabulary size (input tokens and output classes).
        optimizer: ``"sgd"`` (momentum 0.9), ``"adam"`` or a Keras optimizer.
        seed: weight initialisation seed (sets Keras' global seed).
    """
    _positive(seq=seq, d_model=d_model, heads=heads, layers=layers, batch=batch, vocab=vocab)
    _multiple("transformer d_model", d_model, heads)
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((seq,), batch_size=batch, dtype="int32")
    x = keras.layers.Embedding(vocab, d_model)(inputs)
    x = _PositionEmbedding()(x)
    for _ in range(layers):
        x = _encoder_block(x, d_model, heads)
    outputs = keras.layers.Dense(vocab)(x)
    model = keras.Model(inputs, outputs, name="transformer")
    return _workload(
        "transformer",
        model,
        optimizer,
        tf.TensorSpec([batch, seq], tf.int32, name="x"),
        tf.TensorSpec([batch, seq], tf.int32, name="y"),
        vocab,
        x_vocab=vocab,
    )


# --------------------------------------------------------------------------- small CNN


def small_cnn(
    size: int = 16,
    batch: int = 2,
    classes: int = 10,
    filters: int = 8,
    optimizer: OptimizerArg = "sgd",
    seed: int = 0,
    convs: int = 2,
) -> Workload:
    """A small CNN for quick tests: Conv2D+BN+ReLU, MaxPool, then ``convs - 1``
    more Conv2D+BN+ReLU, Flatten, Dense.

    Args:
        size: image height and width, even.
        batch: images per step.
        classes: output classes.
        filters: channels of the first convolution (doubled in the second).
        optimizer: ``"sgd"`` (momentum 0.9), ``"adam"`` or a Keras optimizer.
        seed: weight initialisation seed (sets Keras' global seed).
        convs: convolutions (2: conv, pool, conv).
    """
    _positive(size=size, batch=batch, classes=classes, filters=filters, convs=convs)
    _multiple("small_cnn size", size, 2)
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((size, size, 3), batch_size=batch)
    x = _conv_bn_relu(inputs, filters)
    x = keras.layers.MaxPool2D(2)(x)
    for _ in range(convs - 1):
        x = _conv_bn_relu(x, filters * 2)
    x = keras.layers.Flatten()(x)
    outputs = keras.layers.Dense(classes)(x)
    model = keras.Model(inputs, outputs, name="small_cnn")
    return _image_classifier("small_cnn", model, optimizer, batch, size, classes)


def small_resnet(
    size: int = 32,
    batch: int = 8,
    classes: int = 10,
    filters: int = 16,
    blocks: int = 3,
    optimizer: OptimizerArg = "sgd",
    seed: int = 0,
) -> Workload:
    """A small residual network whose memory is dominated by activations, for quick
    tests and CPU runs: a stem Conv+BN+ReLU, ``blocks`` basic residual blocks
    (two Conv+BN, identity shortcut, Add, ReLU) at full resolution, global average
    pooling and a Dense head.

    Args:
        size: image height and width.
        batch: images per step.
        classes: output classes.
        filters: channels of every convolution.
        blocks: residual blocks.
        optimizer: ``"sgd"`` (momentum 0.9), ``"adam"`` or a Keras optimizer.
        seed: weight initialisation seed.
    """
    _positive(size=size, batch=batch, classes=classes, filters=filters, blocks=blocks)
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((size, size, 3), batch_size=batch)
    x = _conv_bn_relu(inputs, filters)
    for _ in range(blocks):
        y = _conv_bn_relu(x, filters)
        y = keras.layers.Conv2D(filters, 3, padding="same")(y)
        y = keras.layers.BatchNormalization()(y)
        x = keras.layers.ReLU()(keras.layers.Add()([x, y]))
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(classes)(x)
    model = keras.Model(inputs, outputs, name="small_resnet")
    return _image_classifier("small_resnet", model, optimizer, batch, size, classes)


# --------------------------------------------------------------------------- registry

WORKLOADS: dict[str, Callable[..., Workload]] = {
    "resnet50": resnet50,
    "resnet152": resnet152,
    "deeplabv3plus": deeplabv3plus,
    "unet3d": unet3d,
    "transformer": transformer,
    "small_cnn": small_cnn,
    "small_resnet": small_resnet,
}


def from_keras(
    model: keras.Model,
    x_spec: tf.TensorSpec,
    y_spec: tf.TensorSpec,
    classes: int,
    *,
    optimizer: OptimizerArg = "sgd",
    loss: Any = None,
    x_vocab: int | None = None,
    name: str | None = None,
) -> Workload:
    """Your own Keras classifier as a :class:`Workload` (for :func:`hybridplan.trial`,
    the command line's reports, benchmarks): targets are integer class labels in
    ``[0, classes)``, the loss sparse categorical cross-entropy on logits unless
    ``loss`` is given.

    Raises:
        InvalidArgumentError: a spec that is not fully defined, ``classes`` < 1, or an
            unknown optimizer name.

    Example::

        net = keras.applications.MobileNetV2(weights=None, input_shape=(64, 64, 3),
                                             classes=10)
        w = from_keras(net, tf.TensorSpec([8, 64, 64, 3]), tf.TensorSpec([8], tf.int32), 10)
        hybridplan.trial(w, fraction=0.6)
    """
    _positive(classes=classes)
    for what, spec in (("x_spec", x_spec), ("y_spec", y_spec)):
        if not hasattr(spec, "shape"):
            raise InvalidArgumentError(
                f"{what} is a {type(spec).__name__}; from_keras takes one tf.TensorSpec per "
                "side (one input, one target): trace a model with several with "
                "hybridplan.trace_keras, which takes nests of specs"
            )
        if not spec.shape.is_fully_defined():
            raise InvalidArgumentError(
                f"{what} must have a fully defined shape (batch included), got {spec.shape}"
            )
    w = _workload(name or model.name, model, optimizer, x_spec, y_spec, classes, x_vocab)
    if loss is not None:
        w.loss_fn = loss
    return w


def build(name: str, **kwargs: Any) -> Workload:
    """Build the workload registered as ``name`` with the builder's keyword arguments.

    ``size`` means the sequence length (``seq``) for a sequence model.

    Raises:
        InvalidArgumentError: unknown name (the message lists the known ones) or a bad
            argument.

    Example::

        w = build("unet3d", size=16, levels=3)
    """
    if name not in WORKLOADS:
        raise InvalidArgumentError(f"unknown workload {name!r}; known: {sorted(WORKLOADS)}")
    params = inspect.signature(WORKLOADS[name]).parameters
    if "size" in kwargs and "size" not in params and "seq" in params:
        kwargs["seq"] = kwargs.pop("size")  # a sequence model's "size" is its length
    try:
        return WORKLOADS[name](**kwargs)
    except TypeError as exc:
        raise InvalidArgumentError(f"bad arguments for workload {name!r}: {exc}") from exc
