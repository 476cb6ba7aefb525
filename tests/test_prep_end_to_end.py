"""Every action of `python prepare_data.py`, from a raw corpus to TFRecords the input pipeline reads."""

import glob
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import prepare_data
from common.errors import UserError
from common.files import temporary_name
from data import paths
from data.pretraining import stage

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
SHARDS = ["--n_training_shards", "2", "--n_test_shards", "1", "--fraction_test_set", "0.2"]
RECORDS = [
    "--max_seq_length",
    "128",
    "--max_predictions_per_seq",
    "20",
    "--dupe_factor",
    "2",
    "--no_progress",
]


def _prep(data_dir, *args):
    code = prepare_data.main(["--data_dir", str(data_dir), *args], environ={})
    assert code == 0, args
    return code


def _tfrecord_dir(data_dir, dataset):
    return paths.tfrecord_dir(
        str(data_dir),
        dataset,
        do_lower_case=True,
        max_seq_length=128,
        max_predictions_per_seq=20,
        masked_lm_prob=0.15,
        random_seed=12345,
        dupe_factor=2,
        n_training_shards=2,
        fraction_test=0.2,
    )


def _read_back(files, vocab_size):
    from training.input_pipeline import evaluation_dataset

    batches = list(
        evaluation_dataset(
            files, batch_size=4, max_seq_length=128, max_predictions_per_seq=20
        ).as_numpy_iterator()
    )
    assert batches
    first = batches[0]
    assert first["input_ids"].shape == (4, 128) and first["input_mask"].shape == (4, 128)
    assert first["segment_ids"].shape == (4, 128)
    assert first["masked_lm_positions"].shape == (4, 20) and first["masked_lm_ids"].shape == (4, 20)
    assert first["masked_lm_weights"].shape == (4, 20) and first["next_sentence_labels"].shape == (4, 1)
    ids = np.concatenate([b["input_ids"] for b in batches])
    assert ids.max() < vocab_size and (ids[:, 0] == ids[0, 0]).all()  # every example starts with [CLS]
    weights = np.concatenate([b["masked_lm_weights"] for b in batches])
    return len(ids), int(weights.sum())


def _manifest(directory):
    with open(os.path.join(directory, "manifest.json")) as f:
        return json.load(f)


@pytest.mark.process
@pytest.mark.parametrize(
    "dataset, corpus, formatted_docs",
    [
        ("wiki", "enwiki_sample.xml", 5),
        ("notes", "domain_corpus.jsonl", 10),
    ],
)
def test_corpus_to_tfrecords_with_trained_and_existing_vocab(
    tmp_path, minilm_dir, dataset, corpus, formatted_docs
):
    _prep(
        tmp_path,
        "--action",
        "text_formatting",
        "--dataset",
        dataset,
        "--input_files",
        os.path.join(FIXTURES, corpus),
        "--no_progress",
    )
    formatted = paths.formatted_file(str(tmp_path), dataset)
    assert sum(1 for _ in open(formatted)) == formatted_docs
    _prep(tmp_path, "--action", "sharding", "--dataset", dataset, *SHARDS, "--no_progress")
    shard_dir = paths.sharded_dir(str(tmp_path), dataset, 2, 1, 0.2)
    assert sorted(os.listdir(os.path.join(shard_dir, "training"))) == [
        f"{dataset}_training_0.txt",
        f"{dataset}_training_1.txt",
    ]
    _prep(tmp_path, "--action", "vocab", "--dataset", dataset, *SHARDS, "--vocab_size", "300")
    trained_vocab = os.path.join(paths.vocab_dir(str(tmp_path), dataset), "vocab.txt")

    # Trained vocab, two worker processes, the output directory named from the parameters.
    _prep(
        tmp_path,
        "--action",
        "create_tfrecord_files",
        "--dataset",
        dataset,
        *SHARDS,
        *RECORDS,
        "--n_processes",
        "2",
    )
    out = _tfrecord_dir(tmp_path, dataset)
    assert out.endswith(
        f"lower_case_1_seq_len_128_max_pred_20_masked_lm_prob_0.15_random_seed_12345_"
        f"dupe_factor_2_shard_2_test_split_20/{dataset}"
    )
    manifest = _manifest(out)
    assert manifest["complete"] and sorted(manifest["outputs"]) == [
        f"test/{dataset}_test_0.tfrecord",
        f"training/{dataset}_training_0.tfrecord",
        f"training/{dataset}_training_1.tfrecord",
    ]
    seeds = {entry["counts"]["seed"] for entry in manifest["outputs"].values()}
    assert len(seeds) == 3  # one derived seed per shard
    files = sorted(glob.glob(os.path.join(out, "*", "*.tfrecord")))
    n, masked = _read_back(files, vocab_size=300)
    counts = [e["counts"] for e in manifest["outputs"].values()]
    assert n == sum(c["instances"] for c in counts) > 0
    assert masked == sum(c["masked_tokens"] for c in counts)
    assert sum(c["documents"] for c in counts) == formatted_docs

    # An existing vocab (Google's uncased), one process, an explicit output directory.
    google_out = tmp_path / "google_vocab_records"
    _prep(tmp_path, "--action", "vocab", "--vocab_file", os.path.join(minilm_dir, "vocab.txt"))
    _prep(
        tmp_path,
        "--action",
        "create_tfrecord_files",
        "--dataset",
        dataset,
        *SHARDS,
        *RECORDS,
        "--n_processes",
        "1",
        "--vocab_file",
        os.path.join(minilm_dir, "vocab.txt"),
        "--output_dir",
        str(google_out),
    )
    google_files = sorted(glob.glob(str(google_out / "*" / "*.tfrecord")))
    assert len(google_files) == 3
    assert _read_back(google_files, vocab_size=30522)[0] == sum(
        e["counts"]["instances"] for e in _manifest(google_out)["outputs"].values()
    )
    assert os.path.getsize(trained_vocab) > 0


@pytest.fixture
def prepared(tmp_path):
    """JSONL corpus sharded (2 training + 1 test) with a trained vocab."""
    _prep(
        tmp_path,
        "--action",
        "text_formatting",
        "--dataset",
        "notes",
        "--input_files",
        os.path.join(FIXTURES, "domain_corpus.jsonl"),
        "--no_progress",
    )
    _prep(tmp_path, "--action", "sharding", "--dataset", "notes", *SHARDS, "--no_progress")
    _prep(tmp_path, "--action", "vocab", "--dataset", "notes", *SHARDS, "--vocab_size", "300")
    return tmp_path


def _run_records(data_dir, *extra, processes="1"):
    stats = prepare_data.run(
        prepare_data.parse_flags(
            [
                "--data_dir",
                str(data_dir),
                "--action",
                "create_tfrecord_files",
                "--dataset",
                "notes",
                *SHARDS,
                *RECORDS,
                "--n_processes",
                processes,
                *extra,
            ]
        ),
        environ={},
    )
    return stats


@pytest.mark.process
def test_restart_redoes_only_the_corrupt_or_unfinished_output(prepared):
    first = _run_records(prepared)
    assert (first["done"], first["skipped"]) == (3, 0)
    out = _tfrecord_dir(prepared, "notes")
    target = os.path.join(out, "training", "notes_training_1.tfrecord")
    original = open(target, "rb").read()
    others = {
        p: os.stat(p).st_mtime_ns for p in glob.glob(os.path.join(out, "*", "*.tfrecord")) if p != target
    }
    with open(target, "r+b") as f:  # flip one byte: same size, wrong sha256
        f.seek(len(original) // 2)
        f.write(bytes([original[len(original) // 2] ^ 0xFF]))
    again = _run_records(prepared)
    assert (again["done"], again["skipped"]) == (1, 2)
    assert open(target, "rb").read() == original  # deterministic per-shard seed: same bytes
    assert all(os.stat(p).st_mtime_ns == m for p, m in others.items())
    assert again["instances"] == first["instances"]

    # A killed run: the output is missing and the writers' temporaries are left behind.
    os.remove(target)
    leftovers = [temporary_name(target), os.path.join(out, "training", ".notes_training_1.tfrecord.tmp-999")]
    for path in leftovers:
        with open(path, "wb") as f:
            f.write(original[:100])
    again = _run_records(prepared)
    assert (again["done"], again["skipped"]) == (1, 2)
    assert open(target, "rb").read() == original
    assert not any(os.path.exists(p) for p in leftovers)

    # A parameter change (explicit output dir, different masking) redoes everything there.
    elsewhere = prepared / "custom"
    _run_records(prepared, "--output_dir", str(elsewhere))
    changed = _run_records(prepared, "--output_dir", str(elsewhere), "--masked_lm_prob", "0.2")
    assert (changed["done"], changed["skipped"]) == (3, 0)


@pytest.mark.process
def test_bad_inputs_stop_with_one_sentence(prepared, tmp_path, capsys):
    bad_vocab = tmp_path / "no_mask.txt"
    bad_vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n")
    args = [
        "--data_dir",
        str(prepared),
        "--action",
        "create_tfrecord_files",
        "--dataset",
        "notes",
        *SHARDS,
        *RECORDS,
    ]
    assert prepare_data.main(args + ["--vocab_file", str(bad_vocab)], environ={}) == 2
    assert "lacks the special token(s) [MASK]" in capsys.readouterr().err
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    assert prepare_data.main(args + ["--output_dir", str(blocker / "out")], environ={}) == 2
    err = capsys.readouterr().err
    assert "Cannot write to the TFRecord output directory" in err and err.count("\n") == 1
    assert (
        prepare_data.main(
            [
                "--data_dir",
                str(prepared),
                "--action",
                "create_tfrecord_files",
                "--dataset",
                "other",
                *SHARDS,
                *RECORDS,
                "--vocab_file",
                str(bad_vocab),
            ],
            environ={},
        )
        == 2
    )
    assert (
        prepare_data.main(
            [
                "--data_dir",
                str(prepared),
                "--action",
                "sharding",
                "--dataset",
                "notes",
                "--n_training_shards",
                "20",
                "--n_test_shards",
                "1",
                "--fraction_test_set",
                "0.1",
            ],
            environ={},
        )
        == 2
    )
    assert "fewer than --n_training_shards 20" in capsys.readouterr().err
    assert (
        prepare_data.main(
            ["--data_dir", str(prepared), "--action", "text_formatting", "--dataset", "x"], environ={}
        )
        == 2
    )
    assert "Pass --input_files" in capsys.readouterr().err


@pytest.mark.process
def test_sharding_interrupted_refuses_tfrecords(prepared):
    shard_dir = paths.sharded_dir(str(prepared), "notes", 2, 1, 0.2)
    manifest = _manifest(shard_dir)
    manifest["complete"] = False
    with open(os.path.join(shard_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f)
    with pytest.raises(UserError, match="did not finish"):
        _run_records(prepared)


def test_ranks_split_the_shards_deterministically(tmp_path):
    shard_dir = tmp_path / "s"
    for i, size in enumerate([50, 400, 100, 300, 200]):
        os.makedirs(shard_dir / "training", exist_ok=True)
        (shard_dir / "training" / f"d_training_{i}.txt").write_text("x" * size)
    rels = stage.list_shards(str(shard_dir))
    assert rels == [f"training/d_training_{i}.txt" for i in range(5)]
    ranks = stage.assign_to_ranks(str(shard_dir), rels, 2)
    assert ranks == [
        ["training/d_training_0.txt", "training/d_training_1.txt", "training/d_training_2.txt"],
        ["training/d_training_3.txt", "training/d_training_4.txt"],
    ]
    assert stage.shard_seed(12345, "training/d_training_0.txt") != stage.shard_seed(
        12345, "test/d_test_0.txt"
    )


@pytest.mark.process
@pytest.mark.slow
def test_mpirun_two_ranks_write_what_one_process_writes(prepared):
    mpirun = shutil.which("mpirun", path=os.path.dirname(sys.executable)) or shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun is not installed")
    single = _run_records(prepared, "--output_dir", str(prepared / "single"))
    command = [mpirun, "-np", "2", "--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
    command += [
        sys.executable,
        "prepare_data.py",
        "--data_dir",
        str(prepared),
        "--action",
        "create_tfrecord_files",
        "--dataset",
        "notes",
        *SHARDS,
        *RECORDS,
        "--n_processes",
        "1",
        "--output_dir",
        str(prepared / "mpi"),
    ]
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stderr.count("[create_tfrecord_files] done:") == 1  # rank 0 reports for all
    manifest = _manifest(prepared / "mpi")
    assert manifest["complete"] and not glob.glob(str(prepared / "mpi" / "manifest.*.part.json"))
    for rel in manifest["outputs"]:
        assert open(prepared / "mpi" / rel, "rb").read() == open(prepared / "single" / rel, "rb").read()
    assert sum(e["counts"]["instances"] for e in manifest["outputs"].values()) == single["instances"]


@pytest.mark.process
def test_data_download_script_validates_and_runs_offline(tmp_path):
    script = os.path.join(ROOT, "scripts", "data_download.sh")
    bad = subprocess.run(["bash", script, "books"], capture_output=True, text=True)
    assert (
        bad.returncode == 2
        and "target (argument 1) must be one of wiki_only, squad, glue, all, got 'books'" in bad.stderr
    )
    bad = subprocess.run(
        ["bash", script, "wiki_only", "--n_training_shards", "many"], capture_output=True, text=True
    )
    assert (
        bad.returncode == 2
        and "n_training_shards (--n_training_shards) must be a positive integer, got 'many'" in bad.stderr
    )
    plan = subprocess.run(
        ["bash", script, "all", "--dry_run", "--data_dir", str(tmp_path)], capture_output=True, text=True
    )
    assert plan.returncode == 0, plan.stderr
    expected = paths.default_pretraining_dirs(str(tmp_path))
    assert expected["phase1"] in plan.stdout and expected["phase2"] in plan.stdout
    assert "--action download --dataset squad" in plan.stdout and not os.listdir(tmp_path)


def test_offline_python_docs_corpus_is_built_once_and_formatted(tmp_path, capsys):
    _prep(tmp_path, "--action", "download", "--dataset", "python_docs", "--corpus_mb", "0.3", "--no_progress")
    corpus = paths.python_docs_file(str(tmp_path))
    assert os.path.getsize(corpus) >= 300_000
    capsys.readouterr()
    _prep(tmp_path, "--action", "download", "--dataset", "python_docs", "--corpus_mb", "0.3", "--no_progress")
    assert "skipped=True" in capsys.readouterr().err
    _prep(
        tmp_path,
        "--action",
        "text_formatting",
        "--dataset",
        "python_docs",
        "--input_format",
        "text",
        "--no_progress",
    )
    with open(paths.formatted_file(str(tmp_path), "python_docs"), encoding="utf-8") as f:
        assert len(f.read().splitlines()) > 10  # one document per line
    assert (
        prepare_data.main(
            [
                "--action",
                "download",
                "--dataset",
                "python_docs",
                "--corpus_mb",
                "0",
                "--data_dir",
                str(tmp_path),
            ],
            environ={},
        )
        == 2
    )
