#!/usr/bin/env bash
# Searches fine-tuning hyperparameters with Optuna (run_tune.py): each trial is a run_classifier.py
# or run_squad.py fine-tuning, pruned when its dev metric lags; ends with the trials table, the
# best trial's parameters and checkpoint, and plots.
#
#   bash scripts/run_tune.sh [task_name [n_trials [num_gpu [bert_model [precision [use_xla
#       [seq_length [init_checkpoint]]]]]]]] [--NAME=VALUE ...] [--dry_run] [-- RUN_TUNE_FLAGS ...]
#
# Defaults: MRPC 20 1 large fp16 true <128; SQuAD 384> <BERT_DIR>. task_name is SQuAD (v1.1),
# SQuAD2 (v2.0) or a GLUE task. num_gpu is per trial: each trial starts through horovodrun
# (LAUNCHER_ARGS reaches it). The space, sampler, pruner and a shared study are run_tune.py flags
# after `--`: --learning_rate_range=1e-5,1e-4 --train_batch_size_choices=16,32 --n_trials ...
# --storage=postgresql://USER:PASSWORD@HOST/DB --study_name=NAME (every worker of a shared study
# runs the same command). Paths: BERT_DATA_DIR, GLUE_DIR, SQUAD_DIR, BERT_DIR, BERT_CONFIG,
# VOCAB_FILE, RESULTS_DIR; defaults where scripts/data_download.sh writes.
# Output: $RESULTS_DIR/tune_<task_name>_<bert_model> (trial_<n>/, study.db, trials.tsv,
# best_trial.json, plots); re-running continues the study.
set -euo pipefail
# shellcheck source=scripts/finetuning_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/finetuning_common.sh"

FT_ENTRY="run_tune.py"
FT_ABOUT=(
  "Searches the learning rate, batch size and epochs of a fine-tuning (Optuna; trials pruned when"
  "their dev metric lags), then prints the trials, the best parameters and its checkpoint."
)
ft_setting task_name MRPC tune_task "SQuAD, SQuAD2 or a GLUE task (any case)"
ft_setting n_trials 20 count "trials to finish (complete or pruned), every worker's counted"
ft_setting num_gpu 1 count "GPUs per trial (horovodrun -np num_gpu)"
ft_setting bert_model large model "picks BERT_DIR: Google's base/large, else <results_dir>/phase_2"
ft_setting precision fp16 precision "fp16 | fp32 | tf32 | bf16"
ft_setting use_xla true bool "true | false"
ft_setting seq_length "" count "tokens per example (default 128; SQuAD 384)"
ft_setting init_checkpoint "" checkpoint "starting weights (default: BERT_DIR)"
ft_path data_dir BERT_DATA_DIR "data root of scripts/data_download.sh (default <repo>/data_dir)"
ft_path glue_dir GLUE_DIR "holds MRPC/, MNLI/, ... (default <data_dir>/download/glue)"
ft_path squad_dir SQUAD_DIR "holds v1.1/ and v2.0/ (default <data_dir>/download/squad)"
ft_path bert_dir BERT_DIR "the bert_model's checkpoint, bert_config.json and vocab.txt"
ft_path bert_config BERT_CONFIG "default: beside init_checkpoint, else BERT_DIR's"
ft_path vocab_file VOCAB_FILE "default: beside init_checkpoint, else BERT_DIR's"
ft_path results_dir RESULTS_DIR "default <repo>/results"
ft_path output_dir "" "default <results_dir>/tune_<task_name>_<bert_model>"

ft_parse "$@"
squad_version=""
case "${VALUE[task_name],,}" in
  squad|squad1|squad1.1) squad_version=1.1 VALUE[task_name]=SQuAD ;;
  squad2|squad2.0) squad_version=2.0 VALUE[task_name]=SQuAD2 ;;
esac
task="${VALUE[task_name]}"
if [[ -n "$squad_version" ]]; then
  VALUE[task_name]=""  # ft_probe checks GLUE names only
  ft_probe 1
  VALUE[task_name]="$task"
  ft_default seq_length 384 "SQuAD's"
else
  ft_probe 1  # the tuner is one process; each trial launches its own workers
  task="${VALUE[task_name]}"
  ft_default seq_length 128 "GLUE's"
fi

ft_resolve_path results_dir "$ROOT/results" "<repo>/results"
ft_bert_dir "${VALUE[results_dir]}"
ft_default init_checkpoint "${VALUE[bert_dir]}" "BERT_DIR"
VALUE[init_checkpoint]="$(ft_absolute "${VALUE[init_checkpoint]}")"
ft_model_files
ft_resolve_path output_dir "${VALUE[results_dir]}/tune_${task}_${VALUE[bert_model]}" \
  "results_dir, task_name, bert_model"

declare -a inputs=()
if [[ -n "$squad_version" ]]; then
  ft_resolve_path squad_dir "$FT_DATA_ROOT/download/squad" "under data_dir"
  inputs=("${VALUE[squad_dir]}/v$squad_version/train-v$squad_version.json"
          "${VALUE[squad_dir]}/v$squad_version/dev-v$squad_version.json")
  ft_flag task_name squad task_name
  ft_flag train_file "${inputs[0]}" squad_dir
  ft_flag predict_file "${inputs[1]}" squad_dir
  [[ "$squad_version" == 1.1 ]] || ft_flag version_2_with_negative true task_name
else
  ft_resolve_path glue_dir "$FT_DATA_ROOT/download/glue" "under data_dir"
  task_data="${VALUE[glue_dir]}/$FT_TASK_DIR"
  for split in "${FT_SPLITS[@]}"; do
    case "$split" in train|dev*) inputs+=("$(ft_split_file "$task_data" "$split")") ;; esac
  done
  ft_flag task_name "$task" task_name
  ft_flag data_dir "$task_data" glue_dir
fi
ft_flag bert_config_file "${VALUE[bert_config]}" bert_config
ft_flag vocab_file "${VALUE[vocab_file]}" vocab_file
ft_flag init_checkpoint "${VALUE[init_checkpoint]}" init_checkpoint
ft_flag output_dir "${VALUE[output_dir]}" output_dir
ft_flag n_trials "${VALUE[n_trials]}" n_trials
ft_flag num_gpus "${VALUE[num_gpu]}" num_gpu
ft_flag precision "${VALUE[precision]}" precision
ft_flag use_xla "${VALUE[use_xla]}" use_xla
ft_flag max_seq_length "${VALUE[seq_length]}" seq_length
[[ -z "${LAUNCHER_ARGS:-}" ]] || ft_flag launcher_args "$LAUNCHER_ARGS" num_gpu

FT_NOTES+=("each trial: $([[ -n "$squad_version" ]] && echo run_squad.py || echo run_classifier.py) on" \
           "  $(printf '%s ' "${inputs[@]}")")
if [[ -f "${VALUE[output_dir]}/study.db" ]]; then
  FT_NOTES+=("note: output_dir holds a study (study.db): this run continues it.")
fi

check_inputs() {
  local file
  for file in "${inputs[@]}"; do
    ft_require_file "$file" "The $task file" \
      "run scripts/data_download.sh, or set $([[ -n "$squad_version" ]] && echo SQUAD_DIR || echo GLUE_DIR)"
  done
  ft_require_model_files "$(ft_bert_dir_hint)"
}

ft_report() {  # ft_launch's ending: the tuner printed the table and the best trial itself
  echo "== $FT_SCRIPT: study in ${VALUE[output_dir]} (trials.tsv, best_trial.json, plots) =="
}
ft_launch
