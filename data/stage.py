"""The restart ritual every data stage shares, so that a stage supplies only what it produces.

A stage writes outputs (paths relative to one directory) and records each in that directory's
manifest (data/manifest.py). Every run takes the same steps, in one process or on the MPI ranks
of `Runtime.comm` (data/ranks.py: a rank that dies or hangs is named and the stage stops):

1. load the manifest: one written for other parameters forgets every output;
2. keep each output that still verifies (its recorded size and sha256, or the size alone) and
   that the stage finds current (the input it recorded is unchanged); forget the others. On
   ranks, rank r verifies every world-th output (the hashing is shared) and all get the union;
3. remove the temporaries a killed run left beside the outputs (rank 0, which also makes
   manifest.json what every rank now holds, an interrupted run's per-rank parts folded in);
4. do the work for the others: the stage's `work(run)` writes each output of its share under a
   temporary name renamed only when it is complete (`writing`, or a helper of common.files) and
   `land`s it in the manifest (on ranks, in the rank's own part, so no two processes write one
   file);
5. fold the parts into manifest.json (rank 0) and mark it complete once every output is in place:
   the manifest is written last, so it never names a file that is not there.

`Stage.run_on_ranks` takes these steps in this order for every stage (download, text formatting,
sharding, vocabulary, TFRecord files); a stage supplies the outputs' names, whether a recorded
output is still current, and the work. `Runtime` is how any stage runs (worker processes, ranks,
the rank timeout, verification, progress, log): one value, built once by prepare_data.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Callable

from common.files import atomic_path, remove_stale_temporaries
from data.manifest import Manifest
from data.ranks import DEFAULT_TIMEOUT_S, Ranks


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclasses.dataclass(frozen=True)
class Runtime:
    """How a stage runs, whatever it makes; the same for every stage of one prepare_data run.

    n_processes: worker processes (per rank); comm: an mpi4py communicator, or None for one
    process; rank_timeout_s: how long a rank's heartbeat may stand still before the stage stops;
    verify: "sha256" or "size", how a re-run checks an existing output; progress_factory:
    (description, total) -> Progress, or None; log: where the stage's sentences go (stderr)."""

    n_processes: int = 1
    comm: object = None
    rank_timeout_s: float = DEFAULT_TIMEOUT_S
    verify: str = "sha256"
    progress_factory: Callable | None = None
    log: Callable[[str], None] | None = None

    def __post_init__(self):
        if self.log is None:
            object.__setattr__(self, "log", _stderr)

    @classmethod
    def of(cls, runtime: Runtime | None = None, **fields) -> Runtime:
        """`runtime` (default: one process, every field at its default) with `fields` replaced, so a
        caller passes the whole value or only the fields it sets (`n_processes=2, log=...`)."""
        return dataclasses.replace(runtime or cls(), **fields)


@dataclasses.dataclass
class Run:
    """One run of a stage: what `work` is handed, and what `run_on_ranks` returns."""

    todo: list  # the outputs to (re)do, in the stage's order; [] when every one verified
    ranks: Ranks  # this process among the stage's ranks (rank 0 of 1 without MPI)
    layout: dict  # {"ranks": N, "hosts": H} for a stage's summary under MPI; {} for one process
    removed: int = 0  # temporaries of a killed run cleared before the work (counted by rank 0)
    result: object = None  # what `work` returned on this rank; None when it was not called

    @property
    def skipped(self) -> bool:
        """Every output verified: the stage did no work."""
        return not self.todo


class Stage:
    """The outputs of one stage in one directory, and the steps of a run over them."""

    def __init__(self, directory: str, name: str, params: dict, runtime: Runtime | None = None):
        """Loads the manifest of `directory` (step 1)."""
        self.directory = directory
        self.runtime = runtime or Runtime()
        self.verify = self.runtime.verify
        self.log = self.runtime.log
        self.manifest = Manifest.load(directory, name, params)

    def run_on_ranks(self, relpaths, work, *, current=None, folders=("",)) -> Run:
        """Steps 2 to 5 over the outputs `relpaths`, in one process or on every rank of the
        runtime's communicator (each rank calls it with the same arguments).

        `work(run)` is called (on every rank) only when some output does not verify; it writes and
        `land`s this rank's share of `run.todo` and returns what the stage wants back. A run whose
        outputs all verify does no work, and marks the manifest of an interrupted run whose last
        outputs had landed complete. `current(relpath, counts)` says whether a recorded output is
        still current; `folders` (relative to the directory) are cleared of temporaries (`()`:
        none, for a stage that resumes its own). Returns the Run (`skipped` when nothing was done).
        """
        relpaths = list(relpaths)
        runtime = self.runtime
        with Ranks(
            runtime.comm, self.directory, self.manifest.stage, runtime.rank_timeout_s, self.log
        ) as ranks:
            if ranks.world > 1:
                self.manifest.part = f"rank{ranks.rank}"
            run = Run(todo=[], ranks=ranks, layout=ranks.layout())
            run.todo = self._todo_on_ranks(relpaths, ranks, current)
            if run.todo:
                run.removed = self._start_on_ranks(ranks, folders)
                run.result = work(run)
            if run.todo or not self.manifest.complete:
                self._finish_on_ranks(ranks, relpaths)
            else:
                ranks.barrier("before the stage ends")
        return run

    def todo(self, relpaths, current=None) -> list[str]:
        """The outputs of `relpaths` to (re)do, in order (step 2, in this process): those not
        recorded, missing, not of the recorded size and sha256, or whose recorded counts
        `current(relpath, counts)` rejects. Their entries are forgotten; a recorded output that no
        longer verifies (missing, truncated, changed) is named in one sentence on the log."""
        todo = []
        for relpath in relpaths:
            fresh = current is None or current(relpath, self.manifest.counts(relpath))
            problem = self.manifest.problem(relpath, self.verify) if fresh else "stale"
            if problem is not None:
                if problem not in ("not recorded", "stale"):  # it was complete once: say what broke
                    self.log(
                        f"[{self.manifest.stage}] {self.manifest.abspath(relpath)} is {problem}: redoing it."
                    )
                self.manifest.forget(relpath)
                todo.append(relpath)
        return todo

    @contextlib.contextmanager
    def writing(self, relpaths):
        """Yields {relpath: temporary path} for the work to fill (step 4): when the block ends
        without an error each temporary is committed under its final name, otherwise each is
        deleted."""
        with contextlib.ExitStack() as stack:
            yield {rel: stack.enter_context(atomic_path(self.manifest.abspath(rel))) for rel in relpaths}

    def land(self, counts: dict, sha256: dict | None = None) -> None:
        """Records outputs that are now under their final names, {relpath: counts}, and saves the
        manifest (this rank's part under MPI) once (step 4). Each is hashed unless `sha256`
        ({relpath: hex}) has its hash."""
        for relpath, output_counts in counts.items():
            self.manifest.record(relpath, output_counts, sha256=(sha256 or {}).get(relpath), save=False)
        self.manifest.save()

    # ---- the steps over ranks; with one process, ranks.world is 1 and no rank waits ----

    def _todo_on_ranks(self, relpaths, ranks, current) -> list[str]:
        """Step 2: rank r verifies relpaths[r::world]; every rank gets the union, in the order of
        `relpaths`, and forgets those entries."""
        if ranks.world == 1:
            return self.todo(relpaths, current)
        mine = self.todo(relpaths[ranks.rank :: ranks.world], current)
        redo = {rel for share in ranks.allgather(mine, "deciding what to redo") for rel in share}
        for relpath in redo:
            self.manifest.forget(relpath)
        return [rel for rel in relpaths if rel in redo]

    def _start_on_ranks(self, ranks, folders) -> int:
        """Step 3: rank 0 removes the temporaries of a killed run from `folders` and, under MPI,
        makes manifest.json what every rank now holds (the outputs to redo forgotten, the parts of
        an interrupted run folded in); returns how many temporaries it removed."""
        ranks.barrier("before clearing the temporaries of an earlier run")
        removed = 0
        if ranks.rank == 0:
            removed = sum(remove_stale_temporaries(os.path.join(self.directory, f)) for f in folders)
            if ranks.world > 1:
                self.manifest.replace_parts()
        ranks.barrier("while rank 0 cleared the temporaries of an earlier run")
        return removed

    def _finish_on_ranks(self, ranks, relpaths) -> None:
        """Step 5, once every rank has landed its outputs: rank 0 folds the parts into
        manifest.json and marks it complete when every output of `relpaths` is in place (a failed
        output leaves it incomplete); every rank then holds the merged manifest."""
        ranks.barrier("before the manifest parts are merged")
        if ranks.rank == 0:
            part, self.manifest.part = self.manifest.part, None  # manifest.json, not rank 0's part
            if ranks.world > 1:
                self.manifest.merge_parts()
            if all(self.manifest.verified(rel, "size") for rel in relpaths):
                self.manifest.mark_complete()
            self.manifest.part = part
        ranks.barrier("while rank 0 merged the manifest parts")
        if ranks.world > 1:
            loaded = Manifest.load(self.directory, self.manifest.stage, self.manifest.params)
            self.manifest.outputs, self.manifest.complete = loaded.outputs, loaded.complete
