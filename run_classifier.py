r"""Fine-tunes BERT on a GLUE task (CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE, WNLI) and
writes the official dev metrics and the test submission files.

    python run_classifier.py --task_name=MRPC --data_dir=data/glue --init_checkpoint=results/phase_2 \
        --do_train --do_eval --do_predict --output_dir=results/mrpc --train_batch_size=32 \
        --learning_rate=2e-5 --num_train_epochs=3

    horovodrun -np 8 python run_classifier.py ...      # Horovod turns itself on under a launcher

Outputs in --output_dir: checkpoints (the head as Google's output_weights|bias), log.jsonl,
TensorBoard events, eval_results.json (the task's official metrics on dev; MNLI: matched and
mismatched), <split>_predictions.tsv, and with --do_predict the submission files as GLUE names
them (MRPC.tsv, MNLI-m.tsv, MNLI-mm.tsv, ...). STS-B trains a regression head (one score).
--learning_rate is per worker: the peak is it times the workers. Re-running the same command
continues from the latest checkpoint in --output_dir.
"""

from __future__ import annotations

import sys

import finetuning_cli
from training import tasks

PROG = "run_classifier"


main = finetuning_cli.entry_point(tasks.GLUE, finetuning_cli.define_glue_flags, __doc__, PROG)

if __name__ == "__main__":
    sys.exit(main())
