"""data/stage.py: the restart ritual (Stage.run_on_ranks in one process), shown on a toy stage
whose work counts its calls; the real stages' truncated outputs found and redone."""

import json
import os

import pytest

from common.files import is_temporary
from data.manifest import Manifest
from data.stage import Runtime, Stage

OUTPUTS = ["a.txt", "sub/b.txt"]
CONTENT = {"a.txt": "alpha\n", "sub/b.txt": "beta beta\n"}


class ToyStage:
    """Writes each output it is asked for through Stage.writing; `calls` lists what each run redid."""

    def __init__(self, directory, params=None, verify="sha256", fail_after_writing=False, write=None):
        self.directory = directory
        self.params = params or {"size": 1}
        self.verify = verify
        self.fail_after_writing = fail_after_writing
        self.write = write  # the outputs each run writes of those it is asked for (default: all)
        self.calls = []
        self.messages = []
        self.last = None  # the Run the last run returned

    def run(self):
        runtime = Runtime(verify=self.verify, log=self.messages.append)
        stage = Stage(self.directory, "toy", self.params, runtime)

        def work(run):
            if run.removed:
                self.messages.append("toy: cleared")
            todo = [rel for rel in run.todo if self.write is None or rel in self.write]
            self.calls.append(list(run.todo))
            os.makedirs(os.path.join(self.directory, "sub"), exist_ok=True)
            with stage.writing(todo) as targets:
                for rel, temporary in targets.items():
                    with open(temporary, "w") as f:
                        f.write(CONTENT[rel])
                if self.fail_after_writing:
                    raise RuntimeError("killed after writing")
            stage.land({rel: {"lines": 1} for rel in todo})
            return {"redone": len(todo)}

        self.last = stage.run_on_ranks(OUTPUTS, work, folders=("", "sub"))
        return self.last.result


def _manifest(directory):
    with open(os.path.join(directory, "manifest.json")) as f:
        return json.load(f)


def _temporaries(directory):
    return [name for _, _, names in os.walk(directory) for name in names if is_temporary(name)]


def test_a_second_run_skips_verified_outputs(tmp_path):
    toy = ToyStage(str(tmp_path))
    assert toy.run() == {"redone": 2}
    assert (toy.last.todo, toy.last.skipped, toy.last.layout, toy.last.ranks.world) == (OUTPUTS, False, {}, 1)
    assert toy.run() is None
    assert (toy.last.todo, toy.last.skipped) == ([], True)
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


def test_an_output_the_work_did_not_land_leaves_the_manifest_incomplete(tmp_path):
    # As when a TFRecord shard fails: the others are recorded, the stage is not complete, and
    # a re-run does the missing one alone.
    toy = ToyStage(str(tmp_path), write=["a.txt"])
    assert toy.run() == {"redone": 1}
    manifest = _manifest(tmp_path)
    assert not manifest["complete"] and sorted(manifest["outputs"]) == ["a.txt"]
    toy.write = None
    assert toy.run() == {"redone": 1} and toy.calls[-1] == ["sub/b.txt"]
    assert _manifest(tmp_path)["complete"]


def test_an_interrupted_run_whose_outputs_all_landed_is_completed_without_work(tmp_path):
    toy = ToyStage(str(tmp_path))
    toy.run()
    manifest = _manifest(tmp_path)
    manifest["complete"] = False  # killed between the last output landing and the last save
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert toy.run() is None and len(toy.calls) == 1
    assert _manifest(tmp_path)["complete"]


def test_a_runtime_is_one_value_with_fields_given_alone():
    said = []
    assert Runtime() == Runtime.of()
    runtime = Runtime.of(n_processes=3, log=said.append)
    assert (runtime.n_processes, runtime.verify, runtime.comm) == (3, "sha256", None)
    runtime.log("x")
    assert said == ["x"]
    assert Runtime.of(runtime, verify="size") == Runtime(n_processes=3, verify="size", log=said.append)
    with pytest.raises(TypeError):
        Runtime.of(n_procs=2)  # a misspelt field is refused, not ignored


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


def test_a_truncated_shard_or_record_file_is_found_by_a_rerun_and_redone(tmp_path, capsys):
    """The real stages: a shard and a TFRecord file cut in half (a crash during a copy, a full
    disk, a bad sync) still carry their final names; a re-run finds them by their size, says so,
    and writes them again byte for byte, leaving the others untouched."""
    from data.corpus.sharding import shard_corpus
    from data.pretraining.stage import create_tfrecord_files

    lines = [
        " ".join(f"Document {i} sentence {j} talks about topic {(i * 7 + j) % 11}." for j in range(2 + i % 5))
        for i in range(24)
    ]
    corpus = tmp_path / "formatted.txt"
    corpus.write_text("\n".join(lines) + "\n")
    vocab = tmp_path / "vocab.txt"
    words = sorted({w.lower().strip(".") for line in lines for w in line.split()} | {"."})
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    shards, records = tmp_path / "sharded", tmp_path / "records"
    said = []

    def run():
        shard_corpus(
            [str(corpus)],
            str(shards),
            "ds",
            n_training_shards=2,
            n_test_shards=1,
            fraction_test=0.25,
            log=said.append,
        )
        return create_tfrecord_files(
            str(shards),
            str(records),
            vocab_file=str(vocab),
            max_seq_length=32,
            max_predictions_per_seq=5,
            dupe_factor=1,
            log=said.append,
        )

    run()
    outputs = {p: p.read_bytes() for p in [*shards.rglob("*.txt"), *records.rglob("*.tfrecord")]}
    shard, record = shards / "training" / "ds_training_1.txt", records / "training" / "ds_training_0.tfrecord"
    stamps = {p: p.stat().st_mtime_ns for p in outputs if p not in (shard, record)}
    for path in (shard, record):
        os.truncate(path, path.stat().st_size // 2)
    said.clear()
    capsys.readouterr()
    stats = run()
    redone = (
        f"{shard} is {len(outputs[shard]) // 2} bytes but {len(outputs[shard])} were recorded: redoing it."
    )
    assert f"[sharding] {redone}" in said
    cut = (
        f"{record} is {len(outputs[record]) // 2} bytes but {len(outputs[record])} were recorded: redoing it."
    )
    assert f"[create_tfrecord_files] {cut}" in said  # every stage says it on the runtime's log
    assert capsys.readouterr().err == ""
    # The cut record file is written again; the redone shard came out byte for byte, so its record
    # file (made from the same input) still verifies and is kept.
    assert (stats["done"], stats["skipped"]) == (1, 2)
    assert all(p.read_bytes() == content for p, content in outputs.items())
    assert all(p.stat().st_mtime_ns == stamp for p, stamp in stamps.items())
    assert _temporaries(tmp_path) == []
