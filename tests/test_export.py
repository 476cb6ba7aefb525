"""training/export.py: the SavedModels and the Triton repository that the GLUE and SQuAD runs
export, served by a fresh Python that imports TensorFlow alone and compared with the checkpoint's
model; the export-only run; a non-empty --export_dir refused before any training."""

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import run_classifier
from bert.checkpoints import load_weights
from bert.finetuning import BertClassifier, BertSpanModel
from data import glue, squad
from finetuning_runs import GLUE, SEQ, SQUAD, SQUAD_TRAIN, _error, _flags, _json, _ok, _tsv

# Only TensorFlow (and numpy, its dependency) in a process started outside the repository: the
# SavedModel must serve without this project's code.
SERVE = """
import json, sys
import numpy as np
import tensorflow as tf
results = {}
for key, (model_dir, inputs_file) in json.load(open(sys.argv[1])).items():
    serve = tf.saved_model.load(model_dir).signatures["serving_default"]
    x = np.load(inputs_file)
    out = serve(input_ids=tf.constant(x["input_ids"]), input_mask=tf.constant(x["input_mask"]),
                segment_ids=tf.constant(x["segment_ids"]))
    results.update({key + "/" + name: value.numpy() for name, value in out.items()})
np.savez(sys.argv[2], **results)
ours = {m.split(".")[0] for m in sys.modules} & {"bert", "common", "data", "optimization", "training"}
assert not ours, ours
"""


def _serve(tmp_path, jobs):
    """{key: (SavedModel dir, input arrays)} -> {key/output name: array}, computed by a fresh
    `python -c` outside the repository with only TensorFlow imported."""
    spec = {}
    for key, (model_dir, arrays) in jobs.items():
        inputs_file = str(tmp_path / f"serve-{key}.npz")
        np.savez(inputs_file, **arrays)
        spec[key] = (str(model_dir), inputs_file)
    spec_file, out_file = tmp_path / "serve.json", tmp_path / "served.npz"
    spec_file.write_text(json.dumps(spec))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    done = subprocess.run(
        [sys.executable, "-c", SERVE, str(spec_file), str(out_file)],
        cwd=str(tmp_path),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(np.load(out_file))


def _glue_features(files, task, split, max_seq_length=SEQ):
    from bert.tokenization import build_tokenizer

    task = glue.get_task(task)
    examples, _ = glue.read_examples(task, GLUE, split, log=lambda m: None)
    tokenizer = build_tokenizer(vocab_file=files["vocab_file"], do_lower_case=True)
    features = glue.convert_examples(examples, task, tokenizer, max_seq_length)
    return examples, {k: features[k] for k in ("input_ids", "input_mask", "segment_ids")}


@pytest.mark.process
def test_glue_export_serves_the_checkpoints_logits_with_tensorflow_alone(mrpc_run, model_files, tmp_path):
    config = model_files["config"]
    model = BertClassifier(config, 2)
    load_weights(model, tf.train.latest_checkpoint(str(mrpc_run["output"])))
    _, dev = _glue_features(model_files, "MRPC", "dev")
    _, test = _glue_features(model_files, "MRPC", "test")
    rows = {k: np.concatenate([dev[k], test[k]]) for k in dev}  # B=4 at S=64
    expected = model(rows)["logits"].numpy()  # [B, C]
    # Three rows cut to their longest real length: another batch and another sequence length
    # than training's, which the padding mask makes no difference to.
    length = int(rows["input_mask"][:3].sum(axis=1).max())
    assert length < SEQ
    short = {k: v[:3, :length] for k, v in rows.items()}
    triton_copy = mrpc_run["triton"] / "bert_glue_mrpc" / "1" / "model.savedmodel"
    served = _serve(
        tmp_path,
        {
            "full": (mrpc_run["export"], rows),
            "short": (mrpc_run["export"], short),
            "triton": (triton_copy, short),
        },
    )
    assert set(served) == {"full/logits", "short/logits", "triton/logits"}
    assert served["full/logits"].shape == (4, 2) and served["full/logits"].dtype == np.float32
    assert np.abs(served["full/logits"] - expected).max() <= 1e-5
    assert np.abs(served["short/logits"] - expected[:3]).max() <= 1e-5
    np.testing.assert_array_equal(served["triton/logits"], served["short/logits"])
    # The job's own dev predictions are the argmax of what the export serves.
    predicted = [r[1] for r in _tsv(mrpc_run["output"] / "dev_predictions.tsv")[1:]]
    assert predicted == [str(i) for i in served["full/logits"][:2].argmax(axis=1)]


def test_triton_repository_layout(mrpc_run):
    model_dir = mrpc_run["triton"] / "bert_glue_mrpc"
    assert sorted(os.listdir(mrpc_run["triton"])) == ["bert_glue_mrpc"]
    assert sorted(os.listdir(model_dir)) == ["1", "config.pbtxt"]
    assert (model_dir / "1" / "model.savedmodel" / "saved_model.pb").is_file()
    assert sorted(os.listdir(model_dir / "1" / "model.savedmodel")) == sorted(os.listdir(mrpc_run["export"]))
    text = (model_dir / "config.pbtxt").read_text()
    assert re.search(r'^name: "bert_glue_mrpc"$', text, re.M)
    assert re.search(r'^platform: "tensorflow_savedmodel"$', text, re.M)
    assert re.search(r"^max_batch_size: 0$", text, re.M)  # the batch is the dims' first -1
    tensors = re.findall(r'\{ name: "(\w+)" data_type: (\w+) dims: \[ ([-\d, ]+) \] \}', text)
    assert tensors == [
        ("input_ids", "TYPE_INT32", "-1, -1"),
        ("input_mask", "TYPE_INT32", "-1, -1"),
        ("segment_ids", "TYPE_INT32", "-1, -1"),
        ("logits", "TYPE_FP32", "-1, 2"),
    ]
    assert text.index("input [") < text.index("input_ids") < text.index("output [") < text.index('"logits"')
    assert 'key: "TF_SIGNATURE_DEF" value: { string_value: "serving_default" }' in text


@pytest.mark.process
def test_export_only_run_equals_the_export_after_training(mrpc_run, model_files, tmp_path, capsys):
    # A copy: the export-only run rewrites resolved_config.json of the directory it reads.
    finished = tmp_path / "finished"
    shutil.copytree(mrpc_run["output"], finished)
    export = tmp_path / "export"
    argv = [
        "--task_name=MRPC",
        f"--data_dir={GLUE}",
        f"--output_dir={finished}",  # its bert_config.json, vocab.txt and latest checkpoint
        f"--export_dir={export}",
        f"--max_seq_length={SEQ}",
    ]
    _ok(run_classifier.main, argv)
    assert f"Predicting with the weights of {finished / 'ckpt-5'}." in capsys.readouterr().out
    assert sorted(f for f in os.listdir(finished) if f.endswith(".index")) == [
        "ckpt-2.index",
        "ckpt-4.index",
        "ckpt-5.index",
    ]  # nothing trained
    _, rows = _glue_features(model_files, "MRPC", "test")
    served = _serve(tmp_path, {"after_training": (mrpc_run["export"], rows), "export_only": (export, rows)})
    np.testing.assert_array_equal(served["export_only/logits"], served["after_training/logits"])
    # A second export into the now non-empty directory is refused, naming it.
    status, err = _error(run_classifier.main, argv, capsys)
    assert status == 2 and f"--export_dir {export} exists and is not empty" in err


def test_non_empty_export_dir_is_refused_before_training(model_files, tmp_path, capsys):
    export = tmp_path / "export"
    export.mkdir()
    (export / "saved_model.pb").write_bytes(b"an earlier export")
    argv = _flags(
        model_files, tmp_path / "run", "--do_train", task_name="MRPC", data_dir=GLUE, export_dir=export
    )
    status, err = _error(run_classifier.main, argv, capsys)
    assert status == 2 and len(err.splitlines()) == 1
    assert f"--export_dir {export} exists and is not empty" in err
    assert not (tmp_path / "run").exists()  # stopped before any training


@pytest.mark.process
def test_squad_export_serves_start_and_end_logits_with_tensorflow_alone(squad_run, model_files, tmp_path):
    from bert.tokenization import build_tokenizer

    config = model_files["config"]
    model = BertSpanModel(config)
    load_weights(model, tf.train.latest_checkpoint(str(squad_run["output"])))
    examples, _ = squad.read_examples(SQUAD_TRAIN, False, False, log=lambda m: None)
    tokenizer = build_tokenizer(vocab_file=model_files["vocab_file"], do_lower_case=True)
    features = squad.convert_examples_to_features(
        examples,
        tokenizer,
        max_seq_length=SEQ,
        doc_stride=SQUAD["doc_stride"],
        max_query_length=SQUAD["max_query_length"],
        progress=False,
    )
    arrays = squad.features_to_arrays(features)
    rows = {k: arrays[k] for k in ("input_ids", "input_mask", "segment_ids")}  # B = every window
    assert len(features) not in (4, 8)  # neither the training nor the prediction batch
    served = _serve(tmp_path, {"squad": (squad_run["export"], rows)})
    assert set(served) == {"squad/start_logits", "squad/end_logits"}
    expected = model(rows)
    for name in ("start_logits", "end_logits"):
        assert served[f"squad/{name}"].shape == (len(features), SEQ)
        assert np.abs(served[f"squad/{name}"] - expected[name].numpy()).max() <= 1e-5
    # Decoding the served logits gives the job's predictions.json.
    predictions, _, _ = squad.postprocess(
        examples,
        features,
        served["squad/start_logits"],
        served["squad/end_logits"],
        n_best_size=SQUAD["n_best_size"],
        max_answer_length=SQUAD["max_answer_length"],
    )
    assert predictions == _json(squad_run["output"] / "predictions.json")
