"""common/files.py: commit publishes what another program wrote, over a file or a directory."""

import os

import pytest

from common.files import TEMP_GLOB, atomic_path, commit, remove_stale_temporaries, temporary_name


def _tree(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)


def _read_tree(root):
    found = {}
    for folder, _, names in os.walk(root):
        for name in names:
            with open(os.path.join(folder, name)) as f:
                found[os.path.relpath(os.path.join(folder, name), root)] = f.read()
    return found


def test_commit_publishes_a_file_written_under_any_name(tmp_path):
    written = tmp_path / "model.part"  # a name of the writer's choosing, not temporary_name's
    written.write_text("new")
    final = tmp_path / "model.bin"
    final.write_text("old")
    commit(str(written), str(final))
    assert final.read_text() == "new"
    assert sorted(os.listdir(tmp_path)) == ["model.bin"]


@pytest.mark.parametrize("old", ["file", "directory", "none"])
@pytest.mark.parametrize("new", ["file", "directory"])
def test_commit_replaces_whatever_is_there(tmp_path, old, new):
    final = str(tmp_path / "out")
    if old == "file":
        _tree(str(tmp_path), {"out": "old file"})
    elif old == "directory":
        _tree(final, {"a.txt": "old a", "sub/b.txt": "old b"})
    staged = str(tmp_path / "staging" / "out")
    if new == "file":
        _tree(str(tmp_path / "staging"), {"out": "new file"})
    else:
        _tree(staged, {"c.txt": "new c", "sub/d.txt": "new d"})
    commit(staged, final)
    if new == "file":
        assert open(final).read() == "new file"
    else:
        assert _read_tree(final) == {"c.txt": "new c", os.path.join("sub", "d.txt"): "new d"}
    # Nothing left aside: the old one moved out of the way is deleted.
    assert sorted(os.listdir(tmp_path)) == ["out", "staging"]
    assert os.listdir(tmp_path / "staging") == []


def test_atomic_path_leaves_only_a_removable_temporary_on_failure(tmp_path):
    final = str(tmp_path / "result.txt")
    with pytest.raises(RuntimeError), atomic_path(final) as temporary:
        assert os.path.basename(temporary) == os.path.basename(temporary_name(final))
        with open(temporary, "w") as f:
            f.write("half")
        raise RuntimeError("killed")
    assert os.listdir(tmp_path) == []
    # A killed process (no exception handler ran) leaves the temporary, which matches TEMP_GLOB.
    with open(temporary_name(final), "w") as f:
        f.write("half")
    assert TEMP_GLOB.startswith(".") and remove_stale_temporaries(str(tmp_path)) == 1
    assert os.listdir(tmp_path) == []
