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

`Stage.run` takes these steps in this order for a stage whose outputs land in one go (text
formatting, sharding, vocabulary). A stage whose outputs land one by one over a long run takes
them itself: downloads (each source is reported, verified or not, and MRPC is built after
them) and the TFRecord files (ranks clear the temporaries between barriers and merge manifests).
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
