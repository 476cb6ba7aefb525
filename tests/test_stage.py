"""data/stage.py: the restart ritual, shown on a toy stage whose work counts its calls."""

import json
import os

import pytest

from common.files import is_temporary
from data.manifest import Manifest
from data.stage import Stage

OUTPUTS = ["a.txt", "sub/b.txt"]
CONTENT = {"a.txt": "alpha\n", "sub/b.txt": "beta beta\n"}


class ToyStage:
    """Writes each output it is asked for through Stage.writing; `calls` lists what each run redid."""

    def __init__(self, directory, params=None, verify="sha256", fail_after_writing=False):
        self.directory = directory
        self.params = params or {"size": 1}
        self.verify = verify
        self.fail_after_writing = fail_after_writing
        self.calls = []
        self.messages = []

    def run(self):
        stage = Stage(self.directory, "toy", self.params, verify=self.verify, log=self.messages.append)

        def work(todo):
            self.calls.append(list(todo))
            os.makedirs(os.path.join(self.directory, "sub"), exist_ok=True)
            with stage.writing(todo) as targets:
                for rel, temporary in targets.items():
                    with open(temporary, "w") as f:
                        f.write(CONTENT[rel])
                if self.fail_after_writing:
                    raise RuntimeError("killed after writing")
            stage.land({rel: {"lines": 1} for rel in todo})
            return {"redone": len(todo)}

        return stage.run(OUTPUTS, work, folders=("", "sub"), cleared="toy: cleared")


def _manifest(directory):
    with open(os.path.join(directory, "manifest.json")) as f:
        return json.load(f)


def _temporaries(directory):
    return [name for _, _, names in os.walk(directory) for name in names if is_temporary(name)]


def test_a_second_run_skips_verified_outputs(tmp_path):
    toy = ToyStage(str(tmp_path))
    assert toy.run() == {"redone": 2}
    assert toy.run() is None
    assert toy.calls == [OUTPUTS]
    manifest = _manifest(tmp_path)
    assert manifest["complete"] and sorted(manifest["outputs"]) == OUTPUTS
    assert manifest["outputs"]["a.txt"]["counts"] == {"lines": 1}
    assert manifest["outputs"]["a.txt"]["bytes"] == len(CONTENT["a.txt"])


@pytest.mark.parametrize("damage", ["missing", "same_size_other_bytes"])
def test_a_missing_or_changed_output_is_redone_alone(tmp_path, damage):
    toy = ToyStage(str(tmp_path))
    toy.run()
    target = tmp_path / "sub" / "b.txt"
    if damage == "missing":
        target.unlink()
    else:
        target.write_text("BETA BETA\n")
    assert toy.run() == {"redone": 1}
    assert toy.calls == [OUTPUTS, ["sub/b.txt"]]
    assert target.read_text() == CONTENT["sub/b.txt"]
    assert toy.run() is None and len(toy.calls) == 2


def test_size_verification_trusts_an_output_of_the_recorded_size(tmp_path):
    toy = ToyStage(str(tmp_path), verify="size")
    toy.run()
    (tmp_path / "a.txt").write_text("ALPHA\n")
    assert toy.run() is None
    (tmp_path / "a.txt").write_text("alpha, longer\n")
    assert toy.run() == {"redone": 1} and toy.calls[-1] == ["a.txt"]


def test_other_parameters_redo_every_output(tmp_path):
    ToyStage(str(tmp_path)).run()
    other = ToyStage(str(tmp_path), params={"size": 2})
    assert other.run() == {"redone": 2} and other.calls == [OUTPUTS]
    assert _manifest(tmp_path)["params"] == {"size": 2}


def test_a_failure_leaves_no_temporary_and_records_nothing(tmp_path):
    toy = ToyStage(str(tmp_path), fail_after_writing=True)
    with pytest.raises(RuntimeError, match="killed after writing"):
        toy.run()
    assert _temporaries(tmp_path) == []
    assert not (tmp_path / "a.txt").exists() and not (tmp_path / "sub" / "b.txt").exists()
    assert not (tmp_path / "manifest.json").exists()


def test_the_temporaries_of_a_killed_run_are_cleared_before_the_work(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / ".a.txt.tmp-999").write_text("half")
    (tmp_path / "sub" / ".b.txt.tmp-999").write_text("half")
    toy = ToyStage(str(tmp_path))
    toy.run()
    assert _temporaries(tmp_path) == [] and toy.messages == ["toy: cleared"]
    toy.run()
    assert toy.messages == ["toy: cleared"]  # nothing left to clear, and nothing said


def test_the_manifest_is_written_last(tmp_path, monkeypatch):
    # Every save of the manifest finds each output it names under its final name, and the save
    # that marks it complete comes last.
    saves = []
    save = Manifest.save

    def watched(manifest):
        present = {rel: os.path.isfile(manifest.abspath(rel)) for rel in manifest.outputs}
        saves.append((manifest.complete, present))
        save(manifest)

    monkeypatch.setattr(Manifest, "save", watched)
    ToyStage(str(tmp_path)).run()
    assert saves[-1] == (True, {"a.txt": True, "sub/b.txt": True})
    assert all(all(present.values()) for _, present in saves)
    assert [complete for complete, _ in saves].count(True) == 1


def test_todo_asks_the_stage_whether_a_verified_output_is_current(tmp_path):
    toy = ToyStage(str(tmp_path))
    toy.run()
    stage = Stage(str(tmp_path), "toy", toy.params)
    assert stage.todo(OUTPUTS, current=lambda rel, counts: rel != "a.txt" and counts == {"lines": 1}) == [
        "a.txt"
    ]
    # The stale entry is forgotten, so a save made before it is redone no longer names it.
    assert sorted(stage.manifest.outputs) == ["sub/b.txt"]
    assert Stage(str(tmp_path), "toy", toy.params).todo(OUTPUTS) == []
