"""Writing files so that no partial file ever looks complete, reading JSON, expanding globs.

Every write in the project goes through `atomic_write` / `atomic_path`: the data lands in
`.<name>.tmp-<pid>` in the same directory, is fsynced, renamed over the final name (atomic on
POSIX) and the directory entry is fsynced. `commit` is that last step alone, for a file that
another program wrote under a name of its own choosing; it is the only place that renames. A
killed process leaves only hidden temporaries that match TEMP_GLOB, which
`remove_stale_temporaries` clears and every reader ignores; a write that fails (no space, a
read-only or vanished directory) leaves no temporary either, and `describe_write_error` says why
in words a sentence can carry.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import json
import os
import shutil

from common.errors import UserError

TEMP_MARK = ".tmp-"
TEMP_GLOB = ".*" + TEMP_MARK + "*"
_HASH_CHUNK = 1 << 20


def temporary_name(path: str) -> str:
    """`dir/.name.tmp-<pid>`: hidden, beside its final name, unique per process."""
    directory, name = os.path.split(os.path.abspath(path))
    return os.path.join(directory, f".{name}{TEMP_MARK}{os.getpid()}")


def is_temporary(path: str) -> bool:
    name = os.path.basename(path)
    return name.startswith(".") and TEMP_MARK in name


def fsync_directory(directory: str) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def commit(temporary: str, final: str) -> None:
    """fsyncs `temporary` (a file, or a directory tree) and renames it to `final`, replacing
    whatever file or directory is there.

    `temporary` need not be named by `temporary_name`: a file another program wrote (a compiler's
    output, a trainer's model, a resumable `.part` download) is published the same way, as long as
    it lies on the same file system as `final`.
    """
    if os.path.isdir(temporary):
        # Every file and folder of the tree (a SavedModel nests variables/ and assets/).
        for folder, _, names in os.walk(temporary, topdown=False):
            for name in names:
                with open(os.path.join(folder, name), "rb") as f:
                    os.fsync(f.fileno())
            fsync_directory(folder)
    else:
        with open(temporary, "rb+") as f:
            os.fsync(f.fileno())
    if os.path.isdir(final) or (os.path.isdir(temporary) and os.path.lexists(final)):
        # os.replace cannot put anything over a non-empty directory, nor a directory over a file:
        # the old one is moved aside first, so `final` is never missing for longer than a rename.
        old = temporary_name(final) + ".old"
        _remove(old)
        os.replace(final, old)
        try:
            os.replace(temporary, final)
        except BaseException:
            os.replace(old, final)  # the caller removes the temporary: the old one must stay
            raise
        _remove(old)
    else:
        os.replace(temporary, final)
    fsync_directory(os.path.dirname(os.path.abspath(final)))


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


@contextlib.contextmanager
def atomic_path(path: str, directory: bool = False):
    """Yields a temporary path (a file, or a directory when `directory`) to fill; on success it
    becomes `path` (replacing any old one), on an exception it is deleted."""
    temporary = temporary_name(path)
    _remove(temporary)
    if directory:
        os.makedirs(temporary)
    try:
        yield temporary
        commit(temporary, path)
    except BaseException:
        _remove(temporary)
        raise


@contextlib.contextmanager
def atomic_write(path: str, mode: str = "w", encoding: str | None = "utf-8", newline: str | None = "\n"):
    """`with atomic_write(path) as f: f.write(...)`: an open file that becomes `path` when closed
    without an error (text mode by default; "wb" for bytes)."""
    binary = "b" in mode
    with atomic_path(path) as temporary:
        with open(
            temporary, mode, encoding=None if binary else encoding, newline=None if binary else newline
        ) as f:
            yield f


def write_text(path: str, text: str) -> None:
    with atomic_write(path) as f:
        f.write(text)


def write_json(path: str, value, indent: int | None = 2) -> None:
    write_text(path, json.dumps(value, indent=indent, sort_keys=True) + "\n")


def remove_stale_temporaries(directory: str) -> int:
    """Deletes the temporaries a killed process left in `directory` (not recursive); returns how many."""
    removed = 0
    for path in glob.glob(os.path.join(glob.escape(directory), TEMP_GLOB)):
        _remove(path)
        removed += 1
    return removed


def read_json(path: str, what: str = "JSON file"):
    """The parsed JSON in `path`, or UserError naming the file (missing, unreadable or malformed)."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise UserError(f"The {what} {path!r} does not exist.") from None
    except OSError as e:
        raise UserError(f"Cannot read the {what} {path!r} ({e.strerror or e}).") from None
    except ValueError as e:
        raise UserError(f"The {what} {path!r} is not valid JSON ({e}).") from None


def expand_globs(spec, what: str = "input files", source: str | None = None) -> list[str]:
    """Comma-separated (or listed) paths and glob patterns -> existing files, sorted per pattern,
    duplicates dropped, order of the patterns kept. A pattern that matches nothing is a UserError
    naming it and `source` (the flag or file it came from): a typo must not silently drop data."""
    origin = f" (from {source})" if source else ""
    patterns = [p.strip() for p in (spec.split(",") if isinstance(spec, str) else spec)]
    patterns = [p for p in patterns if p]
    if not patterns:
        raise UserError(f"No {what} given{origin}.")
    files, seen = [], set()
    for pattern in patterns:
        pattern = os.path.expanduser(pattern)
        if "://" in pattern:  # gs://, hdfs://, s3://: TensorFlow's file systems (imported only then)
            import tensorflow as tf

            matches = sorted(tf.io.gfile.glob(pattern))
        elif glob.has_magic(pattern):
            matches = sorted(p for p in glob.glob(pattern) if os.path.isfile(p) and not is_temporary(p))
        else:
            matches = [pattern] if os.path.isfile(pattern) else []
        if not matches:
            raise UserError(f"No {what} match {pattern!r}{origin}.")
        for match in matches:
            if match not in seen:
                seen.add(match)
                files.append(match)
    return files


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    buffer = memoryview(bytearray(_HASH_CHUNK))  # one fixed buffer: memory does not follow file size
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buffer):
            digest.update(buffer[:n])
    return digest.hexdigest()


def ensure_writable_dir(directory: str, what: str = "output directory") -> None:
    """Creates `directory` if needed and proves it is writable, or raises UserError naming it."""
    try:
        os.makedirs(directory, exist_ok=True)
        probe = os.path.join(directory, f".write_test{TEMP_MARK}{os.getpid()}")
        with open(probe, "w") as f:
            f.write("ok")
        os.remove(probe)
    except OSError as e:
        reason = e.strerror or str(e)
        if e.errno in (errno.ENOTDIR, errno.EEXIST):
            reason = "a path component is a file, not a directory"
        raise UserError(
            f"Cannot write to the {what} {directory!r} ({reason}); choose a writable "
            f"directory or fix its permissions."
        ) from None


# The write failures a user can fix, in the words of a sentence. TensorFlow's file errors carry
# only strerror's text, so the text is matched too.
# A write that fails for the storage itself, whatever the file: the entry points turn these into
# one sentence (common/cli.py).
STORAGE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)
_WRITE_FAILURES = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ENOENT: "a file or directory vanished",
}


def write_error_number(error: BaseException) -> int | None:
    """The errno of a failed write: an OSError's own, or the one whose strerror text a
    TensorFlow error carries (SaveV2 says "...; No space left on device"); None for neither."""
    if isinstance(error, OSError) and error.errno:
        return error.errno
    text = str(error)
    for number in _WRITE_FAILURES:
        if os.strerror(number) in text:
            return number
    return None


def free_bytes(path: str) -> int | None:
    """Bytes an unprivileged writer may still use on the file system of `path` (or of its nearest
    existing parent), or None when the system does not say."""
    path = os.path.abspath(path)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def format_bytes(n: int) -> str:
    """1234567 -> "1.2 MiB (1234567 bytes)": readable, and exact for whoever compares with df."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit} ({n} bytes)"
    return f"{n} bytes"


def describe_write_error(error: BaseException, directory: str, needed_bytes: int | None = None) -> str:
    """Why a write into `directory` failed, as a phrase: "no space left on the device: about 1.2 MiB
    (...) are needed and 0.3 MiB (...) are free", "the directory no longer exists", "the file system
    is read-only", or the error's first line when it is none of those."""
    number = write_error_number(error)
    if number in (errno.ENOSPC, errno.EDQUOT):
        free = free_bytes(directory)
        amounts = ([f"about {format_bytes(needed_bytes)} are needed"] if needed_bytes else []) + (
            [f"{format_bytes(free)} are free"] if free is not None else []
        )
        return _WRITE_FAILURES[number] + (": " + " and ".join(amounts) if amounts else "")
    if number == errno.ENOENT and not os.path.isdir(directory):
        return "the directory no longer exists"
    if number in _WRITE_FAILURES:
        return _WRITE_FAILURES[number]
    lines = str(error).strip().splitlines()
    return (lines[0] if lines else type(error).__name__).rstrip(".")
