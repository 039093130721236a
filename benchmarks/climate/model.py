"""Tiramisu (FC-DenseNet, Jegou et al. 2017) for the climate segmentation benchmark, its weighted loss and pixel
metrics, for TF2 Keras 2 and Keras 3.

Classes: 0 background, 1 tropical cyclone, 2 atmospheric river. The original benchmark ran
``ORIGINAL_MODEL`` on 768x1152 CAM5 images; the smaller presets keep the same topology.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

#: Unit tests and ``--smoke`` runs: one training step on a 64x96x4 image takes ~20-30 ms on 2 CPU cores.
SMOKE_MODEL = dict(blocks=(2, 2, 3), growth=4, base_filters=8)
#: For the 192x288x4 demo images (height and width divisible by 2**3).
DEMO_MODEL = dict(blocks=(2, 2, 3, 3), growth=8, base_filters=16)
#: The original climate benchmark: 6 down blocks, a bottleneck of 10 layers, growth 16.
ORIGINAL_MODEL = dict(blocks=(3, 3, 4, 4, 7, 7, 10), growth=16, base_filters=48)


def build_tiramisu(height: int, width: int, channels: int, classes: int = 3,
                   blocks: Sequence[int] = (3, 3, 4, 4, 7, 7, 10), growth: int = 16, base_filters: int = 48,
                   dropout: float = 0.2) -> Any:
    """Build the FC-DenseNet as a Keras model.

    Parameters
    ----------
    height, width, channels
        Input NHWC shape ``(height, width, channels)``; height and width must be divisible by
        ``2 ** (len(blocks) - 1)`` (one max-pool per down block, undone exactly by the transposed convs).
    classes
        Number of output classes (logits per pixel).
    blocks
        Layers per dense block: all but the last are the down path (each followed by a transition down),
        the last is the bottleneck. The up path mirrors the down blocks in reverse.
    growth
        Feature maps added by each dense layer.
    base_filters
        Filters of the first 3x3 convolution.
    dropout
        Dropout rate after every dense-layer and transition-down convolution.

    Returns
    -------
    tf.keras.Model
        Input ``(height, width, channels)`` float32, output logits ``(height, width, classes)``.

    Raises
    ------
    ValueError
        If ``blocks`` is empty or height/width is not divisible by ``2 ** (len(blocks) - 1)``.
    """
    if not blocks:
        raise ValueError("blocks must name at least the bottleneck block")
    factor = 2 ** (len(blocks) - 1)
    if height % factor or width % factor:
        raise ValueError(f"height and width must be divisible by 2**{len(blocks) - 1} = {factor} "
                         f"({len(blocks) - 1} down blocks), got {height}x{width}")

    import tensorflow as tf

    layers = tf.keras.layers
    down, bottleneck = list(blocks[:-1]), blocks[-1]

    def concat(tensors: list, name: str) -> Any:
        # Concatenate refuses a single input (a 1-layer block)
        return tensors[0] if len(tensors) == 1 else layers.Concatenate(name=name)(tensors)

    def dense_block(x: Any, n: int, name: str) -> tuple[Any, Any]:
        """``n`` dense layers, each seeing all earlier outputs; returns (input + new features, new features)."""
        new = []
        for i in range(n):
            y = layers.BatchNormalization(name=f"{name}_l{i}_bn")(x)
            y = layers.ReLU(name=f"{name}_l{i}_relu")(y)
            y = layers.Conv2D(growth, 3, padding="same", kernel_initializer="he_uniform",
                              name=f"{name}_l{i}_conv")(y)
            y = layers.Dropout(dropout, name=f"{name}_l{i}_drop")(y)
            new.append(y)
            x = layers.Concatenate(name=f"{name}_l{i}_cat")([x, y])
        return x, concat(new, f"{name}_new")

    inputs = tf.keras.Input((height, width, channels), name="image")
    x = layers.Conv2D(base_filters, 3, padding="same", kernel_initializer="he_uniform", name="stem_conv")(inputs)
    filters = base_filters
    skips = []
    for b, n in enumerate(down):
        x, _ = dense_block(x, n, f"down{b}")
        filters += n * growth
        skips.append(x)
        x = layers.BatchNormalization(name=f"td{b}_bn")(x)
        x = layers.ReLU(name=f"td{b}_relu")(x)
        x = layers.Conv2D(filters, 1, padding="same", kernel_initializer="he_uniform", name=f"td{b}_conv")(x)
        x = layers.Dropout(dropout, name=f"td{b}_drop")(x)
        x = layers.MaxPooling2D(2, name=f"td{b}_pool")(x)

    # Only the new feature maps of a block are upsampled (not its input): this is what keeps FC-DenseNet's
    # up path affordable at full resolution.
    x, new = dense_block(x, bottleneck, "bottleneck")
    prev_n = bottleneck
    for b, n in reversed(list(enumerate(down))):
        up = layers.Conv2DTranspose(prev_n * growth, 3, strides=2, padding="same", kernel_initializer="he_uniform",
                                    name=f"tu{b}")(new)
        x = layers.Concatenate(name=f"tu{b}_skip")([up, skips[b]])
        x, new = dense_block(x, n, f"up{b}")
        prev_n = n
    # The last up block keeps its input too, so the classifier sees the skip features at full resolution.
    logits = layers.Conv2D(classes, 1, padding="same", kernel_initializer="he_uniform", name="logits")(x)
    return tf.keras.Model(inputs, logits, name="tiramisu")


def weighted_loss(labels: Any, logits: Any, weights: Any) -> Any:
    """Per-pixel softmax cross-entropy, weighted mean ``sum(w * ce) / sum(w)``.

    Parameters
    ----------
    labels
        int32 ``(B, H, W)`` class ids.
    logits
        float32 ``(B, H, W, classes)``.
    weights
        float32 ``(B, H, W)`` per-pixel weights (the class weight of each pixel's label); a zero weight removes
        the pixel from the loss.

    Returns
    -------
    Scalar tensor; 0 if all weights are 0.
    """
    import tensorflow as tf

    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    weights = tf.cast(weights, ce.dtype)
    # Normalising by the weight sum (not the pixel count) keeps the loss scale independent of how many rare-class
    # pixels a batch happens to hold.
    return tf.math.divide_no_nan(tf.reduce_sum(weights * ce), tf.reduce_sum(weights))


def pixel_counts(labels: Any, logits: Any) -> tuple[Any, Any, Any]:
    """Counts from which accuracy and IoU follow; sum them over steps and ranks, then call ``scores``.

    Parameters
    ----------
    labels
        int ``(B, H, W)`` class ids.
    logits
        ``(B, H, W, classes)``; the prediction is the argmax.

    Returns
    -------
    (correct, intersection, union)
        int64 tensors: correctly classified pixels (scalar), and per class ``(classes,)`` the pixels both labelled
        and predicted as the class, and the pixels labelled or predicted as the class. Counts, not ratios, so
        that sums across batches and ranks give the exact global metrics.
    """
    import tensorflow as tf

    classes = logits.shape[-1]
    truth = tf.reshape(tf.cast(labels, tf.int64), [-1])
    pred = tf.reshape(tf.argmax(logits, axis=-1, output_type=tf.int64), [-1])
    # int64 confusion matrix: float32 sums would lose exactness beyond 2**24 pixels (~19 original 768x1152 images)
    cm = tf.math.confusion_matrix(truth, pred, num_classes=classes, dtype=tf.int64)
    intersection = tf.linalg.diag_part(cm)
    union = tf.reduce_sum(cm, axis=0) + tf.reduce_sum(cm, axis=1) - intersection
    return tf.reduce_sum(intersection), intersection, union


def scores(correct: Any, intersection: Any, union: Any, pixels: int) -> tuple[float, float]:
    """``(accuracy, mean IoU)`` from summed ``pixel_counts`` and the number of pixels they cover.

    The mean IoU averages over classes with a non-empty union only (a class absent from both labels and
    predictions says nothing about the model).
    """
    intersection = np.asarray(intersection, dtype=np.float64)
    union = np.asarray(union, dtype=np.float64)
    present = union > 0
    miou = float(np.mean(intersection[present] / union[present])) if present.any() else float("nan")
    return float(correct) / pixels if pixels else float("nan"), miou


def class_weights(frequencies: Sequence[float]) -> np.ndarray:
    """Loss weight per class from the class pixel frequencies: ``w_c = 1 / sqrt(f_c)``, scaled so ``w_0 = 1``.

    Inverse-square-root rather than plain inverse frequency: with tropical cyclones covering well under 1 % of
    the pixels, ``1 / f`` gives weights in the hundreds, whose gradients swamp the background and destabilise
    training; the square root still boosts the rare classes by an order of magnitude. Scaling to the background
    (class 0) keeps the common pixels at the unweighted loss. Per-pixel weights for ``weighted_loss`` are then
    ``class_weights(f)[labels]``.

    Parameters
    ----------
    frequencies
        Fraction (or count) of pixels per class, class 0 first; need not sum to 1.

    Returns
    -------
    float32 array, one weight per class.

    Raises
    ------
    ValueError
        If any frequency is not positive and finite (an absent class would get an infinite weight).
    """
    f = np.asarray(frequencies, dtype=np.float64)
    if f.ndim != 1 or not f.size or not np.all(np.isfinite(f)) or np.any(f <= 0):
        raise ValueError(f"class frequencies must be a non-empty list of positive numbers, got {frequencies!r}")
    w = 1.0 / np.sqrt(f)
    return (w / w[0]).astype(np.float32)
