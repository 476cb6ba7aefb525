"""run_squad.py: errors a user can cause (a missing or a malformed --train_file) stop with one
sentence and exit status 2."""

import tensorflow as tf

import run_squad
from finetuning_runs import _error, _flags


def test_missing_squad_train_file_exits_2_naming_it(model_files, tmp_path, capsys):
    missing = tmp_path / "train-v1.1.json"
    status, err = _error(
        run_squad.main, _flags(model_files, tmp_path / "run", "--do_train", train_file=missing), capsys
    )
    assert status == 2 and len(err.splitlines()) == 1
    assert f"--train_file {missing} does not exist" in err


def test_malformed_squad_json_exits_2_naming_file_and_line(model_files, tmp_path, capsys):
    broken = tmp_path / "train.json"
    broken.write_text('{\n  "version": "1.1",\n  "data": [\n    {"title": "x",, "paragraphs": []}\n  ]\n}\n')
    status, err = _error(
        run_squad.main, _flags(model_files, tmp_path / "run", "--do_train", train_file=broken), capsys
    )
    assert status == 2 and len(err.splitlines()) == 1
    assert str(broken) in err and "line 4" in err and "not valid JSON" in err
    assert tf.train.latest_checkpoint(str(tmp_path / "run")) is None
