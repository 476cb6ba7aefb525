"""The fine-tuning job: plain settings and a task in, a fine-tuned and evaluated output directory out.

run_squad.py and run_classifier.py turn their flags into `FineTuningSettings` and a task
(training/squad_task.py, training/glue_task.py) and call `run`. The task says what the data,
the model head, the objective and the outputs are; everything else is the pretraining job's
machinery: the one TrainStep, the one loop, checkpoints (heads under Google's names), exact
resume, log.jsonl, TensorBoard and the progress line. In order:

1. cheap checks: values in range, the config and the vocab (beside --init_checkpoint when not
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
import sys

import numpy as np

from common.errors import UserError
from common.files import ensure_writable_dir, write_json
from training.pretraining_job import OPTIMIZER_TYPES

RESOLVED_CONFIG_NAME = "resolved_config.json"
# Fine-tuning decays linearly to 0 after warmup (Google's and NVIDIA's run_squad/run_classifier).
DECAY_POWER = 1.0


@dataclasses.dataclass(frozen=True)
class FineTuningSettings:
    """The flags run_squad.py and run_classifier.py share (see their --help for each)."""

    output_dir: str
    init_checkpoint: str | None = None
    bert_config_file: str | None = None  # default: the config beside init_checkpoint
    vocab_file: str | None = None  # default: the vocab.txt beside init_checkpoint
    do_lower_case: bool = True
    max_seq_length: int = 128
    train_batch_size: int = 32  # per worker, per micro-batch
    predict_batch_size: int = 8
    learning_rate: float = 5e-5  # per worker: the peak is this x workers
    num_train_epochs: float = 3.0
    warmup_proportion: float = 0.1
    num_accumulation_steps: int = 1
    optimizer_type: str = "adam_weight_decay"
    precision: str = "fp32"
    use_xla: bool = True
    use_horovod: bool = False
    do_train: bool = False
    do_eval: bool = False
    do_predict: bool = False
    save_checkpoints_steps: int = 1000
    keep_checkpoints: int = 3
    log_every_n_steps: int = 10
    eval_every_n_steps: int = 0  # 0: evaluate after training only
    seed: int = 12345
    deterministic: bool = True
    export_dir: str | None = None
    triton_repository: str | None = None


def validate(s: FineTuningSettings) -> None:
    """UserError naming the first flag whose value cannot work."""
    from training.precision import PRECISIONS

    if s.triton_repository and not s.export_dir:
        raise UserError("--triton_repository needs --export_dir (the SavedModel it copies).")
    if s.export_dir and os.path.isdir(s.export_dir) and os.listdir(s.export_dir):  # not after training
        raise UserError(f"--export_dir {s.export_dir} exists and is not empty; choose a new directory.")
    if not (s.do_train or s.do_eval or s.do_predict or s.export_dir):
        raise UserError("Nothing to do: pass --do_train, --do_eval, --do_predict and/or --export_dir.")
    if not s.output_dir:
        raise UserError("--output_dir is required.")
    for name in (
        "max_seq_length",
        "train_batch_size",
        "predict_batch_size",
        "num_accumulation_steps",
        "save_checkpoints_steps",
        "keep_checkpoints",
        "log_every_n_steps",
    ):
        if getattr(s, name) < 1:
            raise UserError(f"--{name} must be at least 1 (got {getattr(s, name)}).")
    if s.eval_every_n_steps < 0:
        raise UserError(f"--eval_every_n_steps must be 0 (off) or positive (got {s.eval_every_n_steps}).")
    if s.eval_every_n_steps and not (s.do_train and s.do_eval):
        raise UserError("--eval_every_n_steps evaluates during training: it needs --do_train and --do_eval.")
    if not s.learning_rate > 0:
        raise UserError(f"--learning_rate must be > 0 (got {s.learning_rate}).")
    if s.do_train and not s.num_train_epochs > 0:
        raise UserError(f"--num_train_epochs must be > 0 (got {s.num_train_epochs}).")
    if not 0 <= s.warmup_proportion <= 1:
        raise UserError(f"--warmup_proportion must lie in [0, 1] (got {s.warmup_proportion}).")
    if s.optimizer_type not in OPTIMIZER_TYPES:
        raise UserError(
            f"--optimizer_type must be one of {', '.join(OPTIMIZER_TYPES)} (got {s.optimizer_type!r})."
        )
    if s.precision not in PRECISIONS:
        raise UserError(f"--precision must be one of {', '.join(PRECISIONS)} (got {s.precision!r}).")


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


def training_dataset(arrays: dict, batch_size: int, *, num_workers: int, worker_index: int, seed: int):
    """Fixed-shape training batches of one worker from in-memory feature arrays: this worker's
    share of the rows (every num_workers-th), reshuffled each epoch, repeated, batch B.

    The shuffle runs over row indices, so a checkpoint of the iterator (its position, for an
    exact resume) holds indices, not feature rows."""
    import tensorflow as tf

    rows = len(next(iter(arrays.values())))
    mine = np.arange(worker_index, rows, num_workers, dtype=np.int64)
    if len(mine) < batch_size:
        raise UserError(
            f"{rows} training features for {num_workers} worker(s) leave {len(mine)} per worker, "
            f"fewer than --train_batch_size={batch_size}."
        )
    tensors = {name: tf.constant(value) for name, value in arrays.items()}
    d = tf.data.Dataset.from_tensor_slices(mine)
    d = d.shuffle(len(mine), seed=seed, reshuffle_each_iteration=True).repeat()
    d = d.batch(batch_size, drop_remainder=True)
    d = d.map(lambda index: {name: tf.gather(t, index) for name, t in tensors.items()})
    return d.prefetch(tf.data.AUTOTUNE)


def batches_in_order(arrays: dict, batch_size: int):
    """(batch, real rows) over every row once, the last batch padded by repeating its final row so
    every batch has the compiled shape; the caller keeps the first `real rows` outputs."""
    rows = len(next(iter(arrays.values())))
    for start in range(0, rows, batch_size):
        stop = min(start + batch_size, rows)
        index = np.minimum(np.arange(start, start + batch_size), rows - 1)
        yield {name: value[index] for name, value in arrays.items()}, stop - start


def predict(step, arrays: dict, batch_size: int, progress_name: str, stream) -> dict[str, np.ndarray]:
    """The model's outputs (float32 arrays, one row per feature) over `arrays`, in order."""
    from common.progress import Progress

    rows = len(next(iter(arrays.values())))
    parts: dict[str, list] = {}
    with Progress(progress_name, rows, unit="features", stream=stream) as progress:
        for batch, real in batches_in_order(arrays, batch_size):
            outputs = step.predict(batch)
            for name, value in outputs.items():
                parts.setdefault(name, []).append(np.asarray(value)[:real])
            progress(real)
    return {name: np.concatenate(values) for name, values in parts.items()}


def periodic_evaluation(step, task, split: str, every: int, last: int, features, batch_size: int, log):
    """loop.train's `periodic` for --eval_every_n_steps: every `every` updates before the last
    (whose evaluation follows training), the official metrics of `split` into the log (log.jsonl's
    {"step", "eval"} lines and TensorBoard's eval/ scalars); nothing is written on other ranks."""

    def evaluate(current: int) -> None:
        if current >= last or not log.enabled:
            return
        arrays, context = features  # rank 0's (None on the others, which never get here)
        outputs = predict(step, arrays, batch_size, f"evaluate {split} at step {current}", log.stream)
        metrics = task.dev_metrics(split, outputs, context)
        if metrics is not None:
            log.record_eval(current, {"split": split, **metrics})
            print(f"{split} at step {current}: " + json.dumps(metrics), file=log.stream, flush=True)

    return every, evaluate


def _print_resolved(resolved: dict, stream) -> None:
    print("Resolved fine-tuning settings:", file=stream)
    width = max(len(k) for k in resolved)
    for key in sorted(resolved):
        print(f"  {key:<{width}}  {json.dumps(resolved[key])}", file=stream)
    stream.flush()


def run(s: FineTuningSettings, task, stream=None) -> dict:
    """Fine-tunes, predicts and evaluates `task` (training.squad_task.SquadTask or
    training.glue_task.GlueTask); returns {"resolved", "model", "train" (last metrics or None),
    "results" ({split: metrics}), "export_dir"}. Problems the user can fix raise UserError
    before any model is built."""
    stream = stream if stream is not None else sys.stdout
    validate(s)
    task.validate(do_train=s.do_train, do_eval=s.do_eval, do_predict=s.do_predict)
    import keras
    import tensorflow as tf

    from bert.checkpoints import global_step_of, load_for_fine_tuning, load_weights
    from bert.tokenization import build_tokenizer
    from optimization import WarmupPolynomialDecay, create_optimizer, scaled_learning_rate
    from training import loop
    from training.checkpointing import Checkpointer, latest_checkpoint, write_model_files
    from training.distributed import Distributed
    from training.metrics_log import MetricsLog
    from training.precision import configure_precision
    from training.train_step import TrainStep

    if s.deterministic:
        tf.config.experimental.enable_op_determinism()
    dist = Distributed(use_horovod=s.use_horovod)
    chief = dist.is_chief
    out = stream if chief else open(os.devnull, "w")
    if chief:
        ensure_writable_dir(s.output_dir)
    resume_from = latest_checkpoint(s.output_dir)

    # 1-2. Config, vocab, features, steps.
    config, vocab_file = load_model_files(s, resume_from)
    tokenizer = build_tokenizer(vocab_file=vocab_file, do_lower_case=s.do_lower_case)
    steps = warmup = 0
    train_arrays = None
    global_batch = s.train_batch_size * s.num_accumulation_steps * dist.size
    if s.do_train:
        train_arrays, num_examples = task.train_features(tokenizer, s.max_seq_length, seed=s.seed, stream=out)
        num_features = len(train_arrays["input_ids"])
        steps, warmup = train_steps(num_features, global_batch, s.num_train_epochs, s.warmup_proportion)
        if steps < 1:
            raise UserError(
                f"{num_features} training features x {s.num_train_epochs} epochs make no update of "
                f"{global_batch} (the global batch): lower --train_batch_size or raise --num_train_epochs."
            )

    # 3. What will run.
    peak = scaled_learning_rate(s.learning_rate, dist.size)
    resolved = {
        **dataclasses.asdict(s),
        **task.describe(),
        "vocab_file": vocab_file,
        "workers": dist.size,
        "global_batch_size": global_batch,
        "effective_learning_rate": peak,
        "num_train_steps": steps,
        "num_warmup_steps": warmup,
        "resume_from": resume_from,
    }
    if s.do_train:
        resolved["num_train_examples"] = num_examples
        resolved["num_train_features"] = num_features
    if chief:
        _print_resolved(resolved, out)
        path = os.path.join(s.output_dir, RESOLVED_CONFIG_NAME)
        if s.do_train or not os.path.exists(path):  # a predict/export-only run keeps the training record
            write_json(path, resolved)
        write_model_files(config, vocab_file, s.output_dir)

    # 4. Model, optimizer, step; where to start.
    keras.utils.set_random_seed(s.seed + dist.rank)
    model = task.build_model(config, configure_precision(s.precision))
    if not resume_from and s.init_checkpoint:
        head = load_for_fine_tuning(model, s.init_checkpoint)
        print(
            f"Initialised the encoder{' and the head' if head else ''} from {s.init_checkpoint}"
            f"{'' if head else '; the head starts fresh'}.",
            file=out,
        )
    elif not resume_from:
        print("No --init_checkpoint: the encoder starts from random weights.", file=out)
    schedule = WarmupPolynomialDecay(peak, warmup, max(steps, 1), DECAY_POWER) if s.do_train else peak
    optimizer = create_optimizer(s.optimizer_type, schedule)
    step = TrainStep(
        model,
        optimizer,
        task.objective,
        accumulation_steps=s.num_accumulation_steps,
        distributed=dist,
        jit_compile=s.use_xla,
    )
    result = {"resolved": resolved, "model": model, "train": None, "results": {}, "export_dir": None}
    if s.do_train:
        iterator = iter(
            training_dataset(
                train_arrays, s.train_batch_size, num_workers=dist.size, worker_index=dist.rank, seed=s.seed
            )
        )
        checkpointer = Checkpointer(s.output_dir, step, iterator, keep=s.keep_checkpoints, distributed=dist)
        checkpointer.remove_leftovers()
        start = loop.resume(checkpointer, step)
        if resume_from:
            print(f"Resuming from {resume_from} (step {start} of {steps}).", file=out)
        log = MetricsLog(
            s.output_dir,
            total_steps=steps,
            start_step=start,
            sequences_per_update=global_batch,
            log_every=s.log_every_n_steps,
            enabled=chief,
            stream=out,
        )
        periodic = None
        if s.eval_every_n_steps:
            split = task.prediction_splits(do_eval=True, do_predict=False)[0]
            features = (
                task.predict_features(split, tokenizer, s.max_seq_length, stream=out) if chief else None
            )
            periodic = periodic_evaluation(
                step, task, split, s.eval_every_n_steps, steps, features, s.predict_batch_size, log
            )
        result["train"] = loop.train(
            step,
            iterator,
            checkpointer,
            log,
            num_train_steps=steps,
            save_checkpoints_steps=s.save_checkpoints_steps,
            periodic=periodic,
        )
    elif resume_from:
        load_weights(model, resume_from)
        print(f"Predicting with the weights of {resume_from}.", file=out)

    # 5. Predictions and metrics (rank 0), export.
    source = resume_from or s.init_checkpoint
    global_step = int(optimizer.iterations) if s.do_train else (global_step_of(source) or 0 if source else 0)
    if chief:
        for split in task.prediction_splits(do_eval=s.do_eval, do_predict=s.do_predict):
            arrays, context = task.predict_features(split, tokenizer, s.max_seq_length, stream=out)
            outputs = predict(step, arrays, s.predict_batch_size, f"predict {split}", out)
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
                model, s.export_dir, tuple(task.serving_outputs), stream=out
            )
            if s.triton_repository:
                where = write_triton_repository(
                    s.export_dir, s.triton_repository, task.triton_name, task.serving_outputs
                )
                print(f"Wrote the Triton model {where} (config.pbtxt, 1/model.savedmodel).", file=out)
    dist.barrier()
    if out is not stream:
        out.close()
    return result
