r"""Searches fine-tuning hyperparameters (learning rate, batch size, epochs, warmup, seed) with
Optuna: each trial is a run of run_classifier.py or run_squad.py, pruned early when its dev metric
lags, and the study ends with a table, the best trial's parameters and checkpoint, and plots.

    python run_tune.py --task_name=MRPC --data_dir=data/glue/MRPC --init_checkpoint=results/phase_2 \
        --output_dir=results/tune_mrpc --n_trials=20 --learning_rate_range=1e-5,1e-4 \
        --train_batch_size_choices=16,32 --num_train_epochs_choices=2,3,4

    # several workers (processes or machines) on one study: a database URL
    python run_tune.py ... --storage=postgresql://user:pass@db-host/optuna --study_name=mrpc

The space: --search_space FILE (YAML or JSON: `learning_rate: {low: 1e-5, high: 1e-4, log: true}`,
`train_batch_size: [16, 32]`, `seed: 7`) or the *_range / *_choices flags, which override the
file's entries; a tuned parameter given as its plain fine-tuning flag (--learning_rate=3e-5) is
fixed at that value. Without either: learning rate 1e-5..1e-4 log-uniform, batch 16/32, epochs
2/3/4 (the BERT paper's grid). Every other fine-tuning flag given here (--init_checkpoint,
--max_seq_length, --use_xla, SQuAD's --train_file ...) goes to every trial as given; flags not
given take run_classifier.py's / run_squad.py's defaults.

--storage defaults to <output_dir>/study.db (SQLite). Re-running the same command continues the
study; a trial whose worker died is recorded as failed (after 3 missed --heartbeat_seconds) and
re-queued with the same parameters (--trial_retries times at most). --num_gpus > 1 launches each
trial through horovodrun (--launcher_args, e.g. "--gloo -H localhost:2").

    # a live view of the study (every worker's trials) in a browser: optuna-dashboard
    python run_tune.py --dashboard --storage=postgresql://user:pass@db-host/optuna   # or --output_dir
    bash scripts/run_tune.sh MRPC ... -- --dashboard                                  # the launcher's study

--dashboard runs no trial: it serves the dashboard on --dashboard_host:--dashboard_port until
Ctrl-C.
"""

from __future__ import annotations

import dataclasses
import os
import sys

from common import cli

PROG = "run_tune"
# Fine-tuning flags the tuner sets itself for every trial.
SET_BY_TUNER = (
    "output_dir",
    "do_train",
    "do_eval",
    "do_predict",
    "export_dir",
    "triton_repository",
    "eval_every_n_steps",
)
# run_tune.py's flags that are TuneSettings fields of the same name.
STUDY_FLAGS = (
    "metric",
    "n_trials",
    "sampler",
    "sampler_seed",
    "pruner",
    "pruner_startup_trials",
    "pruner_warmup_steps",
    "study_name",
    "storage",
    "num_gpus",
    "heartbeat_seconds",
    "trial_retries",
)


def define_flags(fv) -> None:
    import finetuning_cli
    from tuning import search

    finetuning_cli.define_flags(
        fv,
        max_seq_length=128,
        learning_rate=2e-5,
        train_batch_size=32,
        epochs=3.0,
        output_dir_help="The study's directory: trial_<n>/ per trial, study.db (the default storage), "
        "trials.tsv, best_trial.json and the plots.",
    )
    finetuning_cli.define_glue_flags(
        fv, task_help="SQuAD, or a GLUE task: CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE, WNLI."
    )
    finetuning_cli.define_squad_flags(fv)

    flag = cli.Flags(fv)
    flag("search_space", "YAML/JSON file of the space (see the module doc).", str)
    flag("learning_rate_range", "LOW,HIGH: learning rate per worker, log-uniform.", str)
    flag("train_batch_size_choices", "Batch sizes to choose from, e.g. 16,32.", str)
    flag("num_train_epochs_choices", "Epoch counts to choose from, e.g. 2,3,4.", str)
    flag("warmup_proportion_range", "LOW,HIGH: warmup proportion, uniform.", str)
    flag("seed_choices", "Seeds to choose from, e.g. 1,2,3.", str)
    flag("timeout", "Start no trial after this long (3600, 90m, 2h); a running trial finishes.", str)
    study = cli.Flags(fv, search.TuneSettings)  # kind, default and help from the settings' fields
    for name in STUDY_FLAGS:
        study(name)
    flag(
        "launcher_args",
        "Extra arguments for each trial's horovodrun/mpirun, e.g. '--gloo -H localhost:2' (default $LAUNCHER_ARGS).",
        str,
    )
    flag(
        "dashboard",
        "Serve optuna-dashboard on the study's storage (--storage, else --output_dir's study.db) "
        "instead of running trials.",
        bool,
        default=False,
    )
    flag(
        "dashboard_host",
        "Address the dashboard listens on (0.0.0.0: every interface).",
        str,
        default="127.0.0.1",
    )
    flag("dashboard_port", "Port of the dashboard (0: a free one, printed).", int, default=8080)


def _space(F):
    from tuning import search_space

    overrides = {}
    for name, flag, log in (
        ("learning_rate", "learning_rate_range", True),
        ("warmup_proportion", "warmup_proportion_range", False),
    ):
        if F[flag].value is not None:
            overrides[name] = (search_space.parse_range(F[flag].value, flag, log), f"--{flag}")
    for name in ("train_batch_size", "num_train_epochs", "seed"):
        flag = f"{name}_choices"
        if F[flag].value is not None:
            overrides[name] = (search_space.parse_choices(F[flag].value, flag), f"--{flag}")
    for name in search_space.PARAMETERS:  # a plain fine-tuning flag fixes the parameter
        if F[name].present:
            overrides[name] = (F[name].value, f"--{name}")
    file_spec = search_space.read_space_file(F.search_space) if F.search_space else None
    return search_space.build_space(file_spec, overrides, f"--search_space {F.search_space}")


def _trial_flags(F, kind) -> tuple[str, ...]:
    """The fine-tuning flags given on this command line that every trial gets."""
    from training.finetuning_job import FineTuningSettings
    from tuning.search_space import PARAMETERS

    shared = [n for n in FineTuningSettings.__dataclass_fields__ if n in F]
    shared += ["precision", "amp", "use_horovod"]
    names = [
        n for n in dict.fromkeys([*shared, *kind.options]) if n not in SET_BY_TUNER and n not in PARAMETERS
    ]
    return tuple(F[n].serialize() for n in names if F[n].present)


def _check_task(F, kind, eval_every: int) -> None:
    """The fine-tuning flags and files, checked as a trial would check them, before any trial."""
    import finetuning_cli
    from training import finetuning_job

    task = finetuning_cli.task_of(kind, F)
    task.validate(do_train=True, do_eval=True, do_predict=False)
    settings = dataclasses.replace(
        finetuning_cli.settings_from_flags(F),
        output_dir=F.output_dir or ".",
        do_train=True,
        do_eval=True,
        do_predict=False,
        export_dir=None,
        triton_repository=None,
        eval_every_n_steps=eval_every,
    )
    finetuning_job.validate(settings)
    finetuning_job.load_model_files(settings, None)


def _trial_prefix(F) -> tuple:
    """The argv in front of each trial's entry point, from the launcher engine: trials start their
    workers as the fine-tuning launchers start theirs."""
    import shlex

    from launch.workers import trial_prefix

    launcher_args = os.environ.get("LAUNCHER_ARGS", "") if F.launcher_args is None else F.launcher_args
    return tuple(trial_prefix(F.num_gpus, os.environ, sys.executable, shlex.split(launcher_args)))


def run(F) -> int:
    from common.errors import UserError
    from training import tasks
    from tuning import search

    if F.dashboard:  # the study's storage is all it needs: no task, no trial
        if not (F.storage or F.output_dir):
            raise UserError("--dashboard needs --storage or --output_dir (the study's study.db).")
        url = search.study_storage_url(F.storage, F.output_dir)
        search.serve_dashboard(url, F.dashboard_host, F.dashboard_port)
        return 0
    cli.required(F, "task_name", "output_dir")
    kind = tasks.find(F.task_name)  # an unknown task, first
    for name in SET_BY_TUNER[2:]:
        if F[name].present and name != "eval_every_n_steps":
            raise UserError(f"--{name} is set by the tuner for every trial; leave it out.")
    given = {"eval_every_n_steps": F.eval_every_n_steps} if F["eval_every_n_steps"].present else {}
    settings = search.TuneSettings(
        output_dir=F.output_dir,
        task_name=F.task_name,
        space=_space(F),
        trial_flags=_trial_flags(F, kind),
        version_2_with_negative=F.version_2_with_negative,
        timeout_seconds=search.parse_timeout(F.timeout),
        trial_prefix=_trial_prefix(F),
        **{name: F[name].value for name in STUDY_FLAGS},
        **given,
    )
    search.validate(settings)
    _check_task(F, kind, settings.eval_every_n_steps)
    search.run(settings)
    return 0


def main(argv=None) -> int:
    return cli.main(
        define_flags, run, [PROG, *(sys.argv[1:] if argv is None else argv)], doc=__doc__, prog=PROG
    )


if __name__ == "__main__":
    sys.exit(main())
