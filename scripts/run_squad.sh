#!/usr/bin/env bash
# Fine-tunes BERT on SQuAD v1.1 or v2.0, then predicts the dev set and scores it with the official
# metric (run_squad.py --do_train --do_predict --do_eval); prints EM and F1 at the end.
#
#   bash scripts/run_squad.sh [batch_size [learning_rate [precision [use_xla [num_gpu [seq_length
#       [doc_stride [bert_model [squad_version [init_checkpoint [epochs]]]]]]]]]]]
#       [--NAME=VALUE ...] [--preset NAME|FILE] [--dry_run] [-- RUN_SQUAD_FLAGS ...]
#
# NVIDIA's order and defaults: 24 5e-6 fp16 true 8 384 128 large 1.1 <BERT_DIR> 2.0.
# learning_rate and batch_size are per GPU (run_squad.py multiplies the rate by the workers).
# Presets: configs/presets/run_squad/. Paths: BERT_DATA_DIR, SQUAD_DIR (holding v1.1/ and v2.0/),
# BERT_DIR, BERT_CONFIG, VOCAB_FILE, RESULTS_DIR; defaults where scripts/data_download.sh writes.
# Output: $RESULTS_DIR/squad_v<squad_version>_<bert_model>; re-running continues from its checkpoint.
# --help lists every argument. The engine: launch/squad.py.
set -euo pipefail
# shellcheck source=scripts/launch.sh
source "$(dirname "${BASH_SOURCE[0]}")/launch.sh"
launch run_squad "$@"
