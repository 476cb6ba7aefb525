#!/usr/bin/env bash
# Searches fine-tuning hyperparameters with Optuna (run_tune.py): each trial is a run_classifier.py
# or run_squad.py fine-tuning, pruned when its dev metric lags; ends with the trials table, the
# best trial's parameters and checkpoint, and plots.
#
#   bash scripts/run_tune.sh [task_name [n_trials [num_gpu [bert_model [precision [use_xla
#       [seq_length [init_checkpoint]]]]]]]] [--NAME=VALUE ...] [--preset NAME|FILE] [--dry_run]
#       [-- RUN_TUNE_FLAGS ...]
#
# Defaults: MRPC 20 1 large fp16 true <128; SQuAD 384> <BERT_DIR>. task_name is SQuAD (v1.1),
# SQuAD2 (v2.0) or a GLUE task. num_gpu is per trial. The space, sampler, pruner and a shared
# study are run_tune.py flags after `--` (--learning_rate_range=1e-5,1e-4 --storage=postgresql://...
# --study_name=NAME). Output: $RESULTS_DIR/tune_<task_name>_<bert_model>; re-running continues the
# study. --help lists every argument. The engine: launch/tune.py.
set -euo pipefail
# shellcheck source=scripts/launch.sh
source "$(dirname "${BASH_SOURCE[0]}")/launch.sh"
launch run_tune "$@"
