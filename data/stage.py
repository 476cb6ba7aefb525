"""The restart ritual every data stage shares, so that a stage supplies only its work.

A stage writes outputs (paths relative to one directory) and records each in that directory's
manifest (data/manifest.py). Every run takes the same steps:

1. load the manifest: one written for other parameters forgets every output;
2. keep each output that still verifies (its recorded size and sha256, or the size alone) and
   that the stage finds current (the input it recorded is unchanged); forget the others;
3. remove the temporaries a killed run left beside the outputs;
4. do the work for the others, each output written under a temporary name and renamed only
   when it is complete (`writing`, or a helper of common.files), deleted after a failure;
5. record the outputs once they are in place and save the manifest (`land`), then mark it
   complete: the manifest is written last, so it never names a file that is not there.

`Stage.run` takes these steps in this order for a stage whose outputs land in one go in one
process (vocabulary). A stage whose outputs land one by one over a long run takes them itself:
downloads (each source is reported, verified or not, and MRPC is built after them) and the
TFRecord files (ranks clear the temporaries between barriers and merge manifests). Text
formatting and sharding run on MPI ranks (data/ranks.py) with `todo_on_ranks`, `start_on_ranks`
and `finish_on_ranks`: the same steps, each rank verifying and writing its share, rank 0 alone
clearing and writing manifest.json; with one process they are the steps above.
"""

from __future__ import annotations

import contextlib
import os
import sys

from common.files import atomic_path, remove_stale_temporaries
from data.manifest import Manifest


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Stage:
    """The outputs of one stage in one directory, and the steps of a run over them."""

    def __init__(
        self,
        directory: str,
        name: str,
        params: dict,
        *,
        verify: str = "sha256",
        part: str | None = None,
        log=None,
    ):
        """Loads the manifest of `directory` (step 1). `verify` is "sha256" or "size"; `part`
        names a rank's own manifest file under MPI (Manifest.merge_parts folds them)."""
        self.directory = directory
        self.verify = verify
        self.log = log or _stderr
        self.manifest = Manifest.load(directory, name, params, part)

    def todo(self, relpaths, current=None) -> list[str]:
        """The outputs of `relpaths` to (re)do, in order (step 2): those not recorded, missing, not
        of the recorded size and sha256, or whose recorded counts `current(relpath, counts)`
        rejects. Their entries are forgotten; a recorded output that no longer verifies (missing,
        truncated, changed) is named in one sentence on the log."""
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

    def clear(self, folders=("",)) -> int:
        """Deletes the temporaries a killed run left in `folders` (relative to the directory; step
        3); returns how many."""
        return sum(remove_stale_temporaries(os.path.join(self.directory, folder)) for folder in folders)

    @contextlib.contextmanager
    def writing(self, relpaths):
        """Yields {relpath: temporary path} for the work to fill (step 4): when the block ends
        without an error each temporary is committed under its final name, otherwise each is
        deleted."""
        with contextlib.ExitStack() as stack:
            yield {rel: stack.enter_context(atomic_path(self.manifest.abspath(rel))) for rel in relpaths}

    def land(self, counts: dict, sha256: dict | None = None) -> None:
        """Records outputs that are now under their final names, {relpath: counts}, and saves the
        manifest once (step 5). Each is hashed unless `sha256` ({relpath: hex}) has its hash."""
        for relpath, output_counts in counts.items():
            self.manifest.record(relpath, output_counts, sha256=(sha256 or {}).get(relpath), save=False)
        self.manifest.save()

    def complete(self) -> None:
        self.manifest.mark_complete()

    # ---- the same steps over MPI ranks (data/ranks.py); with one process, the steps above ----

    def todo_on_ranks(self, relpaths, ranks, current=None) -> list[str]:
        """Step 2 over ranks: rank r verifies relpaths[r::world] (the hashing is shared); every
        rank gets the union, in the order of `relpaths`, and forgets those entries."""
        relpaths = list(relpaths)
        if ranks.world == 1:
            return self.todo(relpaths, current)
        mine = self.todo(relpaths[ranks.rank :: ranks.world], current)
        redo = {rel for share in ranks.allgather(mine, "deciding what to redo") for rel in share}
        for relpath in redo:
            self.manifest.forget(relpath)
        return [rel for rel in relpaths if rel in redo]

    def start_on_ranks(self, ranks, folders=("",)) -> int:
        """Step 3 over ranks: rank 0 removes the temporaries of a killed run from `folders` and makes
        manifest.json what every rank now holds (the outputs to redo forgotten, the manifest parts
        of an interrupted run folded in); returns how many temporaries it removed."""
        if ranks.world == 1:
            return self.clear(folders)
        ranks.barrier("before clearing the temporaries of an earlier run")
        removed = 0
        if ranks.rank == 0:
            removed = self.clear(folders)
            self.manifest.replace_parts()
        ranks.barrier("while rank 0 cleared the temporaries of an earlier run")
        return removed

    def finish_on_ranks(self, ranks, relpaths) -> None:
        """Step 5 over ranks, once every rank has `land`ed its outputs (in its manifest part): rank
        0 folds the parts into manifest.json and marks it complete when every output of
        `relpaths` is in place; every rank then holds the merged manifest."""
        if ranks.world == 1:
            self.complete()
            return
        ranks.barrier("before the manifest parts are merged")
        if ranks.rank == 0:
            part, self.manifest.part = self.manifest.part, None  # manifest.json, not rank 0's part
            self.manifest.merge_parts()
            if all(self.manifest.verified(rel, "size") for rel in relpaths):
                self.complete()
            self.manifest.part = part
        ranks.barrier("while rank 0 merged the manifest parts")
        loaded = Manifest.load(self.directory, self.manifest.stage, self.manifest.params, self.manifest.part)
        self.manifest.outputs, self.manifest.complete = loaded.outputs, loaded.complete

    def run(self, relpaths, work, *, folders=("",), cleared: str | None = None):
        """Steps 2 to 5 for a stage whose outputs land in one go. Returns None, touching nothing,
        when every output of `relpaths` verifies; otherwise removes stale temporaries from
        `folders` (logging `cleared` if there were any), calls `work(todo)`, which must `land`
        every output of `todo`, marks the manifest complete and returns what the work returned."""
        todo = self.todo(relpaths)
        if not todo:
            return None
        if self.clear(folders) and cleared:
            self.log(cleared)
        result = work(todo)
        self.complete()
        return result
