#!/usr/bin/env bash
# Fine-tunes BERT on a GLUE task, then scores the dev set with the task's official metrics and, when
# the task's test file is there, writes the submission file (run_classifier.py --do_train --do_eval
# [--do_predict]); prints the metrics at the end.
#
#   bash scripts/run_glue.sh [task_name [batch_size [learning_rate [precision [use_xla [num_gpu
#       [seq_length [doc_stride [bert_model [epochs [warmup_proportion [init_checkpoint]]]]]]]]]]]]
#       [--NAME=VALUE ...] [--preset NAME|FILE] [--dry_run] [-- RUN_CLASSIFIER_FLAGS ...]
#
# NVIDIA's order and defaults: MRPC 16 3e-6 fp16 true 8 128 64 large 3.0 0.1 <BERT_DIR>.
# doc_stride is accepted for NVIDIA's order and unused (GLUE examples are not split into windows).
# learning_rate and batch_size are per GPU. Presets: configs/presets/run_glue/. Paths:
# BERT_DATA_DIR, GLUE_DIR (holding MRPC/, MNLI/, ...), BERT_DIR, BERT_CONFIG, VOCAB_FILE, RESULTS_DIR.
# Output: $RESULTS_DIR/glue_<task_name>_<bert_model>; re-running continues from its checkpoint.
# --help lists every argument. The engine: launch/glue.py.
set -euo pipefail
# shellcheck source=scripts/launch.sh
source "$(dirname "${BASH_SOURCE[0]}")/launch.sh"
launch run_glue "$@"
