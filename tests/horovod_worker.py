"""Run under horovodrun/mpirun by test_horovod.py: each worker takes its half of one batch,
averages gradients through training.distributed, and writes what it got (rank 0 only)."""

import os
import sys

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bert.pretraining import BertPretrainer, pretraining_losses  # noqa: E402
from tests.conftest import random_batch  # noqa: E402
from tools.tiny_pretraining import tiny_bert_config  # noqa: E402
from training.distributed import Distributed  # noqa: E402


def main(output):
    dist = Distributed(use_horovod=True)
    config = tiny_bert_config()
    keras_seed = 1000 + dist.rank  # different initial weights per worker: broadcast must fix that
    tf.keras.utils.set_random_seed(keras_seed) if hasattr(tf, "keras") else None
    import keras

    keras.utils.set_random_seed(keras_seed)
    model = BertPretrainer(config)
    dist.broadcast_variables(model.weights)
    batch = random_batch(config, batch=4, seq=16)
    half = {k: v[dist.rank * 2 : (dist.rank + 1) * 2] for k, v in batch.items()}
    with tf.GradientTape() as tape:
        loss = pretraining_losses(model(half), half)["loss"]
    grads = tape.gradient(loss, model.trainable_variables)
    grads = dist.average([tf.convert_to_tensor(g) for g in grads])
    if dist.is_chief:
        np.savez(
            output,
            size=dist.size,
            loss=float(loss),
            **{f"w{i}": w.numpy() for i, w in enumerate(model.trainable_variables)},
            **{f"g{i}": g.numpy() for i, g in enumerate(grads)},
        )


if __name__ == "__main__":
    main(sys.argv[1])
