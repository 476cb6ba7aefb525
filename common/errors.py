"""The exception types an entry point turns into one sentence and an exit status: UserError (a
problem the user can fix), StorageError (a file could not be written) and Preempted (stopped for
a preemption, to be continued).

Library code raises `UserError` with one sentence naming the file or value and what to do;
entry points (the root-level scripts) print that sentence and exit with status 2, instead of
a stack trace from deep inside TensorFlow.
"""


class UserError(Exception):
    """A problem the user can fix (bad path, bad input, bad value): printed as one sentence."""


class StorageError(UserError):
    """A save that failed (no space left, a read-only, vanished or forbidden directory): printed as
    one sentence naming the directory, the bytes needed and free where the system says, and the
    last intact checkpoint. Exit status 2 like any UserError, never PREEMPTED_EXIT_STATUS: running
    the same command again cannot help until someone frees space or fixes the directory, so a
    launcher that requeues preempted jobs must not requeue this one."""


# EX_TEMPFAIL (sysexits.h): a temporary failure; the same command, run again, continues. The
# launchers and scripts/run.sub requeue on it.
PREEMPTED_EXIT_STATUS = 75


class Preempted(Exception):
    """The run stopped for a preemption notice (SIGTERM, SIGUSR1, a STOP file) after writing a
    checkpoint at the update where every worker agreed to stop: printed as one sentence, exit
    status PREEMPTED_EXIT_STATUS."""
