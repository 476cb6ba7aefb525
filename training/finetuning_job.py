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

import dataclasses
import json
import os

import numpy as np

from common.cli import setting
from common.errors import UserError
from common.files import ensure_writable_dir, write_json
from optimization import FINE_TUNING_DECAY_POWER
from training import job


@dataclasses.dataclass(frozen=True, kw_only=True)
class FineTuningSettings(job.JobSettings):
    """The flags run_squad.py and run_classifier.py share (see their --help for each): the ones
    every job has (job.JobSettings; here bert_config_file and vocab_file default to the files
    beside init_checkpoint) and fine-tuning's own."""

    do_lower_case: bool = setting("bool", True)
    predict_batch_size: int = setting("count", 8)
    num_train_epochs: float = setting("epochs", 3.0)
    warmup_proportion: float = setting("proportion", 0.1)
    decay_after_warmup: bool = setting("bool", False)  # False: Google's decay from step 0
    adam_epsilon: float = setting("rate", 1e-6)  # Google's; Hugging Face's is 1e-8
    optimizer_type: str = "adam_weight_decay"
    do_train: bool = setting("bool", False)
    do_predict: bool = setting("bool", False)
    keep_checkpoints: int = setting("count", 3)
    eval_every_n_steps: int = setting("steps", 0)  # 0: evaluate after training only
    group_by_length: bool = setting("bool", False)  # training/data_order.rows_in_order
    export_dir: str | None = None
    triton_repository: str | None = None


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
    from bert.checkpoints import check_vocab_size, find_config, vocab_beside
    from bert.config import read_config_file
    from bert.tokenization import load_vocab

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
    check_vocab_size(config, len(load_vocab(vocab_file)), vocab_file)
    if s.max_seq_length > config.max_position_embeddings:
        raise UserError(
            f"--max_seq_length={s.max_seq_length} exceeds the model's max_position_embeddings="
            f"{config.max_position_embeddings}."
        )
    return config, vocab_file


def train_steps(num_features: int, global_batch: int, epochs: float, warmup_proportion: float):
    """(updates, warmup updates) as Google's and NVIDIA's scripts count them."""
    steps = int(num_features / global_batch * epochs)
    return steps, int(steps * warmup_proportion)


def training_dataset(
    arrays: dict,
    batch_size: int,
    *,
    num_workers: int,
    worker_index: int,
    seed: int,
    start: int = 0,
    accumulation: int = 1,
    bin_size: int = 0,
    group_by_length: bool = False,
):
    """Training micro-batches of one worker from in-memory feature arrays: the rows in the global
    order of training/data_order.py (a seeded permutation per epoch, endless; grouped by length
    with `group_by_length`) from sequence `start` of it. bin_size 0: every num_workers-th
    micro-batch of B, each S long; else each update's W x k x B rows (k = accumulation) sorted by
    length and dealt to the workers, each micro-batch cut to its bin (training/length_bins.py)."""
    import tensorflow as tf

    from training.data_order import rows_in_order, worker_micro_batches
    from training.length_bins import trim

    rows = len(next(iter(arrays.values())))
    if rows < batch_size * num_workers:
        raise UserError(
            f"{rows} training features are fewer than --train_batch_size={batch_size} x "
            f"{num_workers} worker(s), one micro-batch for each."
        )
    lengths = arrays["input_mask"].sum(axis=1) if bin_size or group_by_length else None
    order = rows_in_order(
        rows,
        seed=seed,
        start=start,
        lengths=lengths,
        group_batch=batch_size * accumulation * num_workers if group_by_length else None,
    )
    tensors = {name: tf.constant(value) for name, value in arrays.items()}
    lengths_of = None
    if bin_size:
        row_lengths = tf.constant(lengths.astype(np.int32))

        def lengths_of(index):
            return tf.gather(row_lengths, index)

    d = worker_micro_batches(
        order, batch_size, num_workers, worker_index, accumulation=accumulation, lengths_of=lengths_of
    )
    max_seq_length = arrays["input_ids"].shape[1] if bin_size else None
    d = d.map(
        lambda index: trim(
            {name: tf.gather(t, index) for name, t in tensors.items()}, bin_size, max_seq_length
        )
    )
    return d.prefetch(tf.data.AUTOTUNE)


def predict(
    step,
    arrays: dict,
    batch_size: int,
    progress_name: str,
    stream,
    *,
    bin_size: int = 0,
    sequence_outputs: tuple = (),
) -> dict[str, np.ndarray]:
    """The model's outputs (float32 arrays, one row per feature) over `arrays`, in input order.

    With bin_size the rows go by length (training/length_bins.by_length), each batch cut to its
    bin; the outputs named in `sequence_outputs` ([B, L]) are filled back to S with -inf past L:
    positions that are padding in every row of the batch."""
    from common.progress import Progress
    from training.length_bins import SEQUENCE_FEATURES, by_length

    rows, max_seq_length = arrays["input_ids"].shape
    outputs: dict[str, np.ndarray] = {}
    lengths = arrays["input_mask"].sum(axis=1)
    with Progress(progress_name, rows, unit="features", stream=stream) as progress:
        for index, real, length in by_length(lengths, batch_size, bin_size, max_seq_length):
            batch = {
                name: value[index][:, :length] if name in SEQUENCE_FEATURES else value[index]
                for name, value in arrays.items()
            }
            for name, value in step.predict(batch).items():
                value = np.asarray(value, np.float32)[:real]
                if name in sequence_outputs and value.shape[1] < max_seq_length:
                    filler = np.full((real, max_seq_length - value.shape[1]), -np.inf, np.float32)
                    value = np.concatenate([value, filler], axis=1)
                if name not in outputs:
                    outputs[name] = np.empty((rows, *value.shape[1:]), np.float32)
                outputs[name][index[:real]] = value
            progress(real)
    return outputs


def periodic_evaluation(
    step, task, split: str, every: int, last: int, features, batch_size: int, log, by_length: dict
):
    """loop.train's `periodic` for --eval_every_n_steps: every `every` updates before the last
    (whose evaluation follows training), the official metrics of `split` into the log (log.jsonl's
    {"step", "eval"} lines and TensorBoard's eval/ scalars); nothing is written on other ranks.
    by_length: predict's bin_size and sequence_outputs."""

    def evaluate(current: int) -> None:
        if current >= last or not log.enabled:
            return
        arrays, context = features  # rank 0's (None on the others, which never get here)
        outputs = predict(
            step, arrays, batch_size, f"evaluate {split} at step {current}", log.stream, **by_length
        )
        metrics = task.dev_metrics(split, outputs, context)
        if metrics is not None:
            log.record_eval(current, {"split": split, **metrics})
            print(f"{split} at step {current}: " + json.dumps(metrics), file=log.stream, flush=True)

    return every, evaluate


def update_of(s: FineTuningSettings, workers: int) -> job.Update:
    """The update `s` asks for on `workers` workers: linear decay after warmup, whatever the
    optimizer, counted from step 0 (Google's) or, with --decay_after_warmup, from the end of warmup;
    the optimizer's epsilon --adam_epsilon."""
    return job.Update(
        s.train_batch_size,
        s.num_accumulation_steps,
        s.learning_rate,
        workers,
        s.optimizer_type,
        decay_power=FINE_TUNING_DECAY_POWER,
        decay_from_warmup=s.decay_after_warmup,
        epsilon=s.adam_epsilon,
    )


@dataclasses.dataclass(kw_only=True)
class FineTuningPlan(job.Plan):
    """The job's plan with fine-tuning's data: the tokenizer and the training features."""

    tokenizer: object
    train_arrays: dict | None  # the training features, with --do_train


def _plan(s: FineTuningSettings, task, dist, out) -> FineTuningPlan:
    """Steps 1-3: config, vocab, features, steps; then the resolved settings reported."""
    from bert.tokenization import build_tokenizer
    from training.checkpointing import latest_checkpoint, write_model_files

    if dist.is_chief:
        ensure_writable_dir(s.output_dir)
    resume_from = latest_checkpoint(s.output_dir)
    config, vocab_file = load_model_files(s, resume_from)
    tokenizer = build_tokenizer(vocab_file=vocab_file, do_lower_case=s.do_lower_case)
    update, start = update_of(s, dist.size), 0
    if s.do_train:
        update, start = job.continue_update(update, resume_from, out)
    steps = warmup = 0
    train_arrays = None
    if s.do_train:
        train_arrays, num_examples = task.train_features(tokenizer, s.max_seq_length, seed=s.seed, stream=out)
        num_features = len(train_arrays["input_ids"])
        steps, warmup = train_steps(
            num_features, update.global_batch_size, s.num_train_epochs, s.warmup_proportion
        )
        if steps < 1:
            raise UserError(
                f"{num_features} training features x {s.num_train_epochs} epochs make no update of "
                f"{update.global_batch_size} (the global batch): lower --train_batch_size or raise "
                "--num_train_epochs."
            )
    resolved = {
        **dataclasses.asdict(s),
        **task.describe(),
        "vocab_file": vocab_file,
        **update.describe(),
        "bin_size": job.bin_size_of(s),
        "num_train_steps": steps,
        "num_warmup_steps": warmup,
        "resume_from": resume_from,
        "start_sequence": start,
    }
    if s.do_train:
        resolved["num_train_examples"] = num_examples
        resolved["num_train_features"] = num_features
    if dist.is_chief:
        path = os.path.join(s.output_dir, job.RESOLVED_CONFIG_NAME)
        # A predict/export-only run keeps the training record.
        job.report("fine-tuning", resolved, out, path if s.do_train or not os.path.exists(path) else None)
        write_model_files(config, vocab_file, s.output_dir)
    return FineTuningPlan(
        config=config,
        update=update,
        start_sequence=start,
        steps=steps,
        warmup=warmup,
        resume_from=resume_from,
        resolved=resolved,
        tokenizer=tokenizer,
        train_arrays=train_arrays,
    )


def _predict_and_export(
    s: FineTuningSettings, task, plan: FineTuningPlan, step, global_step: int, out, result: dict
):
    """Step 5b, rank 0: each split's predictions and official metrics; the SavedModel."""
    from training import loop

    for split in task.prediction_splits(do_eval=s.do_eval, do_predict=s.do_predict):
        arrays, context = task.predict_features(split, plan.tokenizer, s.max_seq_length, stream=out)
        outputs = predict(step, arrays, s.predict_batch_size, f"predict {split}", out, **_by_length(s, task))
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


def _by_length(s: FineTuningSettings, task) -> dict:
    """predict's keywords for the task's outputs under --bin_size."""
    sequence_outputs = tuple(name for name, dims in task.serving_outputs.items() if dims == [-1])
    return {"bin_size": job.bin_size_of(s), "sequence_outputs": sequence_outputs}


class FineTuningTask:
    """What every fine-tuning task does alike, for training.job.run. A subclass (SquadTask,
    GlueTask) gives its data and head: validate(do_train=, do_eval=, do_predict=), describe(),
    build_model(config, dtype), objective, train_features(tokenizer, max_seq_length, seed=,
    stream=), prediction_splits(do_eval=, do_predict=), predict_features(split, tokenizer,
    max_seq_length, stream=), dev_metrics(split, outputs, context), write_predictions(split,
    outputs, context, output_dir), serving_outputs and triton_name."""

    def validate_settings(self, s: FineTuningSettings) -> None:
        validate(s)
        self.validate(do_train=s.do_train, do_eval=s.do_eval, do_predict=s.do_predict)

    def plan(self, s: FineTuningSettings, dist, out) -> FineTuningPlan:
        return _plan(s, self, dist, out)

    def initialise(self, model, s: FineTuningSettings, plan: FineTuningPlan, out) -> None:
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

    def training_batches(self, s: FineTuningSettings, plan: FineTuningPlan, dist):
        return iter(
            training_dataset(
                plan.train_arrays,
                s.train_batch_size,
                num_workers=dist.size,
                worker_index=dist.rank,
                seed=s.seed,
                start=plan.start_sequence,
                accumulation=plan.update.accumulation_steps,
                bin_size=job.bin_size_of(s),
                group_by_length=s.group_by_length,
            )
        )

    def resumed(self, plan: FineTuningPlan, start: int, out) -> None:
        if plan.resume_from:
            print(f"Resuming from {plan.resume_from} (step {start} of {plan.steps}).", file=out)

    def periodic(self, s: FineTuningSettings, plan: FineTuningPlan, step, log, out):
        """--eval_every_n_steps' evaluation during training (rank 0 computes the features)."""
        if not s.eval_every_n_steps:
            return None
        split = self.prediction_splits(do_eval=True, do_predict=False)[0]
        features = (
            self.predict_features(split, plan.tokenizer, s.max_seq_length, stream=out)
            if step.distributed.is_chief
            else None
        )
        return periodic_evaluation(
            step,
            self,
            split,
            s.eval_every_n_steps,
            plan.steps,
            features,
            s.predict_batch_size,
            log,
            _by_length(s, self),
        )

    def loaded(self, plan: FineTuningPlan, out) -> None:
        print(f"Predicting with the weights of {plan.resume_from}.", file=out)

    def result_fields(self) -> dict:
        return {"results": {}, "export_dir": None}

    def finish(self, s: FineTuningSettings, plan: FineTuningPlan, step, result: dict, log, out) -> None:
        """Rank 0: each split's predictions and official metrics, the SavedModel; then every
        worker waits for it."""
        dist = step.distributed
        if dist.is_chief:
            _predict_and_export(s, self, plan, step, result["step"], out, result)
        dist.barrier()
