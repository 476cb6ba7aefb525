"""Fine-tuning as tasks of the one training job: plain settings and a task in, a fine-tuned and
evaluated output directory out.

run_squad.py and run_classifier.py turn their flags into `FineTuningSettings` and a task
(training/squad_task.py's SquadTask, training/glue_task.py's GlueTask: both a `FineTuningTask`)
and call `training.job.run(settings, task)`. The task says what the data, the model head, the
objective and the outputs are; `FineTuningTask` holds what every fine-tuning task does alike
(features in memory, steps from epochs, prediction, export), and training/job.py the rest, as for
pretraining: the one TrainStep, the one loop, checkpoints (heads under Google's names), exact
resume, log.jsonl, TensorBoard and the progress line. In order:

1. cheap checks: values of their kind (common/kinds.py), the config and the vocab (beside --init_checkpoint when not
   given) fit each other, the task's files exist;
2. features: the task's training examples become fixed-shape arrays; steps follow from them as
   in Google's and NVIDIA's scripts: int(examples / global batch x epochs), warmup a proportion;
3. the resolved settings are printed and written to <output_dir>/resolved_config.json;
4. the model starts from the latest checkpoint of output_dir (an exact resume), else from
   --init_checkpoint (the encoder, and the head when the checkpoint holds one);
5. training; then rank 0 predicts each evaluation split and the task writes its predictions and
   official metrics; --export_dir writes a SavedModel for serving (training/export.py).
"""

from __future__ import annotations

import abc
import dataclasses
import json
import os

from common.cli import redefault, setting
from common.errors import UserError
from common.files import write_json
from optimization import FINE_TUNING_DECAY_POWER
from training import job
from training.finetuning_data import predict, training_dataset
from training.task import Prepared, Task
from training.update import Update


@dataclasses.dataclass(frozen=True, kw_only=True)
class FineTuningSettings(job.JobSettings):
    """The flags run_squad.py and run_classifier.py share (see their --help for each): the ones
    every job has (job.JobSettings; here bert_config_file and vocab_file default to the files
    beside init_checkpoint) and fine-tuning's own."""

    do_lower_case: bool = setting("bool", True, "Lower-case and strip accents (uncased models).")
    predict_batch_size: int = setting("count", 8, "Examples per prediction batch.")
    num_train_epochs: float = setting("epochs", 3.0, "Epochs over the training features.")
    warmup_proportion: float = setting(
        "proportion", 0.1, "Share of the updates spent in linear warmup (then linear decay to 0)."
    )
    decay_after_warmup: bool = setting(  # False: Google's decay from step 0
        "bool",
        False,
        "Count the linear decay from the end of warmup, so the rate reaches the peak (Hugging Face's "
        "get_linear_schedule_with_warmup); default: from step 0, as Google's run_squad / "
        "run_classifier, whose rate after warmup starts at (1 - warmup_proportion) of the peak.",
    )
    adam_epsilon: float = setting(
        "rate",
        1e-6,
        "The optimizer's epsilon in m / (sqrt(v) + epsilon): Google's 1e-6 by default; Hugging "
        "Face's (torch's AdamW) is 1e-8.",
    )
    optimizer_type: str = "adam_weight_decay"
    do_train: bool = setting("bool", False, "Fine-tune.")
    do_predict: bool = setting(
        "bool", False, "Predict the test data and write the prediction / submission files."
    )
    keep_checkpoints: int = redefault(job.JobSettings, "keep_checkpoints", 3)
    eval_every_n_steps: int = setting(  # 0: evaluate after training only
        "steps",
        0,
        "With --do_train --do_eval: also score the dev set every this many updates (log.jsonl, "
        "TensorBoard); 0: only after training.",
    )
    group_by_length: bool = setting(  # training/data_order.rows_in_order
        "bool",
        False,
        "Order each epoch in groups of 50 global batches sorted by length, the batches of a group "
        "shuffled by --seed (Hugging Face's group_by_length): with --bin_size, less padding.",
    )
    export_dir: str | None = setting(
        str,
        None,
        "Write a SavedModel here (serving_default: input_ids, input_mask, segment_ids -> logits) "
        "after training, or from --output_dir's latest checkpoint without --do_train.",
    )
    triton_repository: str | None = setting(
        str, None, "Also write a Triton model repository here (needs --export_dir)."
    )


def validate(s: FineTuningSettings) -> None:
    """UserError naming the first flag whose value cannot work."""
    if s.triton_repository and not s.export_dir:
        raise UserError("--triton_repository needs --export_dir (the SavedModel it copies).")
    if s.export_dir and os.path.isdir(s.export_dir) and os.listdir(s.export_dir):  # not after training
        raise UserError(f"--export_dir {s.export_dir} exists and is not empty; choose a new directory.")
    if not (s.do_train or s.do_eval or s.do_predict or s.export_dir):
        raise UserError("Nothing to do: pass --do_train, --do_eval, --do_predict and/or --export_dir.")
    job.validate_settings(s)
    if s.eval_every_n_steps and not (s.do_train and s.do_eval):
        raise UserError("--eval_every_n_steps evaluates during training: it needs --do_train and --do_eval.")


def load_model_files(s: FineTuningSettings, output_dir_checkpoint: str | None):
    """(BertConfig, vocab file): the flags' or those stored beside --init_checkpoint (or beside
    the output directory's checkpoint when resuming); the vocab's size is checked."""
    from bert.checkpoints import find_config, vocab_beside
    from bert.config import read_config_file

    source = s.init_checkpoint or output_dir_checkpoint
    if s.bert_config_file:
        config = read_config_file(s.bert_config_file)
    elif source:
        config = find_config(source)
        if config is None:
            raise UserError(f"No bert_config.json or config.json beside {source}; pass --bert_config_file.")
    else:
        raise UserError("--bert_config_file is required when there is no --init_checkpoint.")
    vocab_file = s.vocab_file or (vocab_beside(source) if source else None)
    if not vocab_file:
        raise UserError(f"No vocab.txt beside {source or '--init_checkpoint'}; pass --vocab_file.")
    job.check_model_files(config, vocab_file, s.max_seq_length, s.bert_config_file or source)
    return config, vocab_file


def train_steps(num_features: int, global_batch: int, epochs: float, warmup_proportion: float):
    """(updates, warmup updates) as Google's and NVIDIA's scripts count them."""
    steps = int(num_features / global_batch * epochs)
    return steps, int(steps * warmup_proportion)


def update_of(s: FineTuningSettings, workers: int) -> Update:
    """The update `s` asks for on `workers` workers: linear decay after warmup, whatever the
    optimizer, counted from step 0 (Google's) or, with --decay_after_warmup, from the end of warmup;
    the optimizer's epsilon --adam_epsilon."""
    return Update(
        s.train_batch_size,
        s.num_accumulation_steps,
        s.learning_rate,
        workers,
        s.optimizer_type,
        decay_power=FINE_TUNING_DECAY_POWER,
        decay_from_warmup=s.decay_after_warmup,
        epsilon=s.adam_epsilon,
    )


@dataclasses.dataclass(frozen=True)
class FineTuningData:
    """Fine-tuning's plan.data: the tokenizer and the training features (with --do_train)."""

    tokenizer: object
    train_arrays: dict | None


def _predict_and_export(
    s: FineTuningSettings, task, plan: job.Plan, step, global_step: int, out, result: dict
):
    """Step 5b, rank 0: each split's predictions and official metrics; the SavedModel."""
    from training import loop

    tokenizer = plan.data.tokenizer
    for split in task.prediction_splits(do_eval=s.do_eval, do_predict=s.do_predict):
        arrays, context = task.predict_features(split, tokenizer, s.max_seq_length, stream=out)
        outputs = predict(
            step, arrays, s.predict_batch_size, f"predict {split}", out, **_by_length(plan, task)
        )
        metrics = task.write_predictions(split, outputs, context, s.output_dir)
        if metrics is not None:
            metrics = {**metrics, "global_step": global_step}
            result["results"][split] = metrics
            print(f"{split}: " + json.dumps(metrics), file=out, flush=True)
    if result["results"]:
        # One split: its metrics (Google's eval_results); several (MNLI): keyed by split.
        splits = result["results"]
        written = next(iter(splits.values())) if len(splits) == 1 else splits
        write_json(os.path.join(s.output_dir, loop.EVAL_RESULTS_NAME), written)
    if s.export_dir:
        from training.export import export_saved_model, write_triton_repository

        result["export_dir"] = export_saved_model(
            step.model, s.export_dir, tuple(task.serving_outputs), stream=out
        )
        if s.triton_repository:
            where = write_triton_repository(
                s.export_dir, s.triton_repository, task.triton_name, task.serving_outputs
            )
            print(f"Wrote the Triton model {where} (config.pbtxt, 1/model.savedmodel).", file=out)


def _by_length(plan: job.Plan, task) -> dict:
    """predict's keywords for the task's outputs under --bin_size."""
    sequence_outputs = tuple(name for name, dims in task.serving_outputs.items() if dims == [-1])
    return {"bin_size": plan.bin_size, "sequence_outputs": sequence_outputs}


class FineTuningTask(Task):
    """What every fine-tuning task does alike, for training.job.run: features in memory, steps
    from epochs, Google's linear schedule, prediction of each split with the official metrics,
    export. A subclass (SquadTask, GlueTask) gives its data and head by implementing the abstract
    methods below and setting `objective`, `serving_outputs` ({output name: dims after the
    batch}) and `triton_name`."""

    title = "fine-tuning"
    serving_outputs: dict = {}
    triton_name: str = ""

    # ---- what a fine-tuning task supplies ----

    @abc.abstractmethod
    def validate(self, *, do_train: bool, do_eval: bool, do_predict: bool) -> None:
        """UserError naming the first of the task's own flags that cannot work for these actions."""

    @abc.abstractmethod
    def describe(self) -> dict:
        """The task's own resolved settings (its "task" name first)."""

    @abc.abstractmethod
    def train_features(self, tokenizer, max_seq_length: int, *, seed: int, stream) -> tuple[dict, int]:
        """({feature name: [rows, ...] array}, the number of training examples)."""

    @abc.abstractmethod
    def prediction_splits(self, *, do_eval: bool, do_predict: bool) -> list[str]:
        """The splits to predict, in order (the first is the one --eval_every_n_steps scores)."""

    @abc.abstractmethod
    def predict_features(self, split: str, tokenizer, max_seq_length: int, *, stream) -> tuple[dict, object]:
        """(the split's feature arrays, the context its predictions are decoded with)."""

    @abc.abstractmethod
    def dev_metrics(self, split: str, outputs: dict, context) -> dict | None:
        """The official metrics of `outputs`, writing nothing; None for a split without labels."""

    @abc.abstractmethod
    def write_predictions(self, split: str, outputs: dict, context, output_dir: str) -> dict | None:
        """Writes the split's prediction files; its official metrics, or None without labels."""

    # ---- training.task.Task's hooks, alike for every fine-tuning task ----

    def validate_settings(self, s: FineTuningSettings) -> None:
        validate(s)
        self.validate(do_train=s.do_train, do_eval=s.do_eval, do_predict=s.do_predict)

    def model_files(self, s: FineTuningSettings, resume_from):
        return load_model_files(s, resume_from)

    def update(self, s: FineTuningSettings, workers: int) -> Update:
        return update_of(s, workers)

    def prepare(self, s: FineTuningSettings, plan: job.Plan, dist, out) -> Prepared:
        """The tokenizer and, with --do_train, the training features and the steps they make."""
        from bert.tokenization import build_tokenizer

        tokenizer = build_tokenizer(vocab_file=plan.vocab_file, do_lower_case=s.do_lower_case)
        resolved = {**self.describe()}
        steps = warmup = 0
        train_arrays = None
        if s.do_train:
            global_batch = plan.update.global_batch_size
            train_arrays, num_examples = self.train_features(
                tokenizer, s.max_seq_length, seed=s.seed, stream=out
            )
            num_features = len(train_arrays["input_ids"])
            steps, warmup = train_steps(num_features, global_batch, s.num_train_epochs, s.warmup_proportion)
            if steps < 1:
                raise UserError(
                    f"{num_features} training features x {s.num_train_epochs} epochs make no update of "
                    f"{global_batch} (the global batch): lower --train_batch_size or raise "
                    "--num_train_epochs."
                )
            resolved.update(num_train_examples=num_examples, num_train_features=num_features)
        resolved.update(num_train_steps=steps, num_warmup_steps=warmup)
        return Prepared(FineTuningData(tokenizer, train_arrays), steps, warmup, resolved)

    def initialise(self, model, s: FineTuningSettings, plan: job.Plan, out) -> None:
        """The encoder, and the head when the checkpoint holds one, from --init_checkpoint in a
        new output_dir."""
        from bert.checkpoints import load_for_fine_tuning

        if not plan.resume_from and s.init_checkpoint:
            head = load_for_fine_tuning(model, s.init_checkpoint)
            print(
                f"Initialised the encoder{' and the head' if head else ''} from {s.init_checkpoint}"
                f"{'' if head else '; the head starts fresh'}.",
                file=out,
            )
        elif not plan.resume_from:
            print("No --init_checkpoint: the encoder starts from random weights.", file=out)

    def training_batches(self, s: FineTuningSettings, plan: job.Plan, dist, start: int):
        return iter(
            training_dataset(
                plan.data.train_arrays,
                s.train_batch_size,
                num_workers=dist.size,
                worker_index=dist.rank,
                seed=s.seed,
                start=start,
                accumulation=plan.update.accumulation_steps,
                bin_size=plan.bin_size,
                group_by_length=s.group_by_length,
            )
        )

    def resumed(self, plan: job.Plan, start: int, out) -> None:
        if plan.resume_from and plan.steps:
            print(f"Resuming from {plan.resume_from} (step {start} of {plan.steps}).", file=out)
        elif plan.resume_from:  # without --do_train
            print(f"Predicting with the weights of {plan.resume_from}.", file=out)

    def safeguards(self, s: FineTuningSettings, plan: job.Plan, step, log, out) -> list:
        """--eval_every_n_steps' evaluation during training (rank 0 computes the features)."""
        if not s.eval_every_n_steps:
            return []
        from training.periodic_evaluation import PeriodicEvaluation

        split = self.prediction_splits(do_eval=True, do_predict=False)[0]
        features = (
            self.predict_features(split, plan.data.tokenizer, s.max_seq_length, stream=out)
            if step.distributed.is_chief
            else None
        )
        return [
            PeriodicEvaluation(
                self,
                split,
                s.eval_every_n_steps,
                plan.steps,
                features,
                s.predict_batch_size,
                log,
                _by_length(plan, self),
            )
        ]

    def finish(self, s: FineTuningSettings, plan: job.Plan, step, result: dict, log, out) -> None:
        """Rank 0: each split's predictions and official metrics, the SavedModel; then every
        worker waits for it."""
        result.update(results={}, export_dir=None)
        dist = step.distributed
        if dist.is_chief:
            _predict_and_export(s, self, plan, step, result["step"], out, result)
        dist.barrier()
