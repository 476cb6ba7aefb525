"""The offline question-answering set: SQuAD v1.1 files whose answers sit at their offsets."""

import json
import os
import textwrap

from data.corpus.stdlib_qa import build_qa_set, documented_functions


def _questions(path):
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    assert data["version"] == "1.1"
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                yield paragraph["context"], qa


def test_documented_functions_reads_public_functions_and_methods(tmp_path):
    path = tmp_path / "shapes.py"
    path.write_text(
        textwrap.dedent(
            '''
            def area(r):
                """Return the area of a circle of radius r.

                More text."""

            def _hidden():
                """Return something nobody should see here."""

            def short():
                """Too short."""

            class Box:
                def volume(self):
                    """Compute the volume of the box in litres."""
            '''
        )
    )
    assert documented_functions(str(path), "shapes") == {
        "shapes": [("area", "Return the area of a circle of radius r.")],
        "shapes.Box": [("volume", "Compute the volume of the box in litres.")],
    }


def test_every_answer_is_at_its_offset_and_no_paragraph_is_in_both_files(tmp_path):
    stats = build_qa_set(str(tmp_path), max_questions=1500)
    assert stats["train_questions"] + stats["dev_questions"] == 1500
    assert stats["dev_questions"] >= 50  # about a tenth of the paragraphs
    contexts = {}
    for split in ("train", "dev"):
        found = list(_questions(os.path.join(tmp_path, f"{split}.json")))
        assert len(found) == stats[f"{split}_questions"]
        for context, qa in found:
            answer = qa["answers"][0]
            assert (
                context[answer["answer_start"] : answer["answer_start"] + len(answer["text"])]
                == answer["text"]
            )
            assert context[answer["answer_start"] + len(answer["text"])] == ":"  # "name: summary"
            assert qa["question"].startswith("Which function of ")
        contexts[split] = {context for context, _ in found}
    assert not contexts["train"] & contexts["dev"]
    ids = [
        qa["id"]
        for split in ("train", "dev")
        for _, qa in _questions(os.path.join(tmp_path, f"{split}.json"))
    ]
    assert len(ids) == len(set(ids))
