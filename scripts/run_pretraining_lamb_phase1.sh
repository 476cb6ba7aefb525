#!/usr/bin/env bash
# Phase 1 of BERT pretraining alone (seq 128, 20 predictions, 90% of train_steps), for users who
# run the phases apart. Same arguments and presets as scripts/run_pretraining_lamb.sh (--help
# lists them); INIT_CHECKPOINT, when set, is where phase 1 starts from. Output: $RESULTS_DIR/phase_1.
set -euo pipefail
# shellcheck source=scripts/launch.sh
source "$(dirname "${BASH_SOURCE[0]}")/launch.sh"
launch run_pretraining_lamb_phase1 "$@"
