"""The version: one line of pyproject.toml, read by common/version.py, printed by every entry
point's --version before anything else loads."""

import importlib
import sys

import pytest

from common import version

ENTRY_POINTS = (
    "run_pretraining", "run_squad", "run_classifier", "run_tune", "prepare_data",
    "create_pretraining_data", "convert_checkpoint", "extract_features",
)  # fmt: skip


def test_the_version_is_pyprojects_and_reads_only_the_project_table():
    with open(version.PYPROJECT, encoding="utf-8") as f:
        text = f.read()
    assert version.version() == version.from_pyproject(text) == "0.9.0"
    other = '[tool.x]\nversion = "9"\n\n[project]\nname = "b"\nversion = "1.2.3"\n\n[tool.y]\nversion = "8"\n'
    assert version.from_pyproject(other) == "1.2.3"
    assert version.from_pyproject('[tool.x]\nversion = "9"\n') is None


def test_the_changelog_has_a_section_for_the_version_below_unreleased():
    with open(version.PYPROJECT.replace("pyproject.toml", "CHANGELOG.md"), encoding="utf-8") as f:
        headings = [line for line in f if line.startswith("## ")]
    assert headings[0].strip() == "## Unreleased"
    assert headings[1].startswith(f"## {version.version()} ")


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_every_entry_point_prints_the_version_without_loading_tensorflow(name, capsys):
    loaded = "tensorflow" in sys.modules
    assert importlib.import_module(name).main(["--version"]) == 0
    assert capsys.readouterr().out == f"{name} {version.version()}\n"
    assert loaded or "tensorflow" not in sys.modules
