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

from common import cli

PROG = "run_squad"


def define_flags(fv) -> None:
    from absl import flags

    import finetuning_cli

    finetuning_cli.define_flags(fv, max_seq_length=384, learning_rate=5e-5, train_batch_size=32, epochs=2.0)
    flags.DEFINE_string("train_file", None, "SQuAD JSON for training (train-v1.1.json).", flag_values=fv)
    flags.DEFINE_string("predict_file", None, "SQuAD JSON to predict (dev-v1.1.json).", flag_values=fv)
    flags.DEFINE_bool(
        "version_2_with_negative", False, "SQuAD 2.0: questions may have no answer.", flag_values=fv
    )
    flags.DEFINE_integer(
        "doc_stride", 128, "Tokens between the starts of a context's windows.", flag_values=fv
    )
    flags.DEFINE_integer("max_query_length", 64, "Question tokens kept.", flag_values=fv)
    flags.DEFINE_integer(
        "n_best_size", 20, "Candidate answers kept per question (nbest_predictions.json).", flag_values=fv
    )
    flags.DEFINE_integer("max_answer_length", 30, "Longest answer, in tokens.", flag_values=fv)
    flags.DEFINE_float(
        "null_score_diff_threshold",
        0.0,
        "SQuAD 2.0: predict no answer when null score - best span score exceeds this.",
        flag_values=fv,
    )


def run(F) -> int:
    import finetuning_cli
    from training.finetuning_job import run as run_job
    from training.squad_task import SquadTask

    task = SquadTask(
        train_file=F.train_file,
        predict_file=F.predict_file,
        version_2_with_negative=F.version_2_with_negative,
        doc_stride=F.doc_stride,
        max_query_length=F.max_query_length,
        n_best_size=F.n_best_size,
        max_answer_length=F.max_answer_length,
        null_score_diff_threshold=F.null_score_diff_threshold,
    )
    run_job(finetuning_cli.settings_from_flags(F), task)
    return 0


def main(argv=None) -> int:
    return cli.main(
        define_flags, run, [PROG, *(sys.argv[1:] if argv is None else argv)], doc=__doc__, prog=PROG
    )


if __name__ == "__main__":
    sys.exit(main())
