#!/usr/bin/env bash
# Fine-tunes BERT on SQuAD v1.1 or v2.0, then predicts the dev set and scores it with the official
# metric (run_squad.py --do_train --do_predict --do_eval); prints EM and F1 at the end.
#
#   bash scripts/run_squad.sh [batch_size [learning_rate [precision [use_xla [num_gpu [seq_length
#       [doc_stride [bert_model [squad_version [init_checkpoint [epochs]]]]]]]]]]]
#       [--NAME=VALUE ...] [--dry_run] [-- RUN_SQUAD_FLAGS ...]
#
# NVIDIA's order and defaults: 24 5e-6 fp16 true 8 384 128 large 1.1 <BERT_DIR> 2.0.
# learning_rate and batch_size are per GPU (run_squad.py multiplies the rate by the workers).
# Paths: BERT_DATA_DIR, SQUAD_DIR (holding v1.1/ and v2.0/), BERT_DIR, BERT_CONFIG, VOCAB_FILE,
# RESULTS_DIR; defaults where scripts/data_download.sh writes. --help lists every argument.
# Output: $RESULTS_DIR/squad_v<squad_version>_<bert_model>; re-running continues from its checkpoint.
set -euo pipefail
# shellcheck source=scripts/finetuning_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/finetuning_common.sh"

FT_ENTRY="run_squad.py"
FT_ABOUT=(
  "Fine-tunes on SQuAD's training set, then predicts and scores the dev set (EM, F1)."
  "squad_version 2.0 reads train-v2.0.json / dev-v2.0.json and adds --version_2_with_negative."
)
ft_setting batch_size 24 count "training examples per GPU per step (--train_batch_size)"
ft_setting learning_rate 5e-6 rate "peak learning rate per GPU (x num_gpu)"
ft_setting precision fp16 precision "fp16 | fp32 | tf32 | bf16"
ft_setting use_xla true bool "true | false"
ft_setting num_gpu 8 count "workers, one process per GPU"
ft_setting seq_length 384 count "tokens per window (--max_seq_length)"
ft_setting doc_stride 128 count "tokens between the starts of a context's windows"
ft_setting bert_model large model "picks BERT_DIR: Google's base/large, else <results_dir>/phase_2"
ft_setting squad_version 1.1 squad_version "1.1 | 2.0"
ft_setting init_checkpoint "" checkpoint "starting weights (default: BERT_DIR)"
ft_setting epochs 2.0 epochs "passes over the training set"
ft_path data_dir BERT_DATA_DIR "data root of scripts/data_download.sh (default <repo>/data_dir)"
ft_path squad_dir SQUAD_DIR "holds v1.1/ and v2.0/ (default <data_dir>/download/squad)"
ft_path train_file "" "default <squad_dir>/v<squad_version>/train-v<squad_version>.json"
ft_path predict_file "" "default <squad_dir>/v<squad_version>/dev-v<squad_version>.json"
ft_path bert_dir BERT_DIR "the bert_model's checkpoint, bert_config.json and vocab.txt"
ft_path bert_config BERT_CONFIG "default: beside init_checkpoint, else BERT_DIR's"
ft_path vocab_file VOCAB_FILE "default: beside init_checkpoint, else BERT_DIR's"
ft_path results_dir RESULTS_DIR "default <repo>/results"
ft_path output_dir "" "default <results_dir>/squad_v<squad_version>_<bert_model>"

ft_parse "$@"
if ft_compare "${VALUE[doc_stride]}" '>=' "${VALUE[seq_length]}"; then
  ft_usage_error "doc_stride=${VALUE[doc_stride]} (${SOURCE[doc_stride]}) must be smaller than" \
                 "seq_length=${VALUE[seq_length]} (${SOURCE[seq_length]})."
fi
ft_probe "${VALUE[num_gpu]}"

version="${VALUE[squad_version]}"
ft_resolve_path results_dir "$ROOT/results" "<repo>/results"
ft_resolve_path squad_dir "$FT_DATA_ROOT/download/squad" "under data_dir"
ft_resolve_path train_file "${VALUE[squad_dir]}/v$version/train-v$version.json" "squad_dir, squad_version"
ft_resolve_path predict_file "${VALUE[squad_dir]}/v$version/dev-v$version.json" "squad_dir, squad_version"
ft_bert_dir "${VALUE[results_dir]}"
ft_default init_checkpoint "${VALUE[bert_dir]}" "BERT_DIR"
VALUE[init_checkpoint]="$(ft_absolute "${VALUE[init_checkpoint]}")"
ft_model_files
ft_resolve_path output_dir "${VALUE[results_dir]}/squad_v${version}_${VALUE[bert_model]}" \
  "results_dir, squad_version, bert_model"

ft_flag bert_config_file "${VALUE[bert_config]}" bert_config
ft_flag vocab_file "${VALUE[vocab_file]}" vocab_file
ft_flag init_checkpoint "${VALUE[init_checkpoint]}" init_checkpoint
ft_flag train_file "${VALUE[train_file]}" train_file
ft_flag predict_file "${VALUE[predict_file]}" predict_file
ft_flag output_dir "${VALUE[output_dir]}" output_dir
v2=false
[[ "$version" != 2.0 ]] || v2=true
ft_flag version_2_with_negative "$v2" squad_version
ft_flag train_batch_size "${VALUE[batch_size]}" batch_size
ft_flag learning_rate "${VALUE[learning_rate]}" learning_rate
ft_flag num_train_epochs "${VALUE[epochs]}" epochs
ft_flag max_seq_length "${VALUE[seq_length]}" seq_length
ft_flag doc_stride "${VALUE[doc_stride]}" doc_stride
ft_flag precision "${VALUE[precision]}" precision
ft_flag use_xla "${VALUE[use_xla]}" use_xla
ft_flag use_horovod "$(ft_horovod)" num_gpu
ft_flag do_train true
ft_flag do_predict true
ft_flag do_eval true

ft_workers_note "${VALUE[batch_size]}"
if [[ -f "${VALUE[output_dir]}/checkpoint" ]]; then
  FT_NOTES+=("note: output_dir holds a checkpoint: $FT_ENTRY continues from it (a finished run only" \
             "      predicts again); give --output_dir=NEW for a fresh run.")
fi
check_inputs() {
  ft_require_file "${VALUE[train_file]}" "The SQuAD training file" \
    "run scripts/data_download.sh squad, or set SQUAD_DIR (or --train_file)"
  ft_require_file "${VALUE[predict_file]}" "The SQuAD dev file" \
    "run scripts/data_download.sh squad, or set SQUAD_DIR (or --predict_file)"
  ft_require_model_files "$(ft_bert_dir_hint)"
}
ft_launch
