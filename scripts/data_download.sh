#!/usr/bin/env bash
# Downloads and prepares BERT data the way NVIDIA's users expect, restartably.
#
#   bash scripts/data_download.sh [wiki_only|squad|glue|all] [--NAME VALUE | --NAME=VALUE ...]
#       [--preset NAME|FILE] [--dry_run] [-- PREPARE_DATA_FLAGS ...]
#
#   wiki_only (default)  Wikipedia -> formatted text -> shards -> TFRecords for phase 1 (seq 128,
#                        20 predictions) and phase 2 (seq 512, 80 predictions), with Google's
#                        uncased vocab (downloaded with the BERT-Base uncased checkpoint)
#   squad                SQuAD v1.1 and v2.0 train/dev JSON
#   glue                 the GLUE tasks (MRPC built from its SentEval sources)
#   all                  all of the above
#
# Named options: --data_dir (BERT_DATA_DIR), --corpus FILE[,FILE] (your own corpus instead of
# Wikipedia), --dataset, --vocab_file or --train_vocab SIZE, --n_training_shards, --n_test_shards,
# --fraction_test_set, --dupe_factor (defaults: NVIDIA's recipe, `python -m data.paths recipe`),
# --phases, --n_processes, --mirror, --wiki_dump, --glue_tasks; --help lists them with their
# defaults; --dry_run prints the settings and the prepare_data.py commands and runs nothing.
# Every step is a restartable prepare_data.py stage: run the same command again after an
# interruption and finished outputs are verified and kept. The TFRecords land where
# scripts/run_pretraining_lamb.sh looks by default (`python -m data.paths`). The engine: launch/data.py.
set -euo pipefail
# shellcheck source=scripts/launch.sh
source "$(dirname "${BASH_SOURCE[0]}")/launch.sh"
launch data_download "$@"
