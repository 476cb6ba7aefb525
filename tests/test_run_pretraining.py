"""run_pretraining.py end to end on a tiny config (in-process, one worker): outputs and their
keys, early user errors (exit 2, one sentence naming the file or flag), NVIDIA's aliases,
phase 2 from phase 1's directory, resume over --init_checkpoint."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import run_pretraining
from common import cli
from tools import tiny_pretraining as tiny


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return tiny.setup(tmp_path_factory.mktemp("data"))


def _run(paths, output_dir, **overrides):
    overrides.setdefault("use_xla", False)  # compiling XLA adds seconds; test_preemption.py runs it
    return run_pretraining.main(tiny.flags(paths, output_dir, **overrides))


def _arrays(prefix):
    reader = tf.train.load_checkpoint(prefix)
    return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()}


def _json(path):
    with open(path) as f:
        return json.load(f)


def test_a_run_writes_checkpoints_log_events_and_results(data, tmp_path, capsys):
    out = tmp_path / "out"
    assert _run(data, out, do_eval=True, num_accumulation_steps=2, num_train_steps=3) == 0
    printed = capsys.readouterr().out
    resolved = _json(out / "resolved_config.json")
    assert resolved["workers"] == 1 and resolved["global_batch_size"] == 4 * 2
    assert resolved["effective_learning_rate"] == 1e-3 and resolved["precision"] == "fp32"
    assert resolved["num_train_steps"] == 3 and resolved["num_train_files"] == 2
    assert "global_batch_size" in printed and "Throughput Average (sequences/sec) = " in printed
    assert "step 3/3" in printed and "seq/s" in printed
    log = [json.loads(line) for line in open(out / "log.jsonl")]
    assert [e["step"] for e in log] == [1, 2, 3]
    assert set(log[0]) == {
        "step",
        "loss",
        "mlm_loss",
        "nsp_loss",
        "mlm_accuracy",
        "nsp_accuracy",
        "learning_rate",
        "loss_scale",
        "sequences_per_second",
        "skipped",
    }
    assert log[0]["learning_rate"] == 0.0 and log[1]["learning_rate"] > 0  # warmup of 1 update
    results = _json(out / "eval_results.json")
    assert set(results) >= {
        "masked_lm_accuracy",
        "masked_lm_loss",
        "next_sentence_accuracy",
        "next_sentence_loss",
        "global_step",
    }
    assert results["global_step"] == 3 and 0.0 <= results["masked_lm_accuracy"] <= 1.0
    assert tf.train.latest_checkpoint(str(out)).endswith("ckpt-3")
    assert os.path.isfile(out / "bert_config.json") and os.path.isfile(out / "vocab.txt")
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    arrays = _arrays(str(out / "ckpt-3"))
    assert int(arrays["global_step"]) == 3 and int(arrays["training_state/optimizer/iterations"]) == 3


def test_a_glob_that_matches_nothing_stops_before_a_model_is_built(data, tmp_path, capsys, monkeypatch):
    import bert.pretraining

    def no_model(*args, **kwargs):
        raise AssertionError("a model was built")

    monkeypatch.setattr(bert.pretraining, "BertPretrainer", no_model)
    missing = os.path.join(os.path.dirname(data["input_files"]), "nope-*.tfrecord")
    assert _run(data, tmp_path / "out", input_files=data["input_files"] + "," + missing) == 2
    err = capsys.readouterr().err
    assert "nope-*.tfrecord" in err and "--input_files" in err and len(err.strip().splitlines()) == 1
    assert not os.path.exists(tmp_path / "out" / "resolved_config.json")


def test_a_corrupt_first_record_stops_before_a_model_is_built(data, tmp_path, capsys, monkeypatch):
    import bert.pretraining

    monkeypatch.setattr(bert.pretraining, "BertPretrainer", None)
    junk = tmp_path / "junk.tfrecord"
    junk.write_bytes(b"not a TFRecord at all\n" * 4)
    assert _run(data, tmp_path / "out", input_files=str(junk)) == 2
    assert "junk.tfrecord: corrupt record header" in capsys.readouterr().err


def test_a_truncated_tfrecord_stops_the_run_naming_the_file(data, tmp_path, capsys):
    path = tiny.write_records(tmp_path / "cut.tfrecord", 10, seed=7)
    with open(path, "rb+") as f:
        f.truncate(os.path.getsize(path) - 20)  # a killed writer: the last record is cut short
    assert _run(data, tmp_path / "out", input_files=path) == 2
    err = capsys.readouterr().err
    assert "cut.tfrecord: truncated record" in err and "Traceback" not in err


def test_a_nan_loss_in_fp32_stops_the_run_naming_the_step(data, tmp_path, capsys):
    poisoned = tiny.write_records(tmp_path / "nan.tfrecord", 8, seed=3, nan_weight=True)
    out = tmp_path / "out"
    assert _run(data, out, input_files=poisoned) == 2
    err = capsys.readouterr().err
    assert "The loss is not finite at step 1" in err and "no checkpoint was written yet" in err
    assert tf.train.latest_checkpoint(str(out)) is None  # nothing non-finite was saved


def test_vocab_and_flag_mistakes_are_one_sentence(data, tmp_path, capsys):
    small = tmp_path / "vocab.txt"
    small.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")
    assert _run(data, tmp_path / "a", vocab_file=str(small)) == 2
    assert "has 5 tokens but the model's vocab_size is 99" in capsys.readouterr().err
    assert _run(data, tmp_path / "b", num_warmup_steps=9) == 2
    assert "--num_warmup_steps must be between 0 and --num_train_steps=4" in capsys.readouterr().err
    assert _run(data, tmp_path / "c", amp=True, precision="bf16") == 2
    assert "--amp means --precision=fp16" in capsys.readouterr().err


def test_nvidia_aliases_resolve_to_the_flags(data, monkeypatch):
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")  # as under mpirun: Horovod on by default
    train_dir = os.path.dirname(data["input_files"])
    F = cli.parse(
        run_pretraining.define_flags,
        [
            "run_pretraining",
            "--amp",
            "--nohorovod",
            f"--input_files_dir={train_dir}",
            "--output_dir=x",
            "--bert_config_file=c.json",
        ],
    )
    s = run_pretraining.settings_from_flags(F)
    assert s.precision == "fp16" and not s.use_horovod and s.input_files == os.path.join(train_dir, "*")
    F = cli.parse(run_pretraining.define_flags, ["run_pretraining", "--output_dir=x", "--bert_config_file=c"])
    s = run_pretraining.settings_from_flags(F)
    assert s.use_horovod and s.precision == "fp32" and s.use_xla and s.do_train and not s.do_eval


@pytest.mark.slow
def test_phase_2_starts_from_every_phase_1_weight_with_a_fresh_optimizer(data, tmp_path):
    phase1, phase2 = tmp_path / "phase_1", tmp_path / "phase_2"
    assert _run(data, phase1, num_train_steps=3) == 0
    # With warmup, update 1 uses learning rate 0: phase 2's ckpt-1 holds exactly what it started from.
    assert (
        _run(
            data,
            phase2,
            init_checkpoint=str(phase1),
            num_train_steps=1,
            num_warmup_steps=1,
            save_checkpoints_steps=1,
        )
        == 0
    )
    first, second = _arrays(str(phase1 / "ckpt-3")), _arrays(str(phase2 / "ckpt-1"))
    weights = [
        n
        for n in first
        if not n.endswith(("/adam_m", "/adam_v"))
        and not n.startswith("training_state/")
        and n != "global_step"
    ]
    assert any(n.startswith("cls/predictions/") for n in weights)
    assert any(n.startswith("cls/seq_relationship/") for n in weights)
    assert len(weights) == 2 * 16 + 5 + 2 + 5 + 2  # 2 layers, embeddings, pooler, MLM and NSP heads
    for name in weights:
        np.testing.assert_array_equal(second[name], first[name], err_msg=name)
    assert int(second["global_step"]) == 1 and int(second["training_state/optimizer/iterations"]) == 1
    # Fresh slots: after one update m = (1 - b1) g, not phase 1's moments carried on.
    assert not np.allclose(
        second["cls/predictions/output_bias/adam_m"], first["cls/predictions/output_bias/adam_m"]
    )
    assert _json(phase2 / "resolved_config.json")["init_checkpoint_step"] == 3


@pytest.mark.slow
def test_init_checkpoint_never_overrides_a_checkpoint_in_output_dir(data, tmp_path):
    start, out = tmp_path / "start", tmp_path / "out"
    assert _run(data, start, num_train_steps=1) == 0
    assert _run(data, out, init_checkpoint=str(start), num_train_steps=2) == 0
    assert _run(data, out, init_checkpoint=str(start), num_train_steps=3) == 0
    resolved = _json(out / "resolved_config.json")
    assert resolved["resume_from"].endswith("ckpt-2") and resolved["init_checkpoint_ignored"]
    assert int(_arrays(str(out / "ckpt-3"))["training_state/optimizer/iterations"]) == 3
    assert [json.loads(line)["step"] for line in open(out / "log.jsonl")] == [1, 2, 3]


@pytest.mark.parametrize(
    "flag, value, sentence",
    [
        ("learning_rate", "2.0", "--learning_rate must be a number in (0, 1] (got 2.0)."),
        ("train_batch_size", "0", "--train_batch_size must be a positive integer (got 0)."),
        ("num_warmup_steps", "-1", "--num_warmup_steps must be an integer >= 0 (got -1)."),
        ("precision", "fp8", "--precision must be one of fp16, fp32, tf32, bf16 (got 'fp8')."),
    ],
)
def test_a_value_outside_its_kind_is_refused_by_the_flag_and_by_the_settings_alike(
    data, tmp_path, capsys, flag, value, sentence
):
    """common/kinds.py's rule, one sentence, at parse time (exit 2) and for library callers."""
    import dataclasses

    from common.errors import UserError
    from training.pretraining_job import PretrainingSettings, validate

    assert _run(data, tmp_path / "out", **{flag: value}) == 2
    err = capsys.readouterr().err
    assert err == f"run_pretraining: error: {sentence} (see --help)\n"
    assert not os.path.exists(tmp_path / "out")
    settings = PretrainingSettings(bert_config_file="c.json", output_dir="x", input_files="*")
    typed = {"learning_rate": 2.0, "train_batch_size": 0, "num_warmup_steps": -1, "precision": "fp8"}[flag]
    with pytest.raises(UserError) as refused:
        validate(dataclasses.replace(settings, **{flag: typed}))
    assert str(refused.value) == sentence


@pytest.mark.slow
def test_the_largest_rate_the_table_accepts_runs(data, tmp_path):
    # (0, 1]: 1.0 itself is a rate; the schedule then peaks at it (one worker).
    assert _run(data, tmp_path / "out", learning_rate="1.0", num_train_steps=1, do_train=True) == 0
    assert _json(tmp_path / "out" / "resolved_config.json")["effective_learning_rate"] == 1.0
