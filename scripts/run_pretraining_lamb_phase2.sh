#!/usr/bin/env bash
# Phase 2 of BERT pretraining alone (seq 512, 80 predictions), for users who run the phases apart.
# Same arguments and presets as scripts/run_pretraining_lamb.sh (--help lists them), and the same
# ones phase 1 ran with: phase 2's step count follows from them. It starts from
# $RESULTS_DIR/phase_1 (whose latest checkpoint must be phase 1's final step), or from
# INIT_CHECKPOINT when that is set. Output: $RESULTS_DIR/phase_2.
set -euo pipefail
# shellcheck source=scripts/launch.sh
source "$(dirname "${BASH_SOURCE[0]}")/launch.sh"
launch run_pretraining_lamb_phase2 "$@"
