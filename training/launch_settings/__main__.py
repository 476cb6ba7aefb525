"""`python -m training.launch_settings plan ...|verify ...`: the pretraining launchers' settings,
for scripts/pretraining_common.sh (the library is training/launch_settings/__init__.py)."""

import os
import sys

from common.errors import UserError
from training.launch_settings import SETTINGS, UsageError, plan, verify_phase1_checkpoint


def main(argv=None, environ=None) -> int:
    """`plan SCRIPT both|1|2 PLAN_FILE PYTHON ARGS...` or `verify DIR STEPS WAIT_S` (for the shell).
    PYTHON is the interpreter the workers run (the shell's resolved one)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    environ = dict(os.environ if environ is None else environ)
    repo_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    script = argv[1] if len(argv) > 1 and argv[0] == "plan" else "run_pretraining_lamb.sh"
    try:
        if argv[:1] == ["plan"] and len(argv) >= 5:
            return plan(script, argv[2], argv[3], argv[5:], environ, repo_root, python=argv[4])
        if argv[:1] == ["verify"] and len(argv) == 4:
            verify_phase1_checkpoint(argv[1], int(argv[2]), float(argv[3]))
            return 0
        print(
            "usage: python -m training.launch_settings plan SCRIPT both|1|2 PLAN_FILE PYTHON ARGS... | "
            "verify DIR STEPS WAIT_S",
            file=sys.stderr,
        )
        return 2
    except UsageError as e:
        print(f"{script}: error: {e}", file=sys.stderr)
        print(
            f"usage: {script} [up to {len(SETTINGS)} positional arguments] [--NAME=VALUE ...] "
            f"[--preset NAME|FILE] [--dry_run]   (--help lists them)",
            file=sys.stderr,
        )
        return 2
    except UserError as e:
        print(f"{script}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
