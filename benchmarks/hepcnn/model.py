"""The original HEP-CNN network (config ``cori_knl_224_adam``) and its weighted loss, for TF2 Keras 2 and Keras 3."""
from __future__ import annotations

from typing import Any


def build_model(image_size: int, width: int = 128, dropout: float = 0.5, blocks: int = 4) -> Any:
    """``blocks`` x [conv 3x3/``width`` + ReLU + maxpool 2 + dropout] -> conv 3x3 + ReLU -> global average pool ->
    dense 2 (logits). Input NHWC ``(image_size, image_size, 3)``."""
    import tensorflow as tf

    layers = tf.keras.layers
    inputs = tf.keras.Input((image_size, image_size, 3), name="image")
    x = inputs
    for i in range(blocks):
        x = layers.Conv2D(width, 3, padding="same", activation="relu", name=f"conv{i}")(x)
        x = layers.MaxPooling2D(2, name=f"pool{i}")(x)
        x = layers.Dropout(dropout, name=f"dropout{i}")(x)
    x = layers.Conv2D(width, 3, padding="same", activation="relu", name=f"conv{blocks}")(x)
    x = layers.GlobalAveragePooling2D(name="gap")(x)
    outputs = layers.Dense(2, name="logits")(x)
    return tf.keras.Model(inputs, outputs, name="hep_cnn")


def weighted_loss(labels: Any, logits: Any, weights: Any) -> Any:
    """Weighted sparse softmax cross-entropy, mean over the batch (weights have mean 1 per file)."""
    import tensorflow as tf

    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    return tf.reduce_mean(weights * ce)


def weighted_correct(labels: Any, logits: Any, weights: Any) -> Any:
    """Sum of the weights of correctly classified samples (accuracy = this / sum of weights)."""
    import tensorflow as tf

    hit = tf.cast(tf.equal(tf.argmax(logits, axis=1, output_type=labels.dtype), labels), weights.dtype)
    return tf.reduce_sum(weights * hit)
