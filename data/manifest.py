"""Restartable stage outputs: atomic writes and a per-directory manifest of verified results.

Every stage writes each output to `<name>.tmp` and renames it only when complete, so a file
under its final name is never half-written (a killed run leaves only `.tmp` files, which are
ignored and overwritten). Each stage output directory holds `manifest.json`:

    {"stage": "sharding", "params": {...}, "outputs": {"training/x_0.txt":
        {"sha256": "...", "bytes": 123, "counts": {"documents": 10, ...}}}, "complete": true}

A re-run skips an output whose file still has the recorded size and sha256, and redoes a
missing or corrupt one; a change of any parameter (including the sha256 of the inputs)
invalidates every recorded output. Under MPI each rank records into `manifest.<rank>.part.json`
and rank 0 merges the parts, so no two processes ever write the same file.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import json
import os

MANIFEST_NAME = "manifest.json"
TMP_SUFFIX = ".tmp"
_HASH_CHUNK = 1 << 20


class PrepError(Exception):
    """A problem the user can fix (bad path, bad input, bad flag); the CLI prints it as one sentence."""


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    buffer = memoryview(bytearray(_HASH_CHUNK))  # one fixed buffer: memory does not follow file size
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buffer):
            digest.update(buffer[:n])
    return digest.hexdigest()


def tmp_path(path: str) -> str:
    return path + TMP_SUFFIX


def _fsync_dir(directory: str) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def commit(tmp: str, final: str) -> None:
    """fsyncs `tmp` and renames it to `final` (atomic on POSIX)."""
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, final)
    _fsync_dir(os.path.dirname(os.path.abspath(final)))


@contextlib.contextmanager
def atomic_output(path: str):
    """Yields a temporary path to write; renames it to `path` on success, deletes it on error."""
    tmp = tmp_path(path)
    try:
        yield tmp
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise
    commit(tmp, path)


def ensure_writable_dir(directory: str, what: str = "output directory") -> None:
    """Creates `directory` if needed and proves it is writable, or raises PrepError naming it."""
    try:
        os.makedirs(directory, exist_ok=True)
        probe = os.path.join(directory, f".write_test_{os.getpid()}")
        with open(probe, "w") as f:
            f.write("ok")
        os.remove(probe)
    except OSError as e:
        reason = e.strerror or str(e)
        if e.errno in (errno.ENOTDIR, errno.EEXIST):
            reason = "a path component is a file, not a directory"
        raise PrepError(f"Cannot write to the {what} {directory!r} ({reason}); pass a writable "
                        f"--data_dir / --output_dir or fix its permissions.") from None


def _read_json(path: str):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        # An unreadable manifest only costs a redo; it must never stop a run.
        return None


class Manifest:
    """The verified outputs of one stage in one directory (paths relative to that directory)."""

    def __init__(self, directory: str, stage: str, params: dict, part: str | None = None):
        self.directory = directory
        self.stage = stage
        # A JSON round trip normalises tuples and keys, so comparisons with a loaded copy are exact.
        self.params = json.loads(json.dumps(params, sort_keys=True))
        self.part = part
        self.outputs: dict[str, dict] = {}
        self.complete = False
        self.invalidated = False

    @property
    def path(self) -> str:
        name = MANIFEST_NAME if self.part is None else f"manifest.{self.part}.part.json"
        return os.path.join(self.directory, name)

    @classmethod
    def load(cls, directory: str, stage: str, params: dict, part: str | None = None) -> "Manifest":
        """The manifest of `directory` if it was written for the same stage and params, else an empty one.

        Outputs recorded by per-rank parts (an interrupted MPI run) are merged in.
        """
        manifest = cls(directory, stage, params, part)
        sources = [os.path.join(directory, MANIFEST_NAME)]
        sources += sorted(glob.glob(os.path.join(directory, "manifest.*.part.json")))
        for source in sources:
            data = _read_json(source)
            if not isinstance(data, dict):
                continue
            if data.get("stage") != stage or data.get("params") != manifest.params:
                manifest.invalidated = True
                continue
            outputs = data.get("outputs")
            if isinstance(outputs, dict):
                manifest.outputs.update(outputs)
            if source.endswith(MANIFEST_NAME):
                manifest.complete = bool(data.get("complete"))
        return manifest

    def abspath(self, relpath: str) -> str:
        return os.path.join(self.directory, relpath)

    def verified(self, relpath: str, verify: str = "sha256") -> bool:
        """True if `relpath` is recorded and its file still has the recorded size (and sha256)."""
        entry = self.outputs.get(relpath)
        path = self.abspath(relpath)
        if not entry or not os.path.isfile(path):
            return False
        if os.path.getsize(path) != entry.get("bytes"):
            return False
        return verify == "size" or sha256_file(path) == entry.get("sha256")

    def counts(self, relpath: str) -> dict:
        return dict(self.outputs.get(relpath, {}).get("counts", {}))

    def record(self, relpath: str, counts: dict | None = None, sha256: str | None = None,
               save: bool = True) -> None:
        """Records a finished output (hashing it unless `sha256` is given) and saves the manifest."""
        path = self.abspath(relpath)
        self.outputs[relpath] = {
            "sha256": sha256 or sha256_file(path),
            "bytes": os.path.getsize(path),
            "counts": dict(counts or {}),
        }
        self.complete = False
        if save:
            self.save()

    def forget(self, relpath: str) -> None:
        self.outputs.pop(relpath, None)
        self.complete = False

    def mark_complete(self) -> None:
        self.complete = True
        self.save()

    def totals(self, relpaths=None) -> dict:
        """Sums the recorded counts over `relpaths` (default: every output)."""
        total: dict = {}
        for relpath in self.outputs if relpaths is None else relpaths:
            for key, value in self.counts(relpath).items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    total[key] = total.get(key, 0) + value
        return total

    def save(self) -> None:
        data = {"stage": self.stage, "params": self.params, "complete": self.complete,
                "outputs": dict(sorted(self.outputs.items()))}
        os.makedirs(self.directory, exist_ok=True)
        tmp = tmp_path(self.path)
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=False)
            f.write("\n")
        commit(tmp, self.path)

    def merge_parts(self) -> None:
        """Rank 0, after a barrier: folds every `manifest.*.part.json` into manifest.json and deletes them."""
        merged = Manifest.load(self.directory, self.stage, self.params)
        self.outputs.update(merged.outputs)
        part, self.part = self.part, None
        self.save()
        for source in glob.glob(os.path.join(self.directory, "manifest.*.part.json")):
            with contextlib.suppress(FileNotFoundError):
                os.remove(source)
        self.part = part
