#!/usr/bin/env bash
# Predicts SQuAD's dev set with a fine-tuned model and scores it with the official metric when the
# file holds answers (run_squad.py --do_predict --do_eval from init_checkpoint, no training); prints
# EM and F1. --export_dir DIR also writes the model as a SavedModel for serving.
#
#   bash scripts/run_squad_inference.sh [init_checkpoint [batch_size [precision [use_xla
#       [seq_length [doc_stride [bert_model [squad_version]]]]]]]]
#       [--NAME=VALUE ...] [--preset NAME|FILE] [--export_dir DIR] [--dry_run] [-- RUN_SQUAD_FLAGS ...]
#
# NVIDIA's order and defaults: <run_squad.sh's output_dir> 8 fp16 true 384 128 large 1.1.
# init_checkpoint is the fine-tuned output directory (or a checkpoint prefix in it); its
# bert_config.json and vocab.txt are used, else BERT_DIR's. One process. Paths as run_squad.sh.
# Output: $RESULTS_DIR/inference_squad_v<squad_version>_<init_checkpoint's directory name>.
# --help lists every argument. The engine: launch/squad.py.
set -euo pipefail
# shellcheck source=scripts/launch.sh
source "$(dirname "${BASH_SOURCE[0]}")/launch.sh"
launch run_squad_inference "$@"
