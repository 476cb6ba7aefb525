"""Restartable stage outputs: atomic writes and a per-directory manifest of verified results.

Every stage writes each output through common.files (a hidden temporary beside it, renamed
only when complete), so a file under its final name is never half-written; a killed run leaves
only temporaries, which are ignored and cleaned. Each stage output directory holds `manifest.json`:

    {"stage": "sharding", "params": {...}, "outputs": {"training/x_0.txt":
        {"sha256": "...", "bytes": 123, "counts": {"documents": 10, ...}}}, "complete": true}

A re-run skips an output whose file still has the recorded size and sha256, and redoes a
missing, truncated or corrupt one (never trusting a file for being there under its name); a change of any parameter (including the sha256 of the inputs)
invalidates every recorded output. Under MPI each rank records into `manifest.<rank>.part.json`
and rank 0 merges the parts, so no two processes ever write the same file. data/stage.py takes a
stage's run through these steps in order.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os

from common.errors import UserError
from common.files import read_json, sha256_file, write_text

MANIFEST_NAME = "manifest.json"


def input_identity(path: str) -> list:
    """[absolute path, size, mtime]: what a stage records of an input so a changed input redoes it."""
    st = os.stat(path)
    return [os.path.abspath(path), st.st_size, st.st_mtime_ns]


def _read_manifest(path: str):
    try:
        return read_json(path, "manifest")
    except UserError:
        return None  # an unreadable manifest only costs a redo; it must never stop a run


def read_manifest_outputs(path: str) -> dict:
    """{relpath: {"sha256", "bytes", "counts"}} of the manifest at `path`; {} when there is none
    or it cannot be read (a reader falls back to looking at the files)."""
    if not os.path.isfile(path):
        return {}
    data = _read_manifest(path)
    outputs = data.get("outputs") if isinstance(data, dict) else None
    return outputs if isinstance(outputs, dict) else {}


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
            data = _read_manifest(source)
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

    def problem(self, relpath: str, verify: str = "sha256") -> str | None:
        """None if `relpath` is recorded and its file still has the recorded size (and sha256),
        else what is wrong: "not recorded", "missing", "N bytes but M were recorded" (a file cut
        short by a crash, a full disk or a bad copy), "not the bytes recorded"."""
        entry = self.outputs.get(relpath)
        path = self.abspath(relpath)
        if not entry:
            return "not recorded"
        if not os.path.isfile(path):
            return "missing"
        size = os.path.getsize(path)
        if size != entry.get("bytes"):
            return f"{size} bytes but {entry.get('bytes')} were recorded"
        if verify != "size" and sha256_file(path) != entry.get("sha256"):
            return "not the bytes recorded (its sha256 differs)"
        return None

    def verified(self, relpath: str, verify: str = "sha256") -> bool:
        """True if `relpath` is recorded and its file still has the recorded size (and sha256)."""
        return self.problem(relpath, verify) is None

    def counts(self, relpath: str) -> dict:
        return dict(self.outputs.get(relpath, {}).get("counts", {}))

    def record(
        self, relpath: str, counts: dict | None = None, sha256: str | None = None, save: bool = True
    ) -> None:
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
        data = {
            "stage": self.stage,
            "params": self.params,
            "complete": self.complete,
            "outputs": dict(sorted(self.outputs.items())),
        }
        os.makedirs(self.directory, exist_ok=True)
        write_text(self.path, json.dumps(data, indent=1, sort_keys=False) + "\n")

    def merge_parts(self) -> None:
        """Rank 0, after a barrier: folds every `manifest.*.part.json` into manifest.json and deletes them."""
        merged = Manifest.load(self.directory, self.stage, self.params)
        self.outputs.update(merged.outputs)
        self.replace_parts()

    def replace_parts(self) -> None:
        """Rank 0: manifest.json becomes this manifest and every `manifest.*.part.json` is deleted.
        Before the work of a run over ranks, this manifest already holds what the parts of an
        interrupted run recorded (load merged them) less the outputs to redo (forgotten)."""
        part, self.part = self.part, None
        self.save()
        for source in glob.glob(os.path.join(self.directory, "manifest.*.part.json")):
            with contextlib.suppress(FileNotFoundError):
                os.remove(source)
        self.part = part
