r"""Fine-tunes BERT on SQuAD v1.1 or v2.0 and writes predictions with the official metrics.

    python run_squad.py --init_checkpoint=results/phase_2 --do_train --do_predict --do_eval \
        --train_file=data/squad/v1.1/train-v1.1.json --predict_file=data/squad/v1.1/dev-v1.1.json \
        --output_dir=results/squad --train_batch_size=32 --learning_rate=5e-5 --num_train_epochs=2

    horovodrun -np 8 python run_squad.py ...      # Horovod turns itself on under a launcher

Outputs in --output_dir: checkpoints (the span head as Google's cls/squad/output_weights|bias),
log.jsonl, TensorBoard events, predictions.json, nbest_predictions.json, null_odds.json (v2.0)
and eval_results.json (exact_match/f1, or the v2.0 keys) when --predict_file has answers.
--learning_rate is per worker (NVIDIA's convention): the peak is it times the workers.
Re-running the same command continues from the latest checkpoint in --output_dir.
"""

from __future__ import annotations

import sys

import finetuning_cli
from training import tasks

PROG = "run_squad"


main = finetuning_cli.entry_point(tasks.SQUAD, finetuning_cli.define_squad_flags, __doc__, PROG)

if __name__ == "__main__":
    sys.exit(main())
