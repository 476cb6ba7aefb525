"""The launcher engine: a launcher is a table of settings (`Launcher`); `plan_launch` parses what
the user typed, checks it, prints the usage or the resolved settings, asks the launcher for its
commands, checks its inputs and writes the steps that launch/runner.py runs.

A problem with an argument raises UsageError (printed with the usage line, exit 2); a problem
with an input (a missing file) raises UserError (one sentence, exit 2). Everything here is plain
Python on plain values: the input checks read records as bytes (data/pretraining/schema.check_file),
without TensorFlow.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import time
from collections.abc import Callable

from common.errors import UserError
from common.kinds import KINDS
from launch.workers import UsageError, Workers

# Flags after `--` that are another name for a flag a launcher sets.
FLAG_ALIASES = {
    "amp": "precision",
    "horovod": "use_horovod",
    "input_files_dir": "input_files",
    "eval_files_dir": "eval_files",
}
# Kinds whose rule reads better with the setting's own default as an example.
_WITH_EXAMPLE = ("rate", "epochs", "positive", "proportion", "fraction")


@dataclasses.dataclass(frozen=True)
class Setting:
    """One setting: positional (in NVIDIA's order) unless `positional` is False.

    kind: a common/kinds.py kind, or "model" (a configs/bert_<name>.json), "choice" (one of
    `choices`), "text" (any non-empty value), "custom" (`parse` gives the canonical value or
    raises ValueError(rule)). An empty default is computed by the launcher (shown as "-").
    flag: the entry point's flag the value is passed on as, unchanged (a launcher only renames:
    `Launch.command` adds --FLAG=value itself); None when the plan computes flags from it."""

    name: str
    default: str
    kind: str
    help: str
    choices: tuple = ()
    parse: Callable[[str], str] | None = None
    positional: bool = True
    flag: str | None = None

    @classmethod
    def of_field(
        cls,
        settings_class,
        name: str,
        default: str | None = None,
        positional: bool = False,
        passed_on: bool = True,
    ):
        """The setting a launcher passes on as the entry point's flag of the same name (unless
        not `passed_on`): its kind and help as declared once on `settings_class`'s field
        (common.cli.setting); `default` (text) the launcher's own, else the field's (what None
        means, where it says)."""
        field = next(f for f in dataclasses.fields(settings_class) if f.name == name)
        if default is None:
            value = field.metadata.get("none_means")
            value = field.default if value is None else value
            default = str(value).lower() if isinstance(value, bool) else str(value)
        text = field.metadata["help"].rstrip(".")  # as the launchers' tables write help
        kind = field.metadata["kind"]
        choices = tuple(kind) if isinstance(kind, (tuple, list)) else ()  # the field's names
        return cls(
            name,
            default,
            "choice" if choices else kind,
            text[:1].lower() + text[1:],
            choices=choices,
            positional=positional,
            flag=name if passed_on else None,
        )


@dataclasses.dataclass(frozen=True)
class PathOption:
    name: str
    env: str | None  # the environment variable behind it, or None
    help: str


@dataclasses.dataclass(frozen=True)
class Launcher:
    """One scripts/ launcher: its settings table, its paths and what it plans from them."""

    name: str  # "run_squad": its presets live in configs/presets/run_squad/
    entry: str | None  # the entry point flags after -- go to ("run_squad.py"); None: no such flags
    about: tuple  # lines of the --help text under the usage
    settings: tuple  # Setting, positional ones first
    paths: tuple  # PathOption
    plan: Callable  # (Launch) -> Plan
    workers: str | None = None  # the setting that counts workers ("num_gpus", "num_gpu")

    @property
    def positional(self) -> tuple:
        return tuple(s for s in self.settings if s.positional)

    @property
    def named_only(self) -> tuple:
        return tuple(s for s in self.settings if not s.positional)


@dataclasses.dataclass
class Step:
    """One command of the plan. `banner` prints "== SCRIPT: BANNER starts (time) ==" first;
    `failure` is printed (with {status} filled in) when the command fails. `stop_file` is where
    the launcher asks the command to stop for a preemption (training/preemption.py's STOP file in
    its output directory) when it gets SIGTERM, SIGUSR1 or SIGINT; without one, the launcher
    passes the signal on."""

    argv: list
    banner: str = ""
    failure: str = ""
    stop_file: str = ""


@dataclasses.dataclass
class Plan:
    """What a launcher will run: `commands` are shown in the summary ((label or None, argv)),
    `notes` printed under the paths, and `prepare(say)` (not called by --dry_run) checks the
    inputs and returns the steps to run."""

    commands: list
    notes: list
    prepare: Callable
    done: str = ""


# ---- arguments -------------------------------------------------------------------------------


@dataclasses.dataclass
class Request:
    """What the user typed, not yet validated."""

    positional: list = dataclasses.field(default_factory=list)
    named: dict = dataclasses.field(default_factory=dict)  # setting name -> value
    paths: dict = dataclasses.field(default_factory=dict)  # path option -> value
    preset: str | None = None
    dry_run: bool = False
    help: bool = False
    extra: list = dataclasses.field(default_factory=list)  # after `--`: the entry point's flags


def parse_arguments(launcher: Launcher, args) -> Request:
    """Splits the arguments: positional values, --name=value / --name value, --preset, --dry_run,
    --help and, after `--`, flags passed on to the entry point."""
    settings = {s.name for s in launcher.settings}
    paths = {p.name for p in launcher.paths}
    request = Request()
    args = list(args)
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            if launcher.entry is None:
                raise UsageError("nothing may follow --: this launcher passes no flags on to a program.")
            request.extra = args[i:]
            break
        if arg in ("-h", "--help"):
            request.help = True
            continue
        if not arg.startswith("--"):
            request.positional.append(arg)
            continue
        name, has_value, value = arg[2:].partition("=")
        name = name.replace("-", "_")
        if name == "dry_run":
            if has_value:
                raise UsageError(f"--dry_run takes no value (got --dry_run={value}).")
            request.dry_run = True
            continue
        if name not in settings | paths | {"preset"}:
            known = ", ".join(
                "--" + n for n in [s.name for s in launcher.settings] + [p.name for p in launcher.paths]
            )
            raise UsageError(
                f"unknown option '--{name}'; the named options are --preset, --dry_run, {known}."
            )
        if not has_value:
            if i >= len(args) or args[i].startswith("--") or not args[i]:
                raise UsageError(f"--{name} needs a value (--{name}=VALUE or --{name} VALUE).")
            value = args[i]
            i += 1
        elif not value:
            raise UsageError(f"--{name} needs a value (--{name}=VALUE or --{name} VALUE).")
        if name == "preset":
            request.preset = value
        elif name in paths:
            request.paths[name] = value
        else:
            request.named[name] = value
    count = len(launcher.positional)
    if len(request.positional) > count:
        raise UsageError(
            f"{f'at most {count}' if count else 'no'} positional arguments are accepted, got "
            f"{len(request.positional)}: {' '.join(request.positional)}."
        )
    return request


# ---- presets ---------------------------------------------------------------------------------


def presets_dir(repo_root: str, launcher: Launcher) -> str:
    return os.path.join(repo_root, "configs", "presets", launcher.name)


def list_presets(directory: str) -> list:
    if not os.path.isdir(directory):
        return []
    return sorted({os.path.splitext(f)[0] for f in os.listdir(directory) if f.endswith((".conf", ".json"))})


def preset_path(preset: str, directory: str) -> str:
    """A preset file: an existing path, else <directory>/<name>.conf or .json."""
    if os.path.isfile(preset):
        return os.path.abspath(preset)
    for ext in (".conf", ".json"):
        candidate = os.path.join(directory, preset + ext)
        if os.path.isfile(candidate):
            return candidate
    names = ", ".join(list_presets(directory)) or f"none yet in {directory}"
    raise UsageError(f"no preset '{preset}': give a file or one of {names}.")


def read_preset(path: str, names) -> dict:
    """{setting name: value string} from a flat `name=value` file (# comments, optional quotes)
    or a JSON object; an unknown or repeated name is an error naming the file and the name."""
    if path.endswith(".json"):
        from common.files import read_json

        data = read_json(path, what="preset file")
        if not isinstance(data, dict):
            raise UserError(f"The preset file {path!r} must hold a JSON object of name: value.")
        items = [
            (str(k), "true" if v is True else "false" if v is False else str(v), f"key {k!r}")
            for k, v in data.items()
        ]
    else:
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except OSError as e:
            raise UserError(f"Cannot read the preset file {path!r} ({e.strerror or e}).") from None
        items = []
        for number, line in enumerate(lines, 1):
            line = re.sub(r"(^|\s)#.*$", "", line).strip()
            if not line:
                continue
            name, eq, value = line.partition("=")
            if not eq:
                raise UserError(f"{path}, line {number}: expected name=value, got {line!r}.")
            items.append((name.strip(), value.strip().strip("'\""), f"line {number}"))
    values = {}
    for name, value, where in items:
        if name not in names:
            raise UserError(
                f"{path}, {where}: unknown setting {name!r}; a preset sets {', '.join(names)} "
                "(paths come from environment variables or named options)."
            )
        if name in values:
            raise UserError(f"{path}, {where}: {name} is set twice.")
        values[name] = value
    return values


# ---- validation ------------------------------------------------------------------------------


def check_value(setting: Setting, text: str, where: str, models) -> tuple:
    """(the text to pass on, the typed value) of one setting, or UsageError naming the setting,
    where its value came from and the rule (common/kinds.py's, for the kinds it holds)."""
    try:
        if setting.kind in KINDS:
            return text, KINDS[setting.kind].parse(text)
        if setting.kind == "model":
            if text not in models:
                raise ValueError(f"one of {', '.join(models)} (the configs/bert_<name>.json files)")
            return text, text
        if setting.kind == "choice":
            if text not in setting.choices:
                *most, last = setting.choices
                raise ValueError(
                    f"{', '.join(most)} or {last}"
                    if len(most) == 1
                    else f"one of {', '.join(setting.choices)}"
                )
            return text, text
        if setting.kind == "custom":
            canonical = setting.parse(text)
            return canonical, canonical
        if not text:
            raise ValueError(setting.help)
        return text, text
    except ValueError as e:
        rule = str(e)
        if setting.kind in _WITH_EXAMPLE and setting.default:
            rule += f" such as {setting.default}"
        raise UsageError(f"{setting.name} ({where}) must be {rule}, got '{text}'.") from None


@dataclasses.dataclass(frozen=True)
class Resolved:
    text: dict  # name -> the value as passed on ("" for a default the launcher computes)
    value: dict  # name -> typed value (None for a default the launcher computes)
    source: dict  # name -> "default" | "preset <name>" | "argument N" | "--name"


def resolve(launcher: Launcher, request: Request, preset: tuple | None, models) -> Resolved:
    """Applies defaults < preset < positional < named and checks every setting."""
    text = {s.name: s.default for s in launcher.settings}
    source = dict.fromkeys(text, "default")
    if preset:
        preset_name, preset_values = preset
        for name, value in preset_values.items():
            text[name], source[name] = value, f"preset {preset_name}"
    for setting, value in zip(launcher.positional, request.positional):
        index = launcher.positional.index(setting) + 1
        text[setting.name], source[setting.name] = value, f"argument {index}"
    for name, value in request.named.items():
        text[name], source[name] = value, f"--{name}"
    value = {}
    for s in launcher.settings:
        if text[s.name] == "" and source[s.name] == "default":
            value[s.name] = None  # computed by the launcher
        else:
            text[s.name], value[s.name] = check_value(s, text[s.name], source[s.name], models)
    return Resolved(text, value, source)


# ---- one launch ------------------------------------------------------------------------------


def absolute(path: str) -> str:
    return path if "://" in path else os.path.abspath(os.path.expanduser(path))


class Launch:
    """One launch being planned: the resolved settings, the paths resolved so far (with where each
    came from), the workers, and what a launcher's plan needs of the world around it."""

    def __init__(self, launcher, script, request, resolved, environ, repo_root, python, models):
        self.launcher, self.script, self.request = launcher, script, request
        self.text, self.value, self.source = resolved.text, resolved.value, resolved.source
        self.environ, self.repo_root, self.python, self.models = environ, repo_root, python, models
        self.paths = {}  # name -> (value, source), in resolution order
        self.flag_origin = {}  # a flag the launcher sets -> the setting or path behind it ("" always)
        count = self.value.get(launcher.workers) if launcher.workers else 1
        what = f"{launcher.workers}={count}" if launcher.workers else "this launcher runs one process"
        self.workers = Workers(count, what, environ, python)

    def default(self, name: str, value: str, how: str) -> str:
        """A computed default for a setting left at its (empty) default."""
        if self.source[name] == "default" and self.text[name] == "":
            self.text[name], self.value[name], self.source[name] = value, value, f"default: {how}"
        return self.text[name]

    def path(self, name: str, default: str, how: str = "") -> str:
        """--NAME, else its environment variable, else `default` ("default: HOW"); absolute."""
        option = next(p for p in self.launcher.paths if p.name == name)
        if self.request.paths.get(name):
            value, source = absolute(self.request.paths[name]), f"--{name}"
        elif option.env and self.environ.get(option.env):
            value, source = absolute(self.environ[option.env]), option.env
        else:
            value, source = default, f"default: {how}" if how else "default"
        self.paths[name] = (value, source)
        return value

    def passed_on(self) -> list:
        """(flag, value, setting) of each setting passed on by its `flag`, in the table's order;
        one left empty (an optional setting not given) is left out."""
        return [
            (s.flag, self.text[s.name], s.name)
            for s in self.launcher.settings
            if s.flag and self.text[s.name]
        ]

    def command(self, flags) -> list:
        """The workers' prefix + the entry point + --flag=value for each (flag, value, origin) the
        plan computed, then for each setting passed on (`passed_on`), + the flags after --.
        `origin` names the setting or path behind the flag ("": always set)."""
        flags = [*flags, *self.passed_on()]
        names = [flag for flag, _, _ in flags]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"{self.launcher.name} sets --{', --'.join(twice)} twice")
        for flag, _, origin in flags:
            self.flag_origin.setdefault(flag, origin)
        entry = os.path.join(self.repo_root, self.launcher.entry)
        return [*self.workers.prefix, entry, *(f"--{f}={v}" for f, v, _ in flags), *self.request.extra]


def check_extra(launch: Launch) -> None:
    """Flags after -- may add to the command, not contradict what the printed settings say (absl
    would let the last one win)."""
    positions = {s.name: i for i, s in enumerate(launch.launcher.positional, 1)}
    envs = {p.name: p.env for p in launch.launcher.paths}
    for arg in launch.request.extra:
        if not arg.startswith("-"):
            continue
        name = arg.lstrip("-").partition("=")[0]
        if name not in launch.flag_origin and name.startswith("no"):
            name = name[2:]
        name = FLAG_ALIASES.get(name, name)
        if name not in launch.flag_origin:
            continue
        given = arg.partition("=")[0]
        origin = launch.flag_origin[name]
        if not origin:
            raise UsageError(
                f"{given} after -- would contradict the launcher's own --{name}: {launch.script} always "
                f"sets it (run {launch.launcher.entry} directly for other modes)."
            )
        if origin in positions:
            how = f"{origin} (argument {positions[origin]}, or --{origin}=VALUE)"
        elif origin in envs:
            how = f"--{origin}=PATH" + (f" or {envs[origin]}" if envs[origin] else "")
        else:
            how = f"--{origin}=VALUE"
        raise UsageError(f"{given} after -- would contradict the launcher's own --{name}; set {how} instead.")


# ---- what is printed -------------------------------------------------------------------------


def usage_line(launcher: Launcher, script: str) -> str:
    count = len(launcher.positional)
    return (
        f"usage: {script} {f'[up to {count} positional arguments] ' if count else ''}[--NAME=VALUE ...] "
        f"[--preset NAME|FILE] [--dry_run]{_passed_on(launcher)}   (--help lists them)"
    )


def _passed_on(launcher: Launcher) -> str:
    return f" [-- {launcher.entry} FLAGS ...]" if launcher.entry else ""


def _help(setting: Setting) -> str:
    """A setting's help row, naming the entry point's flag where the launcher renames it."""
    renamed = setting.flag and setting.flag != setting.name
    return f"{setting.help} (--{setting.flag})" if renamed else setting.help


def usage(launcher: Launcher, script: str, models, presets) -> str:
    width = max(len(s.name) for s in launcher.settings) + 2
    positional = "[POSITIONAL ...] " if launcher.positional else ""
    lines = [
        f"usage: {script} {positional}[--NAME=VALUE | --NAME VALUE ...] [--preset NAME|FILE]",
        f"       {' ' * len(script)} [--dry_run]{_passed_on(launcher)}",
        "",
        *launcher.about,
        "",
    ]
    if launcher.positional:
        lines.append(
            "Positional arguments, NVIDIA's order (each optional; --NAME=VALUE overrides any of them):"
        )
        for index, s in enumerate(launcher.positional, 1):
            lines.append(f"  {index:2d} {s.name:{width}s} {s.default or '-':8s} {_help(s)}")
        lines.append("")
    lines.append("Named only:")
    lines += [f"     {'--' + s.name:{width}s} {s.default or '-':8s} {_help(s)}" for s in launcher.named_only]
    lines += [
        f"     {'--preset':{width}s} {'':8s} a file, or one of: {', '.join(presets) or '(none yet)'}",
        f"     {'--dry_run':{width}s} {'':8s} print the settings and the commands, run nothing",
        "",
        "Paths (named option, else environment variable, else the default):",
    ]
    for p in launcher.paths:
        lines.append(f"     {'--' + p.name:20s} {p.env or '':16s} {p.help}")
    precedence = f"Precedence: defaults < preset (configs/presets/{launcher.name}/) < positional < named."
    if any(s.kind == "model" for s in launcher.settings):
        precedence += f"  bert_model: {', '.join(models)}"
    lines += ["", precedence]
    if launcher.workers:
        lines.append(
            f"Workers: {launcher.workers} > 1 starts horovodrun -np N (mpirun inside a SLURM allocation, or "
            "as HOROVOD_LAUNCHER says; LAUNCHER_ARGS adds arguments to it); learning rates are per GPU."
        )
    if launcher.entry:
        lines.append(
            f"Flags after -- go to {launcher.entry}, except those the launcher sets from its arguments."
        )
    return "\n".join(lines)


# A URL's password (postgresql://user:PASSWORD@host/db): never printed.
_URL_PASSWORD = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^:/@\s]*:)[^@\s]+@")


def shown(argv) -> str:
    """A command as printed: shell-quoted, with any URL's password replaced by ***."""
    return _URL_PASSWORD.sub(r"\1***@", shlex.join(argv))


def summary(launch: Launch, plan: Plan) -> str:
    width = max(len(s.name) for s in launch.launcher.settings)
    lines = [f"== {launch.script}: resolved settings (defaults < preset < positional < named) =="]
    for s in launch.launcher.settings:
        lines.append(f"  {s.name:{width}s} = {launch.text[s.name] or '-':10s} ({launch.source[s.name]})")
    lines.append("paths (named option > environment variable > default):")
    for name, (value, source) in launch.paths.items():
        if value:
            lines.append(f"  {name:18s} = {value} ({source})")
    lines += plan.notes
    if len(plan.commands) == 1 and plan.commands[0][0] is None:
        lines += ["command:", "  " + shown(plan.commands[0][1])]
    else:
        lines.append("commands:")
        lines += [f"  {label}: {shown(argv)}" for label, argv in plan.commands]
    return "\n".join(lines)


def write_steps(path: str, script: str, steps, done: str) -> None:
    """The plan for the launcher process (launch/runner.py) to run, as JSON: each step's argv,
    banner and failure message (prefixed with the script's name) and STOP file, then DONE."""
    import json

    from common.files import write_text

    plan = {
        "steps": [
            {
                "argv": [str(a) for a in step.argv],
                "banner": f"{script}: {step.banner}" if step.banner else "",
                "failure": f"{script}: error: {step.failure}" if step.failure else "",
                "stop_file": step.stop_file,
            }
            for step in steps
        ],
        "done": f"{script}: {done}" if done else "",
    }
    write_text(path, json.dumps(plan, indent=1) + "\n")


def read_steps(path: str) -> tuple:
    """([Step], done) of a plan `write_steps` wrote."""
    import json

    with open(path, encoding="utf-8") as f:
        plan = json.load(f)
    return [Step(**step) for step in plan["steps"]], plan["done"]


def models_in(repo_root: str) -> list:
    configs = os.path.join(repo_root, "configs")
    return sorted(
        f[len("bert_") : -len(".json")]
        for f in os.listdir(configs)
        if f.startswith("bert_") and f.endswith(".json")
    )


def plan_launch(
    launcher: Launcher, script: str, plan_file: str, args, environ: dict, repo_root: str, python: str, out
) -> int:
    """Resolves and checks `args`, prints the settings and the commands, checks the inputs (not
    with --dry_run) and writes the steps to `plan_file` (write_steps; none with --help or
    --dry_run); raises UsageError / UserError."""
    models = models_in(repo_root)
    presets = presets_dir(repo_root, launcher)
    request = parse_arguments(launcher, args)
    if request.help:
        print(usage(launcher, script, models, list_presets(presets)), file=out)
        return 0
    preset = None
    if request.preset:
        path = preset_path(request.preset, presets)
        preset = (request.preset, read_preset(path, [s.name for s in launcher.settings]))
    resolved = resolve(launcher, request, preset, models)
    launch = Launch(launcher, script, request, resolved, environ, repo_root, python, models)
    plan = launcher.plan(launch)
    check_extra(launch)
    say = (lambda *a: None) if launch.workers.rank > 0 else (lambda *a: print(*a, file=out, flush=True))
    say(summary(launch, plan))
    if request.dry_run:
        say("dry run: nothing checked or started.")
        return 0
    write_steps(plan_file, script, plan.prepare(say), plan.done)
    return 0


def started_at() -> str:
    """Now, for a report step that reads only results written after this launch began."""
    return f"{time.time():.3f}"
