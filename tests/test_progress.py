"""The one progress display (common/progress.py): tqdm's bar on a terminal, plain lines in logs."""

import io
import re

from common.progress import Progress, summary


def test_plain_lines_in_logs_carry_fraction_amounts_rate_and_eta():
    stream = io.StringIO()
    with Progress("sharding", total=200e6, stream=stream, is_tty=False, log_interval=0) as bar:
        bar.update(50e6)
        bar(50e6)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3 and "\r" not in stream.getvalue()
    assert re.fullmatch(r"sharding:  50% 100M/200M \[\d\d:\d\d<\d\d:\d\d, [0-9.]+[kMGTP]?B/s\]", lines[1])
    assert lines[2].startswith("sharding:  50% 100M/200M")  # the closing line


def test_no_line_before_the_interval_and_none_when_disabled():
    stream = io.StringIO()
    with Progress("x", total=10, unit="it", stream=stream, is_tty=False, log_interval=3600) as bar:
        bar.update(4)
    assert stream.getvalue().splitlines() == [stream.getvalue().splitlines()[-1]]  # only the closing line
    assert stream.getvalue().startswith("x:  40% 4/10")
    quiet = io.StringIO()
    with Progress("x", total=10, stream=quiet, is_tty=False, log_interval=0, enabled=False) as bar:
        bar.update(4)
    assert quiet.getvalue() == "" and bar.done == 4


def test_terminal_bar_redraws_in_place_with_counts():
    tty = io.StringIO()
    with Progress("vocab", total=10, unit="docs", stream=tty, is_tty=True) as bar:
        bar.update(5)
    text = tty.getvalue()
    assert text.startswith("\rvocab:   0%") and "\rvocab:  50%|#####     | 5/10" in text
    assert text.endswith("\n")


def test_unknown_total_shows_the_amount_and_rate():
    stream = io.StringIO()
    with Progress("read", stream=stream, is_tty=False, log_interval=0) as bar:
        bar.update(3e6)
    assert re.match(r"read: 3\.00MB \[\d\d:\d\d, [0-9.]+[kMGTP]?B/s\]", stream.getvalue())


def test_summary_is_one_line_with_separators():
    assert (
        summary("x", {"documents": 1234, "seconds": 1.5}, stream=io.StringIO())
        == "[x] done: documents=1,234  seconds=1.50"
    )
