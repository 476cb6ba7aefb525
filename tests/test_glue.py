"""data/glue.py on hand-written files in the official GLUE layouts (tests/fixtures/glue)."""

import csv
import os
import shutil

import numpy as np
import pytest

from bert.tokenization import WordPieceTokenizer, encode_pair
from common.errors import UserError
from common.files import TEMP_MARK
from data import glue

GLUE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "glue")
TASK_DIRS = ("CoLA", "SST-2", "MRPC", "STS-B", "QQP", "MNLI", "QNLI", "RTE", "WNLI", "diagnostic")
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "a", "dog", "."]


@pytest.fixture
def tokenizer(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    return WordPieceTokenizer(str(path), do_lower_case=True)


def read(task, split, data_dir=GLUE):
    examples, _ = glue.read_examples(glue.get_task(task), data_dir, split, log=lambda m: None)
    return examples


# (task, split, row, count, guid, text_a, text_b, label, index): values copied by hand from the files.
ROWS = [
    ("CoLA", "train", 2, 3, "train-2", "They drank the pub.", None, "0", None),
    ("CoLA", "dev", 0, 3, "dev-0", "The sailors rode the breeze clear of the rocks.", None, "1", None),
    ("CoLA", "test", 1, 2, "test-1", "The car honked its way down the road.", None, None, "1"),
    ("SST-2", "train", 0, 3, "train-1", "hide new secretions from the parental units ", None, "0", None),
    ("SST-2", "dev", 1, 2, "dev-2", "unflinchingly bleak and desperate ", None, "0", None),
    ("SST-2", "test", 0, 2, "test-0", "uneasy mishmash of styles and genres .", None, None, "0"),
    (
        "MRPC",
        "train",
        1,
        2,
        "train-2",
        "Yucaipa owned Dominick 's before selling the chain to Safeway in 1998 for $ 2.5 billion .",
        "Yucaipa bought Dominick 's in 1995 for $ 693 million and sold it to Safeway for $ 1.8 billion in 1998 .",
        "0",
        None,
    ),
    (
        "MRPC",
        "test",
        1,
        2,
        "test-1",
        "The world 's two largest automakers said their U.S. sales declined more than predicted last month .",
        "Domestic sales at both GM and No. 2 Ford Motor Co. declined more than predicted .",
        None,
        "1",
    ),
    (
        "STS-B",
        "train",
        1,
        3,
        "train-1",
        "A man is playing a large flute.",
        "A man is playing a flute.",
        3.8,
        "1",
    ),
    (
        "STS-B",
        "dev",
        1,
        2,
        "dev-1",
        "A young child is riding a horse.",
        "A child is riding a horse.",
        4.75,
        "1",
    ),
    (
        "STS-B",
        "test",
        0,
        2,
        "test-0",
        "A girl is styling her hair.",
        "A girl is brushing her hair.",
        None,
        "0",
    ),
    (
        "QQP",
        "train",
        2,
        3,
        "train-360472",
        "What causes stool color to change to yellow?",
        "What can cause stool to come out as little balls?",
        "0",
        "360472",
    ),
    (
        "QQP",
        "dev",
        1,
        2,
        "dev-289834",
        "Which is the best book for physics?",
        "What is the best book of physics?",
        "1",
        "289834",
    ),
    (
        "QQP",
        "test",
        1,
        2,
        "test-1",
        "Should I have a hair transplant at age 24? How much would it cost?",
        "How much cost does hair transplant require?",
        None,
        "1",
    ),
    (
        "MNLI",
        "train",
        0,
        3,
        "train-0",
        "Conceptually cream skimming has two basic dimensions - product and geography.",
        "Product and geography are what make cream skimming work. ",
        "neutral",
        "0",
    ),
    (
        "MNLI",
        "dev",
        0,
        2,
        "dev_matched-0",
        "The new rights are nice enough",
        "Everyone really likes the newest benefits ",
        "neutral",  # gold_label (the last column), not label1 ("entailment")
        "0",
    ),
    (
        "MNLI",
        "dev_mismatched",
        1,
        2,
        "dev_mismatched-1",
        "The answer has nothing to do with their cause, however.",
        "The answer is unrelated to their cause.",
        "entailment",
        "1",
    ),
    (
        "MNLI",
        "test",
        0,
        2,
        "test_matched-0",
        "Hierbas, ans seco, ans dulce, and frigola are just a few names worth keeping a look-out for.",
        "Hierbas is a name worth looking out for.",
        None,
        "0",
    ),
    (
        "MNLI",
        "test_mismatched",
        1,
        2,
        "test_mismatched-1",
        "Mostly, the forest is quiet.",
        "The forest is loud.",
        None,
        "1",
    ),
    (
        "QNLI",
        "train",
        1,
        2,
        "train-1",
        "What is the first major city in the stream of the Rhine?",
        "The most important tributaries in this area are the Ill below of Strasbourg, the Neckar in Mannheim "
        "and the Main across from Mainz.",
        "not_entailment",
        "1",
    ),
    (
        "RTE",
        "dev",
        0,
        2,
        "dev-0",
        "Dana Reeve, the widow of the actor Christopher Reeve, has died of lung cancer at age 44.",
        "Christopher Reeve had an accident.",
        "not_entailment",
        "0",
    ),
    (
        "WNLI",
        "train",
        1,
        2,
        "train-1",
        "John couldn't see the stage with Billy in front of him because he is so short.",
        "Billy is so short.",
        "0",
        "1",
    ),
    ("AX", "test", 0, 2, "test-0", "The cat sat on the mat.", "The cat did not sit on the mat.", None, "0"),
]


@pytest.mark.parametrize("task,split,row,count,guid,text_a,text_b,label,index", ROWS)
def test_each_task_reads_its_rows(task, split, row, count, guid, text_a, text_b, label, index):
    examples = read(task, split)
    assert len(examples) == count
    assert examples[row] == glue.InputExample(guid, text_a, text_b, label, index)


def test_every_split_of_every_task_reads():
    for task in glue.TASKS.values():
        for split in task.split_names:
            examples = read(task.name, split)
            assert examples, (task.name, split)
            labelled = not split.startswith("test")
            assert all((e.label is not None) == labelled for e in examples), (task.name, split)
            assert all((e.text_b is None) == (task.name in ("CoLA", "SST-2")) for e in examples)


def test_lone_quotes_survive_untouched():
    # A quoting reader would swallow the tab after a lone " and merge columns.
    assert (
        read("MRPC", "dev")[0].text_b
        == '" The foodservice pie business does not fit our long-term growth strategy .'
    )
    assert read("MRPC", "train")[0].text_a.count('"') == 2
    assert read("CoLA", "dev")[2].text_a == 'He said " that the dog barked.'
    assert read("MNLI", "train")[2].text_a == 'He said, " go away.'
    assert read("AX", "test")[1].text_a == 'The " cat did not sit on the mat.'
    assert read("QNLI", "dev")[1].label == "not_entailment"


def test_labels_follow_googles_processor_order():
    expected = {
        "CoLA": ("0", "1"),
        "SST-2": ("0", "1"),
        "MRPC": ("0", "1"),
        "QQP": ("0", "1"),
        "MNLI": ("contradiction", "entailment", "neutral"),
        "QNLI": ("entailment", "not_entailment"),
        "RTE": ("entailment", "not_entailment"),
        "WNLI": ("0", "1"),
        "AX": ("contradiction", "entailment", "neutral"),
        "STS-B": None,
    }
    assert {name: task.labels for name, task in glue.TASKS.items()} == expected
    assert [name for name, task in glue.TASKS.items() if task.is_regression] == ["STS-B"]


def test_get_task_accepts_names_and_aliases():
    for name, canonical in [
        ("cola", "CoLA"),
        ("SST-2", "SST-2"),
        ("sst2", "SST-2"),
        ("Mrpc", "MRPC"),
        ("sts-b", "STS-B"),
        ("STSB", "STS-B"),
        ("sts_b", "STS-B"),
        ("qqp", "QQP"),
        ("mnli", "MNLI"),
        ("MNLI-m", "MNLI"),
        ("mnli-mm", "MNLI"),
        ("qnli", "QNLI"),
        ("rte", "RTE"),
        ("wnli", "WNLI"),
        ("ax", "AX"),
        ("diagnostic", "AX"),
    ]:
        assert glue.get_task(name).name == canonical
    with pytest.raises(UserError, match=r"Unknown GLUE task 'squad'; choose one of CoLA, SST-2, MRPC"):
        glue.get_task("squad")


def test_splits_resolve_and_unknown_splits_are_refused():
    mnli = glue.get_task("mnli")
    assert mnli.resolve_split("dev") == "dev_matched"
    assert mnli.resolve_split("test") == "test_matched"
    assert mnli.resolve_split("test_mismatched") == "test_mismatched"
    assert read("MNLI", "dev") == read("MNLI", "dev_matched")
    with pytest.raises(
        UserError, match=r"GLUE task RTE has no split 'dev_matched'; choose one of train, dev, test"
    ):
        read("RTE", "dev_matched")
    with pytest.raises(UserError, match=r"GLUE task AX has no split 'train'; choose one of test\."):
        read("AX", "train")


def test_qqp_short_rows_are_skipped_counted_and_reported():
    messages = []
    examples, stats = glue.read_examples(glue.get_task("qqp"), GLUE, "train", log=messages.append)
    assert [e.index for e in examples] == ["133273", "402555", "360472"]
    assert stats == {"file": os.path.join(GLUE, "QQP", "train.tsv"), "examples": 3, "skipped_short_rows": 1}
    assert len(messages) == 1 and "skipped 1 malformed row(s)" in messages[0] and "line 4" in messages[0]
    _, stats = glue.read_examples(glue.get_task("qqp"), GLUE, "dev", log=messages.append)
    assert stats["skipped_short_rows"] == 0 and len(messages) == 1


def test_glue_root_and_task_directory_both_work(tmp_path):
    assert read("MRPC", "train", os.path.join(GLUE, "MRPC")) == read("MRPC", "train", GLUE)
    assert read("ax", "test", os.path.join(GLUE, "diagnostic")) == read("ax", "test", GLUE)
    # The diagnostic set as the GLUE host serves it (AX.tsv), in a directory of its own.
    shutil.copy(os.path.join(GLUE, "diagnostic", "diagnostic.tsv"), tmp_path / "AX.tsv")
    examples, stats = glue.read_examples(glue.get_task("ax"), str(tmp_path), "test")
    assert stats["file"] == str(tmp_path / "AX.tsv") and examples == read("ax", "test")


def _copy_task(tmp_path, directory):
    shutil.copytree(os.path.join(GLUE, directory), tmp_path / directory)
    return tmp_path / directory


def test_label_outside_the_set_names_file_line_and_labels(tmp_path):
    rte = _copy_task(tmp_path, "RTE")
    lines = (rte / "dev.tsv").read_text().splitlines()
    lines[2] = lines[2].replace("\tentailment", "\tentails")
    (rte / "dev.tsv").write_text("\n".join(lines) + "\n")
    path = str(rte / "dev.tsv")
    with pytest.raises(UserError) as error:
        read("rte", "dev", str(tmp_path))
    assert str(error.value) == (
        f"{path}, line 3: label 'entails' is not one of GLUE RTE's labels 'entailment', 'not_entailment'."
    )


def test_short_row_outside_qqp_names_file_and_line(tmp_path):
    wnli = _copy_task(tmp_path, "WNLI")
    with open(wnli / "train.tsv", "a", encoding="utf-8") as f:
        f.write("2\tOnly one sentence.\n")
    with pytest.raises(
        UserError, match=r"WNLI/train\.tsv, line 4: 2 tab-separated column\(s\), but GLUE WNLI"
    ):
        read("wnli", "train", str(tmp_path))


def test_stsb_score_must_be_a_number(tmp_path):
    stsb = _copy_task(tmp_path, "STS-B")
    text = (stsb / "train.tsv").read_text().replace("\t3.800\n", "\tabout four\n", 1)
    (stsb / "train.tsv").write_text(text)
    with pytest.raises(
        UserError, match=r"STS-B/train\.tsv, line 3: the STS-B score 'about four' is not a number"
    ):
        read("sts-b", "train", str(tmp_path))


def test_missing_file_names_the_paths_and_the_download(tmp_path):
    with pytest.raises(UserError) as error:
        read("cola", "train", str(tmp_path))
    message = str(error.value)
    assert (
        repr(str(tmp_path / "train.tsv")) in message and repr(str(tmp_path / "CoLA" / "train.tsv")) in message
    )
    assert "scripts/data_download.sh glue" in message and os.path.join("download", "glue", "CoLA") in message
    with pytest.raises(UserError, match="MNLI dev_mismatched file not found"):
        read("mnli", "dev_mismatched", str(tmp_path / "nowhere"))


def test_non_utf8_file_is_a_user_error(tmp_path):
    sst = _copy_task(tmp_path, "SST-2")
    (sst / "dev.tsv").write_bytes(b"sentence\tlabel\ncaf\xe9 \t1\n")
    with pytest.raises(UserError, match=r"SST-2/dev\.tsv is not UTF-8 text"):
        read("sst-2", "dev", str(tmp_path))


# --- features ---


def test_pair_features_segments_and_longest_first_truncation(tokenizer):
    examples = [
        glue.InputExample("dev-0", "The cat sat on the mat.", "A dog.", "1"),  # 7 + 3 tokens, room for 7
        glue.InputExample("dev-1", "the cat sat on the", "a dog sat.", "0"),  # 5 + 4: a tie at 4 + 4
        glue.InputExample("dev-2", "the cat", "a dog sat", "0"),  # fits, padded
        glue.InputExample("dev-3", "a zebra", None, "0"),  # single sentence, an unknown word
    ]
    features = glue.convert_examples(
        examples, glue.get_task("mrpc"), tokenizer, max_seq_length=10, progress=False
    )
    # The longer side loses its last token until 7 fit: A drops "mat", ".", "the"; a tie cuts B.
    np.testing.assert_array_equal(
        features["input_ids"],
        [
            [2, 5, 6, 7, 8, 3, 10, 11, 12, 3],  # [CLS] the cat sat on [SEP] a dog . [SEP]
            [2, 5, 6, 7, 8, 3, 10, 11, 7, 3],  # [CLS] the cat sat on [SEP] a dog sat [SEP]
            [2, 5, 6, 3, 10, 11, 7, 3, 0, 0],
            [2, 10, 1, 3, 0, 0, 0, 0, 0, 0],  # [CLS] a [UNK] [SEP]
        ],
    )
    np.testing.assert_array_equal(
        features["segment_ids"],
        [[0] * 6 + [1] * 4, [0] * 6 + [1] * 4, [0, 0, 0, 0, 1, 1, 1, 1, 0, 0], [0] * 10],
    )
    np.testing.assert_array_equal(features["input_mask"].sum(axis=1), [10, 10, 8, 4])
    np.testing.assert_array_equal(features["label_ids"], [1, 0, 0, 0])
    assert all(features[k].dtype == np.int32 for k in ("input_ids", "input_mask", "segment_ids", "label_ids"))
    assert features["has_labels"].tolist() == [True] * 4


def test_features_match_encode_pair_for_every_fixture(tokenizer):
    for task in glue.TASKS.values():
        for split in task.split_names:
            examples = read(task.name, split)
            features = glue.convert_examples(examples, task, tokenizer, max_seq_length=12, progress=False)
            for i, example in enumerate(examples):
                expected = encode_pair(tokenizer, example.text_a, example.text_b, max_seq_length=12)
                for key in ("input_ids", "input_mask", "segment_ids"):
                    assert features[key][i].tolist() == expected[key], (task.name, split, i, key)


def test_label_ids_and_unlabelled_examples(tokenizer):
    mnli = glue.get_task("mnli")
    features = glue.convert_examples(read("mnli", "train"), mnli, tokenizer, 16, progress=False)
    assert features["label_ids"].tolist() == [2, 1, 0]  # neutral, entailment, contradiction
    features = glue.convert_examples(read("mnli", "test"), mnli, tokenizer, 16, progress=False)
    assert features["label_ids"].tolist() == [0, 0] and features["has_labels"].tolist() == [False, False]
    stsb = glue.get_task("stsb")
    features = glue.convert_examples(read("stsb", "dev"), stsb, tokenizer, 16, progress=False)
    assert features["label_ids"].dtype == np.float32
    np.testing.assert_array_equal(features["label_ids"], np.float32([5.0, 4.75]))


def test_progress_callback_counts_examples(tokenizer, monkeypatch):
    monkeypatch.setattr(glue, "_CHUNK", 2)
    counts = []
    examples = read("qnli", "train") + read("qnli", "dev") + read("qnli", "test")
    features = glue.convert_examples(examples, glue.get_task("qnli"), tokenizer, 8, progress=counts.append)
    assert counts == [2, 2, 1] and features["input_ids"].shape == (5, 8)


# --- submissions ---


def test_submission_file_names():
    names = {
        name: glue.submission_file_name(glue.get_task(name), "test")
        for name in ("cola", "sst-2", "mrpc", "sts-b", "qqp", "qnli", "rte", "wnli", "ax")
    }
    assert list(names.values()) == [
        "CoLA.tsv",
        "SST-2.tsv",
        "MRPC.tsv",
        "STS-B.tsv",
        "QQP.tsv",
        "QNLI.tsv",
        "RTE.tsv",
        "WNLI.tsv",
        "AX.tsv",
    ]
    mnli = glue.get_task("mnli-mm")
    assert glue.submission_file_name(mnli, "test") == "MNLI-m.tsv"
    assert glue.submission_file_name(mnli, "test_matched") == "MNLI-m.tsv"
    assert glue.submission_file_name(mnli, "test_mismatched") == "MNLI-mm.tsv"


def _read_submission(path):
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return rows[0], rows[1:]


def test_write_submission_classification_round_trip(tmp_path):
    mnli = glue.get_task("mnli")
    examples = read("mnli", "test_mismatched")
    path = tmp_path / glue.submission_file_name(mnli, "test_mismatched")
    logits = np.float32([[0.1, 0.2, 3.0], [2.0, -1.0, 0.5]])
    glue.write_submission(str(path), mnli, examples, logits)
    assert _read_submission(path) == (["index", "prediction"], [["0", "neutral"], ["1", "contradiction"]])
    assert not [p for p in os.listdir(tmp_path) if TEMP_MARK in p]

    cola = glue.get_task("cola")
    path = tmp_path / "CoLA.tsv"
    glue.write_submission(str(path), cola, read("cola", "test"), np.int64([1, 0]))
    assert path.read_text() == "index\tprediction\n0\t1\n1\t0\n"


def test_write_submission_regression_clips_and_rounds(tmp_path):
    stsb = glue.get_task("sts-b")
    path = tmp_path / "STS-B.tsv"
    glue.write_submission(str(path), stsb, read("stsb", "test"), np.float32([5.71, 2.34567]))
    assert _read_submission(path) == (["index", "prediction"], [["0", "5.000"], ["1", "2.346"]])
    assert glue.label_strings(stsb, [-0.2, 0.0004]) == ["0.000", "0.000"]


def test_label_strings_and_submission_refuse_bad_predictions(tmp_path):
    rte = glue.get_task("rte")
    assert glue.label_strings(rte, [1, 0]) == ["not_entailment", "entailment"]
    assert glue.label_strings(rte, []) == []
    with pytest.raises(ValueError, match=r"label ids must be in \[0, 2\)"):
        glue.label_strings(rte, [2])
    with pytest.raises(ValueError, match="non-finite"):
        glue.label_strings(glue.get_task("stsb"), [np.nan])
    with pytest.raises(ValueError, match="1 examples but 2 predictions"):
        glue.write_submission(str(tmp_path / "RTE.tsv"), rte, read("rte", "test"), [0, 1])
    with pytest.raises(ValueError, match="Example dev-1 has no index column"):
        glue.write_submission(str(tmp_path / "MRPC.tsv"), glue.get_task("mrpc"), read("mrpc", "dev"), [0, 1])
    assert not os.path.exists(tmp_path / "RTE.tsv")


def test_oversized_field_is_a_user_error(tmp_path):
    sst = _copy_task(tmp_path, "SST-2")
    (sst / "train.tsv").write_text("sentence\tlabel\n" + "x" * 200_000 + "\t1\n")
    with pytest.raises(UserError, match=r"SST-2/train\.tsv, line 2: field larger than field limit"):
        read("sst-2", "train", str(tmp_path))


def test_convert_refuses_unknown_labels_and_handles_no_examples(tokenizer):
    rte = glue.get_task("rte")
    with pytest.raises(ValueError, match=r"Label 'maybe' is not one of RTE's labels"):
        glue.convert_examples(
            [glue.InputExample("x-0", "a", "b", "maybe")], rte, tokenizer, 8, progress=False
        )
    features = glue.convert_examples([], rte, tokenizer, 8, progress=False)
    assert features["input_ids"].shape == (0, 8) and features["label_ids"].dtype == np.int32
