"""The one seam to Horovod and MPI. Imported lazily; without them everything runs single-process.

Training ranks come from Horovod (`Distributed`); data-preparation ranks launched by mpirun
come from mpi4py (`mpi_ranks`). Both read the launcher's environment here and nowhere else.

Keras 3 variables are not tf.Variables, so hvd.DistributedGradientTape and
hvd.broadcast_variables fail on them ("'Variable' object has no attribute 'ref'"): gradients
are reduced as plain tensors with grouped_allreduce, and variables are broadcast value by value.
"""

from __future__ import annotations

import functools

# Where each launcher puts a worker's rank: horovodrun, mpirun (OpenMPI), PMI and PMIx, srun.
RANK_VARIABLES = ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")


def launched_ranks(environ) -> int:
    """How many ranks the launcher (horovodrun, mpirun, srun with PMI) started; 1 when run directly."""
    for key in ("HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"):
        if environ.get(key):
            return int(environ[key])
    return 1


def launched_world(environ) -> tuple:
    """(ranks, rank) when this process is already one of several workers (horovodrun, mpirun, or
    srun tasks under scripts/run.sub, whose step size SLURM names even without PMI); (1, 0)
    otherwise. The launchers decide from it whether to start workers themselves."""
    world = launched_ranks(environ)
    if world <= 1:
        world = int(environ.get("SLURM_STEP_NUM_TASKS") or 1)
    rank = 0
    for key in RANK_VARIABLES:
        if environ.get(key, "").isdigit():
            rank = int(environ[key])
            break
    return world, rank


def expected_world(use_horovod: bool) -> tuple:
    """(ranks, rank) this process will have once Horovod starts, from the launcher's environment
    (before hvd.init, which waits for every rank); (1, 0) without Horovod."""
    import os

    if not use_horovod:
        return 1, 0
    world, rank = launched_world(os.environ)
    return max(world, 1), rank


def visible_gpus() -> int:
    """How many GPUs this process sees (before one is pinned to it; 0 on a CPU)."""
    import tensorflow as tf

    return len(tf.config.list_physical_devices("GPU"))


def mpi_ranks(environ):
    """(comm, rank, world, ranks_on_this_node) for a data stage launched by mpirun or srun; (None, 0,
    1, 1) when run directly. mpi4py is imported only when the environment says MPI (or srun with
    several tasks) started us."""
    world = int(
        environ.get("OMPI_COMM_WORLD_SIZE")
        or environ.get("PMI_SIZE")
        or environ.get("PMIX_SIZE")
        or environ.get("SLURM_STEP_NUM_TASKS")
        or 1
    )
    if world <= 1:
        return None, 0, 1, 1
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise RuntimeError(
            f"Launched under MPI ({world} ranks) but mpi4py cannot be imported ({e}); "
            f"install it (bash scripts/setup.sh) or run without mpirun."
        ) from None
    comm = MPI.COMM_WORLD
    if comm.Get_size() != world:
        # srun without an MPI plugin: every task would believe it is alone and write everything.
        raise RuntimeError(
            f"The launcher started {world} tasks but MPI sees {comm.Get_size()} rank(s) in this one; "
            "with srun pass --mpi=pmix (or pmi2, as your SLURM offers: srun --mpi=list), or use mpirun."
        )
    local = environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") or environ.get("MPI_LOCALNRANKS")
    if not local:
        local = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_size()
    return comm, comm.Get_rank(), comm.Get_size(), int(local)


class _SingleProcess:
    """Stands in for Horovod when it is absent or not wanted (size 1, rank 0)."""

    def rank(self):
        return 0

    def local_rank(self):
        return 0

    def size(self):
        return 1


@functools.lru_cache(maxsize=None)
def _backend(use_horovod: bool):
    if not use_horovod:
        return _SingleProcess()
    try:
        import horovod.tensorflow as hvd
    except ImportError as err:
        raise RuntimeError(
            "Horovod is not installed in this environment; run "
            "`bash scripts/setup.sh` (or train with one process)."
        ) from err
    hvd.init()
    _pin_gpu(hvd.local_rank())
    return hvd


def _pin_gpu(local_rank: int) -> None:
    """Gives each process on a node one GPU: its local rank's. Without this every rank would
    claim GPU 0 and NCCL refuses two ranks on one device."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        tf.config.set_visible_devices(gpus[local_rank % len(gpus)], "GPU")


class Distributed:
    """Rank, size, gradient averaging and variable broadcast; Horovod only when asked for."""

    def __init__(self, use_horovod: bool = False):
        self.use_horovod = use_horovod
        self._hvd = _backend(use_horovod)

    @property
    def rank(self) -> int:
        return self._hvd.rank()

    @property
    def local_rank(self) -> int:
        return self._hvd.local_rank()

    @property
    def size(self) -> int:
        return self._hvd.size()

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    def average(self, tensors, compression_fp16: bool = False):
        """Averages a list of dense tensors across workers (identity with one worker)."""
        return self._allreduce(tensors, "Average", compression_fp16)

    def sum(self, tensors, compression_fp16: bool = False):
        """Sums a list of dense tensors across workers (identity with one worker). With
        compression_fp16 they travel as float16 and come back in their own dtype."""
        return self._allreduce(tensors, "Sum", compression_fp16)

    def _allreduce(self, tensors, op: str, compression_fp16: bool):
        if self.size == 1:
            return list(tensors)
        hvd = self._hvd
        compression = hvd.Compression.fp16 if compression_fp16 else hvd.Compression.none
        return hvd.grouped_allreduce(list(tensors), op=getattr(hvd, op), compression=compression)

    def broadcast_value(self, value, root_rank: int = 0):
        """rank 0's value of a number or array (a NumPy array back); `value` itself with one worker."""
        if self.size == 1:
            return value
        import tensorflow as tf

        return self._hvd.broadcast(tf.convert_to_tensor(value), root_rank, name="broadcast_value").numpy()

    def any(self, flag: bool) -> bool:
        """Whether `flag` is true on any worker. Every worker calls it, at the same point."""
        if self.size == 1:
            return bool(flag)
        import tensorflow as tf

        total = self._hvd.allreduce(tf.constant([int(bool(flag))]), op=self._hvd.Sum, name="any_flag")
        return bool(total.numpy()[0] > 0)

    def gather_texts(self, text: str) -> list[str]:
        """Every worker's `text`, in rank order, on every worker (each calls it at the same point)."""
        if self.size == 1:
            return [text]
        import numpy as np
        import tensorflow as tf

        data = np.frombuffer(text.encode("utf-8"), np.uint8)
        hvd = self._hvd
        lengths = hvd.allgather(tf.constant([data.size], tf.int64), name="gather_text_lengths").numpy()
        joined = hvd.allgather(tf.constant(data, tf.uint8), name="gather_texts").numpy().tobytes()
        ends = np.cumsum(lengths)
        return [joined[end - n : end].decode("utf-8") for n, end in zip(lengths.tolist(), ends.tolist())]

    def barrier(self) -> None:
        """Returns once every worker has called it (a tiny allreduce)."""
        if self.size > 1:
            import tensorflow as tf

            self._hvd.allreduce(tf.zeros([1]), op=self._hvd.Sum, name="barrier")

    def broadcast_variables(self, variables, root_rank: int = 0) -> None:
        """Copies every variable's value from root_rank, so all workers start identical."""
        if self.size == 1:
            return
        import tensorflow as tf

        for i, variable in enumerate(variables):
            value = tf.convert_to_tensor(variable)
            variable.assign(self._hvd.broadcast(value, root_rank, name=f"broadcast_{i}"))
