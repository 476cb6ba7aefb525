"""Serving exports: a TensorFlow SavedModel, and the Triton Inference Server model repository.

The SavedModel's `serving_default` signature takes input_ids, input_mask and segment_ids (int32
[B, S], any batch and any length up to max_position_embeddings) and returns the task's float32
logits: start_logits and end_logits [B, S] for SQuAD, logits [B, C] for a GLUE task. It needs
TensorFlow alone to load: `tf.saved_model.load(dir).signatures["serving_default"](...)`.

The Triton repository holds the same SavedModel as <repository>/<name>/1/model.savedmodel and a
config.pbtxt declaring its platform, inputs and outputs with a dynamic batch and length.
"""

from __future__ import annotations

import os
import shutil

from common.errors import UserError
from common.files import atomic_path, write_text

SERVING_INPUTS = ("input_ids", "input_mask", "segment_ids")
SIGNATURE = "serving_default"


def export_saved_model(model, export_dir: str, output_names, stream=None) -> str:
    """Writes `model` as a SavedModel at `export_dir` (atomically: a killed export leaves no
    directory that looks complete); returns the directory."""
    import tensorflow as tf

    if os.path.exists(export_dir) and os.listdir(export_dir):
        raise UserError(f"--export_dir {export_dir} exists and is not empty; choose a new directory.")
    specs = [tf.TensorSpec([None, None], tf.int32, name=name) for name in SERVING_INPUTS]

    @tf.function(input_signature=specs)
    def serve(input_ids, input_mask, segment_ids):
        outputs = model({"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids})
        return {name: tf.cast(outputs[name], tf.float32) for name in output_names}

    module = tf.Module()
    module.model = model  # tracks the variables
    module.serve = serve
    parent = os.path.dirname(os.path.abspath(export_dir))
    os.makedirs(parent, exist_ok=True)
    if os.path.isdir(export_dir):
        os.rmdir(export_dir)  # empty (checked above); atomic_path renames onto the name
    with atomic_path(export_dir, directory=True) as tmp:
        tf.saved_model.save(module, tmp, signatures={SIGNATURE: serve})
    if stream is not None:
        print(
            f"Exported a SavedModel to {export_dir} (signature {SIGNATURE}: "
            f"{', '.join(SERVING_INPUTS)} -> {', '.join(output_names)}).",
            file=stream,
            flush=True,
        )
    return export_dir


def triton_config(name: str, output_shapes: dict) -> str:
    """config.pbtxt for a SavedModel with the serving inputs; output_shapes: {name: dims after
    the batch, -1 for a variable size}."""
    lines = [f'name: "{name}"', 'platform: "tensorflow_savedmodel"', "max_batch_size: 0", "input ["]
    inputs = [f'  {{ name: "{n}" data_type: TYPE_INT32 dims: [ -1, -1 ] }}' for n in SERVING_INPUTS]
    lines.append(",\n".join(inputs))
    lines += ["]", "output ["]
    outputs = [
        f'  {{ name: "{n}" data_type: TYPE_FP32 dims: [ {", ".join(str(d) for d in [-1, *dims])} ] }}'
        for n, dims in output_shapes.items()
    ]
    lines.append(",\n".join(outputs))
    lines += ["]", f'parameters: {{ key: "TF_SIGNATURE_DEF" value: {{ string_value: "{SIGNATURE}" }} }}']
    return "\n".join(lines) + "\n"


def write_triton_repository(saved_model_dir: str, repository: str, name: str, output_shapes: dict) -> str:
    """Copies the SavedModel into <repository>/<name>/1/model.savedmodel and writes
    <repository>/<name>/config.pbtxt; returns the model's directory."""
    model_dir = os.path.join(repository, name)
    if os.path.exists(model_dir):
        raise UserError(f"{model_dir} exists already; choose another --triton_repository or remove it.")
    os.makedirs(repository, exist_ok=True)
    with atomic_path(model_dir, directory=True) as tmp:
        shutil.copytree(saved_model_dir, os.path.join(tmp, "1", "model.savedmodel"))
        write_text(os.path.join(tmp, "config.pbtxt"), triton_config(name, output_shapes))
    return model_dir
