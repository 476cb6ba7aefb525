"""The project's one train step: XLA-compiled micro-batch gradients summed in float32, a Horovod
sum across workers, then one optimizer update (skipped when not finite).

What is minimised comes from an `Objective` (training/objective.py): pretraining's MLM + NSP
loss, or a fine-tuning task's. Its loss terms are sums divided by counts taken over the WHOLE
update (every micro-batch of every worker), so the update equals that of one big batch however
it is split; an update's gradient is therefore a sum over its micro-batches, and workers add
theirs (Horovod Sum).

One update consumes exactly `accumulation_steps` micro-batches; nothing is applied before the
first k micro-batches are in (NVIDIA's TF2 loop applied an extra update at the start of each
host loop). The learning-rate schedule reads `optimizer.iterations`, which only advances when an
update is applied, so skipped fp16 steps do not advance it.

How an update is compiled: the k micro-batches are stacked and their gradients summed in one
compiled loop (the sums are loop values, not variables: nothing is written to memory between
micro-batches). With one worker the loop and the optimizer update are ONE XLA program per
update. With several, Horovod's allreduce is not an XLA op (its XLA kernels do not build against
TF 2.21), so the gradient program hands its sums to the allreduce and a second program applies
the update.

Micro-batches of several lengths (training/length_bins.py: each padded only to its bin) cannot
be stacked. With several bin lengths and k > 1 an update is instead one compiled micro-step per
micro-batch (its gradients added to the sums it is handed, one program per bin length) and one
compiled update program, unless its micro-batches are so alike in length that padding them all
to the longest costs little (STACK_ABOVE): then they are stacked at that length as usual. With
k = 1 the whole-update program serves each length. Each program is traced once for features of
any length and row count (`_relaxed`: tracing the L2/H32 test model's update takes seconds, a
BERT's tens of seconds, per trace) and compiled by XLA per shape, at most twice
max_seq_length / bin_size compilations (plus the update), each the first time its shape comes:
that call is waited for and timed once (`compiled`, `compile_seconds`), so compilation is
reported per shape and kept out of steady throughput.

Nothing is read back per update: `dispatch` queues an update and returns its outputs as device
tensors (the objective's sums, whether it was applied, the learning rate it used, the loss scale
after it), and `read` brings any number of them to the host in one transfer. On a GPU the host
can so queue update n+1 while update n runs; the loop reads at its log and checkpoint steps.
"""

from __future__ import annotations

import functools
import itertools
import time

import tensorflow as tf

from optimization.loss_scale import DynamicLossScale
from training.distributed import Distributed
from training.objective import Objective
from training.pretraining_objective import PretrainingObjective

# What an update reports besides the objective's sums (see TrainStep.read).
STATUS = ("applied", "learning_rate", "loss_scale", "skipped")


def _add(totals: dict, values: dict) -> dict:
    return {name: totals[name] + value if name in totals else value for name, value in values.items()}


def _micro_batch(stacked, i):
    """Micro-batch i of features stacked along a new leading axis [k, ...]."""
    return {name: tensor[i] for name, tensor in stacked.items()}


def _shape_of(features) -> tuple:
    """The shape that decides a compiled program: the token ids' (e.g. [B, L] or [k, B, L])."""
    return tuple(features["input_ids"].shape)


def _relaxed(features, leading: int) -> dict:
    """Specs of `features` that features of every bin length and row count match: each axis after
    the first `leading` (the k of micro-batches stacked) unknown."""
    return {
        name: tf.TensorSpec([*value.shape[:leading], *[None] * (len(value.shape) - leading)], value.dtype)
        for name, value in features.items()
    }


# An update of micro-batches of several lengths runs as micro-steps only when that computes
# under this share of the positions padding all of them to the longest would: below about a
# tenth saved, one stacked program is faster (bench/padding.py: the micro-steps cost ~5%).
STACK_ABOVE = 0.9


def _stacked_or_none(batches):
    """`batches` padded to their longest length when they are to run stacked (STACK_ABOVE), else
    None. Zero padding is what binning took away: the same update."""
    from training.length_bins import SEQUENCE_FEATURES

    lengths = [int(b["input_ids"].shape[-1]) for b in batches]
    longest = max(lengths)
    if sum(lengths) < STACK_ABOVE * longest * len(lengths):
        return None
    return [
        {
            name: tf.pad(value, [[0, 0], [0, longest - value.shape[1]]])
            if name in SEQUENCE_FEATURES and value.shape[1] < longest
            else value
            for name, value in b.items()
        }
        for b in batches
    ]


def _all_finite(tensors):
    return tf.reduce_all([tf.reduce_all(tf.math.is_finite(t)) for t in tensors])


class TrainStep:
    """Owns the compiled functions and the state that lives between micro-batches.

    model: a Keras model whose dtype policy decides precision (mixed_float16 turns on dynamic
    loss scaling); called as model(features, training=True).
    optimizer: a Keras optimizer (optimization.create_optimizer); built here.
    objective: what to minimise (training.objective.Objective).
    fp16_compression: Horovod fp16 compression of the gradient sum; default: on exactly when
    the loss is scaled (mixed_float16). Gradients are unscaled before they are sent, so the
    float16 wire format holds true gradient values, not values 2^15 times larger.
    bin_lengths: the lengths a micro-batch may be padded to (training.length_bins.bin_lengths);
    when there are several, the micro-batches of one update may differ in length and, with k > 1,
    each is its own compiled micro-step (see the module docstring).
    row_counts: the row counts a packed micro-batch may have (training/packing.py: every
    micro-batch of an update has the same count); one program per count and bin length.
    trace_ahead: the first update first traces every program any update may run, for every bin
    length and row count, in one order and under settled names (training/compile_cache.py), so
    that TensorFlow's persistent compilation cache serves a resumed run as it serves a new one.
    """

    def __init__(
        self,
        model,
        optimizer,
        objective: Objective,
        *,
        accumulation_steps: int = 1,
        distributed: Distributed | None = None,
        jit_compile: bool = True,
        loss_scale: DynamicLossScale | None = None,
        fp16_compression: bool | None = None,
        bin_lengths: tuple[int, ...] = (),
        row_counts: tuple[int, ...] = (),
        trace_ahead: bool = False,
    ):
        if accumulation_steps < 1:
            raise ValueError(f"accumulation_steps must be >= 1 (got {accumulation_steps}).")
        self.model = model
        self.optimizer = optimizer
        self.objective = objective
        self.accumulation_steps = accumulation_steps
        self.distributed = distributed or Distributed(use_horovod=False)
        self.variables = list(model.trainable_variables)
        optimizer.build(self.variables)
        if loss_scale is None:
            loss_scale = DynamicLossScale(enabled=model.dtype_policy.name == "mixed_float16")
        self.loss_scale = loss_scale
        self.fp16_compression = loss_scale.enabled if fp16_compression is None else fp16_compression
        self.bin_lengths = tuple(bin_lengths)
        self.row_counts = tuple(row_counts)
        self.micro_steps = len(self.bin_lengths) > 1 and accumulation_steps > 1
        self.trace_ahead = trace_ahead
        self._settled: set[str] = set()  # the kinds of program traced under settled names so far
        self.compiled: list[tuple[str, float]] = []  # (program and shape, seconds), in order
        self.compile_seconds = 0.0  # compiling and tracing ahead, kept out of throughput
        self.traced_ahead: str | None = None  # the sentence saying so, once traced ahead
        self._shapes_seen: set = set()
        # Traced as written (autograph=False): the steps hold no Python control flow on tensors, and
        # AutoGraph's source conversion cost seconds of CPU in every process that trains.
        step = functools.partial(tf.function, autograph=False)
        # Denominators read no sequence axis: one relaxed trace serves every bin length.
        self._denominators = step(self._sum_denominators, reduce_retracing=True)
        self._zero_sums = step(self._zeros)
        self._accumulate = step(self._accumulate_micro_batch, jit_compile=jit_compile)
        self._whole_update = step(self._compute_and_apply, jit_compile=jit_compile)
        self._gradients = step(self._gradient_sums, jit_compile=jit_compile)
        self._update = step(self._apply_update, jit_compile=jit_compile)
        # The cross-worker sums run in their own, uncompiled graph between the XLA programs.
        self._sum_gradients = step(
            lambda tensors: self.distributed.sum(tensors, compression_fp16=self.fp16_compression),
        )
        self._sum_scalars = step(lambda vector: self.distributed.sum([vector])[0])
        self._evaluate = step(self._evaluate_batch, jit_compile=jit_compile)
        self._predict = step(lambda features: self.model(features, training=False), jit_compile=jit_compile)
        # Several bin lengths or row counts: each program is traced once, for features of any
        # length and row count (`_relaxed`), and compiled per shape the first time it runs.
        self.relaxed = len(self.bin_lengths) > 1 or len(self.row_counts) > 1
        self._traced_relaxed: set[int] = set()  # id() of the functions traced for every shape
        self.broadcast()

    # --- the compiled parts -------------------------------------------------------------------

    def _sum_denominators(self, micro_batches):
        totals = {}
        for features in micro_batches:
            totals = _add(totals, self.objective.denominators(features))
        return totals

    def _loss(self, sums, denominators):
        return tf.add_n(
            [
                tf.math.divide_no_nan(sums[term], denominators[denominator])
                for term, denominator in self.objective.terms.items()
            ]
        )

    def _micro_batch_gradients(self, features, denominators):
        """float32 gradients (unscaled) and the objective's sums of one micro-batch."""
        with tf.GradientTape() as tape:
            outputs = self.model(features, training=True)
            sums = self.objective(outputs, features)
            scaled = self.loss_scale.scale_loss(self._loss(sums, denominators))
        if set(sums) != set(self.objective.sums):
            raise ValueError(
                f"{type(self.objective).__name__} returned the sums {sorted(sums)} but declares "
                f"{sorted(self.objective.sums)} (Objective.sums)."
            )
        gradients = [
            tf.cast(tf.convert_to_tensor(g), tf.float32) for g in tape.gradient(scaled, self.variables)
        ]
        return self.loss_scale.unscale(gradients), sums

    def _gradient_sums(self, stacked, denominators):
        """The update's gradient sums and objective sums over its micro-batches: `stacked` holds
        them along a new leading axis [k, ...] (one micro-batch as is when k is 1)."""
        k = self.accumulation_steps
        if k == 1:
            return self._micro_batch_gradients(stacked, denominators)

        def body(i, gradients, totals):
            g, sums = self._micro_batch_gradients(_micro_batch(stacked, i), denominators)
            return i + 1, [a + b for a, b in zip(gradients, g)], _add(totals, sums)

        start = (
            tf.constant(0),
            [tf.zeros(v.shape, tf.float32) for v in self.variables],
            {name: tf.constant(0.0) for name in self.objective.sums},
        )
        _, gradients, totals = tf.while_loop(lambda i, *_: i < k, body, start, parallel_iterations=1)
        return gradients, totals

    def _zeros(self):
        return [tf.zeros(v.shape, tf.float32) for v in self.variables], {
            name: tf.constant(0.0) for name in self.objective.sums
        }

    def _accumulate_micro_batch(self, features, denominators, gradients, totals):
        """The sums handed in plus one micro-batch's gradients and objective sums."""
        g, sums = self._micro_batch_gradients(features, denominators)
        return [a + b for a, b in zip(gradients, g)], _add(totals, sums)

    def _compute_and_apply(self, stacked):
        """One worker's whole update in one program: counts, gradients, the optimizer update."""
        k = self.accumulation_steps
        micro_batches = [stacked] if k == 1 else [_micro_batch(stacked, i) for i in range(k)]
        denominators = self._sum_denominators(micro_batches)
        gradients, sums = self._gradient_sums(stacked, denominators)
        totals = {**sums, **denominators}
        return totals, self._apply_update(gradients, totals)

    def _apply_update(self, gradients, totals):
        """Applies the update when it is finite; returns what the host reads of it (`STATUS`)."""
        finite = tf.logical_and(tf.math.is_finite(self._loss(totals, totals)), _all_finite(gradients))
        # The schedule's rate at optimizer.iterations before the update: the rate this update uses.
        learning_rate = tf.cast(self.optimizer.learning_rate, tf.float32)

        def apply():
            self.optimizer.apply(gradients, self.variables)
            return tf.constant(True)

        applied = tf.cond(finite, apply, lambda: tf.constant(False))
        self.loss_scale.update(finite)
        return {
            "applied": applied,
            "learning_rate": learning_rate,
            "loss_scale": self.loss_scale.scale.read_value(),
            "skipped": self.loss_scale.skipped_steps.read_value(),
        }

    def _evaluate_batch(self, features):
        outputs = self.model(features, training=False)
        return {**self.objective(outputs, features), **self.objective.denominators(features)}

    # --- the host side ------------------------------------------------------------------------

    def __call__(self, micro_batches) -> dict:
        """Runs one update (`dispatch`) and reads its outputs (`read`): see `read` for the keys."""
        return self.read([self.dispatch(micro_batches)])[0]

    def dispatch(self, micro_batches) -> tuple[dict, dict]:
        """Queues one update over the next `accumulation_steps` micro-batches of `micro_batches`
        (an iterable of feature dicts; an iterator is advanced by exactly that many) and returns
        its outputs as device tensors, unread: (the objective's sums and denominators over the
        whole update and all workers, the update's `STATUS`)."""
        batches = list(itertools.islice(iter(micro_batches), self.accumulation_steps))
        if len(batches) != self.accumulation_steps:
            raise ValueError(
                f"the input ran out after {len(batches)} of {self.accumulation_steps} "
                "micro-batches of an update."
            )
        if self.trace_ahead and "update" not in self._settled:
            self._trace_every_program(batches)
        if self.micro_steps:
            padded = _stacked_or_none(batches)
            if padded is None:
                return self._dispatch_micro_steps(batches)
            batches = padded
        if self.accumulation_steps == 1:
            stacked = batches[0]
        else:
            stacked = {name: tf.stack([b[name] for b in batches]) for name in batches[0]}
        if self.distributed.size == 1:
            return self._timed("update", stacked, self._whole_update, stacked)
        denominators = self._sum_named(self._denominators(batches))
        gradients, sums = self._timed("gradients", stacked, self._gradients, stacked, denominators)
        gradients = self._sum_gradients(gradients)
        totals = {**self._sum_named(sums), **denominators}
        return totals, self._update(gradients, totals)

    def _dispatch_micro_steps(self, batches):
        """One update as a compiled micro-step per micro-batch, then the update program."""
        denominators = self._denominators(batches)
        if self.distributed.size > 1:
            denominators = self._sum_named(denominators)
        gradients, sums = self._zero_sums()
        for features in batches:
            gradients, sums = self._timed(
                "micro-step", features, self._accumulate, features, denominators, gradients, sums
            )
        if self.distributed.size > 1:
            gradients, sums = self._sum_gradients(gradients), self._sum_named(sums)
        totals = {**sums, **denominators}
        return totals, self._update(gradients, totals)

    def _settle(self, kind: str) -> None:
        """With `trace_ahead`, before the first program of `kind` is traced: settles the names
        (training/compile_cache.py). An update's programs are then all traced at once; evaluation
        and prediction meet their shapes in their data's order, the same in every run."""
        from training.compile_cache import settle_names

        if self.trace_ahead and kind not in self._settled:
            self._settled.add(kind)
            settle_names()

    def _trace_every_program(self, batches) -> None:
        """Traces each compiled program an update may run, once for every bin length and row count
        (`_trace_relaxed`), under settled names (`trace_ahead`, training/compile_cache.py);
        `batches` (one update's micro-batches) give the features' kinds. Nothing is compiled or
        run here."""
        scalar = tf.TensorSpec([], tf.float32)
        denominators = {name: scalar for name in self._denominators(batches)}
        sums = {name: scalar for name in self.objective.sums}
        gradients = [tf.TensorSpec(v.shape, tf.float32) for v in self.variables]
        k = self.accumulation_steps
        started, traced = time.perf_counter(), 0
        self._settle("update")
        shapes = [
            (length, rows) for rows in self.row_counts or (None,) for length in self.bin_lengths or (None,)
        ]
        features = {name: tf.TensorSpec(value.shape, value.dtype) for name, value in batches[0].items()}
        stacked = (
            features if k == 1 else {n: tf.TensorSpec([k, *f.shape], f.dtype) for n, f in features.items()}
        )
        programs = [
            (self._whole_update, int(k > 1), stacked)
            if self.distributed.size == 1
            else (self._gradients, int(k > 1), stacked, denominators)
        ]
        if self.micro_steps:
            programs.append((self._accumulate, 0, features, denominators, gradients, sums))
        for function, leading, *args in programs:
            if self.relaxed:
                self._trace_relaxed(function, leading, *args)  # one trace for every shape
            else:
                function.get_concrete_function(*args)
            traced += 1
        if self.micro_steps or self.distributed.size > 1:
            self._update.get_concrete_function(gradients, {**sums, **denominators})
            traced += 1
        seconds = time.perf_counter() - started
        self.compile_seconds += seconds
        what = (
            "shape"
            if self.row_counts and len(self.bin_lengths) > 1
            else "row count"
            if self.row_counts
            else "bin length"
        )
        self.traced_ahead = (
            f"Traced the update's {traced} program{'s' * (traced > 1)} for {len(shapes)} {what}"
            f"{'s' * (len(shapes) > 1)} "
            f"ahead in {seconds:.1f} s (named as in every run: the XLA cache serves a resumed run)."
        )

    def _trace_relaxed(self, function, leading: int, features, *rest) -> None:
        """With several bin lengths or row counts (`relaxed`), traces `function` once for features
        of any length and row count (`_relaxed`; `rest` as they are): every call then runs that
        trace, compiled per shape the first time the shape comes. Otherwise nothing."""
        if self.relaxed and id(function) not in self._traced_relaxed:
            function.get_concrete_function(_relaxed(features, leading), *rest)
            self._traced_relaxed.add(id(function))

    def _timed(self, program: str, features, function, *args):
        """function(*args); the first call for a shape (which compiles) is waited for and timed."""
        key = (program, _shape_of(features))
        if key in self._shapes_seen:
            return function(*args)
        stacked = program != "micro-step" and self.accumulation_steps > 1
        self._trace_relaxed(function, int(stacked), *args)
        started = time.perf_counter()
        outputs = function(*args)
        # A scalar output: waiting for it waits for the program without copying a tensor back.
        tf.nest.flatten(outputs[1])[0].numpy()
        seconds = time.perf_counter() - started
        self._shapes_seen.add(key)
        self.compiled.append((f"{program} {'x'.join(map(str, key[1]))}", seconds))
        self.compile_seconds += seconds
        return outputs

    def read(self, dispatched: list) -> list[dict]:
        """The host values of dispatched updates, in their order, brought over in one transfer
        (the one wait for the device). Each is a dict of floats over the whole update and all
        workers: loss and each objective term and metric (e.g. mlm_loss, nsp_loss, mlm_accuracy),
        `applied` (False when the update was not finite: a skipped fp16 step, or a divergence the
        caller must stop on when `loss_scale_enabled` is False), the `learning_rate` it used,
        `loss_scale` after it, the count of `skipped` fp16 updates so far, `loss_scale_enabled`."""
        if not dispatched:
            return []
        names = sorted(dispatched[0][0])
        row = [*names, *STATUS]
        values = tf.stack(
            [
                tf.cast(tensors[name], tf.float32)
                for totals, status in dispatched
                for tensors, keys in ((totals, names), (status, STATUS))
                for name in keys
            ]
        ).numpy()
        results = []
        for update in (dict(zip(row, r)) for r in values.reshape(len(dispatched), len(row)).tolist()):
            results.append(
                {
                    **self.objective.summarize({name: update[name] for name in names}),
                    "applied": bool(update["applied"]),
                    "learning_rate": update["learning_rate"],
                    "loss_scale": update["loss_scale"],
                    "skipped": int(update["skipped"]),
                    "loss_scale_enabled": self.loss_scale.enabled,
                }
            )
        return results

    def _sum_named(self, values: dict) -> dict:
        """Sums a dict of float32 scalars across workers in one allreduce (never compressed)."""
        names = sorted(values)
        summed = self._sum_scalars(tf.stack([values[name] for name in names]))
        return {name: summed[i] for i, name in enumerate(names)}

    def evaluate(self, batches, max_batches: int | None = None) -> dict:
        """The objective's loss, terms and metrics over an iterable of feature dicts (at most
        `max_batches`), on this worker alone, plus `batches` (how many were read)."""
        totals, count = {}, 0
        self._settle("evaluate")
        for features in itertools.islice(batches, max_batches):
            self._trace_relaxed(self._evaluate, 0, features)
            totals = _add(totals, self._evaluate(features))
            count += 1
        if count == 0:
            raise ValueError("evaluation received no batches.")
        names = sorted(totals)
        values = tf.stack([totals[name] for name in names]).numpy()
        return {**self.objective.summarize(dict(zip(names, values.tolist()))), "batches": count}

    def predict(self, features) -> dict:
        """The model's outputs for one batch (inference: no dropout), as NumPy arrays."""
        self._settle("predict")
        self._trace_relaxed(self._predict, 0, features)
        return {name: value.numpy() for name, value in self._predict(features).items()}

    # --- state --------------------------------------------------------------------------------

    @property
    def state_variables(self):
        """Everything besides the model weights that decides the next updates: optimizer slots
        and iterations, loss-scale state. Gradient sums never outlive an update (they are values
        inside the compiled programs), so there is nothing else."""
        return [*self.optimizer.variables, *self.loss_scale.variables]

    def broadcast(self) -> None:
        """Copies rank 0's weights, optimizer and loss-scale state to every worker (at start and
        after a restore), so all workers start identical."""
        self.distributed.broadcast_variables([*self.model.weights, *self.state_variables])


class PretrainingStep(TrainStep):
    """TrainStep with pretraining's objective (masked LM + next sentence)."""

    def __init__(self, model, optimizer, **kwargs):
        super().__init__(model, optimizer, PretrainingObjective(), **kwargs)
