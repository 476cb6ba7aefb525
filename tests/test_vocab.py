"""Vocabulary stage: validating an existing vocab.txt, training WordPiece and SentencePiece."""

import os

import pytest

import prepare_data
from bert.tokenization import SPECIAL_TOKENS, build_tokenizer, load_vocab
from common.errors import UserError
from data.corpus import vocab

TRAIN_TEXT = """The patient was admitted with chest pain and discharged after three days.
The physician recommended aspirin and a follow-up visit in two weeks.

The contract between the parties shall be governed by the laws of the State.
Either party may terminate the contract with written notice.

The river flows through the valley and into the sea near the old harbour.
Ships have used the river for trade since ancient times.
"""


def _quiet(*_):
    pass


@pytest.fixture
def shards(tmp_path):
    training = tmp_path / "training"
    training.mkdir()
    files = []
    for i in range(2):
        path = training / f"c_training_{i}.txt"
        path.write_text(TRAIN_TEXT * (3 + i))
        files.append(str(path))
    return files


def test_google_vocab_validates_with_its_own_ids(minilm_dir):
    info = vocab.validate_vocab(os.path.join(minilm_dir, "vocab.txt"), do_lower_case=True)
    assert info["size"] == 30522
    assert info["special_ids"] == {"[PAD]": 0, "[UNK]": 100, "[CLS]": 101, "[SEP]": 102, "[MASK]": 103}
    assert info["warnings"] == []
    cased = vocab.validate_vocab(os.path.join(minilm_dir, "vocab.txt"), do_lower_case=False)
    assert any("looks uncased" in w for w in cased["warnings"])


def test_vocab_missing_a_special_token_is_refused(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\nThe\n")
    with pytest.raises(UserError, match=r"lacks the special token\(s\) \[MASK\]"):
        vocab.validate_vocab(str(path))
    with pytest.raises(UserError, match="not found"):
        vocab.validate_vocab(str(tmp_path / "missing.txt"))
    path.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nThe\nCat\nthe\nthe\n")
    info = vocab.validate_vocab(str(path), do_lower_case=True)
    assert any("duplicate" in w for w in info["warnings"])
    assert any("looks cased" in w for w in info["warnings"])


def test_wordpiece_training_puts_the_special_tokens_first(tmp_path, shards):
    stats = vocab.build_vocab(shards, str(tmp_path / "v"), vocab_size=150, unused_tokens=3, log=_quiet)
    tokens = open(stats["path"], encoding="utf-8").read().split("\n")[:-1]
    assert tokens[:8] == list(SPECIAL_TOKENS) + ["[unused0]", "[unused1]", "[unused2]"]
    assert len(tokens) == stats["vocab_size"] <= 150
    assert all(t == t.lower() for t in tokens[8:])
    tokenizer = build_tokenizer(vocab_file=stats["path"], do_lower_case=True)
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id) == (
        0,
        1,
        2,
        3,
        4,
    )
    pieces = tokenizer.tokenize("The River flows.")
    assert pieces[:2] == ["the", "river"] and pieces[-1] == "."
    assert "".join(p[2:] if p.startswith("##") else " " + p for p in pieces).split() == [
        "the",
        "river",
        "flows",
        ".",
    ]


def test_sentencepiece_training_has_bert_special_pieces(tmp_path, shards):
    out = tmp_path / "v"
    out.mkdir()
    (out / ".spm_training.tmp-1.model").write_text("left by a killed run")
    stats = vocab.build_vocab(shards, str(out), kind="sentencepiece", vocab_size=120, log=_quiet)
    assert stats["path"].endswith("spm.model")
    # SentencePiece's listing is published beside the model; the killed run's temporary is gone.
    assert sorted(os.listdir(out)) == ["manifest.json", "spm.model", "spm.vocab"]
    assert (out / "spm.vocab").read_text().split("\n")[0].split("\t")[0] == "[PAD]"
    tokenizer = build_tokenizer(spm_model_file=stats["path"], do_lower_case=True)
    assert [tokenizer.convert_ids_to_tokens([i])[0] for i in range(5)] == list(SPECIAL_TOKENS)
    ids = tokenizer.encode("The contract shall be governed by the laws.")
    assert ids and tokenizer.unk_id not in ids and min(ids) >= 5


def test_vocab_is_restartable_and_parameters_invalidate(tmp_path, shards):
    out = str(tmp_path / "v")
    first = vocab.build_vocab(shards, out, vocab_size=150, log=_quiet)
    assert vocab.build_vocab(shards, out, vocab_size=150, log=_quiet)["skipped"] is True
    with open(first["path"], "a") as f:
        f.write("corrupt\n")
    assert "skipped" not in vocab.build_vocab(shards, out, vocab_size=150, log=_quiet)
    assert "corrupt" not in load_vocab(first["path"])
    assert "skipped" not in vocab.build_vocab(shards, out, vocab_size=140, log=_quiet)


def test_vocab_errors_are_one_sentence(tmp_path, shards, capsys):
    with pytest.raises(UserError, match="leaves no room"):
        vocab.build_vocab(shards, str(tmp_path / "v"), vocab_size=5, log=_quiet)
    with pytest.raises(UserError, match="run --action sharding first"):
        vocab.build_vocab([], str(tmp_path / "v"), vocab_size=100, log=_quiet)
    bad = tmp_path / "bad_vocab.txt"
    bad.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n")
    assert (
        prepare_data.main(["--action", "vocab", "--vocab_file", str(bad), "--data_dir", str(tmp_path)]) == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"[vocab] error: {str(bad)!r} lacks the special token(s) [MASK]; BERT needs all of "
        "[PAD], [UNK], [CLS], [SEP], [MASK]. Use a vocabulary built for BERT or add them."
    ]
