"""Climate Tiramisu: output shapes of the presets, the divisibility check, the weighted loss and pixel counts
against numpy, class weights, and a smoke model that learns a tiny synthetic segmentation task."""
from __future__ import annotations

import numpy as np
import pytest

from benchmarks.climate.model import (
    DEMO_MODEL,
    SMOKE_MODEL,
    build_tiramisu,
    class_weights,
    pixel_counts,
    scores,
    weighted_loss,
)

tf = pytest.importorskip("tensorflow")

pytestmark = pytest.mark.tf


@pytest.mark.parametrize("preset,shape", [(SMOKE_MODEL, (64, 96, 4)), (DEMO_MODEL, (192, 288, 4))])
def test_output_shape(preset: dict, shape: tuple[int, int, int]) -> None:
    model = build_tiramisu(*shape, **preset)
    out = model(np.zeros((1, *shape), np.float32), training=False)
    assert tuple(out.shape) == (1, shape[0], shape[1], 3)
    assert model.output_shape == (None, shape[0], shape[1], 3)


def test_not_divisible() -> None:
    with pytest.raises(ValueError, match=r"divisible by 2\*\*2 = 4.*66x96"):
        build_tiramisu(66, 96, 4, **SMOKE_MODEL)
    with pytest.raises(ValueError, match="divisible"):
        build_tiramisu(64, 90, 4, **SMOKE_MODEL)


def test_weighted_loss_matches_numpy() -> None:
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 2, 3, 3)).astype(np.float32)
    labels = rng.integers(0, 3, size=(2, 2, 3)).astype(np.int32)
    weights = rng.uniform(0.5, 3.0, size=(2, 2, 3)).astype(np.float32)
    weights[0, 1, 2] = 0.0

    def reference(lab: np.ndarray, lg: np.ndarray, w: np.ndarray) -> float:
        lg = lg.astype(np.float64)
        logp = lg - lg.max(-1, keepdims=True)
        logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
        ce = -np.take_along_axis(logp, lab[..., None], -1)[..., 0]
        return float((w * ce).sum() / w.sum())

    got = float(weighted_loss(labels, logits, weights))
    assert got == pytest.approx(reference(labels, logits, weights), rel=1e-5)
    # a zero-weight pixel does not count, whatever its label or logits
    labels2, logits2 = labels.copy(), logits.copy()
    labels2[0, 1, 2] = (labels[0, 1, 2] + 1) % 3
    logits2[0, 1, 2] = [50.0, -50.0, 0.0]
    assert float(weighted_loss(labels2, logits2, weights)) == pytest.approx(got, rel=1e-6)
    # uniform weights: the plain mean cross-entropy
    ones = np.ones_like(weights)
    plain = float(tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)))
    assert float(weighted_loss(labels, logits, 2 * ones)) == pytest.approx(plain, rel=1e-5)
    assert float(weighted_loss(labels, logits, 0 * ones)) == 0.0


def test_pixel_counts_and_scores() -> None:
    labels = np.array([[[0, 0, 1], [2, 2, 0]]], np.int32)   # (1, 2, 3)
    pred = np.array([[[0, 1, 1], [2, 0, 0]]], np.int32)
    logits = np.eye(3, dtype=np.float32)[pred]               # one-hot logits -> argmax == pred
    correct, inter, union = (np.asarray(t) for t in pixel_counts(labels, logits))
    assert correct == 4
    np.testing.assert_array_equal(inter, [2, 1, 1])
    np.testing.assert_array_equal(union, [4, 2, 2])
    acc, miou = scores(correct, inter, union, labels.size)
    assert acc == pytest.approx(4 / 6)
    assert miou == pytest.approx((2 / 4 + 1 / 2 + 1 / 2) / 3)
    # a class in neither labels nor predictions is left out of the mean IoU
    assert scores(6, [6, 0, 0], [6, 0, 0], 6) == (1.0, 1.0)


def test_class_weights() -> None:
    w = class_weights([0.9, 0.01, 0.09])
    assert w.dtype == np.float32
    np.testing.assert_allclose(w, [1.0, np.sqrt(90.0), np.sqrt(10.0)], rtol=1e-6)
    np.testing.assert_allclose(class_weights([900, 10, 90]), w, rtol=1e-6)   # counts work as well
    with pytest.raises(ValueError, match="positive"):
        class_weights([0.9, 0.0, 0.1])


def test_smoke_model_learns() -> None:
    """8 images 32x32x4, class 2 where channel 0 > 1: 30 Adam steps bring the weighted loss well down."""
    tf.keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 32, 32, 4)).astype(np.float32)
    y = np.where(x[..., 0] > 1.0, 2, 0).astype(np.int32)
    freq = np.bincount(y.ravel(), minlength=3) + 1.0     # +1: class 1 is absent here
    w = class_weights(freq)[y]
    model = build_tiramisu(32, 32, 4, **SMOKE_MODEL)
    opt = tf.keras.optimizers.Adam(1e-2)

    @tf.function
    def step(x: tf.Tensor, y: tf.Tensor, w: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = weighted_loss(y, model(x, training=True), w)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    losses = [float(step(x, y, w)) for _ in range(30)]
    assert np.isfinite(losses).all()
    assert np.mean(losses[-5:]) < 0.5 * losses[0], losses
