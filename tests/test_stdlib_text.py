"""The offline corpus (data/corpus/stdlib_text.py): prose sentences of the installed Python, in
create_pretraining_data's input format, of the size asked for."""

from data.corpus import stdlib_text


def test_docstrings_become_sentences_and_code_is_dropped(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        '"""The first sentence is here. The second one follows it.\n\n'
        '>>> print("code is not prose")\n"""\nx = 1\n'
        'def f():\n    """Returns a value that is useful to callers. It never fails."""\n'
    )
    assert stdlib_text.document_sentences(str(module)) == [
        "The first sentence is here.",
        "The second one follows it.",
        "Returns a value that is useful to callers.",
        "It never fails.",
    ]


def test_corpus_has_the_size_asked_for_one_sentence_per_line(tmp_path):
    out = tmp_path / "corpus.txt"
    stats = stdlib_text.build_corpus(str(out), 0.2)
    text = out.read_text(encoding="utf-8")
    assert stats["bytes"] == len(text.encode("utf-8")) >= 200_000
    documents = [d for d in text.split("\n\n") if d.strip()]
    assert len(documents) == stats["documents"] and stats["sentences"] == text.count("\n") - len(documents)
    assert all(len(line) > 1 for d in documents for line in d.splitlines())
    assert [p.name for p in tmp_path.iterdir()] == ["corpus.txt"]  # no temporary left behind


def test_small_installations_are_repeated_to_the_size(tmp_path):
    root = tmp_path / "lib"
    root.mkdir()
    (root / "a.rst").write_text("This module does one thing well. It is small and has two sentences.\n")
    stats = stdlib_text.build_corpus(str(tmp_path / "c.txt"), 0.001, roots=[str(root)])
    assert stats["repeated"] and stats["bytes"] >= 1000 and stats["documents"] > 1
