#!/usr/bin/env bash
# Predicts a GLUE task with a fine-tuned model (run_classifier.py from init_checkpoint, no
# training): scores the dev set(s) with the official metrics when their files are there, and writes
# the submission file when the test file is there. --export_dir DIR also writes a SavedModel.
#
#   bash scripts/run_glue_inference.sh [task_name [init_checkpoint [batch_size [precision [use_xla
#       [seq_length [doc_stride [bert_model]]]]]]]]
#       [--NAME=VALUE ...] [--preset NAME|FILE] [--export_dir DIR] [--dry_run] [-- RUN_CLASSIFIER_FLAGS ...]
#
# NVIDIA's order and defaults: MRPC <run_glue.sh's output_dir> 32 fp16 true 128 64 large.
# AX (GLUE's diagnostic set) takes a fine-tuned MNLI model. One process. Paths as run_glue.sh.
# Output: $RESULTS_DIR/inference_glue_<task_name>_<init_checkpoint's directory name>.
# --help lists every argument. The engine: launch/glue.py.
set -euo pipefail
# shellcheck source=scripts/launch.sh
source "$(dirname "${BASH_SOURCE[0]}")/launch.sh"
launch run_glue_inference "$@"
