#!/usr/bin/env bash
# Downloads and prepares BERT data the way NVIDIA's users expect, restartably.
#
#   bash scripts/data_download.sh [wiki_only|squad|glue|all] [--name value ...]
#
#   wiki_only (default)  Wikipedia -> formatted text -> shards -> TFRecords for phase 1 (seq 128,
#                        20 predictions) and phase 2 (seq 512, 80 predictions), with Google's
#                        uncased vocab (downloaded with the BERT-Base uncased checkpoint)
#   squad                SQuAD v1.1 and v2.0 train/dev JSON
#   glue                 the GLUE tasks (MRPC built from its SentEval sources)
#   all                  all of the above
#
# Named overrides (after the positional argument):
#   --data_dir DIR            root of all data (default: $BERT_DATA_DIR, else <repo>/data_dir)
#   --corpus FILE[,FILE]      your own corpus (plain text with blank lines between documents, JSONL
#                             with {"text": ...}, or a MediaWiki XML dump) instead of Wikipedia
#   --dataset NAME            name of the prepared corpus (default wikicorpus_en; "corpus" with --corpus)
#   --vocab_file FILE         an existing vocab.txt (default: Google's uncased vocab)
#   --train_vocab SIZE        train a WordPiece vocab of SIZE entries on the shards instead
#   --n_training_shards N     (default 256)   --n_test_shards M (default 16)
#   --fraction_test_set F     (default 0.1)   --dupe_factor D (default 5)
#                             (defaults: NVIDIA's recipe, `python -m data.paths recipe`)
#   --phases "1 2"            which TFRecord phases to build (default both)
#   --n_processes P           worker processes (default: all cores)
#   --mirror URL              download from a mirror with the same paths (e.g. a Wikipedia mirror)
#   --wiki_dump DATE          a dated Wikipedia dump (YYYYMMDD) instead of "latest"
#   --glue_tasks LIST         comma-separated GLUE tasks (default all)
#   --dry_run                 print the plan and the commands, run nothing
#
# Every step is restartable: run the same command again after an interruption and finished
# outputs are verified and kept. The TFRecords land where scripts/run_pretraining_lamb.sh looks
# by default (`python -m data.paths` prints those paths; data/paths.py defines them).
set -euo pipefail

# shellcheck source=scripts/find_python.sh
source "$(dirname "${BASH_SOURCE[0]}")/find_python.sh"

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }
die() { echo "data_download.sh: error: $*" >&2; exit 2; }

what="wiki_only"
if [[ $# -gt 0 && "$1" != --* ]]; then
  what="$1"; shift
fi
case "$what" in
  wiki_only|squad|glue|all) ;;
  -h|--help|help) usage; exit 0 ;;
  *) echo "data_download.sh: error: unknown target '$what'; expected wiki_only, squad, glue or all." >&2
     usage >&2; exit 2 ;;
esac

data_dir="${BERT_DATA_DIR:-$ROOT/data_dir}"
corpus=""; dataset=""; vocab_file=""; train_vocab=""; phases="1 2"
# NVIDIA's recipe (shard counts, test fraction, dupe_factor, phase 128/20 and 512/80) comes from
# data/paths, the one place that defines it: lines of name=value, read without eval.
declare -A recipe=()
while IFS='=' read -r key value; do recipe[$key]="$value"; done < <(cd "$ROOT" && "$PY" -m data.paths recipe)
[[ -n "${recipe[n_training_shards]:-}" ]] || die "cannot read the data recipe (python -m data.paths recipe) with $PY; run scripts/setup.sh."
n_training_shards="${recipe[n_training_shards]}"; n_test_shards="${recipe[n_test_shards]}"
fraction_test_set="${recipe[fraction_test_set]}"; dupe_factor="${recipe[dupe_factor]}"
n_processes=""; mirror=""; wiki_dump="latest"; glue_tasks="all"; dry_run=0

need_value() { [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value."; }
is_int() { [[ "$1" =~ ^[0-9]+$ ]]; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --data_dir) need_value "$@"; data_dir="$2"; shift 2 ;;
    --corpus) need_value "$@"; corpus="$2"; shift 2 ;;
    --dataset) need_value "$@"; dataset="$2"; shift 2 ;;
    --vocab_file) need_value "$@"; vocab_file="$2"; shift 2 ;;
    --train_vocab) need_value "$@"; train_vocab="$2"; shift 2 ;;
    --n_training_shards) need_value "$@"; n_training_shards="$2"; shift 2 ;;
    --n_test_shards) need_value "$@"; n_test_shards="$2"; shift 2 ;;
    --fraction_test_set) need_value "$@"; fraction_test_set="$2"; shift 2 ;;
    --dupe_factor) need_value "$@"; dupe_factor="$2"; shift 2 ;;
    --phases) need_value "$@"; phases="$2"; shift 2 ;;
    --n_processes) need_value "$@"; n_processes="$2"; shift 2 ;;
    --mirror) need_value "$@"; mirror="$2"; shift 2 ;;
    --wiki_dump) need_value "$@"; wiki_dump="$2"; shift 2 ;;
    --glue_tasks) need_value "$@"; glue_tasks="$2"; shift 2 ;;
    --dry_run) dry_run=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)." ;;
  esac
done

{ is_int "$n_training_shards" && (( n_training_shards >= 1 )); } || die "--n_training_shards must be a positive integer, got '$n_training_shards'."
is_int "$n_test_shards" || die "--n_test_shards must be an integer >= 0, got '$n_test_shards'."
{ is_int "$dupe_factor" && (( dupe_factor >= 1 )); } || die "--dupe_factor must be a positive integer, got '$dupe_factor'."
[[ "$fraction_test_set" =~ ^0(\.[0-9]+)?$ ]] || die "--fraction_test_set must be a number in [0, 1), got '$fraction_test_set'."
[[ -z "$train_vocab" ]] || { is_int "$train_vocab" && (( train_vocab >= 100 )); } || die "--train_vocab must be an integer >= 100, got '$train_vocab'."
[[ -z "$n_processes" ]] || { is_int "$n_processes" && (( n_processes >= 1 )); } || die "--n_processes must be a positive integer, got '$n_processes'."
[[ -z "$vocab_file" || -z "$train_vocab" ]] || die "give --vocab_file or --train_vocab, not both."
[[ -z "$vocab_file" || -f "$vocab_file" ]] || die "--vocab_file '$vocab_file' does not exist."
for phase in $phases; do [[ "$phase" == 1 || "$phase" == 2 ]] || die "--phases takes 1 and/or 2, got '$phases'."; done
[[ "$wiki_dump" == latest || "$wiki_dump" =~ ^[0-9]{8}$ ]] || die "--wiki_dump must be 'latest' or YYYYMMDD, got '$wiki_dump'."
absolute() { (cd "$(dirname "$1")" && printf '%s/%s' "$(pwd)" "$(basename "$1")"); }
[[ -z "$vocab_file" ]] || vocab_file="$(absolute "$vocab_file")"
if [[ -n "$corpus" ]]; then
  IFS=',' read -r -a corpus_files <<< "$corpus"
  resolved=()
  for f in "${corpus_files[@]}"; do
    [[ -f "$f" ]] || die "--corpus file '$f' does not exist."
    resolved+=("$(absolute "$f")")
  done
  corpus="$(IFS=','; echo "${resolved[*]}")"
  dataset="${dataset:-corpus}"
else
  dataset="${dataset:-wikicorpus_en}"
fi
[[ "$dataset" =~ ^[A-Za-z0-9_.-]+$ ]] || die "--dataset must be a plain name (letters, digits, _ . -), got '$dataset'."
{ mkdir -p "$data_dir" 2>/dev/null && [[ -w "$data_dir" ]]; } || die "cannot write to --data_dir '$data_dir'."
data_dir="$(cd "$data_dir" && pwd)"

prep=("$PY" prepare_data.py --data_dir "$data_dir")
common=(--dataset "$dataset" --n_training_shards "$n_training_shards" --n_test_shards "$n_test_shards"
        --fraction_test_set "$fraction_test_set")
[[ -z "$n_processes" ]] || common+=(--n_processes "$n_processes")
dl=(); [[ -z "$mirror" ]] || dl+=(--mirror "$mirror")

google_vocab="$data_dir/download/google_pretrained_weights/uncased_L-12_H-768_A-12/vocab.txt"
if [[ -n "$train_vocab" ]]; then
  vocab_desc="train a WordPiece vocab of $train_vocab entries on the training shards"
  vocab_args=()
elif [[ -n "$vocab_file" ]]; then
  vocab_desc="use $vocab_file"
  vocab_args=(--vocab_file "$vocab_file")
else
  vocab_desc="Google's uncased vocab ($google_vocab)"
  vocab_args=(--vocab_file "$google_vocab")
fi

cd "$ROOT"
paths_of() { "$PY" -m data.paths "$1" --data_dir "$data_dir" --dataset "$dataset" \
  --n_training_shards "$n_training_shards" --fraction_test_set "$fraction_test_set" --dupe_factor "$dupe_factor"; }

echo "== BERT data preparation: $what =="
echo "data directory : $data_dir"
plan=()
if [[ "$what" == wiki_only || "$what" == all ]]; then
  if [[ -n "$corpus" ]]; then plan+=("format your corpus ($corpus) as dataset '$dataset'")
  else plan+=("download the Wikipedia dump ($wiki_dump) and format it as dataset '$dataset'"); fi
  plan+=("split it into $n_training_shards training + $n_test_shards test shards (test fraction $fraction_test_set)")
  plan+=("vocabulary: $vocab_desc")
  for phase in $phases; do
    seq="${recipe[phase${phase}_max_seq_length]}"; pred="${recipe[phase${phase}_max_predictions_per_seq]}"
    plan+=("phase $phase TFRecords (seq $seq, $pred predictions, dupe_factor $dupe_factor) -> $(paths_of "phase$phase")")
  done
fi
[[ "$what" == squad || "$what" == all ]] && plan+=("download SQuAD v1.1 and v2.0 into $data_dir/download/squad")
[[ "$what" == glue || "$what" == all ]] && plan+=("download GLUE ($glue_tasks) into $data_dir/download/glue")
for i in "${!plan[@]}"; do echo "  $((i + 1)). ${plan[$i]}"; done

step() {
  echo "+ $*"
  if [[ "$dry_run" == 0 ]]; then "$@"; fi
}

if [[ "$what" == wiki_only || "$what" == all ]]; then
  if [[ -n "$corpus" ]]; then
    step "${prep[@]}" --action text_formatting --dataset "$dataset" --input_files "$corpus"
  else
    step "${prep[@]}" --action download --dataset wikicorpus_en --wiki_dump "$wiki_dump" "${dl[@]}"
    step "${prep[@]}" --action text_formatting --dataset "$dataset" \
      --input_files "$data_dir/download/wikicorpus_en/wikicorpus_en.xml.bz2"
  fi
  step "${prep[@]}" --action sharding "${common[@]}"
  if [[ -n "$train_vocab" ]]; then
    step "${prep[@]}" --action vocab "${common[@]}" --vocab_size "$train_vocab"
  elif [[ -z "$vocab_file" ]]; then
    step "${prep[@]}" --action download --dataset google_pretrained_weights "${dl[@]}"
  fi
  for phase in $phases; do
    seq="${recipe[phase${phase}_max_seq_length]}"; pred="${recipe[phase${phase}_max_predictions_per_seq]}"
    step "${prep[@]}" --action create_tfrecord_files "${common[@]}" "${vocab_args[@]}" \
      --max_seq_length "$seq" --max_predictions_per_seq "$pred" --dupe_factor "$dupe_factor"
  done
fi
if [[ "$what" == squad || "$what" == all ]]; then
  step "${prep[@]}" --action download --dataset squad "${dl[@]}"
fi
if [[ "$what" == glue || "$what" == all ]]; then
  step "${prep[@]}" --action download --dataset glue --glue_tasks "$glue_tasks" "${dl[@]}"
fi
echo "== done: $what =="
