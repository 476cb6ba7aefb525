"""Our whole pretraining update against keras-hub's, side by side, as a markdown table.

    .venv/bin/python -m bench pretrain_throughput --quick     # smoke run: mini, fp32, XLA, ~2 min
    .venv/bin/python -m bench pretrain_throughput             # mini + base, every variant; hours
    .venv/bin/python -m bench pretrain_throughput --models base --precisions fp32 --xla on \\
        --data synthetic --accumulation 1                     # one headline row pair
    .venv/bin/python -m bench pretrain_throughput --seq_lengths 128,512 --horovod_workers 2
    .venv/bin/python -m bench pretrain_throughput --baseline HEAD~2,HEAD~1   # levers on/off
    .venv/bin/python -m bench pretrain_throughput --optimizers lamb,adamw    # the update like for like

What one measured update is, per stack:

- ours: what run_pretraining.py runs, built by the calls training/pretraining_job.py makes
  (training/job.py: the precision's BertPretrainer, WarmupPolynomialDecay + create_optimizer("lamb"),
  the TrainStep with the job's seed, determinism and input settings): the `accumulation`
  micro-batches in one compiled loop and the LAMB update (one XLA program per update on one
  worker; under --horovod_workers the loop, the Horovod sum, then the update; --optimizers adamw
  adds a row of the same update with the job's AdamW, the optimizer keras-hub runs), and the host-side
  metric read-back, after every update (--read_every 1) or, as the job's loop does at its log
  steps, after every N (TrainStep.dispatch queues, TrainStep.read reads; a repeat always ends
  with a read, so its clock stops when the device is done).
- keras-hub 0.32: BertBackbone of the same sizes + MaskedLMHead (tied to the backbone's
  token_embedding, gelu, the masked positions as mask_positions) + Dense(2) on the pooled output,
  keras.optimizers.AdamW(1e-4, weight_decay=0.01), in a tf.function(jit_compile=XLA) step with
  GradientTape; loss: cross-entropy over the masked positions weighted by masked_lm_weights + NSP
  cross-entropy. One process, batch B per step, no accumulation.

Both stacks read the same batches: --data synthetic cycles 4 in-memory batches shaped like
create_pretraining_data output (no input cost at all); --data tfrecord reads TFRecords through
the job's pipeline (training.input_pipeline.training_dataset: the global order's file order,
window shuffle, micro-batches dealt to the workers, parse), from --tfrecords or, without it, from small temporary files written
here in the pretraining schema (data/pretraining/schema.py + tfrecord.py), so both data paths are
always measured. keras-hub has no reader of this schema, so it reads through ours too: the ratio
compares the updates, not the readers.

Method. Every (stack, configuration) runs in its own child process, so peak RSS, XLA caches and
allocator state never mix. The two children of a configuration are started one after the other
and compile and warm up (--warmup micro-batches, whole updates, untimed); then the parent has
them take turns, one timed repeat of --steps micro-batches at a time (ours, keras-hub, keras-hub,
ours, ...), --repeats times; the child not being timed is paused (SIGSTOP on its process group:
an idle Horovod worker's background loop alone took ~20% of 2 cores from the other stack) and
a control file starts each repeat. A slow minute on a shared machine therefore hits both stacks
alike, and the ratio is taken repeat by repeat. Each child prints one JSON line per repeat;
the parent reports the median seq/s, its spread (min-max and (max-min)/median), the median of
the per-repeat ratios ours/keras-hub with their min-max, and each child's peak RSS (VmHWM, build
and compile included; bench/harness.py says how it is read). keras-hub is re-measured beside each
of our rows (accumulation and worker variants included) so every ratio has its own paired
reference.

Levers on/off: --baseline REV[,REV...] adds, beside each of our rows, our update as the library
was at each git revision (a temporary `git worktree` of it; its child imports bert/, training/
and optimization/ from there, measured by this file): a revision before a speed change against
the working tree shows what that change pays, paired and interleaved like the keras-hub rows.
The child builds the update through the revision's training/job.py, so a revision must have one
(those before it wired the update by hand).

Settings applied to both stacks alike: TF gets one intra-op thread per usable core (per worker
under Horovod) and one inter-op thread (bench/model_throughput.py says why); the precision is
set by the job's training.precision.configure_precision (fp32: float32 and TF32 off; bf16:
mixed_bfloat16, TF32 allowed), and TF op determinism follows --deterministic (the job's default:
on).

Shapes: phase 1 is seq 128 with 20 predictions, phase 2 seq 512 with 80; default batches: mini
32 and base 16 at seq 128, 4 at seq 512 (--batch_size overrides). Note that configs/bert_small.json
is L4/H512; the 4-layer 256-hidden model (L4/H256) is configs/bert_mini.json.

Time on an idle 2-core machine (default --repeats 3 --steps 4; each configuration is two
children that start, compile and warm up, then 3 x 4 timed micro-batches each): a mini
configuration takes ~2 min, a base one ~8-10 min in fp32 (a base micro-batch of 16 is ~11 s) and
up to twice that in bf16 on CPUs without native bfloat16 (AVX2). The default matrix (2 models x
fp32,bf16 x XLA on,off x synthetic,tfrecord x accumulation 1,4 = 32 configurations) takes about
3-4 hours; --precisions fp32 --xla on (8 configurations) about 45 min. --seq_lengths 128,512
doubles the count (a base micro-batch of 4 at seq 512 costs about as much as 16 at 128), and
--horovod_workers 2 adds one configuration per existing one.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# This checkout's bench modules, in a --baseline child too (they import no library module at the
# top, so the library still comes from CODE_ROOT below).
from bench import harness  # noqa: E402
from bench.model_throughput import config_path, random_pretraining_batch  # noqa: E402

# Where the library is imported from: this checkout, or (in a --baseline child) a worktree of an
# earlier revision.
CODE_ROOT = os.environ.get("BENCH_CODE_ROOT", ROOT)
sys.path.insert(0, CODE_ROOT)

# Pure Python: the parent never imports TensorFlow.
from bert.config import BertConfig  # noqa: E402

# Shapes: B batch (per worker, per micro-batch), S sequence, P masked positions.

STACKS = ("ours", "keras-hub")
OPTIMIZERS = ("lamb", "adamw")  # ours: the job's --optimizer_type names
OPTIMIZER_NAMES = {"lamb": "LAMB", "adamw": "AdamW"}
PRECISIONS = ("fp32", "bf16")  # the job's --precision names
DATA = ("synthetic", "tfrecord")
DEFAULT_MODELS = ("mini", "base")
DEFAULT_BATCH = {("mini", 128): 32, ("base", 128): 16}
PHASE2_BATCH = 4  # any model at seq 512
FALLBACK_BATCH = 8
SYNTHETIC_BATCHES = 4  # distinct in-memory batches, cycled (an update of 4 sees 4 different ones)
TEMP_FILES, TEMP_RECORDS_PER_FILE = 2, 256  # enough files for 2 workers
PEER_LEARNING_RATE, PEER_WEIGHT_DECAY = 1e-4, 0.01
CONTROL_POLL_S = 0.02
KERAS_HUB_INSTALL = (
    ".venv/bin/pip install --no-deps keras-hub==0.32.0 tensorflow-text==2.21.1 "
    "&& .venv/bin/pip install kagglehub kagglesdk==0.1.28 regex rich sentencepiece namex"
)


# ----------------------------------------------------------------------------- child process


def synthetic_batches(vocab_size: int, batch: int, seq_length: int, predictions: int, seed: int) -> list:
    """SYNTHETIC_BATCHES feature dicts of eager tensors (the dtypes pretraining_dataset yields)."""
    import tensorflow as tf

    return [
        {
            k: tf.constant(v)
            for k, v in random_pretraining_batch(vocab_size, batch, seq_length, predictions, seed + i).items()
        }
        for i in range(SYNTHETIC_BATCHES)
    ]


def input_batches(spec: dict, vocab_size: int, rank: int, size: int, settings=None):
    """An endless iterator of this worker's micro-batches: dicts of int32 [B, S] / [B, P] tensors,
    float32 masked_lm_weights [B, P], int32 next_sentence_labels [B, 1]."""
    from common.files import expand_globs

    if spec["data"] == "synthetic":
        batches = synthetic_batches(
            vocab_size, spec["batch"], spec["seq_length"], spec["predictions"], spec["seed"] + 1000 * rank
        )
        return itertools.cycle(batches)
    from training.input_pipeline import naming_corrupt_files, training_dataset
    from training.pretraining_job import PretrainingSettings

    defaults = settings or PretrainingSettings(bert_config_file="", output_dir="")
    files = expand_globs(spec["tfrecords"], "training files", source="--tfrecords")
    dataset = training_dataset(
        files,
        spec["batch"],
        spec["seq_length"],
        spec["predictions"],
        num_workers=size,
        worker_index=rank,
        seed=defaults.seed,
        window=defaults.shuffle_buffer,
    )
    return naming_corrupt_files(iter(dataset), files)


def build_ours(spec: dict):
    """The job's model, optimizer and step, built by training/job.py as training/pretraining_job.py
    builds them.

    Returns (update, finish, sequences per update on this worker, Distributed): with
    spec["read_every"] N > 1, update queues (TrainStep.dispatch) and reads every N updates
    (TrainStep.read), as the job's loop does at its log steps; finish reads what is still queued."""
    import dataclasses

    from bert.config import read_config_file
    from bert.pretraining import BertPretrainer
    from training.distributed import Distributed
    from training.pretraining_job import PretrainingSettings, PretrainingTask
    from training.pretraining_objective import PretrainingObjective

    try:
        from training import job
    except ImportError:
        raise RuntimeError("this revision has no training/job.py to build the job's update with.") from None

    s = PretrainingSettings(bert_config_file=spec["config_path"], output_dir="")
    s = dataclasses.replace(
        s,
        max_seq_length=spec["seq_length"],
        max_predictions_per_seq=spec["predictions"],
        train_batch_size=spec["batch"],
        num_accumulation_steps=spec["accumulation"],
        optimizer_type=spec.get("optimizer", "lamb"),
        precision=spec["precision"],
        use_xla=spec["xla"],
        use_horovod=spec["workers"] > 1,
        deterministic=spec["deterministic"],
    )
    dist = Distributed(use_horovod=s.use_horovod)
    config = read_config_file(s.bert_config_file)
    batches = input_batches(spec, config.vocab_size, dist.rank, dist.size, settings=s)
    model = job.build_model(
        lambda dtype: BertPretrainer(config, dtype=dtype), seed=s.seed, precision=s.precision, rank=dist.rank
    )
    update = PretrainingTask().update(s, dist.size)  # what run_pretraining.py's job builds
    step = update.build(
        model,
        PretrainingObjective(),
        warmup_steps=s.num_warmup_steps,
        train_steps=s.num_train_steps,
        distributed=dist,
        jit_compile=s.use_xla,
    )

    every = spec.get("read_every", 1)
    if every > 1 and not hasattr(step, "dispatch"):
        raise RuntimeError("--read_every needs TrainStep.dispatch, which this revision does not have.")
    queued = []

    def check(metrics):
        if not metrics["applied"]:
            raise FloatingPointError(f"the update was not applied (loss {metrics['loss']})")

    def finish():
        for metrics in step.read(queued) if queued else []:  # one wait for the device
            check(metrics)
        queued.clear()

    def update():
        if every == 1:
            check(step(batches))  # blocks: it reads the update's metrics back to the host
            return
        queued.append(step.dispatch(batches))
        if len(queued) == every:
            finish()

    return update, finish, s.train_batch_size * s.num_accumulation_steps, dist


def build_keras_hub(spec: dict):
    """keras-hub's BERT pretraining model, AdamW and a GradientTape step on the same batches.

    Returns (update, finish (nothing to do: every update reads its loss), sequences per update,
    Distributed for one process)."""
    try:
        import keras_hub
    except Exception as err:  # ImportError, or a dependency failing inside its import
        raise RuntimeError(
            f"keras_hub is not importable ({type(err).__name__}: {err}); install: {KERAS_HUB_INSTALL}"
        ) from None
    import keras
    import tensorflow as tf

    from bert.config import read_config_file
    from training.distributed import Distributed
    from training.precision import configure_precision

    config = read_config_file(spec["config_path"])
    policy = configure_precision(spec["precision"])  # the same TF32 switch as ours
    batches = input_batches(spec, config.vocab_size, 0, 1)
    keras.utils.set_random_seed(spec["seed"])
    initializer = keras.initializers.TruncatedNormal(stddev=config.initializer_range)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=config.vocab_size,
        num_layers=config.num_hidden_layers,
        num_heads=config.num_attention_heads,
        hidden_dim=config.hidden_size,
        intermediate_dim=config.intermediate_size,
        dropout=config.hidden_dropout_prob,
        max_sequence_length=config.max_position_embeddings,
        num_segments=config.type_vocab_size,
        dtype=policy,
    )
    mask_positions = keras.Input(shape=(None,), dtype="int32", name="mask_positions")
    encoded = backbone(backbone.input)
    mlm_head = keras_hub.layers.MaskedLMHead(
        vocabulary_size=config.vocab_size,
        token_embedding=backbone.token_embedding,
        intermediate_activation="gelu",
        kernel_initializer=initializer,
        dtype=backbone.dtype_policy,
        name="mlm_head",
    )
    nsp_head = keras.layers.Dense(
        2, kernel_initializer=initializer, dtype=backbone.dtype_policy, name="nsp_head"
    )
    model = keras.Model(
        inputs={**backbone.input, "mask_positions": mask_positions},
        outputs={
            "mlm_logits": mlm_head(encoded["sequence_output"], mask_positions),  # [B, P, V]
            "nsp_logits": nsp_head(encoded["pooled_output"]),  # [B, 2]
        },
    )
    optimizer = keras.optimizers.AdamW(learning_rate=PEER_LEARNING_RATE, weight_decay=PEER_WEIGHT_DECAY)
    variables = model.trainable_variables
    optimizer.build(variables)  # slots exist before the compiled step, as ours builds LAMB's

    def train_step(features):
        inputs = {
            "token_ids": features["input_ids"],
            "segment_ids": features["segment_ids"],
            "padding_mask": features["input_mask"],
            "mask_positions": features["masked_lm_positions"],
        }
        with tf.GradientTape() as tape:
            outputs = model(inputs, training=True)
            weights = tf.cast(features["masked_lm_weights"], tf.float32)  # [B, P]
            mlm = keras.losses.sparse_categorical_crossentropy(
                features["masked_lm_ids"], tf.cast(outputs["mlm_logits"], tf.float32), from_logits=True
            )  # [B, P]
            nsp = keras.losses.sparse_categorical_crossentropy(
                tf.reshape(features["next_sentence_labels"], [-1]),
                tf.cast(outputs["nsp_logits"], tf.float32),
                from_logits=True,
            )  # [B]
            loss = tf.reduce_sum(mlm * weights) / (tf.reduce_sum(weights) + 1e-5) + tf.reduce_mean(nsp)
        gradients = tape.gradient(loss, variables)
        optimizer.apply(gradients, variables)
        return loss

    step = tf.function(train_step, jit_compile=spec["xla"])

    def update():
        loss = float(step(next(batches)).numpy())  # blocks until the step is done
        if not math.isfinite(loss):
            raise FloatingPointError(f"the loss is not finite ({loss})")

    return update, lambda: None, spec["batch"], Distributed(use_horovod=False)


def wait_for_command(control_dir: str, repeat: int, timeout_s: float) -> str:
    """'go' once the parent has created go-<repeat>, 'stop' once it has created stop."""
    deadline = time.monotonic() + timeout_s
    go, stop = os.path.join(control_dir, f"go-{repeat}"), os.path.join(control_dir, "stop")
    while time.monotonic() < deadline:
        if os.path.exists(stop):
            return "stop"
        if os.path.exists(go):
            return "go"
        time.sleep(CONTROL_POLL_S)
    return "stop"  # the parent is gone


def measure(spec: dict) -> None:
    """The child: builds its stack's update, compiles and warms it up, emits "ready", then times
    one repeat each time the parent says go (one "repeat" event per worker)."""
    import tensorflow as tf

    # Before TF creates its thread pools (bench/model_throughput.py explains one inter-op thread).
    tf.config.threading.set_intra_op_parallelism_threads(spec["threads"])
    tf.config.threading.set_inter_op_parallelism_threads(1)
    if spec["deterministic"]:
        tf.config.experimental.enable_op_determinism()
    ours = spec["stack"] != "keras-hub"  # "ours", or "ours@REV" for a --baseline revision
    update, finish, sequences, dist = (build_ours if ours else build_keras_hub)(spec)
    per_update = spec["accumulation"] if ours else 1
    tag = f"{spec['label']} {spec['stack']}" + (f" rank {dist.rank}" if dist.size > 1 else "")

    first_s, _ = harness.timed(update)
    warm_updates = math.ceil(spec["warmup"] / per_update)
    for _ in range(warm_updates - 1):
        update()
    finish()
    if dist.is_chief:
        harness.log(
            f"{tag}: first update {first_s:.1f}s, {warm_updates} warm-up update(s); "
            f"RSS {harness.rss_mb():,.0f} MB, peak {harness.peak_rss_mb():,.0f} MB"
        )
    harness.emit({"event": "ready", "rank": dist.rank, "size": dist.size, "first_update_s": first_s})

    updates = math.ceil(spec["steps"] / per_update)

    def timed_repeat():
        for _ in range(updates):
            update()
        finish()  # the clock stops when the device is done

    for repeat in itertools.count():
        # Paused between its repeats, it sees the time the other stack's repeats took pass too.
        if wait_for_command(spec["control_dir"], repeat, 3 * spec["timeout"]) == "stop":
            break
        dist.barrier()  # workers start the clock together
        elapsed, _ = harness.timed(timed_repeat)
        rate = sequences * updates / elapsed
        harness.emit({"event": "repeat", "repeat": repeat, "rank": dist.rank, "seq_per_s": rate})


# ---------------------------------------------------------------------------- parent process


class StackChild:
    """One stack's measuring child (or `workers` of them under horovodrun), told through files in
    its control directory when to time a repeat and when to stop."""

    def __init__(self, spec: dict, workdir: str, timeout_s: float):
        self.workers = spec["workers"]
        self.timeout_s = timeout_s
        spec["control_dir"] = self.control_dir = tempfile.mkdtemp(prefix="control-", dir=workdir)
        argv = harness.child_argv(__file__, spec)
        if self.workers > 1:
            n = str(self.workers)
            argv = [horovodrun_path(), "-np", n, "-H", f"localhost:{n}", "--gloo", *argv]
        code_root = spec.get("code_root", ROOT)
        env = {
            "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
            "PYTHONPATH": code_root,
            "BENCH_CODE_ROOT": code_root,
            # OpenMPI's busy polling would take the cores from TensorFlow (tests/conftest.py).
            "OMPI_MCA_mpi_yield_when_idle": "1",
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(spec["threads"])),
        }
        self.child = harness.Child(argv, env=env, cwd=code_root)

    def wait_for(self, kind: str, repeat: int | None = None) -> list[dict]:
        """One `kind` event from every worker (sorted by rank); ChildFailed on an error, a crash
        or the timeout."""
        got: dict[int, dict] = {}
        deadline = time.monotonic() + self.timeout_s
        while len(got) < self.workers:
            event = self.child.next_event(max(0.1, deadline - time.monotonic()))
            if event["event"] == kind and (repeat is None or event.get("repeat") == repeat):
                got[event["rank"]] = event
        return [got[r] for r in sorted(got)]

    def go(self, repeat: int) -> list[dict]:
        """Resumes the child, has it time one repeat, and pauses it again."""
        self.child.resume()
        open(os.path.join(self.control_dir, f"go-{repeat}"), "w").close()
        events = self.wait_for("repeat", repeat)
        self.child.pause()
        return events

    def stop(self) -> float | None:
        """Ends the child; returns its peak RSS in MB: of the process, or under horovodrun of the
        largest worker (None where it did not end by itself)."""
        self.child.resume()
        open(os.path.join(self.control_dir, "stop"), "w").close()
        try:
            done = self.child.wait(timeout_s=120)
        except harness.ChildFailed:
            return None
        return done.peak_rss_mb if self.workers == 1 else done.children_peak_rss_mb


def horovodrun_path() -> str | None:
    return shutil.which(
        "horovodrun", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    )


def horovod_missing() -> str | None:
    """Why 2-worker rows cannot run here, or None."""
    import importlib.util

    if importlib.util.find_spec("horovod") is None:
        return "horovod is not installed in this Python (bash scripts/setup.sh builds it)"
    if horovodrun_path() is None:
        return "horovodrun is not on PATH"
    return None


def keras_hub_missing() -> str | None:
    import importlib.util

    if importlib.util.find_spec("keras_hub") is None:
        return f"keras_hub is not importable in {sys.executable}; install it with: {KERAS_HUB_INSTALL}"
    return None


def write_temporary_records(
    directory: str, seq_length: int, predictions: int, vocab_size: int, seed: int
) -> str:
    """TEMP_FILES small TFRecord files in the pretraining schema; returns their glob."""
    from data.pretraining import schema, tfrecord

    os.makedirs(directory, exist_ok=True)
    for i in range(TEMP_FILES):
        features = random_pretraining_batch(
            vocab_size, TEMP_RECORDS_PER_FILE, seq_length, predictions, seed + i
        )
        with tfrecord.RecordWriter(os.path.join(directory, f"part-{i:02d}.tfrecord")) as writer:
            for row in range(TEMP_RECORDS_PER_FILE):
                writer.write(schema.serialize_example({k: v[row].tolist() for k, v in features.items()}))
    return os.path.join(directory, "*.tfrecord")


def parse_tfrecords(values: list[str] | None, seq_lengths: list[int]) -> dict[int, str]:
    """--tfrecords GLOB (every sequence length) or S=GLOB (one) -> {S: glob}; checks they match."""
    from common.errors import UserError
    from common.files import expand_globs

    globs: dict[int, str] = {}
    for value in values or []:
        head, sep, rest = value.partition("=")
        if sep and head.strip().isdigit():
            globs[int(head)] = rest
        else:
            globs.update({s: value for s in seq_lengths})
    for pattern in globs.values():
        try:
            expand_globs(pattern, "TFRecord files", source="--tfrecords")
        except UserError as err:
            raise SystemExit(str(err)) from None
    return globs


def default_predictions(seq_length: int) -> int:
    """P of phase 1 or phase 2 at their S (data/paths), else masked_lm_prob x S (parent only: a
    --baseline child's tree may predate data/paths' tables)."""
    from data import paths

    predictions = dict(paths.PHASE_SHAPES.values())
    return predictions.get(
        seq_length, max(1, round(seq_length * paths.DEFAULT_TFRECORD_PARAMS["masked_lm_prob"]))
    )


def ours_name(optimizer: str, read_every: int) -> str:
    """A stack of ours: "ours" (LAMB, read after every update), else with what differs."""
    name = "ours" if optimizer == "lamb" else f"ours {OPTIMIZER_NAMES[optimizer]}"
    return name if read_every == 1 else f"{name}, reads every {read_every}"


def default_batch(model: str, seq_length: int) -> int:
    if seq_length >= 512:
        return PHASE2_BATCH
    return DEFAULT_BATCH.get((model, seq_length), FALLBACK_BATCH)


def spread(values: list[float]) -> str:
    if len(values) < 2:
        return "-"
    percent = 100 * (max(values) - min(values)) / statistics.median(values)
    return f"{harness.min_max(values)} ({percent:.0f}%)"


def measure_pair(specs: dict, repeats: int, workdir: str, timeout_s: float) -> dict:
    """Starts the children of {stack: spec} one after the other, then interleaves their repeats
    (harness.interleaved: in --stacks order on even repeats, reversed on odd ones); a child is
    paused (SIGSTOP) whenever it is not the one being timed.

    Returns {stack: {"rates": per repeat, the list of each worker's seq/s; "rss_mb": its peak RSS
    (of the largest worker); "workers"; "error": why it failed, when it did}}."""
    results: dict = {
        name: {
            "rates": [],
            "rss_mb": None,
            "workers": spec["workers"],
            "optimizer": OPTIMIZER_NAMES[spec.get("optimizer", "lamb")],
        }
        for name, spec in specs.items()
    }
    children: dict = {}

    def failed(name, err):
        results[name]["error"] = harness.error_cell(str(err))
        harness.log(f"  {name}: FAILED: {results[name]['error']}")
        children.pop(name, None)

    try:
        for name, spec in specs.items():
            try:
                children[name] = StackChild(dict(spec), workdir, timeout_s)
                children[name].wait_for("ready")
                children[name].child.pause()  # while the next one compiles, and between its repeats
            except harness.ChildFailed as err:
                failed(name, err)
        for repeat, name in harness.interleaved(list(children), repeats):
            if name not in children:
                continue
            try:
                events = children[name].go(repeat)
            except harness.ChildFailed as err:
                failed(name, err)
                continue
            results[name]["rates"].append([e["seq_per_s"] for e in events])
            harness.log(
                f"  repeat {repeat + 1}/{repeats} {name}: "
                + " + ".join(f"{e['seq_per_s']:.2f}" for e in events)
                + " seq/s"
            )
    finally:
        for name, child in children.items():
            results[name]["rss_mb"] = child.stop()
    return results


def table_rows(config_label: str, workers: int, results: dict) -> list[list[str]]:
    """One row per stack of `results` ({stack: measure_pair's result}, in --stacks order)."""
    rows = []
    peer = results.get("keras-hub")
    peer_totals = [sum(r) for r in peer["rates"]] if peer and "error" not in peer else []
    for name, result in results.items():
        if name == "keras-hub":
            stack = "keras-hub (AdamW)"
        else:
            optimizer = result["optimizer"]
            stack = name.replace(f" {optimizer}", "", 1) + f" ({optimizer}"
            stack += f", {workers} workers)" if workers > 1 else ")"
        if "error" in result:
            rows.append([config_label, stack, "FAILED", result["error"], "-", "-"])
            continue
        totals = [sum(r) for r in result["rates"]]
        median = statistics.median(totals)
        cell = f"{median:.2f}"
        if result["workers"] > 1:
            per_worker = statistics.median([statistics.mean(r) for r in result["rates"]])
            cell += f" ({result['workers']} x {per_worker:.2f})"
        rss_cell = harness.mb_cell(result["rss_mb"])
        if result["workers"] > 1:
            rss_cell = f"{result['workers']} x {rss_cell}"
        ratio = "-"
        if name == "keras-hub":
            ratio = "1"
        elif peer_totals:
            pairs = [o / p for o, p in zip(totals, peer_totals)]
            ratio = f"{statistics.median(pairs):.3f}" + (
                f" ({harness.min_max(pairs, '{:.3f}')})" if len(pairs) > 1 else ""
            )
        rows.append([config_label, stack, cell, spread(totals), ratio, rss_cell])
    return rows


def add_worktree(workdir: str, revision: str) -> tuple[str, str]:
    """A detached git worktree of `revision` under workdir: (stack name ours@<short rev>, path)."""
    short = harness.short_revision(revision)
    path = os.path.join(workdir, f"worktree-{short}")
    subprocess.run(
        ["git", "-C", ROOT, "worktree", "add", "--detach", "--quiet", path, short],
        check=True,
        capture_output=True,
        text=True,
    )
    return f"ours@{short}", path


def remove_worktrees(paths: list[str]) -> None:
    for path in paths:
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", path], capture_output=True)


# ------------------------------------------------------------------------------------- main


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Defaults in brackets are the full run's; --quick narrows every list flag not given "
        "explicitly (mini, fp32, XLA on, synthetic, accumulation 1; 2 repeats x 2 steps).",
    )
    counts = harness.comma_list(harness.positive_int, allow_empty=False)

    def some_of(choices):
        return harness.comma_list(choices=choices, allow_empty=False)

    parser.add_argument(
        "--models",
        type=harness.comma_list(allow_empty=False),
        default=None,
        help="comma list of configs/bert_<name>.json names or .json paths [mini,base] "
        "(mini is L4/H256/A4/I1024, base L12/H768/A12/I3072)",
    )
    parser.add_argument(
        "--seq_lengths",
        type=counts,
        default=None,
        help="comma list [128]; 128,512 adds phase 2 (P 80, batch 4)",
    )
    parser.add_argument(
        "--precisions", type=some_of(PRECISIONS), default=None, help="comma list of fp32, bf16 [fp32,bf16]"
    )
    parser.add_argument("--xla", type=some_of(("on", "off")), default=None, help="on, off or on,off [on,off]")
    parser.add_argument(
        "--data",
        type=some_of(DATA),
        default=None,
        help="comma list of synthetic, tfrecord [synthetic,tfrecord]",
    )
    parser.add_argument(
        "--tfrecords",
        action="append",
        metavar="GLOB",
        help="pretraining TFRecords for --data tfrecord (comma-separated globs); S=GLOB gives the "
        "files of one sequence length, e.g. --tfrecords '128=data/phase1/*' --tfrecords "
        "'512=data/phase2/*'. Sequence lengths without files get small temporary ones",
    )
    parser.add_argument(
        "--accumulation",
        type=counts,
        default=None,
        help="comma list of micro-batches per update for ours [1,4]",
    )
    parser.add_argument(
        "--horovod_workers",
        type=int,
        default=1,
        help="N > 1 also measures ours under horovodrun --gloo with N local workers (each with "
        "threads/N intra-op threads), reporting total and per-worker seq/s [1]",
    )
    parser.add_argument(
        "--baseline",
        type=harness.comma_list(),
        default=None,
        metavar="REV[,REV]",
        help="also measure our update as it was at these git revisions (levers on/off) []",
    )
    parser.add_argument(
        "--stacks",
        type=some_of(STACKS),
        default="ours,keras-hub",
        help="comma list of ours, keras-hub [ours,keras-hub]",
    )
    parser.add_argument(
        "--optimizers",
        type=some_of(OPTIMIZERS),
        default="lamb",
        help="comma list of lamb, adamw: our update with each of the job's optimizers, a row each, "
        "so a ratio to keras-hub (AdamW) can compare the same optimizer [lamb]",
    )
    parser.add_argument(
        "--read_every",
        type=counts,
        default="1",
        metavar="N[,N]",
        help="ours reads its updates' metrics back every N updates (the job reads at its log "
        "steps) and at the end of each repeat; each N > 1 adds an 'ours, reads every N' stack [1]",
    )
    parser.add_argument(
        "--batch_size",
        type=harness.positive_int,
        default=None,
        help="per-worker micro-batch B for every configuration [mini 32, base 16 at seq 128; 4 at 512]",
    )
    parser.add_argument(
        "--steps",
        type=harness.positive_int,
        default=None,
        help="timed micro-batches per repeat, in whole updates of ours [4; --quick: 2]",
    )
    parser.add_argument(
        "--repeats", type=harness.positive_int, default=None, help="interleaved timed repeats [3; --quick: 2]"
    )
    parser.add_argument(
        "--warmup",
        type=harness.positive_int,
        default=None,
        help="untimed micro-batches before timing, in whole updates; the first update compiles [2]",
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="TF intra-op threads (default: the usable cores)"
    )
    parser.add_argument(
        "--deterministic",
        choices=("on", "off"),
        default="on",
        help="TF op determinism for both stacks (the job's --deterministic default: on) [on]",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=12345,
        help="seeds weights, dropout and the synthetic/temporary data [12345]",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=1800.0,
        help="seconds one child may take to get ready or to finish a repeat before it is "
        "abandoned and its row reported as failed [1800]",
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: see the defaults above")
    parser.add_argument(harness.CHILD_FLAG, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


@dataclasses.dataclass
class Plan:
    """What to measure: the flags resolved (--quick's narrower defaults where a flag is not given)
    and checked, and what this machine cannot run dropped with a note."""

    models: list[str]
    seq_lengths: list[int]
    precisions: list[str]
    xla_modes: list[bool]
    data_modes: list[str]
    accumulations: list[int]
    stacks: list[str]
    optimizers: list[str]
    read_every: list[int]
    worker_counts: list[int]
    steps: int
    repeats: int
    warmup: int
    threads: int
    batch_size: int | None
    configs: dict  # (model, S) -> config path
    tfrecords: dict  # S -> glob; temporary files are added for the others
    baselines: list[str]  # git revisions
    seed: int
    deterministic: bool
    timeout: float
    notes: list[str]


def plan_from(args: argparse.Namespace) -> Plan:
    def pick(value, full, smoke):
        return value if value is not None else (smoke if args.quick else full)

    models = pick(args.models, list(DEFAULT_MODELS), ["mini"])
    seq_lengths = pick(args.seq_lengths, [128], [128])
    if args.horovod_workers < 1:
        raise SystemExit(f"--horovod_workers must be at least 1 (got {args.horovod_workers}).")
    for s in seq_lengths:
        if default_predictions(s) > s:
            raise SystemExit(f"--seq_lengths {s} is too short for {default_predictions(s)} predictions.")
    plan = Plan(
        models=models,
        seq_lengths=seq_lengths,
        precisions=pick(args.precisions, list(PRECISIONS), ["fp32"]),
        xla_modes=[x == "on" for x in pick(args.xla, ["on", "off"], ["on"])],
        data_modes=pick(args.data, list(DATA), ["synthetic"]),
        accumulations=pick(args.accumulation, [1, 4], [1]),
        stacks=args.stacks,
        optimizers=args.optimizers,
        read_every=args.read_every,
        worker_counts=[1],
        steps=pick(args.steps, 4, 2),
        repeats=pick(args.repeats, 3, 2),
        warmup=pick(args.warmup, 2, 2),
        threads=args.threads or harness.usable_cores(),
        batch_size=args.batch_size,
        configs={(m, s): config_path(m, s) for m in models for s in seq_lengths},
        tfrecords=parse_tfrecords(args.tfrecords, seq_lengths),
        baselines=args.baseline or [],
        seed=args.seed,
        deterministic=args.deterministic == "on",
        timeout=args.timeout,
        notes=[],
    )
    drop_unavailable(plan, args.horovod_workers)
    return plan


def drop_unavailable(plan: Plan, horovod_workers: int) -> None:
    """keras-hub when it is not installed, the multi-worker rows without Horovod; each noted."""
    missing = keras_hub_missing() if "keras-hub" in plan.stacks else None
    if missing:
        harness.log(missing + "; measuring our rows only.")
        plan.notes.append(missing + "; only our rows were measured.")
        plan.stacks = [s for s in plan.stacks if s != "keras-hub"]
    if horovod_workers > 1:
        missing = horovod_missing()
        if missing:
            harness.log(f"--horovod_workers {horovod_workers}: {missing}; the multi-worker rows are skipped.")
            plan.notes.append(f"Multi-worker rows skipped: {missing}.")
        elif "ours" in plan.stacks:
            plan.worker_counts.append(horovod_workers)
    if not plan.stacks:
        raise SystemExit("Nothing to measure: --stacks names no available stack.")


def add_baselines(plan: Plan, workdir: str, baselines: dict) -> None:
    """A worktree per --baseline revision, into baselines {stack name: worktree}."""
    for revision in plan.baselines:
        name, path = add_worktree(workdir, revision)
        baselines[name] = path
        harness.log(f"--baseline {revision}: {name} from a worktree at {path}")


def write_missing_records(plan: Plan, workdir: str) -> None:
    """Small temporary TFRecords for each sequence length --data tfrecord has no files of."""
    if "tfrecord" not in plan.data_modes:
        return
    for s in plan.seq_lengths:
        if s in plan.tfrecords:
            continue
        vocab = min(BertConfig.from_json_file(p).vocab_size for (m, q), p in plan.configs.items() if q == s)
        plan.tfrecords[s] = write_temporary_records(
            os.path.join(workdir, f"records-s{s}"), s, default_predictions(s), vocab, plan.seed
        )
        harness.log(
            f"wrote {TEMP_FILES} x {TEMP_RECORDS_PER_FILE} temporary records of seq {s} to {plan.tfrecords[s]}"
        )


def configurations(plan: Plan) -> list[tuple]:
    """(model, S, precision, xla, data, accumulation, workers) of every row group."""
    groups = list(
        itertools.product(
            plan.models,
            plan.seq_lengths,
            plan.precisions,
            plan.xla_modes,
            plan.data_modes,
            plan.accumulations,
            plan.worker_counts,
        )
    )
    if "ours" not in plan.stacks:  # keras-hub alone has no accumulation or worker variants
        groups = [g for g in groups if g[5] == plan.accumulations[0] and g[6] == 1]
    return groups


def group_specs(plan: Plan, group: tuple, baselines: dict) -> tuple[str, dict]:
    """The row label of one configuration and the child spec of each stack measured for it."""
    model, seq, precision, xla, data, accumulation, workers = group
    config = BertConfig.from_json_file(plan.configs[(model, seq)])
    batch = plan.batch_size or default_batch(model, seq)
    label = (
        f"{model} L{config.num_hidden_layers}/H{config.hidden_size} s{seq} b{batch} "
        f"{precision} XLA {'on' if xla else 'off'} {data} acc{accumulation}"
    )
    spec = {
        "label": label,
        "config_path": plan.configs[(model, seq)],
        "seq_length": seq,
        "predictions": default_predictions(seq),
        "batch": batch,
        "precision": precision,
        "xla": xla,
        "data": data,
        "tfrecords": plan.tfrecords.get(seq),
        "accumulation": accumulation,
        "workers": 1,
        "threads": plan.threads,
        "steps": plan.steps,
        "warmup": plan.warmup,
        "seed": plan.seed,
        "deterministic": plan.deterministic,
        "timeout": plan.timeout,
    }
    specs = {}
    if "ours" in plan.stacks:
        ours = {**spec, "workers": workers, "threads": max(1, plan.threads // workers)}
        for name, path in baselines.items():
            specs[name] = {**ours, "stack": name, "code_root": path}
        for optimizer, n in itertools.product(plan.optimizers, plan.read_every):
            name = ours_name(optimizer, n)
            specs[name] = {**ours, "stack": name, "optimizer": optimizer, "read_every": n}
    if "keras-hub" in plan.stacks:
        specs["keras-hub"] = {**spec, "stack": "keras-hub", "optimizer": "adamw", "accumulation": 1}
    return label, specs


def measure_all(plan: Plan, baselines: dict, workdir: str) -> list[list[str]]:
    """Every configuration's stacks measured side by side; the table's rows."""
    groups = configurations(plan)
    ours_variants = (
        len(baselines) + len(plan.optimizers) * len(plan.read_every) - 1 if "ours" in plan.stacks else 0
    )
    harness.log(
        f"{len(groups)} configuration(s) x {len(plan.stacks) + ours_variants} stack(s); {plan.repeats} "
        f"repeats x {plan.steps} micro-batches after {plan.warmup} warm-up; {plan.threads} intra-op "
        f"thread(s) ({harness.usable_cores()} usable cores)"
    )
    rows = []
    for i, group in enumerate(groups, 1):
        label, specs = group_specs(plan, group, baselines)
        workers = group[-1]
        harness.log(f"[{i}/{len(groups)}] {label}" + (f", ours on {workers} workers" if workers > 1 else ""))
        seconds, results = harness.timed(lambda: measure_pair(specs, plan.repeats, workdir, plan.timeout))
        harness.log(f"[{i}/{len(groups)}] done in {seconds:.0f}s")
        rows += table_rows(label, workers, results)
    return rows


def print_report(plan: Plan, rows: list[list[str]], total_s: float) -> None:
    print(
        f"BERT pretraining update throughput, ours vs keras-hub {harness.package_version('keras-hub')}: "
        f"TF {harness.package_version('tensorflow', 'tensorflow-cpu')}, "
        f"Keras {harness.package_version('keras')}, CPU: {harness.cpu_name()}, "
        f"{plan.threads} intra-op / 1 inter-op thread(s), "
        f"op determinism {'on' if plan.deterministic else 'off'}"
    )
    print(
        f"median of {plan.repeats} interleaved repeats x {plan.steps} micro-batches after {plan.warmup} "
        "warm-up (both in whole updates of ours); "
        f"spread = min-max (range / median); ratio = median of per-repeat ours / keras-hub (min-max); "
        f"run took {total_s / 60:.1f} min"
    )
    print()
    headers = ["config", "stack", "seq/s median", "spread", "ratio vs keras-hub", "peak RSS MB"]
    print(harness.markdown_table(headers, rows))
    print()
    print(
        "ours: run_pretraining.py's update (PretrainingStep, the optimizer named, accumulation accN); keras-hub: "
        "BertBackbone + MaskedLMHead + NSP Dense, AdamW, one process, batch b per step, no "
        "accumulation, measured beside each of our rows. 2-worker cells: total (workers x median "
        "per worker); peak RSS: workers x the largest."
    )
    for note in plan.notes:
        print(note)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args._child:
        harness.serve(measure, args._child)
        return
    plan = plan_from(args)
    workdir = tempfile.mkdtemp(prefix="pretrain_throughput_")
    baselines: dict[str, str] = {}  # stack name -> worktree
    try:
        add_baselines(plan, workdir, baselines)
        write_missing_records(plan, workdir)
        total_s, rows = harness.timed(lambda: measure_all(plan, baselines, workdir))
    finally:
        remove_worktrees(list(baselines.values()))
        shutil.rmtree(workdir, ignore_errors=True)
    print_report(plan, rows, total_s)


if __name__ == "__main__":
    main()
