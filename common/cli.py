"""How every root-level entry point runs: absl flags in a fresh FlagValues, one-sentence errors.

    def define_flags(fv): flag = cli.Flags(fv); flag("input_file", "...", str) ...
    def run(FLAGS) -> int: ... library calls with plain values ...
    main = cli.entry_point(define_flags, run, __doc__, PROG)
    if __name__ == "__main__": sys.exit(main())

A fresh FlagValues per call (not absl's global FLAGS) lets tests call `main` in-process any
number of times, and lets several entry points that define the same flag names (--vocab_file,
--max_seq_length) be imported into one process. Flag errors print usage hints and exit 2; a
UserError (a problem the user can fix) prints its one sentence and exits 2; a run stopped for a
preemption (common.errors.Preempted) exits 75 (re-run to continue); Ctrl-C exits 130;
`--version` prints the project's version (common/version.py). The first
import of TensorFlow leaves out its start-up notes (common/tensorflow_startup.py).

Defining flags: `Flags(fv, settings=SettingsDataclass)` is the one helper the entry points use.
A setting is declared once, on its dataclass field (`setting(kind, default, help)`); a flag of
that name takes its kind, default and help from there, and an entry point passes only what is
its own.

    flag = cli.Flags(fv, settings=PretrainingSettings, defaults={"learning_rate": 2e-5})
    flag("learning_rate")                                     # kind, default and help: the field's
    flag("max_seq_length", "Tokens per sequence.")           # this entry point's own help text
    flag("amp", "NVIDIA's name for --precision=fp16.", bool, default=False)
    flag("optimizer_type", "Which optimizer.", OPTIMIZERS)   # a collection of names: an enum
    flag("search_space", "YAML/JSON file of the space.", str)
    flag.alias("horovod", "use_horovod")

`kind` is a name from common/kinds.py ("count", "steps", "rate", "epochs", "positive",
"proportion", "fraction", "bool", "precision"), a Python type (str, int, float, bool) or a collection of choices; left out, it is
the settings field's metadata["kind"] (see `setting`). A flag of a kinds.py kind gets a validator
from that table, so a bad value stops at parse time (exit 2) with `refusal`'s sentence, e.g.
"--learning_rate must be a number in (0, 1] (got 2.0)": the sentence the jobs' settings checks
give library callers for the same value. `default` left out: `defaults`, else the settings
field's default, else None. `help_text` left out: the field's metadata["help"].
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys

from common.errors import PREEMPTED_EXIT_STATUS, Preempted, UserError
from common.kinds import KINDS
from common.tensorflow_startup import quiet_startup
from common.version import version

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
    if "--version" in argv[1:]:
        print(f"{prog} {version()}")
        return 0
    quiet_startup()
    if any(a in HELP_FLAGS for a in argv[1:]):
        flag_values = flags.FlagValues()
        define_flags(flag_values)
        print((doc or "").strip() + "\n\nFlags:\n" + flag_values.get_help())
        return 0
    try:
        flag_values = parse(define_flags, argv)
    except flags.Error as e:
        # absl prefixes a validator's sentence with "flag --name=value: "; ours names both already.
        message = re.sub(r"^flag --(\w+)=.*?: (?=--\1 )", "", str(e), flags=re.S)
        print(f"{prog}: error: {message} (see --help)", file=sys.stderr)
        return 2
    try:
        return int(run(flag_values) or 0)
    except UserError as e:
        print(f"{prog}: error: {e}", file=sys.stderr, flush=True)
        return 2
    except Preempted as e:
        print(f"{prog}: {e}", file=sys.stderr, flush=True)
        return PREEMPTED_EXIT_STATUS
    except OSError as e:
        # A full, read-only or vanished disk met outside a checkpoint save (a log line, an output
        # file): one sentence, not a traceback; other OS errors stay what they are.
        from common.files import STORAGE_ERRNOS, describe_write_error

        if e.errno not in STORAGE_ERRNOS:
            raise
        where = os.path.dirname(os.path.abspath(e.filename)) if e.filename else os.getcwd()
        print(
            f"{prog}: error: could not write {e.filename or 'an output'} ({describe_write_error(e, where)}); "
            "completed outputs are kept: fix the storage, then re-run the same command to continue.",
            file=sys.stderr,
            flush=True,
        )
        return 2
    except KeyboardInterrupt:
        print(
            f"{prog}: interrupted; completed outputs are kept, re-run the same command to continue.",
            file=sys.stderr,
            flush=True,
        )
        return 130


def entry_point(define_flags, run, doc: str | None, prog: str):
    """The `main(argv=None) -> exit status` of a root entry point: `argv` without the program
    name, sys.argv[1:] when None (tests call main([...]) in-process)."""

    def entry(argv=None) -> int:
        return main(define_flags, run, [prog, *(sys.argv[1:] if argv is None else argv)], doc=doc, prog=prog)

    return entry


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


def define_job_flags(flag) -> None:
    """The flags every training job means the same by (training.job.JobSettings' fields, each
    with its kind, default and help declared there): run_pretraining.py and finetuning_cli.py
    define them here and add those whose meaning is their own (output_dir, init_checkpoint, the
    model files, do_train ...). `flag` is a Flags over the job's settings dataclass. --precision,
    --use_horovod, --bin_size and --trace_ahead default to None here: resolved later (--amp, the
    launched ranks, training/length_bins.py, the XLA cache in use)."""
    flag("learning_rate")
    flag("num_accumulation_steps")
    flag("precision", default=None)
    flag("amp", "NVIDIA's name for --precision=fp16.", bool, default=False)
    flag("use_xla")
    flag("trace_ahead", default=None)
    flag("use_horovod", default=None)
    flag.alias("horovod", "use_horovod")
    flag("bin_size", default=None)
    for name in (
        "save_checkpoints_steps",
        "save_checkpoints_minutes",
        "keep_checkpoints",
        "log_every_n_steps",
        "seed",
    ):
        flag(name)
    flag("deterministic")
    flag("worker_timeout_seconds")


def job_settings(flag_values, settings_class, environ, launched_ranks, **values):
    """A training job's settings dataclass from its entry point's parsed flags: every field that
    is a flag, --precision and --use_horovod resolved (`precision_and_horovod`), then `values`."""
    fields = dataclasses.fields(settings_class)
    precision, use_horovod = precision_and_horovod(
        flag_values, environ, launched_ranks, next(f.default for f in fields if f.name == "precision")
    )
    resolved = {f.name: flag_values[f.name].value for f in fields if f.name in flag_values}
    resolved.update(precision=precision, use_horovod=use_horovod, **values)
    return settings_class(**resolved)


def setting(kind, default, help: str | None = None, none_means=None):
    """A settings dataclass field declared once: its kind (a common/kinds.py name, checked by
    `Flags`' validator and by `check_settings`; or a Python type), its default and the help text
    of its flag, which `Flags` and the launchers' settings (launch/engine.py) read. `none_means`:
    what a None value resolves to, told in the flag's help ("Default 64.")."""
    if isinstance(kind, str) and kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; common/kinds.py has {', '.join(KINDS)}.")
    return dataclasses.field(default=default, metadata={"kind": kind, "help": help, "none_means": none_means})


def redefault(settings_class, name: str, default):
    """`settings_class`'s field `name` (its kind and help) with another default: the field of a
    settings dataclass that changes a default of the one it extends."""
    field = next(f for f in dataclasses.fields(settings_class) if f.name == name)
    return dataclasses.field(default=default, metadata=field.metadata)


def refusal(name: str, kind, value) -> str | None:
    """The sentence refusing `value` for --name as `kind` (a common/kinds.py name, or a tuple or
    list of the choices); None when it is accepted, or when `kind` is a Python type (absl's flag
    parser checks those). None (an optional setting left out) is always accepted."""
    if value is None:
        return None
    if isinstance(kind, str):
        return None if KINDS[kind].accepts(value) else f"--{name} must be {KINDS[kind].rule} (got {value!r})."
    if isinstance(kind, (tuple, list)) and value not in kind:
        return f"--{name} must be one of {', '.join(kind)} (got {value!r})."
    return None


def check_settings(settings) -> None:
    """UserError with `refusal`'s sentence for the first field of a settings dataclass whose
    metadata["kind"] refuses its value: the check library callers get, who build the dataclass
    without flags."""
    for field in dataclasses.fields(settings):
        message = refusal(field.name, field.metadata.get("kind"), getattr(settings, field.name))
        if message:
            raise UserError(message)


_DEFINE_BY_TYPE = {str: "DEFINE_string", int: "DEFINE_integer", float: "DEFINE_float", bool: "DEFINE_bool"}
_TYPE_OF_KIND = {
    "count": int,
    "steps": int,
    "rate": float,
    "epochs": float,
    "positive": float,
    "proportion": float,
    "fraction": float,
    "bool": bool,
    "precision": str,
}


class Flags:
    """Defines flags on `fv` (see the module docstring): `flag(name, help_text, kind=None,
    default=...)`, `flag.alias(alias, name)`."""

    _UNSET = object()

    def __init__(self, fv, settings=None, defaults: dict | None = None):
        self.fv = fv
        self.fields = {f.name: f for f in dataclasses.fields(settings)} if settings else {}
        self.defaults = dict(defaults or {})

    def _default(self, name):
        if name in self.defaults:
            return self.defaults[name]
        field = self.fields.get(name)
        if field is None or field.default is dataclasses.MISSING:
            return None
        return field.default

    def __call__(self, name: str, help_text: str | None = None, kind=None, default=_UNSET) -> None:
        from absl import flags

        field = self.fields.get(name)
        if help_text is None:
            help_text = field.metadata.get("help") if field else None
            if help_text is None:
                raise ValueError(f"--{name}: pass its help text; the settings give it none.")
            if field.metadata.get("none_means") is not None:
                help_text += f" Default {field.metadata['none_means']}."
        if kind is None:
            kind = field.metadata.get("kind") if field else None
            if kind is None:
                raise ValueError(f"--{name}: pass its kind; the settings give it none.")
        default = self._default(name) if default is self._UNSET else default
        if isinstance(kind, str):
            getattr(flags, _DEFINE_BY_TYPE[_TYPE_OF_KIND[kind]])(
                name, default, help_text, flag_values=self.fv
            )
            self._validate(name, kind)
        elif isinstance(kind, type):
            getattr(flags, _DEFINE_BY_TYPE[kind])(name, default, help_text, flag_values=self.fv)
        else:
            flags.DEFINE_enum(name, default, list(kind), help_text, flag_values=self.fv)

    def _validate(self, name: str, kind: str) -> None:
        from absl import flags

        def check(value) -> bool:
            message = refusal(name, kind, value)
            if message:
                raise flags.ValidationError(message)
            return True

        flags.register_validator(name, check, flag_values=self.fv)

    def alias(self, alias: str, name: str) -> None:
        from absl import flags

        flags.DEFINE_alias(alias, name, flag_values=self.fv)
