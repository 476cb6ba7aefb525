"""The process-pool map the data stages share (formatting pages and streams, writing TFRecord
files), and the progress its workers report to the parent's display. Sharding does not map: its
workers own whole shards (data/corpus/sharding.py)."""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import queue
import threading

# Where report_progress sends amounts in this process: the display's update (no pool), the queue
# to the parent (a pool worker), or nowhere.
_report = None


def report_progress(amount: float) -> None:
    """Advances the `progress` of the bounded_imap running the caller, in whichever process it runs."""
    if _report is not None:
        _report(amount)


def bounded_imap(
    function,
    items,
    n_processes: int,
    chunk: int = 64,
    max_chunks_in_flight: int = 4,
    initializer=None,
    initargs: tuple = (),
    progress=None,
):
    """Ordered parallel map whose input is consumed at most `max_chunks_in_flight` chunks ahead.

    Pool.imap reads its whole input as fast as it can; with a 20 GB dump and slower workers that
    would hold the dump in memory. Here at most (n_processes * max_chunks_in_flight) chunks wait.
    `initializer(*initargs)` runs once in every worker (in this process when n_processes <= 1)
    before its first item; `function` advances `progress` (an object with update(n)) through
    `report_progress`.
    """
    global _report
    if n_processes <= 1:
        if initializer is not None:
            initializer(*initargs)
        outer, _report = _report, progress.update if progress is not None else None
        try:
            yield from map(function, items)
        finally:
            _report = outer
        return
    ctx = multiprocessing.get_context("spawn")
    amounts = ctx.Queue() if progress is not None else None
    iterator = iter(items)
    with (
        _relayed(amounts, progress),
        ctx.Pool(n_processes, initializer=_init_worker, initargs=(amounts, initializer, initargs)) as pool,
    ):
        pending = []

        def submit():
            batch = list(itertools.islice(iterator, chunk))
            if batch:
                pending.append(pool.map_async(_map_chunk, [(function, batch)]))
            return bool(batch)

        more = True
        while more and len(pending) < n_processes * max_chunks_in_flight:
            more = submit()
        while pending:
            results = pending.pop(0).get()[0]
            if more:
                more = submit()
            yield from results
        # Workers that exit on their own flush what they put on `amounts` (a queue's feeder thread
        # sends it after put returns); the pool's terminate at the end of the block would not wait.
        pool.close()
        pool.join()


@contextlib.contextmanager
def _relayed(amounts, progress):
    """Moves what the workers put on `amounts` to `progress`, from a thread of this process, until
    the block ends and the queue is empty (when the block raises: for at most a second)."""
    if amounts is None:
        yield
        return
    stop = threading.Event()

    def drain():
        while not stop.is_set() or not amounts.empty():
            try:
                progress.update(amounts.get(timeout=0.1))
            except queue.Empty:
                continue

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    try:
        yield
    except BaseException:
        # The pool was terminated: a worker killed while its queue's feeder was writing can
        # leave half a report in the pipe, whose read would block for ever. The reports do not
        # matter any more; the daemon thread is left behind after a short wait.
        stop.set()
        thread.join(timeout=1.0)
        raise
    stop.set()
    thread.join()  # the workers exited on their own: every report is whole


def _init_worker(amounts, initializer, initargs):
    global _report
    if amounts is not None:
        _report = amounts.put
    if initializer is not None:
        initializer(*initargs)


def _map_chunk(args):
    function, batch = args
    return [function(item) for item in batch]
