"""Checkpoint round trips in every layout, the Google <-> Hugging Face name table, strictness,
what sits beside a checkpoint, fine-tuning heads (ours and transformers' fine-tuned ones), and the
convert_checkpoint command line."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from bert import checkpoints
from bert.checkpoints import (
    CheckpointMismatchError,
    load_for_fine_tuning,
    load_weights,
    model_variables,
    save_huggingface,
)
from bert.encoder import BertEncoder
from bert.finetuning import BertClassifier, BertSpanModel
from bert.pretraining import BertPretrainer
from common.errors import UserError
from conftest import ROOT, random_batch
from finetuning_runs import D
from tools.tiny_pretraining import CONFIG


def _outputs(model, batch):
    out = model(batch)
    return {k: v.numpy() for k, v in out.items() if k != "encoder_outputs"}


def _assert_same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


@pytest.mark.parametrize("writer", ["google", "trainer", "huggingface"])
def test_round_trip_gives_identical_outputs(tiny_config, tmp_path, writer):
    source = BertPretrainer(tiny_config)
    batch = random_batch(tiny_config)
    save = {
        "google": checkpoints.save_google,
        "trainer": checkpoints.save_trainer_checkpoint,
        "huggingface": checkpoints.save_huggingface,
    }[writer]
    save(source, str(tmp_path))
    config = checkpoints.read_config_beside(str(tmp_path))
    assert config == tiny_config
    target = BertPretrainer(config)
    assert not np.array_equal(target.encoder.pooler.kernel.numpy(), source.encoder.pooler.kernel.numpy())
    load_weights(target, str(tmp_path))
    _assert_same(_outputs(source, batch), _outputs(target, batch))
    # The encoder alone loads from the same checkpoint, ignoring the heads.
    encoder = BertEncoder(config)
    load_weights(encoder, str(tmp_path))
    _assert_same(_outputs(source.encoder, batch), _outputs(encoder, batch))
    assert not [f for f in os.listdir(tmp_path) if "tmp" in f]


def test_google_names_and_layout(tiny_config, tmp_path):
    model = BertPretrainer(tiny_config)
    prefix = checkpoints.save_google(model, str(tmp_path))
    import tensorflow as tf

    shapes = tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
    assert shapes["bert/encoder/layer_1/attention/self/query/kernel"] == [32, 32]
    assert shapes["bert/encoder/layer_0/intermediate/dense/kernel"] == [32, 64]  # [in, out]
    assert shapes["cls/seq_relationship/output_weights"] == [2, 32]
    assert shapes["cls/predictions/output_bias"] == [tiny_config.vocab_size]
    assert set(shapes) == set(model_variables(model))
    assert os.path.basename(prefix) == "bert_model.ckpt"


def test_optimizer_slots_and_step_are_skipped(tiny_config, tmp_path):
    model = BertEncoder(tiny_config)
    arrays = {n: v.numpy() for n, v in model_variables(model).items()}
    arrays.update({n + "/adam_m": np.zeros_like(a) for n, a in arrays.items()})
    arrays["global_step"] = np.asarray(7, np.int64)
    prefix = checkpoints.write_tf_checkpoint(str(tmp_path / "model.ckpt-7"), arrays)
    weights = checkpoints.read_tf_checkpoint(prefix)
    assert set(weights) == set(model_variables(model))


def test_missing_and_misshaped_weights_are_named(tiny_config, tmp_path):
    model = BertEncoder(tiny_config)
    arrays = {n: v.numpy() for n, v in model_variables(model).items()}
    del arrays["bert/encoder/layer_1/output/dense/bias"]
    arrays["bert/pooler/dense/kernel"] = np.zeros((32, 31), "float32")
    arrays["bert/encoder/layer_9/output/dense/bias"] = np.zeros((32,), "float32")
    prefix = checkpoints.write_tf_checkpoint(str(tmp_path / "bad.ckpt"), arrays)
    before = model.encoder if hasattr(model, "encoder") else model
    kernel = before.pooler.kernel.numpy().copy()
    with pytest.raises(CheckpointMismatchError) as err:
        load_weights(model, prefix)
    message = str(err.value)
    assert "missing bert/encoder/layer_1/output/dense/bias" in message
    assert "unexpected bert/encoder/layer_9/output/dense/bias" in message
    assert "bert/pooler/dense/kernel (32, 31) vs model (32, 32)" in message
    np.testing.assert_array_equal(kernel, model.pooler.kernel.numpy())  # nothing half-loaded


def test_missing_checkpoint_and_vocab_mismatch_messages(tiny_config, tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        load_weights(BertEncoder(tiny_config), str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="vocab.txt has 10 tokens but the model's vocab_size is 99"):
        checkpoints.check_vocab_size(tiny_config, 10, "vocab.txt")
    import dataclasses

    nvidia = dataclasses.replace(tiny_config, vocab_size=30528)
    checkpoints.check_vocab_size(nvidia, 30522, "vocab.txt")  # padded to a multiple of 8: fits
    with pytest.raises(ValueError, match="has 30530 tokens"):
        checkpoints.check_vocab_size(nvidia, 30530, "vocab.txt")
    with pytest.raises(ValueError, match="has 28996 tokens"):
        checkpoints.check_vocab_size(nvidia, 28996, "vocab.txt")  # a cased vocab on an uncased model
    corrupt = tmp_path / "corrupt.ckpt"
    (tmp_path / "corrupt.ckpt.index").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="corrupt.ckpt is not a readable TensorFlow checkpoint"):
        checkpoints.read_tf_checkpoint(str(corrupt))


def _reference_outputs(torch, reference, batch):
    """A transformers model's outputs on one of our input batches."""
    with torch.no_grad():
        return reference(
            input_ids=torch.tensor(batch["input_ids"], dtype=torch.long),
            attention_mask=torch.tensor(batch["input_mask"], dtype=torch.long),
            token_type_ids=torch.tensor(batch["segment_ids"], dtype=torch.long),
        )


def test_huggingface_output_loads_in_transformers_with_heads(tiny_config, tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = BertPretrainer(tiny_config)
    checkpoints.save_huggingface(model, str(tmp_path))
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == ["BertForPreTraining"]
    reference = transformers.BertForPreTraining.from_pretrained(str(tmp_path)).eval()
    batch = random_batch(tiny_config, batch=2, seq=12, predictions=3)
    out = _reference_outputs(torch, reference, batch)
    ours = model(batch)
    scores = np.take_along_axis(
        out.prediction_logits.numpy(), batch["masked_lm_positions"][..., None].astype(int), axis=1
    )
    assert np.abs(ours["mlm_logits"].numpy() - scores).max() < 1e-4
    assert np.abs(ours["nsp_logits"].numpy() - out.seq_relationship_logits.numpy()).max() < 1e-4


def _convert(*args):
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, "convert_checkpoint.py"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.process
def test_converter_cli_chain_preserves_outputs(tiny_config, tmp_path):
    model = BertPretrainer(tiny_config)
    checkpoints.save_huggingface(model, str(tmp_path / "hf"))
    steps = [("hf", "google"), ("google", "trainer"), ("trainer", "hf2")]
    formats = {"google": "google", "trainer": "trainer", "hf2": "huggingface"}
    for src, dst in steps:
        result = _convert(
            "--input",
            str(tmp_path / src),
            "--output_dir",
            str(tmp_path / dst),
            "--output_format",
            formats[dst],
        )
        assert result.returncode == 0, result.stderr
    final = BertPretrainer(tiny_config)
    load_weights(final, str(tmp_path / "hf2"))
    batch = random_batch(tiny_config)
    _assert_same(_outputs(model, batch), _outputs(final, batch))


@pytest.mark.process
def test_converter_cli_reports_a_bad_input_in_one_line(tmp_path):
    result = _convert(
        "--input",
        str(tmp_path / "absent"),
        "--output_dir",
        str(tmp_path / "out"),
        "--output_format",
        "google",
    )
    assert result.returncode == 2
    assert result.stderr.strip().startswith("convert_checkpoint: error: ") and "absent" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.process
def test_converter_cli_reports_a_checkpoint_that_does_not_fit_in_one_line(tiny_config, tmp_path):
    import dataclasses

    model = BertPretrainer(tiny_config)
    checkpoints.save_google(model, str(tmp_path / "google"))
    wider = dataclasses.replace(tiny_config, intermediate_size=128)
    wider.to_json_file(tmp_path / "wider.json")
    result = _convert(
        "--input",
        str(tmp_path / "google"),
        "--output_dir",
        str(tmp_path / "out"),
        "--output_format",
        "trainer",
        "--bert_config_file",
        str(tmp_path / "wider.json"),
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert "does not fit the model: shape mismatch" in result.stderr
    assert "bert/encoder/layer_0/intermediate/dense/kernel (32, 64) vs model (32, 128)" in result.stderr
    result = _convert("--input", str(tmp_path / "google"), "--output_dir", str(tmp_path / "out"))
    assert result.returncode == 2 and "--output_format is required" in result.stderr


def test_name_table_maps_every_weight_both_ways(tiny_config):
    names = model_variables(BertPretrainer(tiny_config))
    for prefix in ("", "bert."):
        keys = {}
        for name in names:
            key, transposed = checkpoints.google_to_hf(name, prefix)
            assert checkpoints.hf_to_google(key, prefix) == (name, transposed)
            keys[key] = transposed
        assert len(keys) == len(names)
    assert checkpoints.google_to_hf("bert/encoder/layer_1/attention/self/query/kernel", "bert.") == (
        "bert.encoder.layer.1.attention.self.query.weight",
        True,
    )
    assert checkpoints.google_to_hf("bert/embeddings/LayerNorm/gamma") == (
        "embeddings.LayerNorm.weight",
        False,
    )
    assert checkpoints.google_to_hf("cls/seq_relationship/output_weights", "bert.") == (
        "cls.seq_relationship.weight",
        False,
    )  # [2, D] in both layouts
    assert checkpoints.google_to_hf("cls/predictions/output_bias", "bert.") == ("cls.predictions.bias", False)
    # Keys outside the table, or without the checkpoint's prefix, are not BERT weights.
    assert checkpoints.hf_to_google("encoder.layer.0.attention.self.rotary.weight") is None
    assert checkpoints.hf_to_google("encoder.layer.0.output.dense.weight", "bert.") is None
    with pytest.raises(KeyError, match="bert/encoder/layer_0/extra"):
        checkpoints.google_to_hf("bert/encoder/layer_0/extra")


def test_unknown_huggingface_weight_is_named(tiny_config, tmp_path):
    from safetensors.numpy import load_file, save_file

    checkpoints.save_huggingface(BertEncoder(tiny_config), str(tmp_path))
    tensors = load_file(str(tmp_path / "model.safetensors"))
    tensors["encoder.layer.0.attention.self.rotary.weight"] = np.zeros((2,), "float32")
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(
        CheckpointMismatchError,
        match="not part of a BERT model: encoder.layer.0.attention.self.rotary.weight",
    ):
        checkpoints.read_hf_checkpoint(str(tmp_path))


def test_checkpoint_format_and_what_sits_beside(tiny_config, tmp_path):
    model = BertEncoder(tiny_config)
    checkpoints.save_huggingface(model, str(tmp_path / "hf"))
    prefix = checkpoints.save_google(model, str(tmp_path / "google"))
    assert checkpoints.checkpoint_format(str(tmp_path / "hf")) == "huggingface"
    assert checkpoints.checkpoint_format(str(tmp_path / "hf" / "model.safetensors")) == "huggingface"
    assert checkpoints.checkpoint_format(prefix) == "tf"
    # The config beside a checkpoint, or an explicit file of either layout (told apart by content).
    assert checkpoints.find_config(prefix) == tiny_config
    assert checkpoints.find_config(str(tmp_path / "nowhere" / "x.ckpt")) is None
    assert checkpoints.find_config(prefix, str(tmp_path / "hf" / "config.json")) == tiny_config
    with pytest.raises(UserError, match="absent.json"):
        checkpoints.find_config(prefix, str(tmp_path / "absent.json"))
    assert checkpoints.vocab_beside(prefix) is None
    (tmp_path / "google" / "vocab.txt").write_text("[PAD]\n")
    assert checkpoints.vocab_beside(prefix) == str(tmp_path / "google" / "vocab.txt")
    assert checkpoints.vocab_beside(str(tmp_path / "google")) == str(tmp_path / "google" / "vocab.txt")


def test_trainer_checkpoint_keeps_training_state_apart(tiny_config, tmp_path):
    import tensorflow as tf

    model = BertPretrainer(tiny_config)
    prefix = checkpoints.save_trainer_checkpoint(
        model, str(tmp_path), step=7, training_state={"lamb_m/pooler": np.ones((3,), "float32")}
    )
    assert prefix == str(tmp_path / "ckpt-7")
    assert tf.train.latest_checkpoint(str(tmp_path)) == prefix
    reader = tf.train.load_checkpoint(prefix)
    assert reader.get_tensor("global_step") == 7
    np.testing.assert_array_equal(reader.get_tensor("training_state/lamb_m/pooler"), np.ones(3))
    assert set(checkpoints.read_tf_checkpoint(str(tmp_path))) == set(model_variables(model))


def test_a_damaged_checkpoint_to_start_from_is_one_sentence_naming_what_is_wrong(tiny_config, tmp_path):
    model = BertPretrainer(tiny_config)
    prefix = checkpoints.save_trainer_checkpoint(model, str(tmp_path / "trainer"), step=3)
    assert checkpoints.checkpoint_problem(prefix) is None
    data = prefix + ".data-00000-of-00001"
    size = os.path.getsize(data)
    os.truncate(data, size // 2)
    with pytest.raises(checkpoints.CheckpointDamagedError) as error:  # a UserError: one sentence, exit 2
        load_weights(BertPretrainer(tiny_config), str(tmp_path / "trainer"))
    assert str(error.value) == (
        f"{prefix} is damaged (ckpt-3.data-00000-of-00001 is {size // 2} bytes but {size} were written); "
        "use an intact checkpoint."
    )
    # Google's layout has no record: TensorFlow's per-tensor checksum finds a changed byte.
    google = checkpoints.save_google(model, str(tmp_path / "google"))
    with open(google + ".data-00000-of-00001", "r+b") as f:
        f.seek(os.path.getsize(google + ".data-00000-of-00001") // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(
        UserError, match=r"bert_model.ckpt is damaged \(tensor \S+ does not read back: .*Checksum"
    ):
        load_weights(BertPretrainer(tiny_config), google)
    assert "does not read back" in checkpoints.checkpoint_problem(google)


def test_save_huggingface_keeps_the_classifier_head_and_load_for_fine_tuning_reads_it(tmp_path, tiny_config):
    import keras
    from safetensors.numpy import load_file, save_file

    keras.utils.set_random_seed(1)
    source = BertClassifier(tiny_config, 3)
    source.classifier.output_bias.assign([0.5, -0.25, 1.0])  # not the zeros a fresh head has
    save_huggingface(source, str(tmp_path / "hf"))
    tensors = load_file(str(tmp_path / "hf" / "model.safetensors"))
    assert tensors["classifier.weight"].shape == (3, D) and tensors["classifier.bias"].shape == (3,)
    np.testing.assert_array_equal(tensors["classifier.bias"], [0.5, -0.25, 1.0])
    assert "embeddings.word_embeddings.weight" in tensors and "pooler.dense.weight" in tensors
    # BertForSequenceClassification's own layout: the encoder under "bert.", the head not.
    prefixed = tmp_path / "prefixed"
    prefixed.mkdir()
    save_file(
        {(k if k.startswith("classifier.") else "bert." + k): v for k, v in tensors.items()},
        str(prefixed / "model.safetensors"),
    )

    want = {n: v.numpy() for n, v in model_variables(source).items()}
    assert "output_weights" in want and "bert/pooler/dense/kernel" in want
    for checkpoint in (tmp_path / "hf", prefixed):
        keras.utils.set_random_seed(2)
        target = BertClassifier(tiny_config, 3)
        assert load_for_fine_tuning(target, str(checkpoint)) is True
        got = model_variables(target)
        assert set(got) == set(want)
        for name in want:
            np.testing.assert_array_equal(got[name].numpy(), want[name], err_msg=f"{checkpoint}: {name}")


@pytest.mark.parametrize("head", ["classifier", "span"])
def test_transformers_fine_tuned_checkpoint_loads_with_its_head(tmp_path, head):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from bert.checkpoints import read_config_beside

    torch.manual_seed(0)
    hf_config = transformers.BertConfig(**CONFIG, num_labels=3 if head == "classifier" else 2)
    if head == "classifier":
        reference = transformers.BertForSequenceClassification(hf_config)
    else:
        reference = transformers.BertForQuestionAnswering(hf_config)
    with torch.no_grad():  # a head that is not at its initial values
        for parameter in reference.parameters():
            parameter.add_(0.01 * torch.randn_like(parameter))
    reference.eval().save_pretrained(str(tmp_path / "hf"), safe_serialization=True)

    config = read_config_beside(str(tmp_path / "hf"))
    model = BertClassifier(config, 3) if head == "classifier" else BertSpanModel(config)
    assert load_for_fine_tuning(model, str(tmp_path / "hf")) is True
    rng = np.random.default_rng(0)
    batch = {
        "input_ids": rng.integers(5, CONFIG["vocab_size"], (2, 12)).astype("int32"),
        "input_mask": np.array([[1] * 12, [1] * 7 + [0] * 5], "int32"),
        "segment_ids": np.array([[0] * 6 + [1] * 6, [0] * 4 + [1] * 3 + [0] * 5], "int32"),
    }
    out = _reference_outputs(torch, reference, batch)
    ours = model(batch)
    if head == "classifier":
        assert ours["logits"].shape == (2, 3)
        assert np.abs(ours["logits"].numpy() - out.logits.numpy()).max() <= 1e-5
    else:
        real = batch["input_mask"].astype(bool)  # HF does not mask the padded positions' logits
        for name in ("start_logits", "end_logits"):
            got, want = ours[name].numpy(), getattr(out, name).numpy()
            assert np.abs(got[real] - want[real]).max() <= 1e-5
