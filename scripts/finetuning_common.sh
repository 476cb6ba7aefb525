# shellcheck shell=bash
# Sourced by the fine-tuning launchers (run_squad.sh, run_glue.sh, run_squad_inference.sh,
# run_glue_inference.sh) and the tuning launcher (run_tune.sh), so all take their arguments the
# same way:
#
#   - NVIDIA's positional arguments, declared as a table (ft_setting), each optional;
#   - named overrides, --NAME=VALUE or --NAME VALUE, which beat the positional ones;
#   - paths: named option > environment variable > where scripts/data_download.sh writes (ft_path);
#   - validation of count, type and range before anything runs: the error, then the usage, on
#     stderr, exit status 2;
#   - --dry_run prints the resolved settings (each with where it came from) and the command;
#   - flags after `--` go to the Python entry point, except the ones the launcher sets itself;
#   - workers start exactly as the pretraining launcher starts them: training/launch_settings'
#     choose_launcher / launch_prefix (horovodrun -np N, mpirun inside a SLURM allocation or as
#     HOROVOD_LAUNCHER says, LAUNCHER_ARGS added; one process when num_gpu is 1).
#
# A launcher declares its table, calls ft_parse "$@" and ft_probe, resolves its paths
# (ft_resolve_path), builds its command (ft_flag), then calls ft_launch with its input checks
# (check_inputs) and, optionally, its own ending (ft_report) instead of printing eval_results.json.

# shellcheck source=scripts/find_python.sh
source "$(dirname "${BASH_SOURCE[0]}")/find_python.sh"

FT_SCRIPT="$(basename "$0")"
FT_ENTRY=""        # run_squad.py | run_classifier.py
FT_ABOUT=()        # lines of the --help text under the usage
FT_SETTINGS=()     # positional settings, NVIDIA's order
FT_PATHS=()        # named path options
declare -A FT_DEFAULT=() FT_KIND=() FT_HELP=() FT_ENV=() FT_PATH_HELP=()
declare -A FT_NAMED=()               # --NAME VALUE as typed
FT_POSITIONAL=() FT_EXTRA=() FT_DRY_RUN=0
declare -A VALUE=() SOURCE=()        # the resolved settings and paths, and where each came from
FT_ARGS=()                           # the entry point's flags
declare -A FT_FLAG_FROM=()           # flag -> the setting or path option behind it
FT_NOTES=()                          # lines printed with the settings
FT_MODELS=()
for _config in "$ROOT"/configs/bert_*.json; do
  _config="$(basename "$_config" .json)"
  FT_MODELS+=("${_config#bert_}")
done
unset _config

# ft_setting NAME DEFAULT KIND HELP: the next positional argument. KIND: count (integer >= 1),
# rate (number in (0, 1]), epochs (number > 0), proportion (number in [0, 1]), precision, bool,
# model (a configs/bert_<name>.json), squad_version, task (a GLUE task), checkpoint (a path).
# An empty DEFAULT is computed by the launcher from the others (ft_default).
ft_setting() {
  FT_SETTINGS+=("$1")
  FT_DEFAULT[$1]="$2" FT_KIND[$1]="$3" FT_HELP[$1]="$4"
}

# ft_path NAME ENV HELP: a named path option (--NAME=PATH) and the environment variable behind it
# ("" for none).
ft_path() {
  FT_PATHS+=("$1")
  FT_ENV[$1]="$2" FT_PATH_HELP[$1]="$3"
}

ft_error() {
  echo "$FT_SCRIPT: error: $*" >&2
  exit 2
}

ft_usage_error() {
  echo "$FT_SCRIPT: error: $*" >&2
  echo "usage: $FT_SCRIPT [up to ${#FT_SETTINGS[@]} positional arguments] [--NAME=VALUE ...] [--dry_run]" \
       "[-- ${FT_ENTRY} FLAGS ...]   (--help lists them)" >&2
  exit 2
}

ft_usage() {
  local i name env
  echo "usage: $FT_SCRIPT [POSITIONAL ...] [--NAME=VALUE | --NAME VALUE ...] [--dry_run]"
  echo "       ${FT_SCRIPT//?/ } [-- ${FT_ENTRY} FLAGS ...]"
  echo
  printf '%s\n' "${FT_ABOUT[@]}"
  echo
  echo "Positional arguments, NVIDIA's order (each optional; --NAME=VALUE overrides any of them):"
  for i in "${!FT_SETTINGS[@]}"; do
    name="${FT_SETTINGS[$i]}"
    printf '  %2d %-18s %-8s %s\n' "$((i + 1))" "$name" "${FT_DEFAULT[$name]:--}" "${FT_HELP[$name]}"
  done
  echo
  echo "Paths (named option, else environment variable, else the default):"
  for name in "${FT_PATHS[@]}"; do
    env="${FT_ENV[$name]}"
    printf '     %-18s %-14s %s\n' "--$name" "$env" "${FT_PATH_HELP[$name]}"
  done
  printf '     %-18s %-14s %s\n' "--dry_run" "" "print the settings and the command, run nothing"
  echo
  echo "Precedence: defaults < positional < named.  bert_model: ${FT_MODELS[*]}"
  if [[ -n "${FT_KIND[num_gpu]:-}" ]]; then
    echo "Workers: num_gpu > 1 starts horovodrun -np N (mpirun inside a SLURM allocation, or as"
    echo "HOROVOD_LAUNCHER says; LAUNCHER_ARGS adds arguments to it); learning_rate is per GPU."
  fi
  echo "Flags after -- go to $FT_ENTRY, except those the launcher sets from its arguments."
}

# ft_parse ARGS...: positional values, named overrides, --dry_run, --help and the flags after --;
# then each setting resolved (default < positional < named) and checked.
ft_parse() {
  local arg name value i help=0
  while [[ $# -gt 0 ]]; do
    arg="$1"
    shift
    case "$arg" in
      --) FT_EXTRA=("$@"); break ;;
      -h|--help) help=1 ;;
      --dry_run|--dry-run) FT_DRY_RUN=1 ;;
      --*)
        name="${arg#--}"
        value=""
        if [[ "$name" == *=* ]]; then
          value="${name#*=}"
          name="${name%%=*}"
          name="${name//-/_}"
          [[ -n "$value" ]] || ft_usage_error "--$name needs a value (--$name=VALUE or --$name VALUE)."
        else
          name="${name//-/_}"
          if [[ $# -eq 0 || "$1" == --* || -z "$1" ]]; then
            ft_usage_error "--$name needs a value (--$name=VALUE or --$name VALUE)."
          fi
          value="$1"
          shift
        fi
        if [[ -z "${FT_KIND[$name]:-}" && -z "${FT_PATH_HELP[$name]:-}" ]]; then
          local known=() n
          for n in "${FT_SETTINGS[@]}" "${FT_PATHS[@]}"; do known+=("--$n"); done
          ft_usage_error "unknown option '--$name'; the named options are --dry_run, ${known[*]}."
        fi
        FT_NAMED[$name]="$value"
        ;;
      *) FT_POSITIONAL+=("$arg") ;;
    esac
  done
  if [[ "$help" -eq 1 ]]; then
    ft_usage
    exit 0
  fi
  if [[ ${#FT_POSITIONAL[@]} -gt ${#FT_SETTINGS[@]} ]]; then
    ft_usage_error "at most ${#FT_SETTINGS[@]} positional arguments are accepted, got" \
                   "${#FT_POSITIONAL[@]}: ${FT_POSITIONAL[*]}."
  fi
  for name in "${FT_SETTINGS[@]}"; do
    VALUE[$name]="${FT_DEFAULT[$name]}" SOURCE[$name]="default"
  done
  for i in "${!FT_POSITIONAL[@]}"; do
    name="${FT_SETTINGS[$i]}"
    VALUE[$name]="${FT_POSITIONAL[$i]}" SOURCE[$name]="argument $((i + 1))"
  done
  for name in "${FT_SETTINGS[@]}"; do
    if [[ -n "${FT_NAMED[$name]:-}" ]]; then
      VALUE[$name]="${FT_NAMED[$name]}" SOURCE[$name]="--$name"
    fi
    ft_check "$name"
  done
}

# ft_compare A OP B: true when the numbers compare so (awk: bash has no floating point).
ft_compare() {
  LC_ALL=C awk -v a="$1" -v b="$3" "BEGIN { exit !(a + 0 $2 b + 0) }"
}

ft_is_number() {
  [[ "$1" =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$ ]]
}

# ft_check NAME: the setting's value against its kind; a bad one is a usage error naming it,
# where it came from and the rule. Computed defaults (empty) and GLUE tasks are checked later.
ft_check() {
  local name="$1" value="${VALUE[$1]}" rule=""
  [[ -n "$value" || "${SOURCE[$1]}" != default ]] || return 0
  case "${FT_KIND[$name]}" in
    count) [[ "$value" =~ ^0*[1-9][0-9]*$ ]] || rule="a positive integer" ;;
    rate)
      if ! { ft_is_number "$value" && ft_compare "$value" '>' 0 && ft_compare "$value" '<=' 1; }; then
        rule="a number in (0, 1] such as ${FT_DEFAULT[$name]}"
      fi ;;
    epochs)
      if ! { ft_is_number "$value" && ft_compare "$value" '>' 0; }; then
        rule="a positive number such as ${FT_DEFAULT[$name]}"
      fi ;;
    proportion)
      if ! { ft_is_number "$value" && ft_compare "$value" '<=' 1; }; then
        rule="a number in [0, 1] such as ${FT_DEFAULT[$name]}"
      fi ;;
    precision) [[ "$value" =~ ^(fp16|fp32|tf32|bf16)$ ]] || rule="one of fp16, fp32, tf32, bf16" ;;
    bool) [[ "$value" =~ ^(true|false)$ ]] || rule="true or false" ;;
    squad_version) [[ "$value" =~ ^(1\.1|2\.0)$ ]] || rule="1.1 or 2.0" ;;
    model)
      [[ " ${FT_MODELS[*]} " == *" $value "* ]] ||
        rule="one of ${FT_MODELS[*]} (the configs/bert_<name>.json files)" ;;
    checkpoint) [[ -n "$value" ]] || rule="a checkpoint path" ;;
    task|tune_task) ;;  # ft_probe knows the GLUE tasks (run_tune.sh: SQuAD too)
  esac
  [[ -z "$rule" ]] || ft_usage_error "$name (${SOURCE[$name]}) must be $rule, got '$value'."
}

# ft_default NAME VALUE HOW: a computed default, for a setting still at its (empty) default.
ft_default() {
  if [[ "${SOURCE[$1]}" == default ]]; then
    VALUE[$1]="$2" SOURCE[$1]="default: $3"
  fi
}

ft_absolute() {
  case "$1" in
    /*|*://*) printf '%s' "$1" ;;
    *) printf '%s/%s' "$PWD" "${1#./}" ;;
  esac
}

# ft_resolve_path NAME DEFAULT HOW: --NAME, else its environment variable, else DEFAULT ("default:
# HOW"); relative paths are made absolute (the workers may start elsewhere).
ft_resolve_path() {
  local name="$1" env="${FT_ENV[$1]}"
  if [[ -n "${FT_NAMED[$name]:-}" ]]; then
    VALUE[$name]="$(ft_absolute "${FT_NAMED[$name]}")" SOURCE[$name]="--$name"
  elif [[ -n "$env" && -n "${!env:-}" ]]; then
    VALUE[$name]="$(ft_absolute "${!env}")" SOURCE[$name]="$env"
  else
    VALUE[$name]="$2" SOURCE[$name]="default: $3"
  fi
}

# ft_probe NUM_WORKERS: asks Python what only it knows: the data root (data.paths), how the
# workers start (training.launch_settings, as for pretraining) and, with a task_name setting, the
# GLUE task (data.glue): FT_DATA_ROOT, FT_LAUNCHER, FT_PREFIX, FT_WORLD, FT_RANK, FT_TASK_DIR,
# FT_SPLITS and FT_SPLIT_FILES.
ft_probe() {
  local workers="$1" task="${VALUE[task_name]:-}" out fields
  local what="num_gpu=$workers"
  [[ -n "${FT_KIND[num_gpu]:-}" ]] || what="this launcher runs one process"
  local data_dir=""
  [[ -z "${FT_NAMED[data_dir]:-}" ]] || data_dir="$(ft_absolute "${FT_NAMED[data_dir]}")"
  out="$(PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PY" - "$workers" "$what" "$data_dir" "$PY" \
         "$task" <<'PYTHON'
import os
import shlex
import sys

from data import paths
from training.launch_settings import UsageError, choose_launcher, launch_prefix, launched_world

workers, what, data_dir, python, task_name = int(sys.argv[1]), *sys.argv[2:]
env = os.environ


def say(*fields):
    print("\t".join(str(f) for f in fields))


say("root", paths.data_root(env, data_dir or None))
world, rank = launched_world(env)
try:
    if (world > 1 or env.get("HOROVOD_LAUNCHER") == "direct") and world != workers:
        raise UsageError(
            f"{what} but {world} worker processes were started (srun or mpirun); "
            + (f"give num_gpu={world}, one process per GPU." if what.startswith("num_gpu") else "start it once.")
        )
    launcher = choose_launcher(workers, env.get("HOROVOD_LAUNCHER", ""), bool(env.get("SLURM_JOB_ID")), world)
except UsageError as e:
    say("error", e)
    sys.exit(0)
say("launcher", launcher)
say("world", world)
say("rank", rank)
as_root = hasattr(os, "geteuid") and os.geteuid() == 0
for arg in launch_prefix(launcher, workers, python, shlex.split(env.get("LAUNCHER_ARGS", "")), as_root):
    say("prefix", arg)
if task_name:
    from common.errors import UserError
    from data.glue import TASKS, get_task

    say("tasks", ", ".join(TASKS))
    try:
        task = get_task(task_name)
    except UserError:
        sys.exit(0)
    say("task", task.name, task.directory)
    for split in task.splits:
        say("split", split.split, *split.file_names)
PYTHON
)" || ft_error "cannot ask $PY where the data is and how workers start; run scripts/setup.sh (or set BERT_PYTHON)."
  FT_PREFIX=() FT_SPLITS=() FT_TASK_DIR="" FT_RANK=0 FT_WORLD=1
  declare -gA FT_SPLIT_FILES=()
  local tasks="" task_found=""
  # shellcheck disable=SC2034  # FT_TASK_DIR is read by run_glue.sh and run_glue_inference.sh
  while IFS=$'\t' read -r -a fields; do
    case "${fields[0]}" in
      root) FT_DATA_ROOT="${fields[1]}" ;;
      error) ft_usage_error "${fields[1]}" ;;
      launcher) FT_LAUNCHER="${fields[1]}" ;;
      world) FT_WORLD="${fields[1]}" ;;
      rank) FT_RANK="${fields[1]}" ;;
      prefix) FT_PREFIX+=("${fields[1]}") ;;
      tasks) tasks="${fields[1]}" ;;
      task) task_found="${fields[1]}" FT_TASK_DIR="${fields[2]}" ;;
      split) FT_SPLITS+=("${fields[1]}"); FT_SPLIT_FILES[${fields[1]}]="${fields[*]:2}" ;;
    esac
  done <<< "$out"
  if [[ -n "$task" ]]; then
    local kinds="a GLUE task"
    [[ "${FT_KIND[task_name]}" != tune_task ]] || kinds="SQuAD, SQuAD2 or a GLUE task"
    [[ -n "$task_found" ]] || ft_usage_error "task_name (${SOURCE[task_name]}) must be $kinds, one of" \
                                             "$tasks (any case), got '$task'."
    VALUE[task_name]="$task_found"
  fi
  if [[ -n "${FT_NAMED[data_dir]:-}" ]]; then
    VALUE[data_dir]="$FT_DATA_ROOT" SOURCE[data_dir]="--data_dir"
  elif [[ -n "${BERT_DATA_DIR:-}" ]]; then
    VALUE[data_dir]="$FT_DATA_ROOT" SOURCE[data_dir]="BERT_DATA_DIR"
  else
    VALUE[data_dir]="$FT_DATA_ROOT" SOURCE[data_dir]="default"
  fi
}

# ft_split_file DIR SPLIT: the GLUE task's file for SPLIT in DIR (the first of its names that
# exists, else its first name).
ft_split_file() {
  local name first=""
  for name in ${FT_SPLIT_FILES[$2]}; do
    [[ -n "$first" ]] || first="$1/$name"
    if [[ -f "$1/$name" ]]; then
      printf '%s' "$1/$name"
      return 0
    fi
  done
  printf '%s' "$first"
}

# ft_bert_dir RESULTS_DIR: BERT_DIR, the bert_model's checkpoint directory: Google's release
# where the download puts it for base and large, else the pretraining launcher's phase 2 output.
ft_bert_dir() {
  local google="" model="${VALUE[bert_model]}"
  case "$model" in
    base) google="uncased_L-12_H-768_A-12" ;;
    large) google="uncased_L-24_H-1024_A-16" ;;
  esac
  if [[ -n "$google" ]]; then
    ft_resolve_path bert_dir "$FT_DATA_ROOT/download/google_pretrained_weights/$google" \
      "Google's BERT-${model^} under data_dir"
  else
    ft_resolve_path bert_dir "$1/phase_2" "run_pretraining_lamb.sh's output for $model"
  fi
}

# ft_model_files: bert_config and vocab_file: named or environment, else the files beside
# init_checkpoint (a fine-tuned or pretrained output directory holds both; a Hugging Face one has
# config.json), else BERT_DIR's.
ft_model_files() {
  local init="${VALUE[init_checkpoint]}" beside name files dir file found how
  beside="$init"
  [[ -d "$init" ]] || beside="$(dirname "$init")"
  for name in bert_config vocab_file; do
    files="vocab.txt"
    [[ "$name" == vocab_file ]] || files="bert_config.json config.json"
    found="" how="BERT_DIR"
    for dir in "$beside" "${VALUE[bert_dir]}"; do
      for file in $files; do
        if [[ -z "$found" && -f "$dir/$file" ]]; then
          found="$dir/$file"
          [[ "$dir" == "${VALUE[bert_dir]}" ]] || how="beside init_checkpoint"
        fi
      done
    done
    ft_resolve_path "$name" "${found:-${VALUE[bert_dir]}/${files%% *}}" "$how"
  done
}

# ft_flag FLAG VALUE [NAME]: --FLAG=VALUE for the entry point; NAME is the setting or path option
# behind it (what a user changes instead of repeating FLAG after --).
ft_flag() {
  FT_ARGS+=("--$1=$2")
  FT_FLAG_FROM[$1]="${3:-}"
}

# Flags after -- may add to the command, not contradict what the printed settings say (absl
# would let the last one win). --amp and --horovod are the entry points' aliases.
ft_check_extra() {
  local arg name from i how
  for arg in "${FT_EXTRA[@]}"; do
    [[ "$arg" == -* ]] || continue
    name="${arg#-}"
    name="${name#-}"
    name="${name%%=*}"
    if [[ -z "${FT_FLAG_FROM[$name]+set}" && "$name" == no* ]]; then name="${name#no}"; fi
    case "$name" in
      amp) name=precision ;;
      horovod) name=use_horovod ;;
    esac
    [[ -n "${FT_FLAG_FROM[$name]+set}" ]] || continue
    from="${FT_FLAG_FROM[$name]}"
    if [[ -z "$from" ]]; then
      ft_usage_error "${arg%%=*} after -- would contradict the launcher's own --$name: $FT_SCRIPT always" \
                     "sets it (run $FT_ENTRY directly for other modes)."
    fi
    how="--$from=PATH"
    [[ -z "${FT_ENV[$from]:-}" ]] || how="--$from=PATH or ${FT_ENV[$from]}"
    for i in "${!FT_SETTINGS[@]}"; do
      [[ "${FT_SETTINGS[$i]}" != "$from" ]] || how="$from (argument $((i + 1)), or --$from=VALUE)"
    done
    ft_usage_error "${arg%%=*} after -- would contradict the launcher's own --$name; set $how instead."
  done
}

ft_summary() {
  local name
  echo "== $FT_SCRIPT: resolved settings (defaults < positional < named) =="
  for name in "${FT_SETTINGS[@]}"; do
    printf '  %-18s = %-10s (%s)\n' "$name" "${VALUE[$name]}" "${SOURCE[$name]}"
  done
  echo "paths (named option > environment variable > default):"
  for name in "${FT_PATHS[@]}"; do
    [[ -n "${VALUE[$name]+set}" && -n "${VALUE[$name]}" ]] || continue
    printf '  %-18s = %s (%s)\n' "$name" "${VALUE[$name]}" "${SOURCE[$name]}"
  done
  if [[ ${#FT_NOTES[@]} -gt 0 ]]; then printf '%s\n' "${FT_NOTES[@]}"; fi
  echo "command:"
  printf '  '
  printf '%q ' "${FT_CMD[@]}" | sed 's/ $//'
  echo
}

# ft_workers_note BATCH: the workers line; with a learning_rate, the global batch and peak rate.
ft_workers_note() {
  local workers="${VALUE[num_gpu]:-1}" how per
  case "$FT_LAUNCHER" in
    horovodrun|mpirun) how="$FT_LAUNCHER -np $workers" ;;
    *) if [[ "$FT_WORLD" -gt 1 ]]; then how="this process is one"; else how="one process"; fi ;;
  esac
  per="$workers worker"
  [[ "$workers" -eq 1 ]] || per+="s"
  FT_NOTES+=("workers: $workers ($how)")
  if [[ -n "${VALUE[learning_rate]:-}" ]]; then
    local batch rate
    batch="$(LC_ALL=C awk -v b="$1" -v n="$workers" 'BEGIN { printf "%.0f", b * n }')"
    rate="$(LC_ALL=C awk -v r="${VALUE[learning_rate]}" -v n="$workers" 'BEGIN { printf "%.6g", r * n }')"
    FT_NOTES+=("  global batch       = $batch ($1 per worker x $per)")
    FT_NOTES+=("  peak learning rate = $rate (${VALUE[learning_rate]} per worker x $per)")
  fi
}

ft_require_file() {  # PATH WHAT HINT
  [[ -f "$1" ]] || ft_error "$2 $1 does not exist; $3."
}

# ft_require_model_files HINT: init_checkpoint (a directory, a checkpoint prefix or a remote
# path; HINT says where one comes from), the config and the vocab.
ft_require_model_files() {
  local init="${VALUE[init_checkpoint]}"
  if ! [[ "$init" == *://* || -e "$init" || -e "$init.index" ]]; then
    ft_error "init_checkpoint $init does not exist (${SOURCE[init_checkpoint]}); $1."
  fi
  ft_require_file "${VALUE[bert_config]}" "The BERT config" "set BERT_CONFIG (or --bert_config) or BERT_DIR"
  ft_require_file "${VALUE[vocab_file]}" "The vocab file" "set VOCAB_FILE (or --vocab_file) or BERT_DIR"
}

# ft_require_no_other_checkpoint MODEL_DIR: the entry points continue from a checkpoint in
# --output_dir before they look at --init_checkpoint, so a prediction's output directory may hold
# none but the model's own.
ft_require_no_other_checkpoint() {
  local out="${VALUE[output_dir]}"
  [[ -f "$out/checkpoint" ]] || return 0
  [[ "$(cd "$out" && pwd -P)" != "$(cd "$1" 2>/dev/null && pwd -P)" ]] || return 0
  ft_error "output_dir $out holds a checkpoint of its own, which $FT_ENTRY would predict with instead" \
           "of init_checkpoint ${VALUE[init_checkpoint]}; give another --output_dir."
}

# Where the bert_model's checkpoint comes from, for an error message.
ft_bert_dir_hint() {
  case "${VALUE[bert_model]}" in
    base) echo "download it (python prepare_data.py --action download --dataset google_pretrained_weights" \
               "--google_models uncased_L-12_H-768_A-12), set BERT_DIR, or give init_checkpoint" ;;
    large) echo "download it (python prepare_data.py --action download --dataset google_pretrained_weights" \
                "--google_models uncased_L-24_H-1024_A-16), set BERT_DIR, or give init_checkpoint" ;;
    *) echo "pretrain it (scripts/run_pretraining_lamb.sh), set BERT_DIR, or give init_checkpoint" ;;
  esac
}

# ft_launch: prints the settings and the command; with --dry_run stops there. Else runs the
# launcher's check_inputs, checks that the output directory can be written, runs the command and
# prints the metrics it wrote.
ft_launch() {
  local output_dir="${VALUE[output_dir]}" marker status=0
  ft_check_extra
  FT_CMD=("${FT_PREFIX[@]}" "$ROOT/$FT_ENTRY" "${FT_ARGS[@]}" "${FT_EXTRA[@]}")
  local quiet=0
  [[ "$FT_RANK" -eq 0 ]] || quiet=1
  [[ "$quiet" -eq 1 ]] || ft_summary
  if [[ "$FT_DRY_RUN" -eq 1 ]]; then
    echo "dry run: nothing checked or started."
    exit 0
  fi
  check_inputs
  command -v "${FT_CMD[0]}" > /dev/null ||
    ft_error "${FT_CMD[0]} is not installed; run scripts/setup.sh (Horovod), or set HOROVOD_LAUNCHER=mpirun."
  { mkdir -p "$output_dir" 2>/dev/null && [[ -w "$output_dir" ]]; } ||
    ft_error "cannot write the output directory $output_dir; set RESULTS_DIR or --output_dir."
  marker="$(mktemp "${TMPDIR:-/tmp}/bert-finetuning.XXXXXX")"
  # shellcheck disable=SC2064  # expand now: the trap outlives this function's locals
  trap "rm -f '$marker'" EXIT
  [[ "$quiet" -eq 1 ]] || echo "== $FT_SCRIPT: $FT_ENTRY starts ($(date '+%F %T')) =="
  "${FT_CMD[@]}" || status=$?
  if [[ "$status" -ne 0 ]]; then
    ft_error_status "$status" "$FT_ENTRY stopped with exit status $status (see above); re-running the" \
                    "same command continues from the latest checkpoint in $output_dir."
  fi
  [[ "$quiet" -eq 0 ]] || return 0
  if declare -F ft_report > /dev/null; then  # the launcher's own ending (run_tune.sh)
    ft_report
    return 0
  fi
  local results="$output_dir/eval_results.json"
  if [[ -f "$results" && "$results" -nt "$marker" ]]; then
    echo "== $FT_SCRIPT: results ($results) =="
    "$PY" - "$results" <<'PYTHON'
import json
import sys

with open(sys.argv[1], encoding="utf-8") as f:
    results = json.load(f)


def numbers(prefix, values):
    for key, value in values.items():
        if isinstance(value, dict):
            yield from numbers(f"{prefix}{key}/", value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            yield prefix + key, value


exact = results.get("exact_match", results.get("exact"))  # SQuAD v1.1 / v2.0 names
if exact is not None:
    print(f"  EM {exact:.2f}  F1 {results['f1']:.2f}")
for key, value in numbers("", results):
    print(f"  {key:28s} = {value:.4f}" if isinstance(value, float) else f"  {key:28s} = {value}")
PYTHON
  else
    echo "== $FT_SCRIPT: done; no metrics (the data had no answers or labels): predictions in $output_dir =="
  fi
}

ft_error_status() {  # STATUS MESSAGE...: an error that exits with the entry point's status
  local status="$1"
  shift
  echo "$FT_SCRIPT: error: $*" >&2
  exit "$status"
}

ft_horovod() {  # true when the workers are several: run_squad.py / run_classifier.py's --use_horovod
  if [[ "${VALUE[num_gpu]:-1}" -gt 1 ]]; then echo true; else echo false; fi
}
