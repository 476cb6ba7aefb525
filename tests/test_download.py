"""Resumable, verified downloads against a real HTTP server on 127.0.0.1 (with Range support)."""

import bz2
import hashlib
import http.server
import io
import json
import os
import threading
import zipfile

import pytest

from common.files import is_temporary
from data.corpus import download
from data.corpus.download import DownloadError, Source, download_dataset, fetch, retry


class FileServer:
    """A ThreadingHTTPServer on loopback serving in-memory files, with Range/If-Range and cut-offs."""

    def __init__(self):
        self.files = {}  # path -> bytes
        self.etags = {}  # path -> strong ETag
        self.cut_after = {}  # path -> list of byte counts: each request sends that many, then drops
        self.requests = []  # (method, path, Range header, If-Range header)
        self.ignore_range = False
        self.errors = {}  # path -> list of HTTP statuses to answer, one per request, before the file
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                server.requests.append(
                    ("GET", self.path, self.headers.get("Range"), self.headers.get("If-Range"))
                )
                body = server.files.get(self.path)
                if server.errors.get(self.path):
                    self.send_error(server.errors[self.path].pop(0))
                    return
                if body is None:
                    self.send_error(404)
                    return
                etag = server.etags.get(self.path, '"%s"' % hashlib.md5(body).hexdigest())
                start, status = 0, 200
                range_header = self.headers.get("Range")
                if_range = self.headers.get("If-Range")
                if range_header and not server.ignore_range and (if_range is None or if_range == etag):
                    start = int(range_header.split("=")[1].split("-")[0])
                    if start >= len(body):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(body)}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    status = 206
                payload = body[start:]
                self.send_response(status)
                self.send_header("Content-Length", str(len(payload)))
                self.send_header("ETag", etag)
                self.send_header("Accept-Ranges", "bytes")
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                self.end_headers()
                cuts = server.cut_after.get(self.path)
                if cuts:
                    # Announce the full length, send part of it, then drop the connection.
                    self.wfile.write(payload[: cuts.pop(0)])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(payload)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def url(self, path):
        return self.base + path

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = FileServer()
    yield s
    s.close()


def _payload(n=300_000, seed=7):
    # Incompressible-looking, deterministic bytes.
    out, x = bytearray(), seed
    while len(out) < n:
        x = hashlib.sha256(x.to_bytes(32, "little") if isinstance(x, int) else x).digest()
        out += x
    return bytes(out[:n])


def _quiet(*_):
    pass


def test_plain_download_verifies_sha256_and_leaves_no_part(server, tmp_path):
    body = _payload()
    server.files["/f.bin"] = body
    dest = tmp_path / "f.bin"
    result = fetch(server.url("/f.bin"), str(dest), sha256=hashlib.sha256(body).hexdigest(), log=_quiet)
    assert result["status"] == "downloaded"
    assert dest.read_bytes() == body
    assert not (tmp_path / "f.bin.part").exists()
    # A second call sends no request at all.
    n = len(server.requests)
    assert fetch(server.url("/f.bin"), str(dest), size=len(body), log=_quiet)["status"] == "present"
    assert len(server.requests) == n


def test_interrupted_transfer_is_resumed_by_a_rerun(server, tmp_path):
    body = _payload()
    server.files["/dump.xml.bz2"] = body
    server.cut_after["/dump.xml.bz2"] = [100_000]
    dest = tmp_path / "dump.xml.bz2"
    md5 = hashlib.md5(body).hexdigest()
    with pytest.raises(DownloadError, match="re-run to resume"):
        fetch(server.url("/dump.xml.bz2"), str(dest), md5=md5, retries=0, log=_quiet)
    part = tmp_path / "dump.xml.bz2.part"
    assert not dest.exists(), "a partial download must never take the final name"
    assert part.stat().st_size == 100_000
    result = fetch(server.url("/dump.xml.bz2"), str(dest), md5=md5, retries=0, log=_quiet)
    assert result == {"status": "resumed", "bytes": len(body), "resumed_from": 100_000}
    assert dest.read_bytes() == body
    assert not part.exists()
    # The re-run asked only for the missing tail, guarded by the ETag of the first response.
    method, path, range_header, if_range = server.requests[-1]
    assert range_header == "bytes=100000-"
    assert if_range == '"%s"' % hashlib.md5(body).hexdigest()


def test_connection_drops_are_retried_within_one_run(server, tmp_path):
    body = _payload()
    server.files["/x"] = body
    server.cut_after["/x"] = [50_000, 70_000]
    dest = tmp_path / "x"
    messages = []
    fetch(server.url("/x"), str(dest), size=len(body), retries=3, backoff=0, log=messages.append)
    assert dest.read_bytes() == body
    ranges = [r[2] for r in server.requests]
    assert ranges == [None, "bytes=50000-", "bytes=120000-"]
    assert sum("connection lost" in m or "ended early" in m for m in messages) == 2


def test_checksum_mismatch_fails_clearly_and_leaves_nothing_complete_looking(server, tmp_path):
    server.files["/squad.json"] = b'{"data": []}'
    dest = tmp_path / "squad.json"
    with pytest.raises(DownloadError, match=r"sha256 mismatch \(expected 0+, got [0-9a-f]{64}\)"):
        fetch(server.url("/squad.json"), str(dest), sha256="0" * 64, log=_quiet)
    assert sorted(os.listdir(tmp_path)) == []


def test_size_mismatch_announced_by_the_server_fails_before_downloading(server, tmp_path):
    server.files["/a"] = b"x" * 1000
    with pytest.raises(DownloadError, match="announces 1,000 bytes but 999 are expected"):
        fetch(server.url("/a"), str(tmp_path / "a"), size=999, log=_quiet)
    assert os.listdir(tmp_path) == []


def test_changed_upstream_file_restarts_instead_of_splicing(server, tmp_path):
    old, new = _payload(seed=1), _payload(seed=2)
    server.files["/d"] = old
    server.cut_after["/d"] = [120_000]
    dest = tmp_path / "d"
    with pytest.raises(DownloadError):
        fetch(server.url("/d"), str(dest), retries=0, log=_quiet)
    server.files["/d"] = new  # a new dump replaced "latest": the ETag changes
    fetch(server.url("/d"), str(dest), retries=0, log=_quiet)
    assert dest.read_bytes() == new


def test_server_without_range_support_restarts_from_zero(server, tmp_path):
    body = _payload()
    server.files["/n"] = body
    server.cut_after["/n"] = [10_000]
    server.ignore_range = True
    dest = tmp_path / "n"
    fetch(server.url("/n"), str(dest), size=len(body), retries=2, backoff=0, log=_quiet)
    assert dest.read_bytes() == body


def test_server_errors_are_retried_then_given_up_with_the_status(server, tmp_path):
    body = _payload(1000)
    server.files["/busy"] = body
    server.errors["/busy"] = [503, 429]
    dest = tmp_path / "busy"
    assert fetch(server.url("/busy"), str(dest), retries=2, backoff=0, log=_quiet)["status"] == "downloaded"
    assert dest.read_bytes() == body and len(server.requests) == 3
    server.errors["/down"] = [503] * 5
    server.files["/down"] = body
    with pytest.raises(DownloadError, match=r"/down kept failing \(HTTP 503\); the partial file .* re-run"):
        fetch(server.url("/down"), str(tmp_path / "down"), retries=2, backoff=0, log=_quiet)
    assert [r[1] for r in server.requests].count("/down") == 3


def test_a_refused_connection_is_retried_then_named(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    with pytest.raises(DownloadError, match=rf"Could not connect to http://127.0.0.1:{port}/f \("):
        fetch(f"http://127.0.0.1:{port}/f", str(tmp_path / "f"), retries=1, backoff=0, log=_quiet)
    assert os.listdir(tmp_path) == []


def test_http_404_names_the_url(server, tmp_path):
    with pytest.raises(DownloadError, match=r"/missing answered HTTP 404"):
        fetch(server.url("/missing"), str(tmp_path / "m"), log=_quiet)


def test_wikipedia_dump_via_mirror_with_published_md5(server, tmp_path):
    xml = b"<mediawiki><page><title>A</title><ns>0</ns><id>1</id></page></mediawiki>"
    dump = bz2.compress(xml)
    index = bz2.compress(b"0:1:A\n")
    name = "enwiki-latest-pages-articles-multistream"
    server.files[f"/enwiki/latest/{name}.xml.bz2"] = dump
    server.files[f"/enwiki/latest/{name}-index.txt.bz2"] = index
    server.files["/enwiki/latest/enwiki-latest-md5sums.txt"] = (
        f"{'1' * 32}  enwiki-latest-abstract.xml.gz\n{hashlib.md5(dump).hexdigest()}  {name}.xml.bz2\n"
        f"{hashlib.md5(index).hexdigest()}  {name}-index.txt.bz2\n"
    ).encode()
    stats = download_dataset("wikicorpus_en", str(tmp_path), mirror=server.base, log=_quiet)
    target = tmp_path / "download" / "wikicorpus_en"
    assert (target / "wikicorpus_en.xml.bz2").read_bytes() == dump
    assert (target / "wikicorpus_en-index.txt.bz2").read_bytes() == index
    assert stats["downloaded"] == 2
    # The checksum list is read once for both files.
    assert [r[1] for r in server.requests].count("/enwiki/latest/enwiki-latest-md5sums.txt") == 1
    manifest = json.loads((target / "manifest.json").read_text())
    entry = manifest["outputs"]["wikicorpus_en.xml.bz2"]
    assert entry["sha256"] == hashlib.sha256(dump).hexdigest()
    assert entry["counts"]["md5"] == hashlib.md5(dump).hexdigest()
    assert (
        manifest["outputs"]["wikicorpus_en-index.txt.bz2"]["counts"]["md5"] == hashlib.md5(index).hexdigest()
    )
    # Re-run: verified from the manifest, no request at all.
    n = len(server.requests)
    assert download_dataset("wikicorpus_en", str(tmp_path), mirror=server.base, log=_quiet)["skipped"] == 2
    assert len(server.requests) == n


def test_download_action_of_the_cli(server, tmp_path, capsys):
    import prepare_data

    name = "enwiki-20240601-pages-articles-multistream"
    dump = bz2.compress(b"<mediawiki></mediawiki>")
    index = bz2.compress(b"")
    server.files[f"/enwiki/20240601/{name}.xml.bz2"] = dump
    server.files[f"/enwiki/20240601/{name}-index.txt.bz2"] = index
    server.files["/enwiki/20240601/enwiki-20240601-md5sums.txt"] = (
        f"{hashlib.md5(dump).hexdigest()}  {name}.xml.bz2\n{hashlib.md5(index).hexdigest()}  {name}-index.txt.bz2\n"
    ).encode()
    args = [
        "--action",
        "download",
        "--dataset",
        "wikicorpus_en",
        "--wiki_dump",
        "20240601",
        "--mirror",
        server.base,
        "--data_dir",
        str(tmp_path),
        "--no_progress",
    ]
    assert prepare_data.main(args, environ={}) == 0
    assert (tmp_path / "download" / "wikicorpus_en" / "wikicorpus_en.xml.bz2").read_bytes() == dump
    assert "[download] done: files=2  skipped=0  downloaded=2" in capsys.readouterr().err
    server.files.clear()
    assert prepare_data.main(args[:-1], environ={}) == 0  # verified from the manifest: no request needed
    assert (
        prepare_data.main(
            [
                "--action",
                "download",
                "--dataset",
                "glue",
                "--glue_tasks",
                "NOPE",
                "--data_dir",
                str(tmp_path),
            ],
            environ={},
        )
        == 2
    )
    assert "Unknown GLUE task(s) NOPE" in capsys.readouterr().err


def test_wikipedia_md5_mismatch_is_reported(server, tmp_path):
    name = "enwiki-latest-pages-articles-multistream.xml.bz2"
    server.files[f"/enwiki/latest/{name}"] = b"corrupt"
    server.files["/enwiki/latest/enwiki-latest-md5sums.txt"] = f"{'a' * 32}  {name}\n".encode()
    with pytest.raises(DownloadError, match="md5 mismatch"):
        download_dataset("wikicorpus_en", str(tmp_path), mirror=server.base, log=_quiet)
    assert not (tmp_path / "download" / "wikicorpus_en" / "wikicorpus_en.xml.bz2").exists()


def test_glue_zip_and_mrpc_are_extracted_and_formatted(server, tmp_path):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("RTE/train.tsv", "index\tsentence1\tsentence2\tlabel\n0\tA.\tB.\tentailment\n")
        z.writestr("RTE/dev.tsv", "index\tsentence1\tsentence2\tlabel\n")
    server.files["/glue/data/RTE.zip"] = buffer.getvalue()
    header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    train = header + "1\t11\t12\tHe came.\tHe arrived.\n0\t21\t22\tIt rained.\tIt was sunny.\n"
    test = header + "1\t31\t32\tYes.\tIndeed.\n"
    files = {
        "/senteval/senteval_data/msr_paraphrase_train.txt": train.encode(),
        "/senteval/senteval_data/msr_paraphrase_test.txt": test.encode(),
        "/glue/data/mrpc_dev_ids.tsv": b"21\t22\n",
    }
    server.files.update(files)
    sources = [Source(download.GLUE_BASE + "/RTE.zip", "archives/RTE.zip", extract="zip", extract_to=".")]
    sources += [Source(s.url, s.filename) for s in download.MRPC_SOURCES]  # fixture sizes differ
    download_dataset("glue", str(tmp_path), sources=sources, mirror=server.base, log=_quiet)
    glue = tmp_path / "download" / "glue"
    assert (glue / "RTE" / "train.tsv").read_text().splitlines()[1] == "0\tA.\tB.\tentailment"
    assert (glue / "MRPC" / "dev.tsv").read_text().splitlines() == [
        header.strip(),
        "0\t21\t22\tIt rained.\tIt was sunny.",
    ]
    assert (glue / "MRPC" / "train.tsv").read_text().splitlines()[1:] == ["1\t11\t12\tHe came.\tHe arrived."]
    assert (glue / "MRPC" / "test.tsv").read_text().splitlines()[1] == "0\t31\t32\tYes.\tIndeed."
    assert not [p for p in glue.rglob("*") if p.name.endswith(".part") or is_temporary(p.name)]


def test_builtin_sources_are_pinned():
    squad = {s.filename: s for s in download.dataset_sources("squad")}
    assert squad["v1.1/train-v1.1.json"].sha256.startswith("35276639")
    assert all(s.size and s.sha256 for s in squad.values())
    wiki, index = download.dataset_sources("wikicorpus_en", wiki_dump="20240601")
    assert wiki.url.endswith("/enwiki/20240601/enwiki-20240601-pages-articles-multistream.xml.bz2")
    assert index.url.endswith("/enwiki/20240601/enwiki-20240601-pages-articles-multistream-index.txt.bz2")
    assert (wiki.filename, index.filename) == ("wikicorpus_en.xml.bz2", "wikicorpus_en-index.txt.bz2")
    assert wiki.md5_list_url == index.md5_list_url
    assert wiki.md5_list_url.endswith("/enwiki/20240601/enwiki-20240601-md5sums.txt")
    (single,) = download.dataset_sources("wikicorpus_en", wiki_dump="20240601", wiki_multistream=False)
    assert single.url.endswith("/enwiki/20240601/enwiki-20240601-pages-articles.xml.bz2")
    with pytest.raises(download.UserError, match="Unknown GLUE task"):
        download.glue_sources(["NOPE"])


class Flaky:
    """An attempt that raises the given errors in turn, then returns "done"; counts its calls."""

    def __init__(self, *errors):
        self.errors = list(errors)
        self.calls = 0

    def __call__(self):
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "done"


def test_retry_waits_the_doubling_backoff_between_retried_errors():
    attempt, sleeps, notices = Flaky(ConnectionError("a"), TimeoutError("b")), [], []
    result = retry(
        attempt,
        attempts=3,
        backoff=0.5,
        retried=(ConnectionError, TimeoutError),
        notice=lambda error, failures: notices.append((str(error), failures)),
        sleep=sleeps.append,
    )
    assert (result, attempt.calls) == ("done", 3)
    assert sleeps == [0.5, 1.0]
    assert notices == [("a", 1), ("b", 2)]


def test_retry_gives_up_after_its_attempts_with_the_last_error():
    attempt, sleeps = Flaky(*(ConnectionError(f"drop {i}") for i in range(5))), []
    with pytest.raises(ConnectionError, match="^drop 3$"):
        retry(attempt, attempts=4, backoff=10, max_wait=15, retried=ConnectionError, sleep=sleeps.append)
    assert attempt.calls == 4
    assert sleeps == [10, 15, 15]  # no wait after the last attempt


def test_retry_lets_any_other_error_through_at_once():
    attempt, sleeps = Flaky(ValueError("bad"), ConnectionError("drop")), []
    with pytest.raises(ValueError, match="bad"):
        retry(attempt, attempts=5, backoff=1, retried=ConnectionError, sleep=sleeps.append)
    assert (attempt.calls, sleeps) == (1, [])
