#!/usr/bin/env bash
# Phase 1 of BERT pretraining alone (seq 128, 20 predictions, 90% of train_steps), for users who
# run the phases apart. Same arguments as scripts/run_pretraining_lamb.sh (--help lists them);
# INIT_CHECKPOINT, when set, is where phase 1 starts from. Output: $RESULTS_DIR/phase_1.
set -euo pipefail
# shellcheck source=scripts/pretraining_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/pretraining_common.sh"
pretraining_main 1 "$@"
