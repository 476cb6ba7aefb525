"""Resumable, verified downloads of the corpora and fine-tuning sets (all URLs live here).

`fetch(url, dest, ...)` downloads to `dest.part`, resuming an existing `.part` with an HTTP
Range request (guarded by If-Range, so a file that changed upstream restarts from zero instead
of being spliced), retries a dropped connection from where it stopped, verifies the size the
server announced and any published checksum, and only then renames `.part` to `dest`. A file
under its final name is therefore always complete and verified; a mismatch deletes the partial
file and raises DownloadError naming the URL and both checksums.

`download_dataset(name, root)` fetches one dataset (wikicorpus_en: Wikipedia's multistream
dump and its stream index; squad, glue, google_pretrained_weights) into
`<root>/download/<name>/`, extracts archives atomically, and records every file (size, sha256,
source) in that directory's manifest.json, so a re-run with everything in place touches no
network.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import http.client
import json
import os
import shutil
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile

from common.errors import UserError
from common.files import atomic_write, commit, ensure_writable_dir, sha256_file, temporary_name
from data import paths
from data.corpus.wikipedia import multistream_index_path
from data.stage import Runtime, Stage

USER_AGENT = "bert-tf2-data-prep/0.1 (+https://github.com/; resumable downloader)"
CHUNK = 1 << 20


class DownloadError(UserError):
    """A download that cannot complete or does not verify; the message names the URL and what to do."""


class _Interrupted(DownloadError):
    """A transfer that stopped where another request can go on. The message is the one to give up
    with; `notice(failures)`, when there is one, is the line to log before the next request."""

    def __init__(self, message: str, notice=None):
        super().__init__(message)
        self.notice = notice


@dataclasses.dataclass(frozen=True)
class Source:
    """One file to fetch. `filename` is relative to the dataset's download directory.

    Verification uses, in order of preference: `sha256`, `md5`, or the md5 published in the
    checksum list at `md5_list_url` (Wikipedia's `*-md5sums.txt`), and always `size` when known
    or the server's Content-Length otherwise. `extract` ("zip") unpacks into `extract_to`.
    """

    url: str
    filename: str
    sha256: str | None = None
    md5: str | None = None
    size: int | None = None
    md5_list_url: str | None = None
    extract: str | None = None
    extract_to: str | None = None
    # sha256 of files inside the archive that must match after extraction.
    member_sha256: tuple = ()


# --- Where everything comes from -----------------------------------------------------------------
WIKI_BASE = "https://dumps.wikimedia.org"
SQUAD_BASE = "https://rajpurkar.github.io/SQuAD-explorer/dataset"
GLUE_BASE = "https://dl.fbaipublicfiles.com/glue/data"
SENTEVAL_BASE = "https://dl.fbaipublicfiles.com/senteval/senteval_data"
GOOGLE_BERT_BASE = "https://storage.googleapis.com/bert_models/2018_10_18"

# Google's uncased vocab (the same file in BERT-Base and BERT-Large uncased).
UNCASED_VOCAB_SHA256 = "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"


def wikipedia_sources(language: str = "en", dump: str = "latest", multistream: bool = True) -> list[Source]:
    """The pages-articles dump of `<language>wiki` for `dump` ("latest" or a date like "20240601").

    By default the multistream dump and its index (the byte offset of every bz2 stream), which
    let text formatting give whole streams to every process; both are checked against the
    dump's published md5sums.txt. `multistream=False` fetches the single-stream dump alone.
    """
    wiki = f"{language}wiki"
    base = f"{WIKI_BASE}/{wiki}/{dump}"
    local = f"wikicorpus_{language}.xml.bz2"
    checksums = f"{base}/{wiki}-{dump}-md5sums.txt"
    if not multistream:
        return [
            Source(url=f"{base}/{wiki}-{dump}-pages-articles.xml.bz2", filename=local, md5_list_url=checksums)
        ]
    name = f"{wiki}-{dump}-pages-articles-multistream"
    return [
        Source(url=f"{base}/{name}.xml.bz2", filename=local, md5_list_url=checksums),
        # Named as text formatting looks for it beside the dump (wikipedia.multistream_index_path).
        Source(
            url=f"{base}/{name}-index.txt.bz2",
            filename=multistream_index_path(local),
            md5_list_url=checksums,
        ),
    ]


SQUAD_SOURCES = [
    Source(
        f"{SQUAD_BASE}/train-v1.1.json",
        "v1.1/train-v1.1.json",
        size=30288272,
        sha256="3527663986b8295af4f7fcdff1ba1ff3f72d07d61a20f487cb238a6ef92fd955",
    ),
    Source(
        f"{SQUAD_BASE}/dev-v1.1.json",
        "v1.1/dev-v1.1.json",
        size=4854279,
        sha256="95aa6a52d5d6a735563366753ca50492a658031da74f301ac5238b03966972c9",
    ),
    Source(
        f"{SQUAD_BASE}/train-v2.0.json",
        "v2.0/train-v2.0.json",
        size=42123633,
        sha256="68dcfbb971bd3e96d5b46c7177b16c1a4e7d4bdef19fb204502738552dede002",
    ),
    Source(
        f"{SQUAD_BASE}/dev-v2.0.json",
        "v2.0/dev-v2.0.json",
        size=4370528,
        sha256="80a5225e94905956a6446d296ca1093975c4d3b3260f1d6c8f68bc2ab77182d8",
    ),
]

# GLUE task -> archive name on the GLUE host (the directory inside the zip is the task name).
GLUE_ARCHIVES = {
    "CoLA": "CoLA.zip",
    "SST-2": "SST-2.zip",
    "QQP": "QQP-clean.zip",
    "STS-B": "STS-B.zip",
    "MNLI": "MNLI.zip",
    "QNLI": "QNLIv2.zip",
    "RTE": "RTE.zip",
    "WNLI": "WNLI.zip",
}
GLUE_TASKS = tuple(GLUE_ARCHIVES) + ("MRPC", "diagnostic")
# MRPC is not redistributed in a zip: GLUE's own script builds it from SentEval's copies.
MRPC_SOURCES = [
    Source(
        f"{SENTEVAL_BASE}/msr_paraphrase_train.txt",
        "MRPC/msr_paraphrase_train.txt",
        size=1047044,
        sha256="60a9b09084528f0673eedee2b69cb941920f0b8cd0eeccefc464a98768457f89",
    ),
    Source(
        f"{SENTEVAL_BASE}/msr_paraphrase_test.txt",
        "MRPC/msr_paraphrase_test.txt",
        size=441275,
        sha256="a04e271090879aaba6423d65b94950c089298587d9c084bf9cd7439bd785f784",
    ),
    Source(
        f"{GLUE_BASE}/mrpc_dev_ids.tsv",
        "MRPC/dev_ids.tsv",
        size=6222,
        sha256="971d7767d81b997fd9060ade0ec23c4fc31cbb226a55d1bd4a1bac474eb81dc7",
    ),
]


def glue_sources(tasks=GLUE_TASKS) -> list[Source]:
    unknown = [t for t in tasks if t not in GLUE_TASKS]
    if unknown:
        raise UserError(f"Unknown GLUE task(s) {', '.join(unknown)}; choose from {', '.join(GLUE_TASKS)}.")
    sources = []
    for task in tasks:
        if task == "MRPC":
            sources += MRPC_SOURCES
        elif task == "diagnostic":
            sources.append(Source(f"{GLUE_BASE}/AX.tsv", "diagnostic/diagnostic.tsv"))
        else:
            sources.append(
                Source(
                    f"{GLUE_BASE}/{GLUE_ARCHIVES[task]}",
                    f"archives/{GLUE_ARCHIVES[task]}",
                    extract="zip",
                    extract_to=".",
                )
            )
    return sources


GOOGLE_MODELS = (
    "uncased_L-12_H-768_A-12",
    "uncased_L-24_H-1024_A-16",
    "cased_L-12_H-768_A-12",
    "cased_L-24_H-1024_A-16",
)


def google_weight_sources(models=("uncased_L-12_H-768_A-12",)) -> list[Source]:
    """Google's original (TF1 name-based) checkpoints; each zip holds vocab.txt and bert_config.json."""
    sources = []
    for model in models:
        if model not in GOOGLE_MODELS:
            raise UserError(f"Unknown Google model {model!r}; choose from {', '.join(GOOGLE_MODELS)}.")
        members = ((f"{model}/vocab.txt", UNCASED_VOCAB_SHA256),) if model.startswith("uncased") else ()
        sources.append(
            Source(
                f"{GOOGLE_BERT_BASE}/{model}.zip",
                f"archives/{model}.zip",
                extract="zip",
                extract_to=".",
                member_sha256=members,
            )
        )
    return sources


DATASETS = ("wikicorpus_en", "squad", "glue", "google_pretrained_weights")


def dataset_sources(
    dataset: str,
    *,
    glue_tasks=GLUE_TASKS,
    wiki_dump: str = "latest",
    wiki_multistream: bool = True,
    google_models=("uncased_L-12_H-768_A-12",),
) -> list[Source]:
    if dataset == "wikicorpus_en":
        return wikipedia_sources("en", wiki_dump, wiki_multistream)
    if dataset == "squad":
        return list(SQUAD_SOURCES)
    if dataset == "glue":
        return glue_sources(glue_tasks)
    if dataset == "google_pretrained_weights":
        return google_weight_sources(google_models)
    raise UserError(f"Unknown dataset {dataset!r} for download; choose from {', '.join(DATASETS)}.")


def with_mirror(url: str, mirror: str | None) -> str:
    """Replaces scheme and host of `url` by `mirror` (keeping the path), e.g. a Wikipedia dump mirror."""
    if not mirror:
        return url
    parts = urllib.parse.urlsplit(url)
    base = mirror.rstrip("/")
    return f"{base}{parts.path}" + (f"?{parts.query}" if parts.query else "")


# --- HTTP ----------------------------------------------------------------------------------------
_RETRYABLE = (
    http.client.IncompleteRead,
    http.client.RemoteDisconnected,
    ConnectionError,
    socket.timeout,
    TimeoutError,
    urllib.error.URLError,
    http.client.HTTPException,
)


def _open(url: str, headers: dict, timeout: float):
    request = urllib.request.Request(
        url, headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity", **headers}
    )
    return urllib.request.urlopen(request, timeout=timeout)


def retry(
    attempt, *, attempts: int, backoff: float, retried, max_wait: float = 60, notice=None, sleep=time.sleep
):
    """Calls `attempt()` until it returns, and returns what it returned.

    An error of a type in `retried` is tried again after backoff * 2**(k-1) seconds (at most
    `max_wait`) at its k-th occurrence, `notice(error, k)` called first (a line for the log);
    the error of the last of `attempts` calls propagates. Any other error propagates at once.
    """
    failures = 0
    while True:
        try:
            return attempt()
        except retried as error:
            failures += 1
            if failures >= attempts:
                raise
            if notice is not None:
                notice(error, failures)
        sleep(min(max_wait, backoff * 2 ** (failures - 1)))


def read_small(url: str, timeout: float = 60, retries: int = 3) -> bytes:
    """Fetches a small text file (a checksum list) into memory, with retries."""

    def attempt() -> bytes:
        try:
            with _open(url, {}, timeout) as response:
                return response.read()
        except urllib.error.HTTPError as e:
            if e.code < 500:
                raise DownloadError(
                    f"{url} answered HTTP {e.code} ({e.reason}); check the URL or the dump date."
                ) from None
            raise

    try:
        return retry(attempt, attempts=retries + 1, backoff=0.5, max_wait=30, retried=_RETRYABLE)
    except _RETRYABLE as e:
        raise DownloadError(
            f"Could not fetch {url} after {retries + 1} attempts ({e}); check the network."
        ) from None


def published_md5(
    list_url: str, filename_in_list: str, timeout: float = 60, lists: dict | None = None
) -> str:
    """The md5 of `filename_in_list` in a `<md5>  <name>` checksum list (Wikipedia's md5sums.txt).

    `lists` (url -> text) keeps the lists already fetched, so a dump and its index read one list once.
    """
    lists = {} if lists is None else lists
    if list_url not in lists:
        lists[list_url] = read_small(list_url, timeout).decode("utf-8", "replace")
    text = lists[list_url]
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[1].lstrip("*") == filename_in_list:
            return fields[0].lower()
    raise DownloadError(
        f"The checksum list {list_url} has no entry for {filename_in_list}; the dump may "
        f"still be in progress upstream, try a dated dump with --wiki_dump."
    )


def _file_digest(path: str, algorithm: str) -> str:
    digest = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _verify(path: str, url: str, *, size, sha256, md5) -> None:
    actual_size = os.path.getsize(path)
    if size is not None and actual_size != size:
        raise DownloadError(f"{url}: got {actual_size:,} bytes but expected {size:,}.")
    for algorithm, expected in (("sha256", sha256), ("md5", md5)):
        if expected:
            actual = _file_digest(path, algorithm)
            if actual != expected.lower():
                raise DownloadError(f"{url}: {algorithm} mismatch (expected {expected}, got {actual}).")
            return


def _content_range(value: str | None):
    """Parses 'bytes START-END/TOTAL' (or 'bytes */TOTAL') into (start, total); None for unknown parts."""
    if not value or not value.startswith("bytes "):
        return None, None
    span, _, total = value[6:].partition("/")
    start = None if span == "*" else int(span.split("-")[0])
    return start, (None if total in ("", "*") else int(total))


def fetch(
    url: str,
    dest: str,
    *,
    size: int | None = None,
    sha256: str | None = None,
    md5: str | None = None,
    timeout: float = 60,
    retries: int = 5,
    backoff: float = 1.0,
    progress_factory=None,
    log=None,
) -> dict:
    """Downloads `url` to `dest` resumably and verified; returns {'status', 'bytes', 'resumed_from'}.

    status is "present" (dest already verified), "downloaded", or "resumed" (a previous run's
    .part was continued). Raises DownloadError on an HTTP error, a verification failure (the
    partial file is deleted) or when `retries` reconnections did not finish the transfer (the
    partial file is kept for the next run to resume).
    """
    log = log or (lambda message: print(message, file=sys.stderr, flush=True))
    os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
    if os.path.isfile(dest):
        try:
            _verify(dest, url, size=size, sha256=sha256, md5=md5)
            return {"status": "present", "bytes": os.path.getsize(dest), "resumed_from": 0}
        except DownloadError as e:
            log(f"[download] {dest} does not verify ({e}); downloading it again.")
            os.remove(dest)

    part, meta_path = dest + ".part", dest + ".part.json"
    meta = {}
    if os.path.isfile(part):
        with contextlib.suppress(OSError, ValueError):
            with open(meta_path, encoding="utf-8") as f:
                meta = json.load(f)
        if meta.get("url") != url:
            # A .part from another source (or without its record) cannot be trusted to resume.
            os.remove(part)
            meta = {}
    resumed_from = os.path.getsize(part) if os.path.isfile(part) else 0
    total = meta.get("total")
    progress = None

    def attempt() -> None:
        """One request, appending to `part` from where it stops; returns once `part` is whole."""
        nonlocal meta, total, progress
        while True:
            offset = os.path.getsize(part) if os.path.isfile(part) else 0
            headers = {}
            if offset:
                headers["Range"] = f"bytes={offset}-"
                if meta.get("validator"):
                    headers["If-Range"] = meta["validator"]
            try:
                response = _open(url, headers, timeout)
            except urllib.error.HTTPError as e:
                if e.code == 416 and offset:
                    _, server_total = _content_range(e.headers.get("Content-Range"))
                    if server_total is not None and server_total == offset:
                        total = server_total
                        return  # the .part already holds the whole file
                    os.remove(part)
                    continue
                if e.code < 500 and e.code != 429:
                    raise DownloadError(
                        f"{url} answered HTTP {e.code} ({e.reason}); check the URL, or use --mirror."
                    ) from None
                raise _Interrupted(
                    f"{url} kept failing (HTTP {e.code}); the partial file {part} is kept, re-run to resume."
                ) from None
            except _RETRYABLE as e:
                raise _Interrupted(
                    f"Could not connect to {url} ({e}); the partial file {part} is kept, re-run to resume."
                ) from None

            with response:
                if response.status == 206:
                    start, server_total = _content_range(response.headers.get("Content-Range"))
                    if start != offset:
                        os.remove(part)
                        continue
                    mode = "ab"
                else:
                    # 200: the server ignored the range or the file changed (If-Range): start over.
                    mode, offset = "wb", 0
                    length = response.headers.get("Content-Length")
                    server_total = int(length) if length and length.isdigit() else None
                if server_total is not None:
                    if size is not None and server_total != size:
                        with contextlib.suppress(FileNotFoundError):
                            os.remove(part)
                        raise DownloadError(
                            f"{url}: the server announces {server_total:,} bytes but "
                            f"{size:,} are expected; the source may have changed."
                        )
                    total = server_total
                etag = response.headers.get("ETag")
                validator = (
                    etag if etag and not etag.startswith("W/") else response.headers.get("Last-Modified")
                )
                meta = {"url": url, "validator": validator, "total": total}
                with open(meta_path, "w", encoding="utf-8") as f:
                    json.dump(meta, f)
                if progress is None and progress_factory is not None:
                    progress = progress_factory(os.path.basename(dest), total or size)
                    progress.update(offset)
                try:
                    with open(part, mode) as out:
                        while True:
                            chunk = response.read(CHUNK)
                            if not chunk:
                                break
                            out.write(chunk)
                            if progress is not None:
                                progress.update(len(chunk))
                except _RETRYABLE + (OSError,) as e:
                    if (
                        isinstance(e, OSError)
                        and not isinstance(e, (ConnectionError, TimeoutError))
                        and e.errno is not None
                    ):
                        raise DownloadError(
                            f"Writing {part} failed ({e.strerror}); free disk space or choose another --data_dir."
                        ) from None
                    have, cause = os.path.getsize(part), type(e).__name__
                    raise _Interrupted(
                        f"The transfer of {url} kept breaking (last at {have:,} bytes: {e!r}); the partial "
                        f"file {part} is kept, re-run to resume.",
                        notice=lambda failures: (
                            f"[download] connection lost at {have:,} bytes ({cause}); resuming "
                            f"({failures}/{retries})."
                        ),
                    ) from None
            have = os.path.getsize(part)
            if total is not None and have < total:
                raise _Interrupted(
                    f"The transfer of {url} stopped at {have:,} of {total:,} bytes; the partial file "
                    f"{part} is kept, re-run to resume.",
                    notice=lambda _: (
                        f"[download] transfer ended early at {have:,} of {total:,} bytes; resuming."
                    ),
                )
            return

    def notice(error, failures) -> None:
        if error.notice is not None:
            log(error.notice(failures))

    retry(attempt, attempts=retries + 1, backoff=backoff, retried=_Interrupted, notice=notice)

    if progress is not None:
        progress.close()
    try:
        _verify(part, url, size=size if size is not None else total, sha256=sha256, md5=md5)
    except DownloadError as e:
        for leftover in (part, meta_path):
            with contextlib.suppress(FileNotFoundError):
                os.remove(leftover)
        raise DownloadError(f"{e} The partial download was deleted; re-run to fetch it again.") from None
    commit(part, dest)
    with contextlib.suppress(FileNotFoundError):
        os.remove(meta_path)
    return {
        "status": "resumed" if resumed_from else "downloaded",
        "bytes": os.path.getsize(dest),
        "resumed_from": resumed_from,
    }


# --- Datasets ------------------------------------------------------------------------------------
def _extract_zip(archive: str, target_dir: str, member_sha256=()) -> list[str]:
    """Extracts into a temporary sibling directory, checks members, then moves each top entry in place."""
    staging = temporary_name(os.path.join(target_dir, f"extract_{os.path.basename(archive)}"))
    shutil.rmtree(staging, ignore_errors=True)
    try:
        with zipfile.ZipFile(archive) as z:
            for name in z.namelist():
                resolved = os.path.realpath(os.path.join(staging, name))
                if not resolved.startswith(os.path.realpath(staging) + os.sep):
                    raise DownloadError(f"{archive} holds an unsafe path {name!r}; refusing to extract it.")
            z.extractall(staging)
    except zipfile.BadZipFile as e:
        shutil.rmtree(staging, ignore_errors=True)
        raise DownloadError(f"{archive} is not a valid zip file ({e}); delete it and re-run.") from None
    for member, expected in member_sha256:
        actual = (
            sha256_file(os.path.join(staging, member))
            if os.path.isfile(os.path.join(staging, member))
            else None
        )
        if actual != expected:
            shutil.rmtree(staging, ignore_errors=True)
            raise DownloadError(f"{member} in {archive} has sha256 {actual}, expected {expected}.")
    moved = []
    for entry in sorted(os.listdir(staging)):
        if entry == "__MACOSX":
            continue
        commit(os.path.join(staging, entry), os.path.join(target_dir, entry))
        moved.append(entry)
    shutil.rmtree(staging, ignore_errors=True)
    return moved


def format_mrpc(mrpc_dir: str) -> list[str]:
    """Builds GLUE's MRPC train.tsv / dev.tsv / test.tsv from SentEval's files (GLUE's own recipe)."""
    with open(os.path.join(mrpc_dir, "dev_ids.tsv"), encoding="utf-8") as f:
        dev_ids = {tuple(line.strip().split("\t")) for line in f if line.strip()}
    outputs = {name: os.path.join(mrpc_dir, name) for name in ("train.tsv", "dev.tsv", "test.tsv")}
    with (
        open(os.path.join(mrpc_dir, "msr_paraphrase_train.txt"), encoding="utf-8-sig") as src,
        atomic_write(outputs["train.tsv"], newline=None) as train,
        atomic_write(outputs["dev.tsv"], newline=None) as dev,
    ):
        header = src.readline()
        train.write(header)
        dev.write(header)
        for row in src:
            fields = row.rstrip("\r\n").split("\t")
            if len(fields) != 5:
                continue
            (dev if (fields[1], fields[2]) in dev_ids else train).write("\t".join(fields) + "\n")
    with (
        open(os.path.join(mrpc_dir, "msr_paraphrase_test.txt"), encoding="utf-8-sig") as src,
        atomic_write(outputs["test.tsv"], newline=None) as test,
    ):
        src.readline()
        test.write("index\t#1 ID\t#2 ID\t#1 String\t#2 String\n")
        for index, row in enumerate(src):
            fields = row.rstrip("\r\n").split("\t")
            if len(fields) == 5:
                test.write("\t".join([str(index)] + fields[1:]) + "\n")
    return list(outputs)


def download_dataset(
    dataset: str,
    root: str,
    *,
    sources: list[Source] | None = None,
    mirror: str | None = None,
    timeout: float = 60,
    retries: int = 5,
    progress_factory=None,
    log=None,
    **source_options,
) -> dict:
    """Fetches every source of `dataset` into <root>/download/<dataset>; returns a summary dict.

    `sources` overrides the built-in list (tests, private mirrors); `mirror` rewrites each URL's
    host. Verified files recorded in the directory's manifest are skipped without any request.
    """
    log = log or (lambda message: print(message, file=sys.stderr, flush=True))
    target = paths.download_dir(root, dataset)
    ensure_writable_dir(target, "download directory")
    sources = sources if sources is not None else dataset_sources(dataset, **source_options)
    stage = Stage(
        target, "download", {"dataset": dataset}, Runtime(progress_factory=progress_factory, log=log)
    )
    urls = {source.filename: source.url for source in sources}
    stats = {"files": 0, "skipped": 0, "downloaded": 0, "resumed": 0, "bytes": 0}
    checksum_lists: dict = {}
    start = time.monotonic()

    def skip(source):
        stats["files"] += 1
        stats["skipped"] += 1
        stats["bytes"] += stage.manifest.outputs[source.filename]["bytes"]
        log(f"[download] {source.filename}: present and verified, skipped.")

    def fetch_todo(run):
        for source in sources:
            if source.filename not in run.todo:
                skip(source)
                continue
            url = with_mirror(source.url, mirror)
            dest = os.path.join(target, source.filename)
            stats["files"] += 1
            md5 = source.md5
            if not md5 and not source.sha256 and source.md5_list_url:
                listed_name = os.path.basename(urllib.parse.urlsplit(source.url).path)
                md5 = published_md5(
                    with_mirror(source.md5_list_url, mirror), listed_name, timeout, checksum_lists
                )
            log(f"[download] {url} -> {dest}")
            result = fetch(
                url,
                dest,
                size=source.size,
                sha256=source.sha256,
                md5=md5,
                timeout=timeout,
                retries=retries,
                progress_factory=progress_factory,
                log=log,
            )
            if source.extract == "zip":
                extracted = _extract_zip(
                    dest, os.path.join(target, source.extract_to or "."), source.member_sha256
                )
                log(f"[download] extracted {', '.join(extracted)} from {source.filename}")
            counts = {"url": source.url, "md5": md5} if md5 else {"url": source.url}
            stage.land({source.filename: counts})
            stats[result["status"] if result["status"] != "present" else "skipped"] += 1
            stats["bytes"] += result["bytes"]

    def same_url(filename, counts):
        return counts.get("url") == urls[filename]

    # A download resumes its own `.part` files: no folder is cleared of temporaries.
    if stage.run_on_ranks(urls, fetch_todo, current=same_url, folders=()).skipped:
        for source in sources:
            skip(source)
    mrpc_dir = os.path.join(target, "MRPC")
    if all(os.path.isfile(os.path.join(mrpc_dir, s.filename.split("/", 1)[1])) for s in MRPC_SOURCES):
        format_mrpc(mrpc_dir)
    stats["seconds"] = round(time.monotonic() - start, 2)
    stats["directory"] = target
    return stats
