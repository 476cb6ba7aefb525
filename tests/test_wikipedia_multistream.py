"""Formatting a Wikipedia multistream dump: whole bz2 streams per process, by the index's offsets."""

import bz2
import collections
import contextlib
import functools
import hashlib
import http.server
import shutil
import threading

import pytest

import dump_generator
from common.errors import UserError
from data.corpus import download
from data.corpus.text_formatting import format_corpus, iter_documents


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    directory = tmp_path_factory.mktemp("multistream")
    path = str(directory / "enwiki-20240601-pages-articles-multistream.xml.bz2")
    # 10 pages per stream: many streams in a small dump, so two processes interleave many times.
    stats = dump_generator.generate_dump(path, 400_000, seed=7, pages_per_stream=10)
    return path, stats


def _offsets(stats):
    with bz2.open(stats["index_path"], "rt", encoding="utf-8") as f:
        return sorted({int(line.split(":", 1)[0]) for line in f})


def _format(inputs, output, n_processes, messages=None):
    log = messages.append if messages is not None else (lambda _: None)
    return format_corpus(inputs, str(output), n_processes=n_processes, log=log)


@pytest.mark.process
def test_one_and_two_processes_write_the_same_bytes_as_the_serial_reader(dump, tmp_path):
    path, generated = dump
    one = _format([path], tmp_path / "one" / "out.txt", 1)
    two = _format([path], tmp_path / "two" / "out.txt", 2)
    text = (tmp_path / "one" / "out.txt").read_bytes()
    assert (tmp_path / "two" / "out.txt").read_bytes() == text
    # The same dump without its index goes through the serial reader: the same documents again.
    plain = tmp_path / "plain.xml.bz2"
    shutil.copy(path, plain)
    serial = _format([str(plain)], tmp_path / "serial" / "out.txt", 1)
    assert (tmp_path / "serial" / "out.txt").read_bytes() == text
    counts = ("documents", "input_documents", "redirect", "disambiguation", "other_namespace", "bytes_out")
    assert {k: one[k] for k in counts} == {k: two[k] for k in counts} == {k: serial[k] for k in counts}
    assert one["input_documents"] == generated["pages"]
    assert one["redirect"] == generated["redirect"] and one["disambiguation"] == generated["disambiguation"]
    assert one["documents"] == len(text.splitlines()) > 0


@pytest.mark.process
def test_without_an_index_it_runs_serially_and_says_so_once(dump, tmp_path):
    path, _ = dump
    plain = str(tmp_path / "plain.xml.bz2")
    shutil.copy(path, plain)
    messages = []
    stats = collections.Counter()
    documents = list(iter_documents(plain, stats, n_processes=2, log=messages.append))
    assert len(documents) > 0
    said = [m for m in messages if "no multistream index" in m]
    assert said == [
        f"[text_formatting] {plain} has no multistream index (expected {plain[: -len('.xml.bz2')]}"
        "-index.txt.bz2): it is decompressed and parsed in one process; only the cleaning uses 2."
    ]
    # With the index there is nothing to say.
    messages.clear()
    assert list(iter_documents(path, collections.Counter(), n_processes=2, log=messages.append)) == documents
    assert messages == []


@pytest.mark.process
@pytest.mark.parametrize("n_processes", [1, 2])
def test_a_truncated_last_stream_is_named_in_the_error(dump, tmp_path, n_processes):
    path, stats = dump
    last = _offsets(stats)[-1]
    cut = tmp_path / "enwiki-pages-articles-multistream.xml.bz2"
    shutil.copy(stats["index_path"], tmp_path / "enwiki-pages-articles-multistream-index.txt.bz2")
    cut.write_bytes(open(path, "rb").read()[: last + 300])
    with pytest.raises(UserError) as error:
        list(iter_documents(str(cut), collections.Counter(), n_processes=n_processes))
    assert str(error.value).startswith(f"the bz2 stream at byte {last:,} of {cut} is truncated or corrupt (")
    assert str(error.value).endswith("; re-download the dump.")


@pytest.mark.process
def test_a_corrupt_stream_in_the_middle_is_named_and_a_short_file_is_called_truncated(dump, tmp_path):
    path, stats = dump
    offsets = _offsets(stats)
    data = bytearray(open(path, "rb").read())
    middle = offsets[len(offsets) // 2]
    data[middle + 200 : middle + 260] = bytes(60)  # zeros inside the stream's compressed blocks
    bad = tmp_path / "bad.xml.bz2"
    bad.write_bytes(bytes(data))
    shutil.copy(stats["index_path"], tmp_path / "bad-index.txt.bz2")
    with pytest.raises(
        UserError, match=f"^the bz2 stream at byte {middle:,} of {bad} is truncated or corrupt"
    ):
        list(iter_documents(str(bad), collections.Counter(), n_processes=2))
    # Cut in the middle of the dump: the index names streams the file no longer has.
    short = tmp_path / "short.xml.bz2"
    short.write_bytes(bytes(data[: middle + 10]))
    shutil.copy(stats["index_path"], tmp_path / "short-index.txt.bz2")
    with pytest.raises(UserError) as error:
        list(iter_documents(str(short), collections.Counter(), n_processes=1))
    assert str(error.value) == (
        f"{short} has {middle + 10:,} bytes but its index {tmp_path / 'short-index.txt.bz2'} names a stream "
        f"at byte {offsets[offsets.index(middle) + 1]:,}: the dump is truncated; re-download it."
    )


@pytest.mark.process
def test_an_index_of_another_dump_is_named(dump, tmp_path):
    path, _ = dump
    other = dump_generator.generate_dump(str(tmp_path / "other.xml.bz2"), 200_000, seed=8, pages_per_stream=3)
    shutil.copy(path, tmp_path / "d.xml.bz2")
    shutil.copy(other["index_path"], tmp_path / "d-index.txt.bz2")
    first = _offsets(other)[1]  # the header streams are the same
    with pytest.raises(UserError) as error:
        list(iter_documents(str(tmp_path / "d.xml.bz2"), collections.Counter(), n_processes=2))
    assert str(error.value).startswith(
        f"No bz2 stream starts at byte {first:,} of {tmp_path / 'd.xml.bz2'}, where its index "
        f"{tmp_path / 'd-index.txt.bz2'} says one does: the index belongs to another dump;"
    )


def test_a_malformed_index_is_named(dump, tmp_path):
    path, _ = dump
    shutil.copy(path, tmp_path / "d.xml.bz2")
    (tmp_path / "d-index.txt.bz2").write_bytes(bz2.compress(b"0:1:A\nnot an index line\n"))
    with pytest.raises(UserError) as error:
        list(iter_documents(str(tmp_path / "d.xml.bz2"), collections.Counter()))
    assert str(error.value) == (
        f"The multistream index {tmp_path / 'd-index.txt.bz2'} is malformed (line 2 is not "
        f"OFFSET:PAGE_ID:TITLE); re-download it, or delete it to format {tmp_path / 'd.xml.bz2'} in one process."
    )


class _DumpMirror:
    """A dumps.wikimedia.org look-alike on 127.0.0.1 serving one directory (no Range: fetch restarts)."""

    def __init__(self, root):
        handler = functools.partial(_QuietHandler, directory=str(root))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _publish(dump, directory, md5_of_index=None):
    """Lays the dump out as Wikipedia does under enwiki/20240601/, with its md5sums.txt."""
    path, stats = dump
    folder = directory / "enwiki" / "20240601"
    folder.mkdir(parents=True)
    name = "enwiki-20240601-pages-articles-multistream"
    shutil.copy(path, folder / f"{name}.xml.bz2")
    shutil.copy(stats["index_path"], folder / f"{name}-index.txt.bz2")
    md5 = {p.name: hashlib.md5(p.read_bytes()).hexdigest() for p in folder.iterdir()}
    if md5_of_index:
        md5[f"{name}-index.txt.bz2"] = md5_of_index
    lines = [f"{'0' * 32}  enwiki-20240601-pages-articles.xml.bz2"] + [
        f"{v}  {k}" for k, v in sorted(md5.items())
    ]
    (folder / "enwiki-20240601-md5sums.txt").write_text("\n".join(lines) + "\n")
    return folder / f"{name}-index.txt.bz2"


@contextlib.contextmanager
def _served(dump, tmp_path, md5_of_index=None):
    """`dump` published on a local mirror for the block; yields the mirror's base URL."""
    _publish(dump, tmp_path / "mirror", md5_of_index=md5_of_index)
    mirror = _DumpMirror(tmp_path / "mirror")
    try:
        yield mirror.base
    finally:
        mirror.close()


def _download(tmp_path, base):
    return download.download_dataset(
        "wikicorpus_en", str(tmp_path / "data"), mirror=base, wiki_dump="20240601", log=lambda _: None
    )


@pytest.mark.process
def test_download_fetches_dump_and_index_verified_and_formatting_uses_the_index(dump, tmp_path):
    with _served(dump, tmp_path) as base:
        stats = _download(tmp_path, base)
    assert stats["downloaded"] == 2
    target = tmp_path / "data" / "download" / "wikicorpus_en"
    path, generated = dump
    assert (target / "wikicorpus_en.xml.bz2").read_bytes() == open(path, "rb").read()
    assert (target / "wikicorpus_en-index.txt.bz2").read_bytes() == open(generated["index_path"], "rb").read()
    messages = []
    documents = list(
        iter_documents(
            str(target / "wikicorpus_en.xml.bz2"), collections.Counter(), n_processes=2, log=messages.append
        )
    )
    assert messages == [] and len(documents) == generated["article"]


def test_an_index_that_does_not_match_its_published_md5_is_refused(dump, tmp_path):
    with _served(dump, tmp_path, md5_of_index="f" * 32) as base:
        with pytest.raises(download.DownloadError) as error:
            _download(tmp_path, base)
    url = f"{base}/enwiki/20240601/enwiki-20240601-pages-articles-multistream-index.txt.bz2"
    assert str(error.value).startswith(f"{url}: md5 mismatch (expected {'f' * 32}, got ")
    target = tmp_path / "data" / "download" / "wikicorpus_en"
    assert (target / "wikicorpus_en.xml.bz2").exists()  # the dump itself verified
    assert not [p.name for p in target.iterdir() if p.name.startswith("wikicorpus_en-index")]
