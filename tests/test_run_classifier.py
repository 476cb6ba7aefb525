"""run_classifier.py: an error a user can cause stops with one sentence and exit status 2."""

import run_classifier
from finetuning_runs import GLUE, _error

GLUE_TASKS = ("CoLA", "SST-2", "MRPC", "STS-B", "QQP", "MNLI", "QNLI", "RTE", "WNLI")


def test_unknown_task_name_exits_2_naming_the_known_tasks(tmp_path, capsys):
    status, err = _error(
        run_classifier.main,
        ["--task_name=MRCP", f"--data_dir={GLUE}", f"--output_dir={tmp_path / 'run'}", "--do_train"],
        capsys,
    )
    assert status == 2 and len(err.splitlines()) == 1
    assert err.startswith("run_classifier: error: Unknown GLUE task 'MRCP'")
    assert all(name in err for name in GLUE_TASKS)
    assert not (tmp_path / "run").exists()
