"""data/corpus/parallel.py: the ordered pool map, its per-worker initializer and progress relay."""

import os

import pytest

from data.corpus.parallel import bounded_imap, report_progress

pytestmark = pytest.mark.process

_STATE = {}


def _remember_offset(offset):
    _STATE["offset"] = offset
    _STATE["pid"] = os.getpid()


def _offset_square(x):
    report_progress(x)
    return x * x + _STATE["offset"], _STATE["pid"]


class _Tally:
    def __init__(self):
        self.total = 0

    def update(self, n):
        self.total += n


@pytest.mark.parametrize("n_processes", [1, 2])
def test_results_in_order_after_the_initializer_with_every_report_counted(n_processes):
    tally = _Tally()
    items = list(range(40))
    results = list(
        bounded_imap(
            _offset_square,
            items,
            n_processes,
            chunk=3,
            max_chunks_in_flight=1,
            initializer=_remember_offset,
            initargs=(1000,),
            progress=tally,
        )
    )
    assert [value for value, _ in results] == [x * x + 1000 for x in items]
    # Every worker ran the initializer itself: none is this process when there is a pool.
    pids = {pid for _, pid in results}
    assert (pids == {os.getpid()}) if n_processes == 1 else (os.getpid() not in pids)
    assert tally.total == sum(items)
    report_progress(5)  # outside a map: reports go nowhere
    assert tally.total == sum(items)
