"""training/distributed.py's reading of the launcher's environment (the one place that reads it):
how many ranks were started and which one this process is, for every launcher the stack uses."""

import pytest

from training.distributed import launched_ranks, launched_world, mpi_ranks


@pytest.mark.parametrize(
    "environ, world, rank",
    [
        ({}, 1, 0),
        ({"HOROVOD_SIZE": "4", "HOROVOD_RANK": "3"}, 4, 3),  # horovodrun (Gloo or MPI)
        ({"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1"}, 2, 1),  # mpirun (OpenMPI)
        ({"PMI_SIZE": "8", "PMI_RANK": "5"}, 8, 5),  # srun --mpi=pmi2, MPICH
        ({"PMIX_SIZE": "8", "PMIX_RANK": "7"}, 8, 7),  # srun --mpi=pmix
        ({"SLURM_STEP_NUM_TASKS": "16", "SLURM_PROCID": "9"}, 16, 9),  # srun tasks without PMI
        ({"HOROVOD_SIZE": "", "SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "x"}, 2, 0),
    ],
)
def test_launched_world_reads_every_launcher(environ, world, rank):
    assert launched_world(environ) == (world, rank)


def test_srun_tasks_alone_are_not_horovod_ranks():
    # Without PMI, srun's tasks did not start Horovod's world: the job stays single-process and
    # only the launchers treat them as already-started workers.
    assert launched_ranks({"SLURM_STEP_NUM_TASKS": "4"}) == 1
    assert launched_world({"SLURM_STEP_NUM_TASKS": "4"}) == (4, 0)


def test_a_data_stage_run_directly_needs_no_mpi():
    assert mpi_ranks({"HOROVOD_SIZE": "2"}) == (None, 0, 1, 1)  # Gloo ranks are not MPI ranks


@pytest.mark.process
def test_srun_tasks_that_mpi_does_not_join_are_refused_in_one_sentence():
    # srun -n 2 without --mpi=pmix: each task's MPI world is itself alone; a data stage would
    # otherwise write every output twice over.
    import subprocess
    import sys

    code = (
        "from training.distributed import mpi_ranks\n"
        "try:\n    mpi_ranks({'SLURM_STEP_NUM_TASKS': '2'})\n"
        "except RuntimeError as e:\n    print(e)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == (
        "The launcher started 2 tasks but MPI sees 1 rank(s) in this one; with srun pass --mpi=pmix "
        "(or pmi2, as your SLURM offers: srun --mpi=list), or use mpirun."
    ), result.stderr[-2000:]
