"""The pretraining-records writer (data/pretraining/writer.py) and create_pretraining_data.py:
the files we write equal the transcription of Google's script example for example on a
few-hundred-line corpus with a real vocabulary; both engines write the same bytes; bad input
stops with one sentence and leaves no file behind."""

import os
import random
import subprocess
import sys

import pytest

from bert.tokenization import build_tokenizer
from common.files import is_temporary
from data.pretraining import tfrecord
from data.pretraining import writer as cpd
from data.pretraining.instances import InstanceOptions
from data.pretraining.writer import _create_training_files, create_training_files
from pretraining_reference import (
    GoogleFullTokenizer,
    google_create_training_instances,
    google_examples,
    google_read_documents,
    native_or_skip,
    read_examples,
    write_corpus,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def base_tokenizer(minilm_dir):
    return build_tokenizer(vocab_file=os.path.join(minilm_dir, "vocab.txt"), do_lower_case=True)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(str(tmp_path_factory.mktemp("corpus") / "corpus.txt"))


CASES = [
    dict(
        max_seq_length=128,
        max_predictions_per_seq=20,
        masked_lm_prob=0.15,
        short_seq_prob=0.1,
        dupe_factor=2,
        do_whole_word_mask=False,
        random_seed=12345,
    ),
    dict(
        max_seq_length=24,
        max_predictions_per_seq=5,
        masked_lm_prob=0.3,
        short_seq_prob=0.5,
        dupe_factor=2,
        do_whole_word_mask=True,
        random_seed=7,
    ),
    dict(
        max_seq_length=9,
        max_predictions_per_seq=2,
        masked_lm_prob=0.0,
        short_seq_prob=1.0,
        dupe_factor=1,
        do_whole_word_mask=False,
        random_seed=1,
    ),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_files_equal_the_reference_example_for_example(case, corpus, base_tokenizer, minilm_dir, tmp_path):
    c = CASES[case]
    S, P = c["max_seq_length"], c["max_predictions_per_seq"]
    outputs = [str(tmp_path / f"out-{j}.tfrecord") for j in range(2)]
    stats = create_training_files([corpus], outputs, base_tokenizer, **c)

    # Google's own tokenizer (transcribed), so the comparison covers tokenization too.
    google_tokenizer = GoogleFullTokenizer(os.path.join(minilm_dir, "vocab.txt"), do_lower_case=True)
    docs = google_read_documents([corpus], google_tokenizer)
    instances = google_create_training_instances(
        docs,
        random.Random(c["random_seed"]),
        S,
        c["dupe_factor"],
        c["short_seq_prob"],
        c["masked_lm_prob"],
        P,
        list(base_tokenizer.vocab.keys()),
        c["do_whole_word_mask"],
    )
    expected = google_examples(instances, base_tokenizer.vocab, S, P, 2)

    assert stats["instances"] == len(instances) > 50
    assert stats["documents"] == len([d for d in docs if d])
    assert stats["sentences"] == sum(len(d) for d in docs)
    assert stats["tokens"] == sum(len(s) for d in docs for s in d)
    assert stats["masked_tokens"] == sum(len(i.masked_lm_positions) for i in instances)
    for path, want in zip(outputs, expected):
        got = read_examples(path, S, P)
        assert len(got) == len(want)
        for k, (g, w) in enumerate(zip(got, want)):
            assert g == w, f"{os.path.basename(path)} example {k} differs"


def test_both_engines_write_the_same_bytes(corpus, base_tokenizer, tmp_path):
    native_or_skip()
    o = InstanceOptions(
        max_seq_length=32,
        max_predictions_per_seq=6,
        dupe_factor=2,
        do_whole_word_mask=True,
        short_seq_prob=0.3,
    )
    files = {}
    for engine in ("native", "python"):
        out = str(tmp_path / f"{engine}.tfrecord")
        stats = _create_training_files([corpus], [out], base_tokenizer, o, 99, engine=engine)
        files[engine] = (open(out, "rb").read(), {k: v for k, v in stats.items() if k != "seconds"})
    assert files["native"] == files["python"]


def _all_features(path):
    """Every record of `path` as {feature name: list of values}, whatever its layout."""
    from tensorflow.core.example import example_pb2

    out = []
    for data in tfrecord.read_records(path):
        features = example_pb2.Example.FromString(data).features.feature
        out.append({k: list(getattr(v, v.WhichOneof("kind")).value) for k, v in features.items()})
    return out


@pytest.mark.parametrize("whole_word", [False, True])
def test_dynamic_records_hold_the_static_instances_unmasked(whole_word, corpus, base_tokenizer, tmp_path):
    kw = dict(max_seq_length=32, max_predictions_per_seq=6, dupe_factor=1, random_seed=5)
    static, dynamic = str(tmp_path / "static.tfrecord"), str(tmp_path / "dynamic.tfrecord")
    create_training_files([corpus], [static], base_tokenizer, do_whole_word_mask=whole_word, **kw)
    stats = create_training_files(
        [corpus], [dynamic], base_tokenizer, do_whole_word_mask=whole_word, masking="dynamic", **kw
    )
    masked, unmasked = _all_features(static), _all_features(dynamic)
    assert len(unmasked) == len(masked) == stats["instances"] > 50 and stats["masked_tokens"] == 0
    vocab = base_tokenizer.vocab
    continues = {i for t, i in vocab.items() if t.startswith("##")}
    expected_names = {"input_ids", "input_mask", "segment_ids", "next_sentence_labels", "masking_ids"}
    for m, u in zip(masked, unmasked):
        assert set(u) == expected_names | ({"word_continues"} if whole_word else set())
        ids = list(m["input_ids"])
        for position, label, weight in zip(
            m["masked_lm_positions"], m["masked_lm_ids"], m["masked_lm_weights"]
        ):
            if weight:
                ids[position] = label
        assert u["input_ids"] == ids
        for name in ("input_mask", "segment_ids", "next_sentence_labels"):
            assert u[name] == m[name]
        assert u["masking_ids"] == [vocab["[CLS]"], vocab["[SEP]"], vocab["[MASK]"], max(vocab.values()) + 1]
        if whole_word:
            assert u["word_continues"] == [
                int(t in continues and k < sum(m["input_mask"])) for k, t in enumerate(ids)
            ]


def test_both_engines_write_the_same_dynamic_bytes(corpus, base_tokenizer, tmp_path):
    native_or_skip()
    o = InstanceOptions(max_seq_length=32, max_predictions_per_seq=6, dupe_factor=2, do_whole_word_mask=True)
    files = {}
    for engine in ("native", "python"):
        out = str(tmp_path / f"{engine}.tfrecord")
        stats = _create_training_files(
            [corpus], [out], base_tokenizer, o, 99, engine=engine, masking="dynamic"
        )
        files[engine] = (open(out, "rb").read(), {k: v for k, v in stats.items() if k != "seconds"})
    assert files["native"] == files["python"]


def test_round_robin_over_outputs_matches_one_output(corpus, base_tokenizer, tmp_path):
    one = str(tmp_path / "one.tfrecord")
    three = [str(tmp_path / f"three-{j}.tfrecord") for j in range(3)]
    kw = dict(max_seq_length=32, max_predictions_per_seq=5, dupe_factor=1, random_seed=3)
    create_training_files([corpus], [one], base_tokenizer, **kw)
    create_training_files([corpus], three, base_tokenizer, **kw)
    single = list(tfrecord.read_records(one))
    split = [list(tfrecord.read_records(p)) for p in three]
    assert [len(s) for s in split] == [len(single[j::3]) for j in range(3)]
    for j in range(3):
        assert split[j] == single[j::3]
    assert not [f for f in os.listdir(tmp_path) if is_temporary(f)]


# ---- bad input --------------------------------------------------------------------------------


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "create_pretraining_data.py", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.process
def test_cli_end_to_end_with_invalid_utf8(minilm_dir, tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(
        "Hello world.\nThe second sentence.\n\nAnother document here.\nWith bad \xff bytes.\n".encode(
            "latin-1"
        ).replace(b"\\xff", b"\xff")
    )
    out = tmp_path / "out" / "x.tfrecord"
    r = run_cli(
        f"--input_file={tmp_path}/in*.txt",
        f"--output_file={out}",
        f"--vocab_file={minilm_dir}/vocab.txt",
        "--dupe_factor=3",
        "--max_seq_length=16",
        "--max_predictions_per_seq=3",
        "--nodo_lower_case",
    )
    assert r.returncode == 0, r.stderr
    summary = r.stdout.strip().splitlines()[-1]
    assert "2 documents, 4 sentences" in summary and "1 lines with invalid UTF-8 replaced" in summary
    assert tfrecord.count_records(str(out)) > 0
    assert "instances" in r.stderr and "documents" in r.stderr  # progress lines


@pytest.mark.process
def test_cli_errors_are_one_clear_sentence(minilm_dir, tmp_path):
    vocab = f"--vocab_file={minilm_dir}/vocab.txt"
    r = run_cli(f"--input_file={tmp_path}/nothing-*.txt", f"--output_file={tmp_path}/o", vocab)
    assert r.returncode == 1 and "No input files match" in r.stderr and "nothing-*.txt" in r.stderr
    assert "Traceback" not in r.stderr

    (tmp_path / "in.txt").write_text("a b c\n")
    bad_vocab = tmp_path / "vocab.txt"
    bad_vocab.write_text("[PAD]\n[UNK]\n[CLS]\na\nb\n")
    r = run_cli(f"--input_file={tmp_path}/in.txt", f"--output_file={tmp_path}/o", f"--vocab_file={bad_vocab}")
    assert r.returncode == 1 and "[SEP]" in r.stderr and "[MASK]" in r.stderr and str(bad_vocab) in r.stderr
    assert "Traceback" not in r.stderr

    (tmp_path / "afile").write_text("")
    r = run_cli(f"--input_file={tmp_path}/in.txt", f"--output_file={tmp_path}/afile/o.tfrecord", vocab)
    assert r.returncode == 1 and "Cannot write the output file" in r.stderr and "Traceback" not in r.stderr

    r = run_cli(f"--input_file={tmp_path}/in.txt", vocab)
    assert r.returncode == 2 and "--output_file is required" in r.stderr


def test_failure_leaves_no_output(base_tokenizer, tmp_path, monkeypatch):
    (tmp_path / "in.txt").write_text("a b c\nd e f\n")
    out = str(tmp_path / "o.tfrecord")

    def boom(*a, **k):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(cpd, "read_documents", boom)
    with pytest.raises(RuntimeError, match="disk on fire"):
        create_training_files([str(tmp_path / "in.txt")], [out], base_tokenizer)
    assert os.listdir(tmp_path) == ["in.txt"]


def test_progress_adds_up_to_the_input_size(corpus, base_tokenizer, tmp_path):
    seen = []
    create_training_files(
        [corpus], [str(tmp_path / "o")], base_tokenizer, dupe_factor=1, progress=seen.append
    )
    assert sum(seen) == os.path.getsize(corpus) and all(n >= 0 for n in seen)
