"""common/files.py: commit publishes what another program wrote, over a file or a directory."""

import errno
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


@pytest.mark.parametrize("number", [errno.ENOSPC, errno.EROFS])
def test_an_entry_point_meeting_a_full_or_read_only_disk_says_so_in_one_sentence(tmp_path, capsys, number):
    from common import cli

    target = str(tmp_path / "log.jsonl")

    def run(flag_values):
        raise OSError(number, os.strerror(number), target)

    status = cli.main(lambda fv: None, run, ["prog"], prog="prog")
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1
    assert err.startswith(f"prog: error: could not write {target} (")
    assert ("no space left" if number == errno.ENOSPC else "read-only") in err


def test_an_entry_point_lets_other_os_errors_through(capsys):
    from common import cli

    def run(flag_values):
        raise OSError(errno.EIO, "Input/output error")

    with pytest.raises(OSError):
        cli.main(lambda fv: None, run, ["prog"], prog="prog")
