#!/usr/bin/env bash
# BERT pretraining with LAMB in two phases, NVIDIA's launcher contract: phase 1 (seq 128, 20
# predictions) runs 90% of train_steps, then phase 2 (seq 512, 80 predictions) runs the rest,
# rescaled by the ratio of the global batch sizes, starting from phase 1's final checkpoint.
#
#   bash scripts/run_pretraining_lamb.sh [train_batch_size_phase1 [train_batch_size_phase2
#       [eval_batch_size [learning_rate_phase1 [learning_rate_phase2 [precision [use_xla
#       [num_gpus [warmup_steps_phase1 [warmup_steps_phase2 [train_steps [save_checkpoint_steps
#       [num_accumulation_steps_phase1 [num_accumulation_steps_phase2 [bert_model]]]]]]]]]]]]]]]
#       [--NAME=VALUE ...] [--preset NAME|FILE] [--dry_run] [-- RUN_PRETRAINING_FLAGS ...]
#
# NVIDIA's defaults: 64 8 8 7.5e-4 5e-4 fp16 true 8 2000 200 7820 100 128 512 large.
# Precedence: defaults < preset (configs/presets/run_pretraining_lamb/) < positional < named.
# Paths: BERT_DATA_DIR, RESULTS_DIR, BERT_CONFIG, VOCAB_FILE, PHASE1_DATA, PHASE2_DATA,
# INIT_CHECKPOINT (defaults: where scripts/data_download.sh writes; `python -m data.paths`).
# --help lists every argument; --dry_run prints the settings and both commands and runs nothing.
# Re-running the same command resumes: a finished phase is skipped, a phase resumes from its
# latest checkpoint. run_pretraining_lamb_phase1.sh / _phase2.sh run one phase each.
# The engine: launch/pretraining.py.
set -euo pipefail
# shellcheck source=scripts/launch.sh
source "$(dirname "${BASH_SOURCE[0]}")/launch.sh"
launch run_pretraining_lamb "$@"
