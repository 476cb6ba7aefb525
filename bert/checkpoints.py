"""Checkpoint I/O in three layouts, all strict: a partial load is always an error.

- "google": TF1 name-based checkpoints as Google released them (bert_model.ckpt.index/.data
  with names such as bert/encoder/layer_0/attention/self/query/kernel, kernels [in, out]).
  Optimizer slots (adam_m, adam_v, ...) and global_step are skipped on read.
- "trainer": the directory the trainer writes: the same Google names (so Google's tools read
  its checkpoints), bert_config.json beside them, and training state (optimizer slots, step)
  under names that readers of weights skip.
- "huggingface": model.safetensors + config.json, names such as
  encoder.layer.0.attention.self.query.weight (kernels [out, in]), optional "bert." prefix,
  pretraining heads as cls.*.

A checkpoint of the trainer's layout carries a record, <prefix>.manifest.json, written after
every file of it was read back: each file with the size it was written with. `checkpoint_problem`
says what is wrong with one (a missing or truncated file, a tensor that does not read back), or
None for an intact one.

Every reader returns {google_name: np.ndarray}; one assignment function checks names and shapes
against the model and refuses missing, unexpected or mis-shaped weights by name. One table
(_NAME_TABLE) maps Google names to Hugging Face keys and back.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil

import numpy as np

from bert.config import BertConfig, read_config_file, read_config_json
from bert.errors import BertError, BertFileNotFoundError
from common.files import atomic_path, commit, temporary_name, write_json, write_text

# Shapes: B batch, S sequence, D hidden, N heads, H head size (D = N * H), I intermediate,
# P masked positions (max predictions per sequence), V vocab, M sequences packed into a row.

GOOGLE_CHECKPOINT_NAME = "bert_model.ckpt"
HF_WEIGHTS_NAME = "model.safetensors"
HF_CONFIG_NAME = "config.json"
BERT_CONFIG_NAME = "bert_config.json"
VOCAB_NAME = "vocab.txt"

# Checkpoint entries that hold no model weight: optimizer slots, step counters and loss-scale
# state from Google's, NVIDIA's and this project's trainers.
_SKIPPED_SUFFIXES = ("/adam_m", "/adam_v", "/lamb_m", "/lamb_v", "/Momentum")
_SKIPPED_NAMES = frozenset(
    {"global_step", "current_loss_scale", "good_steps", "loss_scale", "_CHECKPOINTABLE_OBJECT_GRAPH"}
)
TRAINING_STATE_PREFIX = "training_state/"

# Hugging Face keys that are buffers or tied copies, not weights of their own.
_HF_IGNORED = re.compile(
    r"^(bert\.)?embeddings\.position_ids$"
    r"|^cls\.predictions\.decoder\.(weight|bias)$"
)


class CheckpointMismatchError(BertError):
    """The checkpoint's weights do not fit the model; the message names every offender."""


class CheckpointDamagedError(BertError):
    """A checkpoint's files are missing, truncated or do not read back; the message names them."""


# --- the model's canonical (Google) names --------------------------------------------------


def _dense_names(prefix, layer):
    return {f"{prefix}/kernel": layer.kernel, f"{prefix}/bias": layer.bias}


def _layer_norm_names(prefix, layer):
    return {f"{prefix}/gamma": layer.gamma, f"{prefix}/beta": layer.beta}


def encoder_variables(encoder) -> dict:
    """{google_name: variable} for a BertEncoder."""
    e = encoder.embeddings
    names = {
        "bert/embeddings/word_embeddings": e.word_embeddings,
        "bert/embeddings/position_embeddings": e.position_embeddings,
        "bert/embeddings/token_type_embeddings": e.token_type_embeddings,
        **_layer_norm_names("bert/embeddings/LayerNorm", e.layer_norm),
    }
    for i, layer in enumerate(encoder.transformer_layers):
        p = f"bert/encoder/layer_{i}"
        names.update(_dense_names(f"{p}/attention/self/query", layer.attention.query))
        names.update(_dense_names(f"{p}/attention/self/key", layer.attention.key))
        names.update(_dense_names(f"{p}/attention/self/value", layer.attention.value))
        names.update(_dense_names(f"{p}/attention/output/dense", layer.attention_output))
        names.update(_layer_norm_names(f"{p}/attention/output/LayerNorm", layer.attention_layer_norm))
        names.update(_dense_names(f"{p}/intermediate/dense", layer.intermediate))
        names.update(_dense_names(f"{p}/output/dense", layer.output_dense))
        names.update(_layer_norm_names(f"{p}/output/LayerNorm", layer.output_layer_norm))
    names.update(_dense_names("bert/pooler/dense", encoder.pooler))
    return names


# Google's names for its fine-tuning heads: run_squad's under cls/squad/, run_classifier's at the
# top level (no scope).
SPAN_HEAD_PREFIX = "cls/squad/"
CLASSIFIER_HEAD_NAMES = ("output_weights", "output_bias")


def model_variables(model) -> dict:
    """{google_name: variable} for a BertEncoder or any model with .encoder (+ pretraining heads)."""
    encoder = getattr(model, "encoder", model)
    names = encoder_variables(encoder)
    mlm = getattr(model, "masked_lm", None)
    if mlm is not None:
        names.update(_dense_names("cls/predictions/transform/dense", mlm.transform))
        names.update(_layer_norm_names("cls/predictions/transform/LayerNorm", mlm.layer_norm))
        names["cls/predictions/output_bias"] = mlm.output_bias
    nsp = getattr(model, "next_sentence", None)
    if nsp is not None:
        names["cls/seq_relationship/output_weights"] = nsp.output_weights
        names["cls/seq_relationship/output_bias"] = nsp.output_bias
    span = getattr(model, "span", None)  # bert.finetuning.BertSpanModel
    if span is not None:
        names[SPAN_HEAD_PREFIX + "output_weights"] = span.output_weights
        names[SPAN_HEAD_PREFIX + "output_bias"] = span.output_bias
    classifier = getattr(model, "classifier", None)  # bert.finetuning.BertClassifier
    if classifier is not None:
        names["output_weights"] = classifier.output_weights
        names["output_bias"] = classifier.output_bias
    return names


def head_variable_names(model) -> list[str]:
    """The Google names of `model`'s fine-tuning head (span or classifier), [] for none."""
    return [n for n in model_variables(model) if n.startswith(SPAN_HEAD_PREFIX) or n in CLASSIFIER_HEAD_NAMES]


# --- Hugging Face names ----------------------------------------------------------------------


def _dense_keys(google, hf):
    return [(f"{google}/kernel", f"{hf}.weight", True), (f"{google}/bias", f"{hf}.bias", False)]


def _layer_norm_keys(google, hf):
    return [(f"{google}/gamma", f"{hf}.weight", False), (f"{google}/beta", f"{hf}.bias", False)]


# (Google name, Hugging Face key, whether the array is transposed between the two), read in both
# directions. {i} is a layer number. Keys of the bert/ rows take the checkpoint's "bert." prefix
# (present when the heads are saved too); the cls rows never do.
_NAME_TABLE = (
    ("bert/embeddings/word_embeddings", "embeddings.word_embeddings.weight", False),
    ("bert/embeddings/position_embeddings", "embeddings.position_embeddings.weight", False),
    ("bert/embeddings/token_type_embeddings", "embeddings.token_type_embeddings.weight", False),
    *_layer_norm_keys("bert/embeddings/LayerNorm", "embeddings.LayerNorm"),
    *_dense_keys("bert/encoder/layer_{i}/attention/self/query", "encoder.layer.{i}.attention.self.query"),
    *_dense_keys("bert/encoder/layer_{i}/attention/self/key", "encoder.layer.{i}.attention.self.key"),
    *_dense_keys("bert/encoder/layer_{i}/attention/self/value", "encoder.layer.{i}.attention.self.value"),
    *_dense_keys("bert/encoder/layer_{i}/attention/output/dense", "encoder.layer.{i}.attention.output.dense"),
    *_layer_norm_keys(
        "bert/encoder/layer_{i}/attention/output/LayerNorm", "encoder.layer.{i}.attention.output.LayerNorm"
    ),
    *_dense_keys("bert/encoder/layer_{i}/intermediate/dense", "encoder.layer.{i}.intermediate.dense"),
    *_dense_keys("bert/encoder/layer_{i}/output/dense", "encoder.layer.{i}.output.dense"),
    *_layer_norm_keys("bert/encoder/layer_{i}/output/LayerNorm", "encoder.layer.{i}.output.LayerNorm"),
    *_dense_keys("bert/pooler/dense", "pooler.dense"),
    *_dense_keys("cls/predictions/transform/dense", "cls.predictions.transform.dense"),
    *_layer_norm_keys("cls/predictions/transform/LayerNorm", "cls.predictions.transform.LayerNorm"),
    ("cls/predictions/output_bias", "cls.predictions.bias", False),
    ("cls/seq_relationship/output_weights", "cls.seq_relationship.weight", False),  # [2, D] in both
    ("cls/seq_relationship/output_bias", "cls.seq_relationship.bias", False),
    # Fine-tuning heads: BertForQuestionAnswering's qa_outputs, BertForSequenceClassification's
    # classifier; [outputs, D] in both, like the NSP head.
    ("cls/squad/output_weights", "qa_outputs.weight", False),
    ("cls/squad/output_bias", "qa_outputs.bias", False),
    ("output_weights", "classifier.weight", False),
    ("output_bias", "classifier.bias", False),
)
# Hugging Face keys of heads: never under the "bert." prefix of the encoder's keys.
_HF_HEAD_PREFIXES = ("cls.", "qa_outputs.", "classifier.")


def _template_pattern(template):
    return re.compile(re.escape(template).replace(re.escape("{i}"), r"(?P<i>\d+)") + "$")


_GOOGLE_PATTERNS = [(_template_pattern(g), h, t) for g, h, t in _NAME_TABLE]
_HF_PATTERNS = [(_template_pattern(h), g, t) for g, h, t in _NAME_TABLE]


def _lookup(patterns, name):
    for pattern, target, transposed in patterns:
        match = pattern.match(name)
        if match:
            return target.format(**match.groupdict()), transposed
    return None


def google_to_hf(name: str, prefix: str = "") -> tuple[str, bool]:
    """Google name -> (Hugging Face key, whether the array is transposed between the two).

    prefix: "bert." for a checkpoint with heads (BertForPreTraining), "" for a BertModel.
    """
    found = _lookup(_GOOGLE_PATTERNS, name)
    if found is None:
        raise KeyError(f"{name} is not a BERT weight name.")
    key, transposed = found
    return (key if key.startswith(_HF_HEAD_PREFIXES) else prefix + key), transposed


def hf_to_google(key: str, prefix: str = "") -> tuple[str, bool] | None:
    """Hugging Face key -> (Google name, transposed), or None for a key that is no BERT weight."""
    if not key.startswith(_HF_HEAD_PREFIXES):
        if not key.startswith(prefix):
            return None
        key = key[len(prefix) :]
    return _lookup(_HF_PATTERNS, key)


# --- readers ---------------------------------------------------------------------------------


def resolve_tf_checkpoint(path: str) -> str:
    """A checkpoint prefix from a prefix, a .index/.data file, or a directory holding one."""
    path = os.fspath(path)
    if path.endswith(".index"):
        path = path[: -len(".index")]
    path = re.sub(r"\.data-\d{5}-of-\d{5}$", "", path)
    if os.path.isfile(path + ".index"):
        return path
    if os.path.isdir(path):
        import tensorflow as tf

        latest = tf.train.latest_checkpoint(path)
        if latest:
            return latest
        for candidate in (GOOGLE_CHECKPOINT_NAME, "model.ckpt"):
            if os.path.isfile(os.path.join(path, candidate + ".index")):
                return os.path.join(path, candidate)
        indexes = sorted(f for f in os.listdir(path) if f.endswith(".index"))
        if len(indexes) == 1:
            return os.path.join(path, indexes[0][: -len(".index")])
        raise BertFileNotFoundError(
            f"{path} holds no TensorFlow checkpoint (no *.index file"
            f"{'; several: ' + ', '.join(indexes) if indexes else ''})."
        )
    raise BertFileNotFoundError(
        f"Checkpoint {path} does not exist (expected {path}.index, a "
        f"directory with a checkpoint, or a directory with {HF_WEIGHTS_NAME})."
    )


def checkpoint_format(path: str) -> str:
    """'huggingface' for model.safetensors (or a directory with one), else 'tf'."""
    path = os.fspath(path)
    if path.endswith(".safetensors") or os.path.isfile(os.path.join(path, HF_WEIGHTS_NAME)):
        return "huggingface"
    return "tf"


def global_step_of(path: str) -> int | None:
    """global_step of a TensorFlow checkpoint (None for Hugging Face weights or none stored)."""
    import tensorflow as tf

    if checkpoint_format(path) != "tf":
        return None
    reader = tf.train.load_checkpoint(resolve_tf_checkpoint(path))
    return int(reader.get_tensor("global_step")) if reader.has_tensor("global_step") else None


def read_tf_checkpoint(path: str) -> dict[str, np.ndarray]:
    """Model weights of a Google-named TF checkpoint (Google's, NVIDIA's or the trainer's)."""
    import tensorflow as tf

    prefix = resolve_tf_checkpoint(path)
    record, problem = _read_record(prefix)
    problem = problem or (record and _files_problem(os.path.dirname(prefix), record["files"]))
    if problem:  # the trainer's record says a file is cut or gone: say which, not TF's IndexError
        raise CheckpointDamagedError(f"{prefix} is damaged ({problem}); use an intact checkpoint.")
    try:
        reader = tf.train.load_checkpoint(prefix)
    except Exception as err:  # TF raises DataLossError/NotFoundError with long C++ text
        raise BertError(
            f"{prefix} is not a readable TensorFlow checkpoint ({str(err).splitlines()[0]})."
        ) from None
    weights = {}
    for name in reader.get_variable_to_shape_map():
        if (
            name in _SKIPPED_NAMES
            or name.endswith(_SKIPPED_SUFFIXES)
            or name.startswith(TRAINING_STATE_PREFIX)
        ):
            continue
        try:
            weights[name] = reader.get_tensor(name)
        except Exception as err:  # DataLossError (a checksum), IndexError (a truncated file), ...
            raise CheckpointDamagedError(
                f"{prefix} is damaged (tensor {name} does not read back: {_first_line(err)}); "
                "use an intact checkpoint."
            ) from None
    if weights and all(n.endswith(".ATTRIBUTES/VARIABLE_VALUE") for n in weights):
        raise BertError(
            f"{prefix} is an object-based TF2 checkpoint; this loader reads "
            "Google-named checkpoints (convert it with convert_checkpoint.py)."
        )
    return weights


def read_hf_checkpoint(path: str) -> dict[str, np.ndarray]:
    """Model weights of a Hugging Face model.safetensors, renamed and transposed to Google's."""
    from safetensors.numpy import load_file

    path = os.fspath(path)
    file = path if path.endswith(".safetensors") else os.path.join(path, HF_WEIGHTS_NAME)
    if not os.path.isfile(file):
        raise BertFileNotFoundError(f"Hugging Face weights {file} do not exist.")
    try:
        tensors = load_file(file)
    except Exception as err:
        raise BertError(f"{file} is not a readable safetensors file ({err}).") from None
    tensors = {k: v for k, v in tensors.items() if not _HF_IGNORED.match(k)}
    prefix = "bert." if any(k.startswith("bert.") for k in tensors) else ""
    weights, unknown = {}, []
    for key, value in tensors.items():
        found = hf_to_google(key, prefix)
        if found is None:
            unknown.append(key)
            continue
        google, transposed = found
        weights[google] = np.ascontiguousarray(value.T) if transposed else value
    if unknown:
        raise CheckpointMismatchError(
            f"{file} holds weights that are not part of a BERT model: {', '.join(sorted(unknown)[:20])}"
            f"{' ...' if len(unknown) > 20 else ''}."
        )
    return weights


def read_checkpoint(path: str) -> dict[str, np.ndarray]:
    """{google_name: array} from any supported checkpoint path."""
    if checkpoint_format(path) == "huggingface":
        return read_hf_checkpoint(path)
    return read_tf_checkpoint(path)


def read_config_beside(path: str) -> BertConfig | None:
    """The BertConfig stored with a checkpoint (bert_config.json or HF config.json), if any."""
    folder = _folder_of(path)
    google = os.path.join(folder, BERT_CONFIG_NAME)
    if os.path.isfile(google):
        return BertConfig.from_json_file(google)
    hf = os.path.join(folder, HF_CONFIG_NAME)
    if os.path.isfile(hf):
        return BertConfig.from_hf_dict(read_config_json(hf), source=hf)
    return None


def find_config(checkpoint: str, config_file: str | None = None) -> BertConfig | None:
    """The config in `config_file` (Google's or Hugging Face's) when given, else the one stored
    beside `checkpoint`; None when there is neither (the caller names its flag)."""
    if config_file:
        return read_config_file(config_file)
    return read_config_beside(checkpoint)


def vocab_beside(checkpoint: str) -> str | None:
    """The vocab.txt stored beside a checkpoint (prefix, file or directory), if any."""
    candidate = os.path.join(_folder_of(checkpoint), VOCAB_NAME)
    return candidate if os.path.isfile(candidate) else None


def _folder_of(path: str) -> str:
    path = os.fspath(path)
    return path if os.path.isdir(path) else os.path.dirname(path)


# --- assignment ------------------------------------------------------------------------------


def _listing(names, limit=12):
    names = sorted(names)
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def assign_weights(
    model,
    weights: dict[str, np.ndarray],
    source: str,
    ignore_prefixes: tuple[str, ...] = (),
    keep_initialised: tuple[str, ...] = (),
) -> None:
    """Sets every model variable from `weights` or raises CheckpointMismatchError.

    ignore_prefixes: checkpoint names that may be present without a home in the model (loading
    an encoder from a checkpoint that also holds pretraining or fine-tuning heads: "cls/").
    keep_initialised: model names left as they are (a new fine-tuning head).
    """
    variables = {n: v for n, v in model_variables(model).items() if n not in keep_initialised}
    missing = set(variables) - set(weights)
    unexpected = {n for n in set(weights) - set(variables) if not n.startswith(ignore_prefixes)}
    misshaped = [
        f"{n} {tuple(weights[n].shape)} vs model {tuple(v.shape)}"
        for n, v in variables.items()
        if n in weights and tuple(weights[n].shape) != tuple(v.shape)
    ]
    problems = []
    if missing:
        problems.append(f"missing {_listing(missing)}")
    if unexpected:
        problems.append(f"unexpected {_listing(unexpected)}")
    if misshaped:
        problems.append(f"shape mismatch {_listing(misshaped)}")
    if problems:
        raise CheckpointMismatchError(f"{source} does not fit the model: " + "; ".join(problems) + ".")
    for name, variable in variables.items():
        variable.assign(weights[name].astype(variable.dtype))


def load_weights(model, path: str, ignore_prefixes: tuple[str, ...] | None = None) -> None:
    """Loads a Google, NVIDIA, trainer or Hugging Face checkpoint into `model`, strictly.

    An encoder alone (no `masked_lm` head) ignores the checkpoint's cls/ heads by default.
    """
    if ignore_prefixes is None:
        ignore_prefixes = () if hasattr(model, "masked_lm") else ("cls/",)
    assign_weights(model, read_checkpoint(path), source=os.fspath(path), ignore_prefixes=ignore_prefixes)


def load_for_fine_tuning(model, path: str) -> bool:
    """Loads a fine-tuning model (bert.finetuning) from any supported checkpoint: the encoder
    strictly, the head too when the checkpoint holds it (a fine-tuned checkpoint: ours, Google's,
    or Hugging Face's qa_outputs / classifier), else the head keeps its fresh initialisation.
    Other heads in the checkpoint (pretraining's cls/, another task's) are ignored. Returns
    whether the head was loaded."""
    weights = read_checkpoint(path)
    head = head_variable_names(model)
    found = [n for n in head if n in weights]
    if found and len(found) != len(head):
        raise CheckpointMismatchError(
            f"{os.fspath(path)} holds only part of the fine-tuning head ({', '.join(found)} but not "
            f"{', '.join(n for n in head if n not in weights)})."
        )
    keep = [] if found else list(head)
    if getattr(model, "span", None) is not None:
        # The span head never reads the pooler, and Hugging Face's BertForQuestionAnswering
        # saves none: a missing pooler keeps its (unused, frozen) initial values.
        keep += [n for n in model_variables(model) if n.startswith("bert/pooler/") and n not in weights]
    assign_weights(
        model,
        weights,
        source=os.fspath(path),
        ignore_prefixes=("cls/", *CLASSIFIER_HEAD_NAMES),
        keep_initialised=tuple(keep),
    )
    return bool(found)


def check_vocab_size(config: BertConfig, vocab_size: int, vocab_source: str) -> None:
    """A vocab file that does not fit the checkpoint's embedding table is an error.

    Equal sizes fit. So does a table padded past the vocab to a multiple of 8 (NVIDIA pads
    30522 to 30528 for tensor cores; Megatron-style padding reaches a multiple of 128): the
    extra rows are never looked up. Anything else means the vocab is not the model's.
    """
    padding = config.vocab_size - vocab_size
    padded = 0 < padding < 128 and config.vocab_size % 8 == 0
    if padding != 0 and not padded:
        raise BertError(
            f"{vocab_source} has {vocab_size} tokens but the model's vocab_size is "
            f"{config.vocab_size}: use the vocab the checkpoint was trained with."
        )


# --- writers ---------------------------------------------------------------------------------


def _model_arrays(model) -> dict[str, np.ndarray]:
    return {name: np.asarray(v.numpy()) for name, v in model_variables(model).items()}


def write_tf_checkpoint(prefix: str, arrays: dict[str, np.ndarray]) -> str:
    """Writes a name-based TF checkpoint (prefix.index + prefix.data-00000-of-00001) atomically."""
    import tensorflow as tf

    prefix = os.fspath(prefix)
    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    # SaveV2 writes several files, so it fills a temporary folder beside the target; each file is
    # then committed, data before index: a reader only sees a checkpoint once its .index exists,
    # and by then the data is complete.
    tmp = temporary_name(prefix)
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        names = sorted(arrays)
        tf.raw_ops.SaveV2(
            prefix=os.path.join(tmp, "ckpt"),
            tensor_names=names,
            shape_and_slices=[""] * len(names),
            tensors=[tf.convert_to_tensor(arrays[n]) for n in names],
        )
        for f in sorted(os.listdir(tmp), key=lambda f: f.endswith(".index")):
            commit(os.path.join(tmp, f), prefix + f[len("ckpt") :])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return prefix


def save_google(model, output_dir: str, vocab_file: str | None = None) -> str:
    """Google's release layout: bert_model.ckpt.*, bert_config.json and (optionally) vocab.txt."""
    os.makedirs(output_dir, exist_ok=True)
    prefix = write_tf_checkpoint(os.path.join(output_dir, GOOGLE_CHECKPOINT_NAME), _model_arrays(model))
    model.config.to_json_file(os.path.join(output_dir, BERT_CONFIG_NAME))
    _copy_vocab(vocab_file, output_dir)
    return prefix


def save_trainer_checkpoint(
    model, output_dir: str, step: int = 0, training_state: dict | None = None, vocab_file: str | None = None
) -> str:
    """The trainer's layout: ckpt-<step> (Google names + training_state/*), bert_config.json,
    and a `checkpoint` file naming the latest, so tf.train.latest_checkpoint finds it."""
    os.makedirs(output_dir, exist_ok=True)
    arrays = _model_arrays(model)
    arrays["global_step"] = np.asarray(step, np.int64)
    for name, value in (training_state or {}).items():
        arrays[TRAINING_STATE_PREFIX + name] = np.asarray(value)
    prefix = write_tf_checkpoint(os.path.join(output_dir, f"ckpt-{step}"), arrays)
    seal_checkpoint(prefix)
    model.config.to_json_file(os.path.join(output_dir, BERT_CONFIG_NAME))
    _copy_vocab(vocab_file, output_dir)
    write_checkpoint_index(output_dir, [prefix])
    return prefix


def write_checkpoint_index(output_dir: str, prefixes) -> None:
    """TF's `checkpoint` index of the trainer's layout: the last of `prefixes` is the latest, all
    of them are kept (tf.train.latest_checkpoint and get_checkpoint_state read it)."""
    names = [os.path.basename(p) for p in prefixes]
    lines = [f'model_checkpoint_path: "{names[-1]}"'] + [f'all_model_checkpoint_paths: "{n}"' for n in names]
    write_text(os.path.join(output_dir, "checkpoint"), "\n".join(lines) + "\n")


# --- verification ----------------------------------------------------------------------------
#
# TensorFlow keeps a crc32c of every tensor in the .index and checks it on every read, so reading
# each tensor once proves the bytes are the ones written. The record adds what a checksum cannot
# see on its own (a file that vanished, or was cut where a tensor ends) and is written last: a
# checkpoint without one was never finished.

RECORD_SUFFIX = ".manifest.json"
_CHECKED: dict = {}  # prefix -> (the files' stat signature, the problem found): verified once


def checkpoint_record_path(prefix: str) -> str:
    return os.fspath(prefix) + RECORD_SUFFIX


def bundle_files(prefix: str) -> list[str]:
    """The files of TF checkpoint `prefix` on disk: its .index and .data-* shards."""
    prefix = os.fspath(prefix)
    shards = glob.glob(glob.escape(prefix) + ".data-[0-9]*-of-[0-9]*")
    return sorted(shards + ([prefix + ".index"] if os.path.exists(prefix + ".index") else []))


def _first_line(error: BaseException) -> str:
    """TensorFlow's error in a few words: its first line, without the bundle's path (the sentence
    names the checkpoint already)."""
    lines = str(error).strip().splitlines()
    text = re.sub(r"^TensorBundle at \S+ shard \d+ \(\d+ bytes\): ", "", lines[0] if lines else "")
    text = text or type(error).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def read_back(prefix: str, label: str | None = None) -> str | None:
    """None when every tensor of TF checkpoint `prefix` reads back with its checksum, else what
    is wrong, as a phrase naming `label` (default: the prefix's name): "tensor X of ckpt-8 does not
    read back (Checksum does not match ...)". One tensor is in memory at a time."""
    import tensorflow as tf

    label = label or os.path.basename(os.fspath(prefix))
    try:
        reader = tf.train.load_checkpoint(os.fspath(prefix))
        names = sorted(reader.get_variable_to_shape_map())
    except Exception as err:  # NotFoundError, DataLossError: a missing or unreadable .index
        return f"{label}.index does not read ({_first_line(err)})"
    for tensor in names:
        try:
            reader.get_tensor(tensor)
        except Exception as err:  # DataLossError (a checksum), IndexError (a cut file), NotFound
            return f"tensor {tensor} of {label} does not read back ({_first_line(err)})"
    return None


def seal_checkpoint(prefix: str, extra_bundles=()) -> dict:
    """Reads back TF checkpoint `prefix` and `extra_bundles` (more checkpoint prefixes under the
    same folder that belong to it: the trainer's worker states), then writes the record naming
    every file of them with its size; returns the record. CheckpointDamagedError when one of
    them does not read back (nothing is recorded then)."""
    prefix = os.fspath(prefix)
    folder = os.path.dirname(prefix)
    bundles = [prefix, *map(os.fspath, extra_bundles)]
    files = {}
    for bundle in bundles:
        problem = read_back(bundle, os.path.relpath(bundle, folder))
        if problem:
            raise CheckpointDamagedError(f"{prefix} does not read back after writing: {problem}.")
        for path in bundle_files(bundle):
            files[os.path.relpath(path, folder)] = os.path.getsize(path)
    record = {
        "checkpoint": os.path.basename(prefix),
        "bundles": [os.path.relpath(b, folder) for b in bundles],
        "files": files,
    }
    write_json(checkpoint_record_path(prefix), record)
    _CHECKED[os.path.abspath(prefix)] = (_signature(prefix, files), None)
    return record


def _signature(prefix: str, files) -> tuple:
    folder = os.path.dirname(os.fspath(prefix))
    stamps = []
    for rel in sorted(files) + [os.path.basename(checkpoint_record_path(prefix))]:
        try:
            st = os.stat(os.path.join(folder, rel))
            stamps.append((rel, st.st_size, st.st_mtime_ns, st.st_ino))
        except OSError:
            stamps.append((rel, None))
    return tuple(stamps)


def _read_record(prefix: str):
    """(record, problem): the parsed record of `prefix` (None when it has none), or why it does
    not parse."""
    path = checkpoint_record_path(prefix)
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as err:
        return None, f"its record {os.path.basename(path)} is unreadable ({_first_line(err)})"
    if not (
        isinstance(record, dict)
        and isinstance(record.get("files"), dict)
        and isinstance(record.get("bundles"), list)
    ):
        return None, f"its record {os.path.basename(path)} is unreadable (not a checkpoint record)"
    return record, None


def checkpoint_problem(prefix: str) -> str | None:
    """What is wrong with checkpoint `prefix`, as a phrase for a sentence ("ckpt-30.data-00000-of-
    00001 is 1024 bytes but 2048 were written"), or None when it is intact: every file its record
    names has the recorded size and every tensor of it reads back. A checkpoint without a record
    (Google's, or written before records existed) is intact when its own tensors read back. The
    answer is kept while none of the files changes, so asking again costs a few stat calls."""
    prefix = os.fspath(prefix)
    folder = os.path.dirname(prefix)
    record, problem = _read_record(prefix)
    if problem:
        return problem
    if record is None:
        files = {os.path.relpath(p, folder): None for p in bundle_files(prefix)}
        bundles = [prefix]
    else:
        files = record["files"]
        bundles = [os.path.join(folder, b) for b in record["bundles"]]
    key, signature = os.path.abspath(prefix), _signature(prefix, files)
    known = _CHECKED.get(key)
    if known is not None and known[0] == signature:
        return known[1]
    problem = _check(prefix, record, files, bundles)
    _CHECKED[key] = (signature, problem)
    return problem


def _files_problem(folder: str, files: dict) -> str | None:
    """The first of `files` ({path relative to folder: size written, or None}) that is missing or
    not of its size, as a phrase; None when all are in place."""
    for rel, size in sorted(files.items()):
        path = os.path.join(folder, rel)
        if not os.path.isfile(path):
            return f"{rel} is missing"
        if size is not None and os.path.getsize(path) != size:
            return f"{rel} is {os.path.getsize(path)} bytes but {size} were written"
    return None


def _check(prefix: str, record, files: dict, bundles: list) -> str | None:
    folder = os.path.dirname(prefix)
    if record is None and not os.path.exists(prefix + ".index"):
        return f"{os.path.basename(prefix)}.index is missing"
    problem = _files_problem(folder, files)
    if problem:
        return problem
    for bundle in bundles:
        problem = read_back(bundle, os.path.relpath(bundle, folder))
        if problem:
            return problem
    return None


def save_huggingface(model, output_dir: str, vocab_file: str | None = None) -> str:
    """model.safetensors + config.json as transformers' save_pretrained writes them."""
    from safetensors.numpy import save_file

    os.makedirs(output_dir, exist_ok=True)
    with_heads = hasattr(model, "masked_lm")
    prefix = "bert." if with_heads else ""
    tensors = {}
    for name, value in _model_arrays(model).items():
        key, transposed = google_to_hf(name, prefix)
        tensors[key] = np.ascontiguousarray(value.T if transposed else value)
    target = os.path.join(output_dir, HF_WEIGHTS_NAME)
    with atomic_path(target) as tmp:
        save_file(tensors, tmp, metadata={"format": "pt"})
    hf_config = model.config.to_hf_dict()
    hf_config["architectures"] = ["BertForPreTraining" if with_heads else "BertModel"]
    write_json(os.path.join(output_dir, HF_CONFIG_NAME), hf_config)
    _copy_vocab(vocab_file, output_dir)
    return target


# The layouts convert_checkpoint writes, by the name its output format goes by.
SAVERS = {"trainer": save_trainer_checkpoint, "google": save_google, "huggingface": save_huggingface}


def _copy_vocab(vocab_file, output_dir):
    if vocab_file:
        target = os.path.join(output_dir, VOCAB_NAME)
        if os.path.abspath(vocab_file) != os.path.abspath(target):
            with atomic_path(target) as tmp:
                shutil.copyfile(vocab_file, tmp)


# --- conversion ------------------------------------------------------------------------------


def convert_checkpoint(
    input_path: str,
    output_dir: str,
    output_format: str,
    config: BertConfig,
    vocab_file: str | None = None,
    encoder_only: bool = False,
) -> str:
    """Reads `input_path` (any supported layout) strictly and writes it in `output_format`, a key
    of SAVERS; returns the written path.

    Pretraining heads are kept when the input has them (all of cls/predictions and
    cls/seq_relationship) unless `encoder_only`, dropped otherwise. A `vocab_file` is checked
    against the config and copied along.
    """
    from bert.encoder import BertEncoder
    from bert.pretraining import BertPretrainer

    if output_format not in SAVERS:
        raise BertError(f"The output format must be one of {', '.join(SAVERS)} (got {output_format!r}).")
    weights = read_checkpoint(input_path)
    if vocab_file:
        from bert.tokenization import load_vocab

        check_vocab_size(config, len(load_vocab(vocab_file)), vocab_file)
    has_heads = any(name.startswith("cls/predictions/") for name in weights)
    model = BertPretrainer(config) if has_heads and not encoder_only else BertEncoder(config)
    assign_weights(
        model,
        weights,
        source=input_path,
        ignore_prefixes=("cls/",) if not hasattr(model, "masked_lm") else (),
    )
    return SAVERS[output_format](model, output_dir, vocab_file=vocab_file)
