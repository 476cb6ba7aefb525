#!/usr/bin/env bash
# The quickstart: from a corpus to a pretrained and fine-tuned BERT, offline, on a CPU.
#
#   bash scripts/setup.sh && bash scripts/quickstart.sh [--dir DIR] [--corpus_mb MB] [--train_steps N]
#
# 1. builds a real-text corpus every machine has: the installed Python's documentation and
#    docstrings (prepare_data.py --action download --dataset python_docs);
# 2. formats and shards it, trains a WordPiece vocab, writes phase 1 (128/20) and phase 2 (512/80)
#    TFRecords (scripts/data_download.sh --corpus);
# 3. measures the masked-LM accuracy of the untrained model on the held-out shard;
# 4. pretrains a tiny BERT through both phases with scripts/run_pretraining_lamb.sh
#    --preset quickstart (LAMB; phase 2 starts from phase 1's final checkpoint);
# 5. measures the masked-LM accuracy of the final model on the held-out shards;
# 6. fine-tunes it on a question-answering set built from the installed Python's docstrings
#    (prepare_data.py --dataset python_qa, SQuAD v1.1 format) with run_squad.py and scores the
#    dev questions with the official SQuAD metric.
# It prints masked-LM accuracy before and after pretraining, EM/F1, and the minutes taken.
# Everything lands under DIR (default <repo>/results/quickstart); re-running resumes or skips
# what is done. --train_steps overrides the preset's step count (phase 1 gets 90%).
set -euo pipefail
# shellcheck source=scripts/find_python.sh
source "$(dirname "${BASH_SOURCE[0]}")/find_python.sh"

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }
die() { echo "quickstart.sh: error: $*" >&2; exit 2; }

dir="$ROOT/results/quickstart"; corpus_mb=4; train_steps=""; vocab_size=2048
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dir) [[ $# -ge 2 ]] || die "--dir needs a value."; dir="$2"; shift 2 ;;
    --corpus_mb) [[ $# -ge 2 && "$2" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--corpus_mb needs a number."
      corpus_mb="$2"; shift 2 ;;
    --train_steps) [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]*$ ]] || die "--train_steps needs a positive integer."
      train_steps="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)." ;;
  esac
done
mkdir -p "$dir" || die "cannot create --dir '$dir'."
dir="$(cd "$dir" && pwd)"
data="$dir/data"
cd "$ROOT"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
start=$(date +%s)

echo "== quickstart 1/6: corpus (the installed Python's prose, ${corpus_mb} MB) =="
"$PY" prepare_data.py --action download --dataset python_docs --corpus_mb "$corpus_mb" --data_dir "$data"
corpus="$("$PY" -c 'import sys; from data import paths; print(paths.python_docs_file(sys.argv[1]))' "$data")"

echo "== quickstart 2/6: shards, vocab, phase 1 and phase 2 TFRecords =="
shards=(--n_training_shards 4 --n_test_shards 1 --fraction_test_set 0.05)
bash scripts/data_download.sh --data_dir "$data" --corpus "$corpus" --dataset python_docs \
  --train_vocab "$vocab_size" "${shards[@]}" --dupe_factor 2
phase_dir() {
  "$PY" -m data.paths "$1" --data_dir "$data" --dataset python_docs --n_training_shards 4 \
    --fraction_test_set 0.05 --dupe_factor 2
}
PHASE1_DATA="$(phase_dir phase1)"; PHASE2_DATA="$(phase_dir phase2)"
VOCAB_FILE="$data/vocab/python_docs/vocab.txt"
BERT_CONFIG="$dir/bert_config.json"
"$PY" - "$VOCAB_FILE" "$BERT_CONFIG" <<'PYTHON'
import sys
from common.files import read_json, write_json
config = read_json("configs/bert_tiny.json", "config")
with open(sys.argv[1], encoding="utf-8") as f:
    config["vocab_size"] = sum(1 for _ in f)  # the trained vocab, not the 30522 uncased one
# A few thousand updates on 2 cores: dropout only slows a model this small and this short a run.
config["hidden_dropout_prob"] = config["attention_probs_dropout_prob"] = 0.0
write_json(sys.argv[2], config)
PYTHON
export PHASE1_DATA PHASE2_DATA VOCAB_FILE BERT_CONFIG RESULTS_DIR="$dir"

# Held-out masked-LM accuracy of a model (an --init_checkpoint, or none: the untrained model) on
# one phase's test shard; results in $dir/eval/<name>/eval_results.json.
evaluate() {
  local name="$1" data_dir="$2" seq="$3" preds="$4" init="${5:-}"
  local out="$dir/eval/$name"
  [[ -f "$out/eval_results.json" ]] && return 0
  "$PY" run_pretraining.py --bert_config_file="$BERT_CONFIG" --vocab_file="$VOCAB_FILE" \
    --eval_files="$data_dir/test/*" --output_dir="$out" --max_seq_length="$seq" \
    --max_predictions_per_seq="$preds" --eval_batch_size=32 --max_eval_steps=50 --nodo_train --do_eval \
    ${init:+--init_checkpoint="$init"} | grep -E "^Evaluation|Initialised" || true
  [[ -f "$out/eval_results.json" ]] || die "the evaluation '$name' wrote no results (see above)."
}

echo "== quickstart 3/6: masked-LM accuracy before pretraining =="
evaluate start_128 "$PHASE1_DATA" 128 20
evaluate start_512 "$PHASE2_DATA" 512 80

echo "== quickstart 4/6: pretraining, phase 1 (seq 128) then phase 2 (seq 512) =="
overrides=()
if [[ -n "$train_steps" ]]; then  # a shorter run: warmups shrink with it (a tenth of each phase)
  overrides=(--train_steps="$train_steps" --warmup_steps_phase1="$((train_steps * 9 / 100))"
             --warmup_steps_phase2="$(((train_steps - train_steps * 9 / 10) / 10))")
fi
bash scripts/run_pretraining_lamb.sh --preset quickstart "${overrides[@]}" \
  -- --log_every_n_steps=50 --max_eval_steps=50

echo "== quickstart 5/6: masked-LM accuracy after pretraining =="
rm -rf "$dir/eval/final_128" "$dir/eval/final_512"  # the model may have changed since a previous run
evaluate final_128 "$PHASE1_DATA" 128 20 "$dir/phase_2"
evaluate final_512 "$PHASE2_DATA" 512 80 "$dir/phase_2"

echo "== quickstart 6/6: fine-tuning on questions about the Python standard library (SQuAD format) =="
"$PY" prepare_data.py --action download --dataset python_qa --data_dir "$data"
qa="$("$PY" -c 'import sys; from data import paths; print(paths.python_qa_dir(sys.argv[1]))' "$data")"
"$PY" run_squad.py --init_checkpoint="$dir/phase_2" --train_file="$qa/train.json" \
  --predict_file="$qa/dev.json" --output_dir="$dir/squad" --do_train --do_predict --do_eval \
  --max_seq_length=128 --doc_stride=64 --max_query_length=48 --train_batch_size=32 \
  --learning_rate="${QUICKSTART_QA_LR:-3e-4}" --num_train_epochs="${QUICKSTART_QA_EPOCHS:-3}" \
  --predict_batch_size=64 --log_every_n_steps=50

"$PY" - "$dir" "$(($(date +%s) - start))" <<'PYTHON'
import sys
from common.files import read_json
root, seconds = sys.argv[1], int(sys.argv[2])
acc = {n: read_json(f"{root}/eval/{n}/eval_results.json")["masked_lm_accuracy"]
       for n in ("start_128", "start_512", "final_128", "final_512")}
squad = read_json(f"{root}/squad/eval_results.json")
print("\nQuickstart results (held-out data):")
print(f"  masked-LM accuracy, seq 128: {acc['start_128']:.3f} before pretraining -> {acc['final_128']:.3f} after")
print(f"  masked-LM accuracy, seq 512: {acc['start_512']:.3f} before pretraining -> {acc['final_512']:.3f} after")
print(f"  question answering (official SQuAD v1.1 metric): EM {squad['exact_match']:.1f}, F1 {squad['f1']:.1f}")
print(f"  {seconds // 60} min {seconds % 60} s in all; outputs in {root}")
PYTHON
