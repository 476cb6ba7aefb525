"""The fault soak as a benchmark: tools/fault_soak.py's seeded faults through horovodrun with two
workers, its table, verdict and goodput recorded.

    .venv/bin/python -m bench fault_soak --record              # 10 faults, seed 1 (~10 min on 2 cores)
    .venv/bin/python -m bench fault_soak --faults 20 --seed 2 -- --use_xla=false

The tiny model (L2/H32) makes an update tens of milliseconds, so goodput here measures what the
faults and the restarts cost against start-up; on a real model the same restarts weigh less. A
soak whose verdict fails (not bit-identical, something lost, a process left running) exits 1 and
records nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tools import fault_soak  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench fault_soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--faults", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--launcher", default=fault_soak.DEFAULT_LAUNCHER)
    parser.add_argument("extra", nargs="*", help="flags for every run_pretraining.py run (after --)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fault_soak_") as work:
        return fault_soak.main(
            [
                "--work_dir", os.path.join(work, "soak"), "--faults", str(args.faults), "--seed", str(args.seed),
                "--launcher", args.launcher, "--", *args.extra,
            ]
        )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
