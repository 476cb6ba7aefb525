#!/usr/bin/env bash
# Predicts SQuAD's dev set with a fine-tuned model and scores it with the official metric when the
# file holds answers (run_squad.py --do_predict --do_eval from init_checkpoint, no training); prints
# EM and F1. --export_dir DIR also writes the model as a SavedModel for serving.
#
#   bash scripts/run_squad_inference.sh [init_checkpoint [batch_size [precision [use_xla
#       [seq_length [doc_stride [bert_model [squad_version]]]]]]]]
#       [--NAME=VALUE ...] [--export_dir DIR] [--dry_run] [-- RUN_SQUAD_FLAGS ...]
#
# NVIDIA's order and defaults: <run_squad.sh's output_dir> 8 fp16 true 384 128 large 1.1.
# init_checkpoint is the fine-tuned output directory (or a checkpoint prefix in it); its
# bert_config.json and vocab.txt are used, else BERT_DIR's. One process.
# Paths: BERT_DATA_DIR, SQUAD_DIR, BERT_DIR, BERT_CONFIG, VOCAB_FILE, RESULTS_DIR (as run_squad.sh).
# Output: $RESULTS_DIR/inference_squad_v<squad_version>_<init_checkpoint's directory name>.
set -euo pipefail
# shellcheck source=scripts/finetuning_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/finetuning_common.sh"

FT_ENTRY="run_squad.py"
FT_ABOUT=(
  "Predicts and scores SQuAD's dev set with a fine-tuned model (no training), in one process."
  "squad_version 2.0 reads dev-v2.0.json and adds --version_2_with_negative."
)
ft_setting init_checkpoint "" checkpoint "fine-tuned model (default <results_dir>/squad_v<ver>_<model>)"
ft_setting batch_size 8 count "examples per prediction batch (--predict_batch_size)"
ft_setting precision fp16 precision "fp16 | fp32 | tf32 | bf16"
ft_setting use_xla true bool "true | false"
ft_setting seq_length 384 count "tokens per window (--max_seq_length), as in training"
ft_setting doc_stride 128 count "tokens between the starts of a context's windows"
ft_setting bert_model large model "picks BERT_DIR (config and vocab when none is beside the model)"
ft_setting squad_version 1.1 squad_version "1.1 | 2.0"
ft_path data_dir BERT_DATA_DIR "data root of scripts/data_download.sh (default <repo>/data_dir)"
ft_path squad_dir SQUAD_DIR "holds v1.1/ and v2.0/ (default <data_dir>/download/squad)"
ft_path predict_file "" "default <squad_dir>/v<squad_version>/dev-v<squad_version>.json"
ft_path bert_dir BERT_DIR "Google's base/large under data_dir, else <results_dir>/phase_2"
ft_path bert_config BERT_CONFIG "default: beside init_checkpoint, else BERT_DIR's"
ft_path vocab_file VOCAB_FILE "default: beside init_checkpoint, else BERT_DIR's"
ft_path results_dir RESULTS_DIR "default <repo>/results"
ft_path output_dir "" "default <results_dir>/inference_squad_v<squad_version>_<model directory>"
ft_path export_dir "" "also write a SavedModel here (a new directory)"

ft_parse "$@"
if ft_compare "${VALUE[doc_stride]}" '>=' "${VALUE[seq_length]}"; then
  ft_usage_error "doc_stride=${VALUE[doc_stride]} (${SOURCE[doc_stride]}) must be smaller than" \
                 "seq_length=${VALUE[seq_length]} (${SOURCE[seq_length]})."
fi
ft_probe 1

version="${VALUE[squad_version]}"
ft_resolve_path results_dir "$ROOT/results" "<repo>/results"
ft_resolve_path squad_dir "$FT_DATA_ROOT/download/squad" "under data_dir"
ft_resolve_path predict_file "${VALUE[squad_dir]}/v$version/dev-v$version.json" "squad_dir, squad_version"
ft_bert_dir "${VALUE[results_dir]}"
ft_default init_checkpoint "${VALUE[results_dir]}/squad_v${version}_${VALUE[bert_model]}" \
  "run_squad.sh's output_dir"
VALUE[init_checkpoint]="$(ft_absolute "${VALUE[init_checkpoint]}")"
ft_model_files
model_dir="${VALUE[init_checkpoint]}"
[[ -d "$model_dir" ]] || model_dir="$(dirname "$model_dir")"
ft_resolve_path output_dir "${VALUE[results_dir]}/inference_squad_v${version}_$(basename "$model_dir")" \
  "results_dir, squad_version, init_checkpoint"
ft_resolve_path export_dir "" "none"

v2=false
[[ "$version" != 2.0 ]] || v2=true
ft_flag init_checkpoint "${VALUE[init_checkpoint]}" init_checkpoint
ft_flag bert_config_file "${VALUE[bert_config]}" bert_config
ft_flag vocab_file "${VALUE[vocab_file]}" vocab_file
ft_flag predict_file "${VALUE[predict_file]}" predict_file
ft_flag output_dir "${VALUE[output_dir]}" output_dir
ft_flag version_2_with_negative "$v2" squad_version
ft_flag predict_batch_size "${VALUE[batch_size]}" batch_size
ft_flag max_seq_length "${VALUE[seq_length]}" seq_length
ft_flag doc_stride "${VALUE[doc_stride]}" doc_stride
ft_flag precision "${VALUE[precision]}" precision
ft_flag use_xla "${VALUE[use_xla]}" use_xla
ft_flag use_horovod false
ft_flag do_train false
ft_flag do_predict true
ft_flag do_eval true
[[ -z "${VALUE[export_dir]}" ]] || ft_flag export_dir "${VALUE[export_dir]}" export_dir

ft_workers_note "${VALUE[batch_size]}"
check_inputs() {
  ft_require_file "${VALUE[predict_file]}" "The SQuAD file to predict" \
    "run scripts/data_download.sh squad, or set SQUAD_DIR (or --predict_file)"
  ft_require_model_files "give the fine-tuned model: run_squad.sh's output directory"
  ft_require_no_other_checkpoint "$model_dir"
}
ft_launch
