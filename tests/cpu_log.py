"""Sums a BERT_TEST_CPU_LOG file (tests/conftest.py writes it: one JSON line per test, which also
names the test's process and its start, for drawing the run's schedule) by file and by test, the
largest CPU first:

    BERT_TEST_CPU_LOG=/tmp/cpu.jsonl bash scripts/test.sh
    python tests/cpu_log.py /tmp/cpu.jsonl [--top N]
"""

import argparse
import collections
import json


def read(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def table(title: str, rows: list[tuple[str, float, float, int]]) -> str:
    lines = [title, f"{'CPU s':>8} {'wall s':>8} {'tests':>6}  name"]
    lines += [f"{cpu:8.1f} {wall:8.1f} {n:6d}  {name}" for name, cpu, wall, n in rows]
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("log", help="the file BERT_TEST_CPU_LOG named")
    parser.add_argument("--top", type=int, default=25, help="rows of each table (default 25)")
    args = parser.parse_args(argv)
    entries = read(args.log)
    files = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for e in entries:
        total = files[e["test"].split("::")[0]]
        total[0] += e["self"] + e["children"]
        total[1] += e["wall"]
        total[2] += 1
    cpu = sum(e["self"] + e["children"] for e in entries)
    own = sum(e["self"] for e in entries)
    print(f"{len(entries)} tests, {cpu:.0f} CPU s ({own:.0f} in the pytest processes themselves)\n")
    by_file = sorted(((name, *t) for name, t in files.items()), key=lambda r: -r[1])
    print(table("by file", by_file[: args.top]) + "\n")
    by_test = sorted(
        ((e["test"], e["self"] + e["children"], e["wall"], 1) for e in entries), key=lambda r: -r[1]
    )
    print(table("by test", by_test[: args.top]))


if __name__ == "__main__":
    main()
