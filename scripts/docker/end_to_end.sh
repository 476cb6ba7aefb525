#!/usr/bin/env bash
# The user's path at the smallest scale, run inside the image by scripts/docker/test.sh (through
# scripts/docker/launch.sh, so with its mounts: the code at /workspace/bert, data at /data,
# results at /results): a corpus -> shards, a WordPiece vocab and both phases' TFRecords
# (data_download.sh) -> two-phase LAMB pretraining on 2 Horovod workers (run_pretraining_lamb.sh)
# -> SQuAD-format fine-tuning and the official metric (run_squad.sh). Each step is the launcher a
# user types; the sizes are tiny, so it checks that the path works in the image, not quality.
#
#   bash scripts/docker/end_to_end.sh [DATA_DIR [RESULTS_DIR]]   (default /data /results/end_to_end)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
data="${1:-${BERT_DATA_DIR:-/data}}"
results="${2:-/results/end_to_end}"
say() { echo "== end_to_end: $* =="; }

say "corpus: the image's Python documentation (0.3 MB)"
python prepare_data.py --action download --dataset python_docs --corpus_mb 0.3 --data_dir "${data}"
corpus="$(python -m data.paths python_docs --data_dir "${data}")"

say "shards, a 1,000-token WordPiece vocab, phase 1 and phase 2 TFRecords"
layout=(--dataset python_docs --n_training_shards 2 --fraction_test_set 0.05 --dupe_factor 1)
bash scripts/data_download.sh --data_dir "${data}" --corpus "${corpus}" --train_vocab 1000 \
  --n_test_shards 1 "${layout[@]}"
PHASE1_DATA="$(python -m data.paths phase1 --data_dir "${data}" "${layout[@]}")"
PHASE2_DATA="$(python -m data.paths phase2 --data_dir "${data}" "${layout[@]}")"
VOCAB_FILE="${data}/vocab/python_docs/vocab.txt"
BERT_CONFIG="${results}/bert_config.json"
mkdir -p "${results}"
# bert_tiny with the trained vocab's size, as the quickstart writes it (its `config` step).
python -m tools.quickstart config configs/bert_tiny.json "${VOCAB_FILE}" "${BERT_CONFIG}"
export PHASE1_DATA PHASE2_DATA VOCAB_FILE BERT_CONFIG RESULTS_DIR="${results}"

say "pretraining, phase 1 then phase 2, 2 workers (horovodrun)"
bash scripts/run_pretraining_lamb.sh --preset cpu_tiny --num_gpus 2 --train_steps 20 \
  --warmup_steps_phase1 2 --warmup_steps_phase2 1 --save_checkpoint_steps 10 \
  -- --log_every_n_steps=5 --max_eval_steps=5

say "fine-tuning on questions about the Python standard library (SQuAD v1.1 format)"
python prepare_data.py --action download --dataset python_qa --data_dir "${data}"
qa="$(python -m data.paths python_qa --data_dir "${data}")"
env -u BERT_CONFIG -u VOCAB_FILE bash scripts/run_squad.sh --preset cpu_tiny \
  --init_checkpoint="${results}/phase_2" --output_dir="${results}/squad" --epochs=0.25 \
  --train_file="${qa}/train.json" --predict_file="${qa}/dev.json" -- --max_query_length=48
[[ -f "${results}/squad/eval_results.json" ]] || { echo "end_to_end: no SQuAD results" >&2; exit 1; }
say "done"
