"""`python -m bench NAME [options]`: runs the benchmark bench/NAME.py with its options (`--help`
lists them); `python -m bench` lists the benchmarks. `python bench/NAME.py [options]` runs the same.

`python -m bench NAME --record [options]` also saves the tables it prints, with what produced them,
as its record in bench/results/NAME.json (bench/records.py); `python -m bench report` writes
docs/performance.md from the records (bench/report.py)."""

from __future__ import annotations

import importlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
NOT_BENCHES = ("harness", "fixtures", "records", "report")  # the modules every benchmark shares


def names() -> list[str]:
    return sorted(
        name[: -len(".py")]
        for name in os.listdir(HERE)
        if name.endswith(".py") and not name.startswith("_") and name[: -len(".py")] not in NOT_BENCHES
    )


def summary(name: str) -> str:
    """The first paragraph of bench/NAME.py's docstring, cut short, read without importing it."""
    with open(os.path.join(HERE, f"{name}.py"), encoding="utf-8") as f:
        text = f.read()
    start = text.find('"""') + 3
    first = " ".join(text[start : text.find("\n\n", start)].split())
    return first if len(first) <= 96 else first[:93].rstrip() + "..."


def usage() -> str:
    width = max(map(len, names()))
    lines = [f"  {name:<{width}}  {summary(name)}" for name in names()]
    return (
        "usage: python -m bench NAME [--record] [options]   (NAME --help for its options)\n"
        "       python -m bench report   (writes docs/performance.md from bench/results/)\n\n"
        + "\n".join(lines)
    )


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if argv[0] == "report":
        from bench import report

        return report.main(argv[1:])
    name = argv[0].removesuffix(".py")
    if name not in names():
        print(f"python -m bench: no benchmark named {argv[0]!r}.\n\n{usage()}", file=sys.stderr)
        return 2
    options = [arg for arg in argv[1:] if arg != "--record"]
    sys.argv = [f"python -m bench {name}", *options]  # argparse's prog, and a child's flag check
    main = importlib.import_module(f"bench.{name}").main
    if "--record" in argv[1:] and not {"-h", "--help"} & set(options):
        from bench import harness

        return harness.recorded(name, options, main)
    return main(options) or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
