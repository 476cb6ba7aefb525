"""How every root-level entry point runs: absl flags in a fresh FlagValues, one-sentence errors.

    def define_flags(fv): flags.DEFINE_string("input_file", None, "...", flag_values=fv) ...
    def run(FLAGS) -> int: ... library calls with plain values ...
    if __name__ == "__main__": sys.exit(cli.main(define_flags, run, sys.argv, doc=__doc__))

A fresh FlagValues per call (not absl's global FLAGS) lets tests call `main` in-process any
number of times, and lets several entry points that define the same flag names (--vocab_file,
--max_seq_length) be imported into one process. Flag errors print usage hints and exit 2; a
UserError (a problem the user can fix) prints its one sentence and exits 2; Ctrl-C exits 130.
"""

from __future__ import annotations

import os
import sys

from common.errors import UserError

HELP_FLAGS = ("-h", "--help", "-help", "--helpshort", "--helpfull")


def parse(define_flags, argv):
    """A FlagValues with the entry point's flags, parsed from argv (argv[0] is the program)."""
    from absl import flags

    flag_values = flags.FlagValues()
    define_flags(flag_values)
    rest = flag_values(list(argv))
    if len(rest) > 1:
        raise flags.Error(f"unexpected arguments: {' '.join(rest[1:])}")
    return flag_values


def main(define_flags, run, argv=None, doc: str | None = None, prog: str | None = None) -> int:
    """Parses `argv` with `define_flags`, calls `run(flag_values)`, returns the exit status."""
    from absl import flags

    argv = list(sys.argv if argv is None else argv)
    prog = prog or os.path.basename(argv[0] if argv else "") or "main"
    if any(a in HELP_FLAGS for a in argv[1:]):
        flag_values = flags.FlagValues()
        define_flags(flag_values)
        print((doc or "").strip() + "\n\nFlags:\n" + flag_values.get_help())
        return 0
    try:
        flag_values = parse(define_flags, argv)
    except flags.Error as e:
        print(f"{prog}: error: {e} (see --help)", file=sys.stderr)
        return 2
    try:
        return int(run(flag_values) or 0)
    except UserError as e:
        print(f"{prog}: error: {e}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        print(
            f"{prog}: interrupted; completed outputs are kept, re-run the same command to continue.",
            file=sys.stderr,
            flush=True,
        )
        return 130


def required(flag_values, *names) -> None:
    """UserError naming the first of `names` that was not given."""
    for name in names:
        if flag_values[name].value in (None, ""):
            raise UserError(f"--{name} is required.")


def precision_and_horovod(flag_values, environ, launched_ranks, default_precision: str) -> tuple[str, bool]:
    """(--precision, --use_horovod) as the training entry points resolve them: NVIDIA's --amp
    means fp16 (a contradicting --precision is a UserError); --use_horovod defaults to on when a
    launcher started more than one rank (`launched_ranks(environ)`)."""
    precision = flag_values.precision
    if flag_values.amp:
        if precision not in (None, "fp16"):
            raise UserError(f"--amp means --precision=fp16, but --precision={precision} was given.")
        precision = "fp16"
    use_horovod = flag_values.use_horovod
    if use_horovod is None:
        use_horovod = launched_ranks(environ) > 1
    return precision or default_precision, use_horovod
