"""The process-pool map the corpus stages share (formatting pages, segmenting documents)."""

from __future__ import annotations

import itertools
import multiprocessing


def bounded_imap(function, items, n_processes: int, chunk: int = 64, max_chunks_in_flight: int = 4):
    """Ordered parallel map whose input is consumed at most `max_chunks_in_flight` chunks ahead.

    Pool.imap reads its whole input as fast as it can; with a 20 GB dump and slower workers that
    would hold the dump in memory. Here at most (n_processes * max_chunks_in_flight) chunks wait.
    """
    if n_processes <= 1:
        yield from map(function, items)
        return
    ctx = multiprocessing.get_context("spawn")
    iterator = iter(items)
    with ctx.Pool(n_processes) as pool:
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


def _map_chunk(args):
    function, batch = args
    return [function(item) for item in batch]
