#!/usr/bin/env bash
# Fine-tunes BERT on a GLUE task, then scores the dev set with the task's official metrics and, when
# the task's test file is there, writes the submission file (run_classifier.py --do_train --do_eval
# [--do_predict]); prints the metrics at the end.
#
#   bash scripts/run_glue.sh [task_name [batch_size [learning_rate [precision [use_xla [num_gpu
#       [seq_length [doc_stride [bert_model [epochs [warmup_proportion [init_checkpoint]]]]]]]]]]]]
#       [--NAME=VALUE ...] [--dry_run] [-- RUN_CLASSIFIER_FLAGS ...]
#
# NVIDIA's order and defaults: MRPC 16 3e-6 fp16 true 8 128 64 large 3.0 0.1 <BERT_DIR>.
# doc_stride is accepted for NVIDIA's order and unused (GLUE examples are not split into windows).
# learning_rate and batch_size are per GPU (run_classifier.py multiplies the rate by the workers).
# Paths: BERT_DATA_DIR, GLUE_DIR (holding MRPC/, MNLI/, ...), BERT_DIR, BERT_CONFIG, VOCAB_FILE,
# RESULTS_DIR; defaults where scripts/data_download.sh writes. --help lists every argument.
# Output: $RESULTS_DIR/glue_<task_name>_<bert_model>; re-running continues from its checkpoint.
set -euo pipefail
# shellcheck source=scripts/finetuning_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/finetuning_common.sh"

FT_ENTRY="run_classifier.py"
FT_ABOUT=(
  "Fine-tunes on a GLUE task's training set, then scores its dev set(s) with the official metrics"
  "and, when the test file is there, writes the submission file (MRPC.tsv, MNLI-m.tsv, ...)."
)
ft_setting task_name MRPC task "CoLA SST-2 MRPC STS-B QQP MNLI QNLI RTE WNLI (any case)"
ft_setting batch_size 16 count "training examples per GPU per step (--train_batch_size)"
ft_setting learning_rate 3e-6 rate "peak learning rate per GPU (x num_gpu)"
ft_setting precision fp16 precision "fp16 | fp32 | tf32 | bf16"
ft_setting use_xla true bool "true | false"
ft_setting num_gpu 8 count "workers, one process per GPU"
ft_setting seq_length 128 count "tokens per example (--max_seq_length)"
ft_setting doc_stride 64 count "accepted for NVIDIA's order; unused by classification"
ft_setting bert_model large model "picks BERT_DIR: Google's base/large, else <results_dir>/phase_2"
ft_setting epochs 3.0 epochs "passes over the training set"
ft_setting warmup_proportion 0.1 proportion "share of the updates in linear warmup"
ft_setting init_checkpoint "" checkpoint "starting weights (default: BERT_DIR)"
ft_path data_dir BERT_DATA_DIR "data root of scripts/data_download.sh (default <repo>/data_dir)"
ft_path glue_dir GLUE_DIR "holds MRPC/, MNLI/, ... (default <data_dir>/download/glue)"
ft_path bert_dir BERT_DIR "the bert_model's checkpoint, bert_config.json and vocab.txt"
ft_path bert_config BERT_CONFIG "default: beside init_checkpoint, else BERT_DIR's"
ft_path vocab_file VOCAB_FILE "default: beside init_checkpoint, else BERT_DIR's"
ft_path results_dir RESULTS_DIR "default <repo>/results"
ft_path output_dir "" "default <results_dir>/glue_<task_name>_<bert_model>"

ft_parse "$@"
ft_probe "${VALUE[num_gpu]}"
task="${VALUE[task_name]}"
if [[ -z "${FT_SPLIT_FILES[train]+set}" ]]; then
  ft_usage_error "task_name $task has no training data (GLUE's diagnostic set is scored with an MNLI" \
                 "model: bash scripts/run_glue_inference.sh $task <fine-tuned MNLI directory>)."
fi

ft_resolve_path results_dir "$ROOT/results" "<repo>/results"
ft_resolve_path glue_dir "$FT_DATA_ROOT/download/glue" "under data_dir"
ft_bert_dir "${VALUE[results_dir]}"
ft_default init_checkpoint "${VALUE[bert_dir]}" "BERT_DIR"
VALUE[init_checkpoint]="$(ft_absolute "${VALUE[init_checkpoint]}")"
ft_model_files
ft_resolve_path output_dir "${VALUE[results_dir]}/glue_${task}_${VALUE[bert_model]}" \
  "results_dir, task_name, bert_model"

task_data="${VALUE[glue_dir]}/$FT_TASK_DIR"
declare -A split_file=()
dev_splits=() test_splits=() predict=true
for split in "${FT_SPLITS[@]}"; do
  split_file[$split]="$(ft_split_file "$task_data" "$split")"
  case "$split" in
    dev*) dev_splits+=("$split") ;;
    test*) test_splits+=("$split"); [[ -f "${split_file[$split]}" ]] || predict=false ;;
  esac
done

ft_flag task_name "$task" task_name
ft_flag data_dir "$task_data" glue_dir
ft_flag bert_config_file "${VALUE[bert_config]}" bert_config
ft_flag vocab_file "${VALUE[vocab_file]}" vocab_file
ft_flag init_checkpoint "${VALUE[init_checkpoint]}" init_checkpoint
ft_flag output_dir "${VALUE[output_dir]}" output_dir
ft_flag train_batch_size "${VALUE[batch_size]}" batch_size
ft_flag learning_rate "${VALUE[learning_rate]}" learning_rate
ft_flag num_train_epochs "${VALUE[epochs]}" epochs
ft_flag warmup_proportion "${VALUE[warmup_proportion]}" warmup_proportion
ft_flag max_seq_length "${VALUE[seq_length]}" seq_length
ft_flag precision "${VALUE[precision]}" precision
ft_flag use_xla "${VALUE[use_xla]}" use_xla
ft_flag use_horovod "$(ft_horovod)" num_gpu
ft_flag do_train true
ft_flag do_eval true
ft_flag do_predict "$predict"

ft_workers_note "${VALUE[batch_size]}"
FT_NOTES+=("task $task in $task_data:")
for split in "${FT_SPLITS[@]}"; do
  FT_NOTES+=("  $(printf '%-18s' "$split") = ${split_file[$split]}")
done
if [[ "$predict" == false ]]; then
  FT_NOTES+=("  (no test file: no --do_predict, no submission file)")
fi
FT_NOTES+=("note: doc_stride=${VALUE[doc_stride]} is accepted for NVIDIA's argument order and unused:" \
           "      GLUE examples are not split into windows.")
if [[ -f "${VALUE[output_dir]}/checkpoint" ]]; then
  FT_NOTES+=("note: output_dir holds a checkpoint: $FT_ENTRY continues from it (a finished run only" \
             "      predicts again); give --output_dir=NEW for a fresh run.")
fi

check_inputs() {
  local split
  for split in train "${dev_splits[@]}"; do
    ft_require_file "${split_file[$split]}" "The GLUE $task $split file" \
      "run scripts/data_download.sh glue, or set GLUE_DIR (the directory holding $FT_TASK_DIR/)"
  done
  ft_require_model_files "$(ft_bert_dir_hint)"
}
ft_launch
