"""A Keras image classifier fed as the Keras guide does it: ``image_dataset_from_directory`` over JPEG files (decoded
and resized on tf.data's threads) with ``.prefetch(AUTOTUNE)``; or (``--memory``) the same shapes from memory. No
toolkit code: ``timelogger run`` captures it.

Run: ``python keras_jpeg.py --make DIR`` writes the JPEGs (``--images``, ``--pixels``), then
``python keras_jpeg.py DIR [--memory] [--epochs E] [--steps N]`` trains (``fit(ds.repeat(), steps_per_epoch=N)``).
It prints one JSON line: its own clock's seconds per step of the last epoch.
"""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

SIZE = (96, 96)
BATCH = 32


def make(directory: str, images: int, pixels: int) -> None:
    rng = np.random.default_rng(0)
    for c in ("a", "b"):
        os.makedirs(os.path.join(directory, c), exist_ok=True)
    for i in range(images):
        # smooth noise: compresses like a photograph, decodes at a photograph's cost
        small = rng.integers(0, 255, (pixels // 8, pixels // 8, 3), dtype=np.uint8)
        img = tf.image.resize(small, (pixels, pixels), method="bilinear")
        data = tf.io.encode_jpeg(tf.cast(img, tf.uint8), quality=90)
        tf.io.write_file(os.path.join(directory, "ab"[i % 2], f"{i:05d}.jpg"), data)


def model() -> tf.keras.Model:
    m = tf.keras.Sequential([
        tf.keras.layers.Input((*SIZE, 3)),
        tf.keras.layers.Rescaling(1 / 255),
        tf.keras.layers.Conv2D(32, 3, activation="relu"),
        tf.keras.layers.Conv2D(32, 3, activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Conv2D(32, 3, activation="relu"),
        tf.keras.layers.GlobalAveragePooling2D(),
        tf.keras.layers.Dense(2),
    ])
    m.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


class StepClock(tf.keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.t0, self.steps = time.perf_counter(), 0

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1

    def on_epoch_end(self, epoch, logs=None):
        self.per_step = (time.perf_counter() - self.t0) / max(self.steps, 1)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--make", action="store_true")
    p.add_argument("--images", type=int, default=64)
    p.add_argument("--pixels", type=int, default=1024)
    p.add_argument("--memory", action="store_true")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--steps", type=int, default=24, help="steps per epoch (the files are repeated)")
    a = p.parse_args()
    if a.make:
        make(a.dir, a.images, a.pixels)
        return 0
    ds = tf.keras.utils.image_dataset_from_directory(a.dir, image_size=SIZE, batch_size=BATCH, seed=0)
    n = sum(1 for _ in os.scandir(os.path.join(a.dir, "a"))) * 2
    if a.memory:
        x = np.random.default_rng(0).integers(0, 255, (n, *SIZE, 3)).astype("float32")
        y = np.arange(n) % 2
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    ds = ds.repeat().prefetch(tf.data.AUTOTUNE)
    clock = StepClock()
    model().fit(ds, epochs=a.epochs, steps_per_epoch=a.steps, verbose=0, callbacks=[clock])
    print(json.dumps({"s_per_step": clock.per_step}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
