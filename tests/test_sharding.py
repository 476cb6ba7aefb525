"""Sentence segmentation and streaming, balanced, restartable sharding."""

import hashlib
import json
import os
import signal
import tracemalloc

import pytest

from common.errors import UserError
from data.corpus.segmentation import split_long, split_sentences
from data.corpus.sharding import _Workers, shard_corpus


def _quiet(*_):
    pass


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "Dr. Smith went to Washington. He arrived at 3 p.m. The meeting was over.",
            ["Dr. Smith went to Washington.", "He arrived at 3 p.m.", "The meeting was over."],
        ),
        (
            "The author J. R. R. Tolkien wrote it. It sold well.",
            ["The author J. R. R. Tolkien wrote it.", "It sold well."],
        ),
        (
            "It costs $3.50, e.g. for Apples. See No. 5 and Fig. 2 on p. 12. Done.",
            ["It costs $3.50, e.g. for Apples.", "See No. 5 and Fig. 2 on p. 12.", "Done."],
        ),
        (
            'He said "Stop." Then he left. (See below.) Next one!',
            ['He said "Stop."', "Then he left.", "(See below.)", "Next one!"],
        ),
        (
            "She moved to the U.S. The weather is nice. The U.S. Army is big.",
            ["She moved to the U.S.", "The weather is nice.", "The U.S. Army is big."],
        ),
        (
            "Was it good? Yes! Absolutely... Maybe not.",
            ["Was it good?", "Yes!", "Absolutely...", "Maybe not."],
        ),
        (
            "Smith et al. found it in 2009. 2010 was different. Pi is approx. 3.14159 in value.",
            ["Smith et al. found it in 2009.", "2010 was different.", "Pi is approx. 3.14159 in value."],
        ),
        (
            "The answer was no. The end. St. Louis and Mt. Everest are far apart.",
            ["The answer was no.", "The end.", "St. Louis and Mt. Everest are far apart."],
        ),
        (
            "北京是中国的首都。上海是最大的城市！你去过吗？",
            ["北京是中国的首都。", "上海是最大的城市！", "你去过吗？"],
        ),
        (
            "lower case after a period. continues the sentence",
            ["lower case after a period. continues the sentence"],
        ),
        ("No terminal punctuation", ["No terminal punctuation"]),
        ("", []),
    ],
)
def test_split_sentences(text, expected):
    assert split_sentences(text) == expected


def test_split_long_cuts_at_spaces_and_inside_huge_words():
    assert split_long("a b c", 10) == ["a b c"]
    assert split_long("aaaa bbbb cccc dddd", 9) == ["aaaa bbbb", "cccc dddd"]
    assert split_long("x" * 25 + " end", 10) == ["x" * 10, "x" * 10, "xxxxx end"]


def _corpus(tmp_path, n_docs=40, name="formatted.txt", seed=0):
    lines = []
    for i in range(n_docs):
        sentences = [
            f"Document {i} sentence {j} talks about topic {(i * 7 + j) % 11}."
            for j in range(1 + (i * 5 + seed) % 9)
        ]
        lines.append(" ".join(sentences))
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n\n")  # a trailing blank line is not a document
    return str(path), lines


def _read_shard_docs(path):
    blocks = open(path, encoding="utf-8").read().split("\n\n")
    return [" ".join(b.split("\n")) for b in blocks if b.strip()]


def _shard(tmp_path, inputs, **kwargs):
    options = dict(n_training_shards=4, n_test_shards=2, fraction_test=0.25, log=_quiet)
    options.update(kwargs)
    return shard_corpus(inputs, str(tmp_path / "sharded"), "ds", **options)


def test_documents_are_never_split_and_the_test_set_is_exact(tmp_path):
    path, lines = _corpus(tmp_path)
    stats = _shard(tmp_path, [path])
    out = tmp_path / "sharded"
    training = [_read_shard_docs(out / "training" / f"ds_training_{i}.txt") for i in range(4)]
    test = [_read_shard_docs(out / "test" / f"ds_test_{i}.txt") for i in range(2)]
    every = [d for shard in training + test for d in shard]
    assert sorted(every) == sorted(lines)  # each document exactly once, intact
    assert sum(map(len, test)) == 10 == stats["test_documents"]  # floor(40 * 0.25)
    # Evenly spread: every 4th document goes to the test set.
    assert sorted(d for shard in test for d in shard) == sorted(lines[i] for i in range(3, 40, 4))
    assert stats["documents"] == 40 and stats["sentences"] == sum(
        len(split_sentences(line)) for line in lines
    )
    assert stats["one_sentence_documents"] == sum(len(split_sentences(line)) == 1 for line in lines)
    # Balanced: shard sizes differ by at most the largest document.
    sizes = [os.path.getsize(out / "training" / f"ds_training_{i}.txt") for i in range(4)]
    assert max(sizes) - min(sizes) <= max(len(line) for line in lines) + 1
    # Format: one sentence per line, a blank line after each document.
    text = (out / "training" / "ds_training_0.txt").read_text()
    assert text.endswith(".\n\n") and "\n\n\n" not in text
    assert text.split("\n")[:2] == ["Document 0 sentence 0 talks about topic 0.", ""]


def _shard_bytes(out):
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*.txt"))}


@pytest.mark.process
def test_parallel_segmentation_writes_the_same_bytes_and_counts(tmp_path):
    # Two input files with invalid UTF-8 in one: the workers read documents from both by offset.
    first, _ = _corpus(tmp_path, n_docs=25)
    second, _ = _corpus(tmp_path, n_docs=15, name="second.txt", seed=3)
    with open(second, "ab") as f:
        f.write(b"A broken \xff byte here. And a second sentence.\n")
    runs = {}
    for n in (1, 2, 3):
        os.makedirs(tmp_path / f"p{n}")
        stats = _shard(tmp_path / f"p{n}", [first, second], n_processes=n)
        out = tmp_path / f"p{n}" / "sharded"
        manifest = json.loads((out / "manifest.json").read_text())
        runs[n] = (_shard_bytes(out), manifest["outputs"], {k: v for k, v in stats.items() if k != "seconds"})
    assert len(runs[1][0]) == 6 and runs[1][2]["invalid_utf8_sequences"] == 1
    assert runs[2] == runs[1] and runs[3] == runs[1]
    # The manifest's hashes (taken while writing) are those of the files.
    for rel, entry in runs[2][1].items():
        assert entry["sha256"] == hashlib.sha256(runs[2][0][rel]).hexdigest()


@pytest.mark.process
def test_shards_redone_by_several_workers_equal_the_first_run(tmp_path):
    path, _ = _corpus(tmp_path)
    _shard(tmp_path, [path])
    out = tmp_path / "sharded"
    original = _shard_bytes(out)
    (out / "training" / "ds_training_1.txt").unlink()
    (out / "test" / "ds_test_0.txt").write_text("corrupt")
    (out / "training" / "ds_training_3.txt").write_text("corrupt")
    stats = _shard(tmp_path, [path], n_processes=2)
    assert stats["redone"] == 3 and _shard_bytes(out) == original


@pytest.mark.process
@pytest.mark.parametrize(
    "case, error, words",
    [
        # A worker that cannot write its shard says why.
        ("unwritable", RuntimeError, r"sharding worker failed: FileNotFoundError.*missing"),
        # A document past the end of its file: the input changed under the stage.
        ("input_changed", UserError, r"formatted.txt changed while it was being sharded"),
        # A worker killed: the others are not waited for in vain.
        ("killed", RuntimeError, r"Sharding worker 1 died \(exit code -9\)"),
    ],
)
def test_a_failing_or_dying_worker_is_named(tmp_path, case, error, words):
    path, _ = _corpus(tmp_path)
    keys = [("training", 0), ("training", 1)]
    folder = tmp_path / ("missing" if case == "unwritable" else "shards")
    if case != "unwritable":
        folder.mkdir()
    workers = _Workers(2, [path], {k: str(folder / f"{k[1]}.tmp") for k in keys}, 100, 1000)
    try:
        if case == "input_changed":
            workers.add(keys[0], 0, os.path.getsize(path) - 3, 10)
        if case == "killed":
            os.kill(workers.processes[1].pid, signal.SIGKILL)
            workers.processes[1].join()
            for _ in range(50):
                workers.add(keys[1], 0, 0, 1)
        with pytest.raises(error, match=words):
            workers.finish()
    finally:
        workers.stop()


def test_corrupt_or_missing_shard_is_redone_alone(tmp_path):
    path, _ = _corpus(tmp_path)
    _shard(tmp_path, [path])
    out = tmp_path / "sharded"
    target = out / "training" / "ds_training_2.txt"
    original = target.read_bytes()
    others = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in out.rglob("*.txt") if p != target}
    target.write_bytes(original.replace(b"Document", b"Dokument", 1))
    stats = _shard(tmp_path, [path])
    assert stats["redone"] == 1 and target.read_bytes() == original
    assert all(p.stat().st_mtime_ns == m and p.read_bytes() == b for p, (m, b) in others.items())
    # Simulated kill: the final file is gone and a half-written temporary is left behind.
    target.unlink()
    (out / "training" / ".ds_training_2.txt.tmp-999").write_text("half")
    stats = _shard(tmp_path, [path])
    assert stats["redone"] == 1 and target.read_bytes() == original
    assert not (out / "training" / ".ds_training_2.txt.tmp-999").exists()
    assert _shard(tmp_path, [path])["skipped"] is True
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"] and len(manifest["outputs"]) == 6


def test_parameter_change_invalidates_every_shard(tmp_path):
    path, _ = _corpus(tmp_path)
    _shard(tmp_path, [path])
    assert _shard(tmp_path, [path], max_sentence_chars=30)["redone"] == 6


def test_long_sentences_are_cut_and_counted(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("Short one. " + "word " * 100 + "end.\nSecond document here.\nThird.\n")
    stats = shard_corpus(
        [str(path)],
        str(tmp_path / "s"),
        "d",
        n_training_shards=1,
        n_test_shards=0,
        fraction_test=0.0,
        max_sentence_chars=100,
        log=_quiet,
    )
    assert stats["long_sentences_split"] == 1
    lines = (tmp_path / "s" / "training" / "d_training_0.txt").read_text().split("\n")
    assert max(map(len, lines)) <= 100


def test_too_few_documents_fail_with_a_clear_message(tmp_path):
    path, _ = _corpus(tmp_path, n_docs=5)
    with pytest.raises(UserError, match=r"5 documents \(4 for training\), fewer than --n_training_shards 8"):
        _shard(tmp_path, [path], n_training_shards=8, n_test_shards=1, fraction_test=0.2)
    with pytest.raises(
        UserError, match=r"Only 1 of 5 documents go to the test set.*fewer than --n_test_shards 2"
    ):
        _shard(tmp_path, [path], n_training_shards=2, n_test_shards=2, fraction_test=0.2)
    with pytest.raises(UserError, match="use both"):
        _shard(tmp_path, [path], n_test_shards=0, fraction_test=0.2)
    with pytest.raises(UserError, match="run --action text_formatting first"):
        _shard(tmp_path, [str(tmp_path / "nope.txt")])
    assert not list((tmp_path / "sharded").rglob("*.txt"))


def test_memory_does_not_grow_with_the_corpus(tmp_path):
    peaks = []
    for n_docs in (300, 1500):
        path, _ = _corpus(tmp_path, n_docs=n_docs, name=f"c{n_docs}.txt")
        tracemalloc.start()
        shard_corpus(
            [path],
            str(tmp_path / f"s{n_docs}"),
            "d",
            n_training_shards=4,
            n_test_shards=1,
            fraction_test=0.1,
            buffer_bytes=16_384,
            log=_quiet,
        )
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    assert peaks[1] < peaks[0] * 1.05 + 20_000, peaks
