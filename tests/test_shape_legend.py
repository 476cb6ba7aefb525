"""The model code's shape comments: one legend per file, the same letters everywhere."""

import glob
import os
import re

import pytest

from conftest import ROOT

LEGEND = (
    "# Shapes: B batch, S sequence, D hidden, N heads, H head size (D = N * H), I intermediate,\n"
    "# P masked positions (max predictions per sequence), V vocab, M sequences packed into a row."
)
LETTERS = set("BSDNHIPVM")
FILES = sorted(glob.glob(os.path.join(ROOT, "bert", "*.py"))) + [os.path.join(ROOT, "extract_features.py")]


def _shape_letters(text):
    """Single capital letters inside [..., ...] shapes, e.g. B, S and D in '[B, S, D]'."""
    letters = set()
    for inside in re.findall(r"\[([^\[\]\n]*,[^\[\]\n]*)\]", text):
        letters.update(t.strip() for t in inside.split(",") if re.fullmatch(r"[A-Z]", t.strip()))
    return letters


@pytest.mark.parametrize("path", FILES, ids=os.path.basename)
def test_shapes_use_the_one_legend(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    letters = _shape_letters(text)
    if not letters:
        assert LEGEND not in text  # a legend where no shape is written is noise
        return
    assert text.count(LEGEND) == 1, f"{path} writes shapes but does not declare the legend once"
    assert letters <= LETTERS, f"{path} uses shape letters {sorted(letters - LETTERS)} outside the legend"


def test_shape_letters_are_found():
    assert _shape_letters("x  # [B, 1, 1, S] and [2, D] but not [CLS] or [in, out]") == {"B", "S", "D"}
    assert _shape_letters("[B, K, S, D]") == {"B", "K", "S", "D"}
