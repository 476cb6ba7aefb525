#!/usr/bin/env bash
# Predicts a GLUE task with a fine-tuned model (run_classifier.py from init_checkpoint, no
# training): scores the dev set(s) with the official metrics when their files are there, and writes
# the submission file when the test file is there; prints the metrics. --export_dir DIR also writes
# the model as a SavedModel for serving.
#
#   bash scripts/run_glue_inference.sh [task_name [init_checkpoint [batch_size [precision [use_xla
#       [seq_length [doc_stride [bert_model]]]]]]]]
#       [--NAME=VALUE ...] [--export_dir DIR] [--dry_run] [-- RUN_CLASSIFIER_FLAGS ...]
#
# NVIDIA's order and defaults: MRPC <run_glue.sh's output_dir> 32 fp16 true 128 64 large.
# init_checkpoint is the fine-tuned output directory (or a checkpoint prefix in it); its
# bert_config.json and vocab.txt are used, else BERT_DIR's. doc_stride is accepted and unused.
# AX (GLUE's diagnostic set) takes a fine-tuned MNLI model. One process.
# Paths: BERT_DATA_DIR, GLUE_DIR, BERT_DIR, BERT_CONFIG, VOCAB_FILE, RESULTS_DIR (as run_glue.sh).
# Output: $RESULTS_DIR/inference_glue_<task_name>_<init_checkpoint's directory name>.
set -euo pipefail
# shellcheck source=scripts/finetuning_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/finetuning_common.sh"

FT_ENTRY="run_classifier.py"
FT_ABOUT=(
  "Predicts a GLUE task with a fine-tuned model (no training), in one process: the dev metrics"
  "when the dev file is there, the submission file when the test file is there."
)
ft_setting task_name MRPC task "CoLA SST-2 MRPC STS-B QQP MNLI QNLI RTE WNLI AX (any case)"
ft_setting init_checkpoint "" checkpoint "fine-tuned model (default <results_dir>/glue_<task>_<model>)"
ft_setting batch_size 32 count "examples per prediction batch (--predict_batch_size)"
ft_setting precision fp16 precision "fp16 | fp32 | tf32 | bf16"
ft_setting use_xla true bool "true | false"
ft_setting seq_length 128 count "tokens per example (--max_seq_length), as in training"
ft_setting doc_stride 64 count "accepted for NVIDIA's order; unused by classification"
ft_setting bert_model large model "picks BERT_DIR (config and vocab when none is beside the model)"
ft_path data_dir BERT_DATA_DIR "data root of scripts/data_download.sh (default <repo>/data_dir)"
ft_path glue_dir GLUE_DIR "holds MRPC/, MNLI/, ... (default <data_dir>/download/glue)"
ft_path bert_dir BERT_DIR "Google's base/large under data_dir, else <results_dir>/phase_2"
ft_path bert_config BERT_CONFIG "default: beside init_checkpoint, else BERT_DIR's"
ft_path vocab_file VOCAB_FILE "default: beside init_checkpoint, else BERT_DIR's"
ft_path results_dir RESULTS_DIR "default <repo>/results"
ft_path output_dir "" "default <results_dir>/inference_glue_<task_name>_<model directory>"
ft_path export_dir "" "also write a SavedModel here (a new directory)"

ft_parse "$@"
ft_probe 1
task="${VALUE[task_name]}"

ft_resolve_path results_dir "$ROOT/results" "<repo>/results"
ft_resolve_path glue_dir "$FT_DATA_ROOT/download/glue" "under data_dir"
ft_bert_dir "${VALUE[results_dir]}"
ft_default init_checkpoint "${VALUE[results_dir]}/glue_${task}_${VALUE[bert_model]}" "run_glue.sh's output_dir"
VALUE[init_checkpoint]="$(ft_absolute "${VALUE[init_checkpoint]}")"
ft_model_files
model_dir="${VALUE[init_checkpoint]}"
[[ -d "$model_dir" ]] || model_dir="$(dirname "$model_dir")"
ft_resolve_path output_dir "${VALUE[results_dir]}/inference_glue_${task}_$(basename "$model_dir")" \
  "results_dir, task_name, init_checkpoint"
ft_resolve_path export_dir "" "none"

task_data="${VALUE[glue_dir]}/$FT_TASK_DIR"
declare -A split_file=()
evaluate=false predict=false first_missing=""
for split in "${FT_SPLITS[@]}"; do
  [[ "$split" != train ]] || continue
  split_file[$split]="$(ft_split_file "$task_data" "$split")"
  if [[ ! -f "${split_file[$split]}" ]]; then
    first_missing="${first_missing:-${split_file[$split]}}"
  elif [[ "$split" == dev* ]]; then
    evaluate=true
  else
    predict=true
  fi
done

ft_flag task_name "$task" task_name
ft_flag data_dir "$task_data" glue_dir
ft_flag init_checkpoint "${VALUE[init_checkpoint]}" init_checkpoint
ft_flag bert_config_file "${VALUE[bert_config]}" bert_config
ft_flag vocab_file "${VALUE[vocab_file]}" vocab_file
ft_flag output_dir "${VALUE[output_dir]}" output_dir
ft_flag predict_batch_size "${VALUE[batch_size]}" batch_size
ft_flag max_seq_length "${VALUE[seq_length]}" seq_length
ft_flag precision "${VALUE[precision]}" precision
ft_flag use_xla "${VALUE[use_xla]}" use_xla
ft_flag use_horovod false
ft_flag do_train false
ft_flag do_eval "$evaluate"
ft_flag do_predict "$predict"
[[ -z "${VALUE[export_dir]}" ]] || ft_flag export_dir "${VALUE[export_dir]}" export_dir

ft_workers_note "${VALUE[batch_size]}"
FT_NOTES+=("task $task in $task_data (a missing file is skipped):")
for split in "${FT_SPLITS[@]}"; do
  [[ "$split" != train ]] || continue
  state="missing"
  [[ ! -f "${split_file[$split]}" ]] || state="$([[ "$split" == dev* ]] && echo scored || echo submission)"
  FT_NOTES+=("  $(printf '%-18s' "$split") = ${split_file[$split]} ($state)")
done
FT_NOTES+=("note: doc_stride=${VALUE[doc_stride]} is accepted for NVIDIA's argument order and unused.")

check_inputs() {
  if [[ "$evaluate" == false && "$predict" == false ]]; then
    ft_error "The GLUE $task file $first_missing does not exist (nor any other to predict); run" \
             "scripts/data_download.sh glue, or set GLUE_DIR (the directory holding $FT_TASK_DIR/)."
  fi
  ft_require_model_files "give the fine-tuned model: run_glue.sh's output directory"
  ft_require_no_other_checkpoint "$model_dir"
}
ft_launch
