"""Every command the docs show runs, and every link between the pages lands.

The shell commands come from the fenced blocks (bash/sh/shell/console, or unmarked blocks whose
first line looks like a command) of README.md, docs/*.md and the READMEs beside the cluster
files. Each is checked the cheapest way that still runs the code a user's copy would:

    bash scripts/<launcher>.sh ...          its --dry_run (settings, presets, the planned commands)
    bash scripts/docker/{build,launch}.sh   their --dry-run (absent --data/--results: stand-ins)
    python X.py / python -m M ...           --help runs, and every --flag the doc names is listed;
                                            common/cli.py entry points parse the values too
    python azureml/submit.py ... --submit   without --submit: its offline check and the az line
    horovodrun/mpirun/sbatch ... CMD        CMD, checked as above; sbatch's run.sub by BERT_DRY_RUN=1
    already dry (--help, BERT_DRY_RUN=1)    as shown

What cannot run here (a GPU cluster, a container runtime, a cloud, the network) matches a rule in
SKIPS by name with its reason; `test_every_command_is_checked_or_skipped_by_name` keeps any
command from being silently ignored. Link checks are plain Python (the fast tier); command checks
start processes (the `process` marker).
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import os
import re
import shlex
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = sorted(
    os.path.relpath(p, ROOT)
    for p in ["README.md", *glob.glob("docs/*.md", root_dir=ROOT)]
    + [p for p in ("kubernetes/README.md", "azureml/README.md", "bench/README.md")]
    if os.path.exists(os.path.join(ROOT, p))
)
SHELL_LANGUAGES = {"bash", "sh", "shell", "console"}
# An unmarked block is shell when its first line starts like one of these.
COMMAND_START = re.compile(
    r"^(\$ )?([A-Z_]+=\S* )*(bash|sh|python|\.venv/bin/|sbatch|srun|mpirun|horovodrun|kubectl|az|docker|"
    r"podman|enroot|export|cd|cat|grep|pip|apt-get|tensorboard)\b"
)
PYTHON = re.compile(r"^(\S*/)?python3?$")

# Commands that cannot run here, by what they start with (after the environment assignments and
# once a wrapper's command is taken out), with the reason. A match of the full command line wins.
SKIPS = (
    (r"^bash scripts/setup\.sh\b", "installs the environment (pip, apt, a Horovod build: network, minutes)"),
    (r"^bash scripts/test\.sh\b", "runs this test suite (recursion)"),
    (r"^enroot\b", "converts a container image: needs enroot and a docker daemon"),
    (r"^(docker|podman)\b", "needs a container runtime and a registry"),
    (r"^kustomize\b", "edits the cluster's kustomization: needs kustomize"),
    (r"^kubectl\b", "needs a Kubernetes cluster"),
    (r"^az\b", "needs an Azure subscription and the network"),
    (r"^apt-get\b", "installs system packages as root from Debian's archive"),
    (r"^cd\b", "changes directory between cluster steps"),
    (r"^export\b", "sets the environment of the commands after it (they are checked with it)"),
    (r"^cat \S+ hostfile\b", "writes an example MPI hostfile (node names of a cluster)"),
    (r"^grep -o 'nvidia-", "the lock-file recipe's first step; the recipe needs the package index"),
    (r"^\S*pip install\b", "resolves the image's lock against the package index (network)"),
    (r"^\S*python -c .*lock\.json", "reads the lock file pip wrote (the network step before it)"),
    (
        r"^\S*python -c\b",
        "inline Python that checks Horovod across a cluster's GPUs (under sbatch or mpirun)",
    ),
)


@dataclasses.dataclass(frozen=True)
class Command:
    page: str
    line: int
    text: str  # the logical command as shown (continuations joined, comments dropped)
    env: tuple  # (NAME, value) assignments before the program
    argv: tuple

    @property
    def id(self) -> str:
        """page:line:program, e.g. docs/data.md:18:data_download.sh."""
        head = self.argv[0]
        if (head in ("bash", "sh") or PYTHON.match(head)) and len(self.argv) > 1:
            head = self.argv[2] if self.argv[1] == "-m" and len(self.argv) > 2 else self.argv[1]
        return f"{self.page}:{self.line}:{os.path.basename(head)}"


# ---------------------------------------------------------------------------------------------
# Reading the pages


def _fenced_blocks(text: str):
    """(language, first line number of the body, body lines) for each fenced block."""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^\s*(```+|~~~+)\s*([\w-]*)", lines[i])
        if not m:
            i += 1
            continue
        fence, language, start = m.group(1), m.group(2).lower(), i + 2
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1
        yield language, start, body


def _strip_comment(line: str, quote: str | None) -> tuple[str, str | None]:
    """The line without its shell comment (a `#` at a word's start, outside quotes) and the quote
    still open at its end (shlex drops `#` inside a word too, which bash keeps)."""
    out = []
    prev = " "
    escaped = False
    for ch in line:
        if escaped:
            escaped = False
        elif quote:
            if ch == quote:
                quote = None
        elif ch == "\\":
            escaped = True
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and prev.isspace():
            break
        out.append(ch)
        prev = ch
    return "".join(out).rstrip(), quote


def _logical_commands(body):
    """(offset of its first line in the block, text) for each command: `\\` continuations, quotes
    spanning lines and here-documents joined; comments dropped."""
    i = 0
    while i < len(body):
        if not body[i].strip() or body[i].lstrip().startswith("#"):
            i += 1
            continue
        start, parts, quote = i, [], None
        while i < len(body):
            stripped, quote = _strip_comment(body[i], quote)
            heredoc = re.search(r"<<-?\s*'?(\w+)'?", stripped) if quote is None else None
            i += 1
            if heredoc:
                parts.append(stripped)
                while i < len(body) and body[i].strip() != heredoc.group(1):
                    parts.append(body[i])
                    i += 1
                i += 1
                break
            if quote is None and stripped.endswith("\\"):
                parts.append(stripped[:-1].rstrip())
                continue
            parts.append(stripped)
            if quote is None:
                break
        text = "\n".join(p for p in parts if p.strip()) if quote is None else "\n".join(parts)
        yield start, re.sub(r"^\$ ", "", text.strip())


def _split_and(text: str):
    """The commands of `a && b`: each as (env, argv)."""
    try:
        words = shlex.split(text, comments=False)
    except ValueError:
        words = text.split()
    commands, current = [], []
    for w in words:
        if w in ("&&", ";", "||"):
            commands.append(current)
            current = []
        else:
            current.append(w)
    commands.append(current)
    for words in commands:
        env = []
        while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
            name, _, value = words.pop(0).partition("=")
            env.append((name, value))
        yield tuple(env), tuple(w for w in words if w != "...")


def collect(pages=PAGES) -> list[Command]:
    """Every shell command the pages show."""
    commands = []
    for page in pages:
        with open(os.path.join(ROOT, page), encoding="utf-8") as f:
            text = f.read()
        for language, first, body in _fenced_blocks(text):
            stripped = [b for b in body if b.strip() and not b.lstrip().startswith("#")]
            if language not in SHELL_LANGUAGES and not (
                language == "" and stripped and COMMAND_START.match(stripped[0].strip())
            ):
                continue
            exported: tuple = ()  # a block's `export NAME=VALUE` reaches the commands after it
            for offset, logical in _logical_commands(body):
                shown = " ".join(logical.split())
                for env, argv in _split_and(logical):
                    if argv:
                        commands.append(Command(page, first + offset, shown, exported + env, argv))
                    if argv[:1] == ("export",):
                        exported += tuple(tuple(a.split("=", 1)) for a in argv[1:] if "=" in a)
    return commands


COMMANDS = collect()


# ---------------------------------------------------------------------------------------------
# Deciding how each command is checked


def _unwrap(argv: tuple) -> tuple:
    """The command a launcher wrapper runs (horovodrun/mpirun's program, sbatch's run.sub
    command, kubernetes/retryable.sh's), else argv itself."""
    if argv and os.path.basename(argv[0]) in ("horovodrun", "mpirun"):
        for i, word in enumerate(argv[1:], 1):
            if PYTHON.match(word) or word == "bash":
                return argv[i:]
        return argv
    if argv and argv[0] in ("sbatch", "srun") and "scripts/run.sub" in argv:
        inner = argv[argv.index("scripts/run.sub") + 1 :]
        return inner or argv
    if argv[:2] == ("bash", "kubernetes/retryable.sh"):
        return argv[2:]
    return argv


def skip_reason(command: Command) -> str | None:
    """The reason of the first SKIPS rule the command (or the command its wrapper runs) matches."""
    inner = _unwrap(command.argv)
    shown = [shlex.join(inner)] + ([shlex.join(command.argv)] if inner == command.argv else [])
    for pattern, reason in SKIPS:
        if any(re.search(pattern, s) for s in shown):
            return reason
    return None


def _launchers() -> set:
    from launch.__main__ import LAUNCHERS

    return set(LAUNCHERS)


def plan(command: Command) -> tuple[str, tuple]:
    """How the command is checked: ("run", argv to run as shown but dry) or ("flags", the entry
    point's argv); ("skip", (reason,)) or ("unknown", ()) otherwise."""
    reason = skip_reason(command)
    if reason:
        return "skip", (reason,)
    argv = _unwrap(command.argv)
    if argv[:1] == ("bash",) and len(argv) > 1:
        script = argv[1]
        name = os.path.basename(script)[: -len(".sh")] if script.endswith(".sh") else None
        if script.startswith("scripts/") and name in _launchers():
            return "run", _with_dry_run(argv, "--dry_run", ("--dry_run", "--help"))
        if script in ("scripts/docker/build.sh", "scripts/docker/launch.sh"):
            return "run", _with_dry_run(argv, "--dry-run", ("--dry-run", "--help"))
        if script == "scripts/run.sub" and ("--help" in argv or dict(command.env).get("BERT_DRY_RUN") == "1"):
            return "run", argv
    if argv and (PYTHON.match(argv[0]) or os.path.basename(argv[0]) == "tensorboard"):
        if len(argv) > 1 and argv[1] == "azureml/submit.py":
            return "run", tuple(a for a in argv if a != "--submit")
        return "flags", argv
    return "unknown", ()


def _with_dry_run(argv: tuple, flag: str, already: tuple) -> tuple:
    if any(a in already for a in argv):
        return argv
    if "--" in argv:
        i = argv.index("--")
        return argv[:i] + (flag,) + argv[i:]
    return argv + (flag,)


# ---------------------------------------------------------------------------------------------
# Fast tier: collection, the skip table, file existence, links


def test_the_pages_show_commands_of_every_kind():
    kinds = {plan(c)[0] for c in COMMANDS}
    assert {"run", "flags", "skip"} <= kinds
    assert len(COMMANDS) >= 60
    assert {c.page for c in COMMANDS} >= {"README.md", "docs/pretraining.md", "docs/finetuning.md"}
    assert PARSED and SUBMITTED


def test_collection_joins_continuations_quotes_heredocs_and_drops_comments():
    body = [
        "# a comment line",
        "A=1 B='x y' bash scripts/run.sh 1 \\",
        "    2 --flag=v   # trailing comment",
        "python -c '",
        "print(1)  # not a shell comment',",
        "cat > f <<'EOF'",
        "node1 slots=8",
        "EOF",
        "CONT=REG#IMAGE:TAG sbatch x && bash y",
    ]
    logical = list(_logical_commands(body))
    assert [offset for offset, _ in logical] == [1, 3, 5, 8]
    assert list(_split_and(logical[0][1])) == [
        ((("A", "1"), ("B", "x y")), ("bash", "scripts/run.sh", "1", "2", "--flag=v"))
    ]
    assert list(_split_and(logical[1][1])) == [((), ("python", "-c", "\nprint(1)  # not a shell comment,"))]
    assert "node1 slots=8" in logical[2][1]
    assert list(_split_and(logical[3][1])) == [
        ((("CONT", "REG#IMAGE:TAG"),), ("sbatch", "x")),
        ((), ("bash", "y")),
    ]


def test_every_command_is_checked_or_skipped_by_name():
    unknown = [f"{c.id}: {c.text}" for c in COMMANDS if plan(c)[0] == "unknown"]
    assert unknown == [], "a command the docs show is neither checked nor matched by SKIPS: add one"
    skipped = sorted(
        {(plan(c)[1][0], c.id, shlex.join(c.argv)[:90]) for c in COMMANDS if plan(c)[0] == "skip"}
    )
    print("\nskipped commands (reason, where, command):")
    for reason, where, shown in skipped:
        print(f"  {where:28s} {shown}\n      -> {reason}")


def test_every_skip_rule_is_used():
    used = {plan(c)[1][0] for c in COMMANDS if plan(c)[0] == "skip"}
    assert [reason for _, reason in SKIPS if reason not in used] == []


def _named_files(argv: tuple) -> list:
    """The repository files a command runs or reads: the script after bash or python, a
    run.sub, and -f/-k FILE (kubectl, az, docker)."""
    named = []
    for previous, word in zip(("", *argv), argv):
        if previous in ("bash", "sh") or PYTHON.match(previous) or word.endswith(".sub"):
            if not word.startswith(("-", "/", "$")):
                named.append(word)
        elif previous in ("-f", "-k") and word.startswith(("kubernetes/", "azureml/", "configs/")):
            named.append(word)
    return named


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.id)
def test_every_file_a_command_names_exists(command):
    missing = [f for f in _named_files(command.argv) if not os.path.exists(os.path.join(ROOT, f))]
    assert missing == [], f"{command.id}: {command.text}\n  names files that do not exist: {missing}"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, links to their text, punctuation other than
    `-` and `_` dropped, spaces to `-`."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


@functools.lru_cache(maxsize=None)
def anchors(path: str) -> frozenset:
    """The anchors of a page's headings (outside code blocks), duplicates numbered -1, -2..."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    seen: dict = {}
    out = set()
    fence = None
    for line in text.split("\n"):
        m = re.match(r"^\s*(```+|~~~+)", line)
        if m:
            fence = None if fence and m.group(1).startswith(fence) else (fence or m.group(1))
            continue
        if fence:
            continue
        h = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if h:
            base = slug(h.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    out |= set(re.findall(r"<a (?:name|id)=\"([^\"]+)\"", text))
    return frozenset(out)


def _links(page: str):
    """(line, target) of each relative Markdown link on a page, outside code."""
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        lines = f.read().split("\n")
    fence = None
    for number, line in enumerate(lines, 1):
        m = re.match(r"^\s*(```+|~~~+)", line)
        if m:
            fence = None if fence and m.group(1).startswith(fence) else (fence or m.group(1))
            continue
        if fence:
            continue
        line = re.sub(r"`[^`]*`", "", line)
        for target in re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", line) + re.findall(
            r"^\s*\[[^\]]+\]:\s*(\S+)", line
        ):
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                yield number, target


LINKS = [(page, line, target) for page in PAGES for line, target in _links(page)]


def test_the_pages_link_to_each_other():
    assert len(LINKS) >= 40
    assert any("#" in t and not t.startswith("#") for _, _, t in LINKS)  # into another page's heading
    assert any(t.startswith("#") for _, _, t in LINKS)  # within a page


@pytest.mark.parametrize("page,line,target", LINKS, ids=[f"{p}:{n}:{t}" for p, n, t in LINKS])
def test_every_relative_link_lands(page, line, target):
    path, _, anchor = target.partition("#")
    resolved = (
        os.path.normpath(os.path.join(ROOT, os.path.dirname(page), path))
        if path
        else os.path.join(ROOT, page)
    )
    assert os.path.exists(resolved), (
        f"{page}:{line}: {target} -> {os.path.relpath(resolved, ROOT)} does not exist"
    )
    if anchor and resolved.endswith(".md"):
        assert anchor in anchors(resolved), (
            f"{page}:{line}: {target}: no heading of {os.path.relpath(resolved, ROOT)} has the anchor #{anchor}"
        )


def test_slugs_follow_githubs_rules():
    assert slug("Padding: `--bin_size`") == "padding---bin_size"
    assert slug("Tuning fine-tuning (run_tune.py)") == "tuning-fine-tuning-run_tunepy"
    assert slug("Preemption, time limits and lost workers") == "preemption-time-limits-and-lost-workers"
    assert slug("See [the page](x.md) now") == "see-the-page-now"


# ---------------------------------------------------------------------------------------------
# Process tier: the commands themselves

RUNS = [c for c in COMMANDS if plan(c)[0] == "run"]
FLAGS = [c for c in COMMANDS if plan(c)[0] == "flags"]


def _env(command: Command) -> dict:
    env = dict(os.environ)
    env.pop("SLURM_JOB_ID", None)
    env.update(TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=ROOT)
    env.update({k: os.path.expandvars(v.replace("$PWD", ROOT)) for k, v in command.env})
    return env


# A cluster's host folders (docker launch's --data/--results, run.sub's DATADIR/RESULTSDIR) must
# exist where the command runs: a stand-in each when the page's path is not here.
HOST_FOLDERS = ("--data", "--results", "DATADIR", "RESULTSDIR")


def _stand_ins(argv: tuple, env: dict, tmp_path) -> tuple:
    """argv and env with a temporary folder for each host folder that is not here."""

    def stand_in(name: str) -> str:
        folder = tmp_path / name.strip("-").lower()
        folder.mkdir(exist_ok=True)
        return str(folder)

    out = list(argv)
    for i, word in enumerate(out[:-1]):
        if word in HOST_FOLDERS and not os.path.isdir(out[i + 1]):
            out[i + 1] = stand_in(word)
    for name in HOST_FOLDERS:
        if name in env and not os.path.isdir(env[name]):
            env[name] = stand_in(name)
    return tuple(out), env


def _program(argv: tuple) -> tuple:
    head = argv[0]
    if PYTHON.match(head):
        return (sys.executable,)
    if os.path.basename(head) == "tensorboard":
        return (os.path.join(os.path.dirname(sys.executable), "tensorboard"),)
    return (head,)


@pytest.fixture(scope="module")
def stand_in_root(tmp_path_factory):
    return tmp_path_factory.mktemp("host-folders")


@functools.lru_cache(maxsize=None)
def _run(argv: tuple, env: tuple) -> tuple[int, str]:
    """Runs a command once however many pages show it: (exit status, output)."""
    result = subprocess.run(argv, cwd=ROOT, env=dict(env), capture_output=True, text=True, timeout=120)
    return result.returncode, result.stdout + result.stderr


@pytest.mark.process
@pytest.mark.parametrize("command", RUNS, ids=lambda c: c.id)
def test_a_launcher_command_runs_dry(command, stand_in_root):
    _, argv = plan(command)
    argv, env = _stand_ins(argv, _env(command), stand_in_root)
    argv = _program(argv) + argv[1:]
    status, output = _run(argv, tuple(sorted(env.items())))
    assert status == 0, f"{command.id}: `{shlex.join(argv)}` exited {status}:\n{output[-3000:]}"
    assert output.strip(), f"{command.id}: printed nothing"
    if "--dry_run" in argv and "--help" not in argv:
        assert "dry run: nothing checked or started." in output, output[-2000:]


@functools.lru_cache(maxsize=None)
def _help(program: tuple) -> tuple[int, str]:
    result = subprocess.run(
        [*program, "--help"],
        cwd=ROOT,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return result.returncode, result.stdout + result.stderr


def _entry(argv: tuple) -> tuple:
    """The program an entry-point command runs: (python, script) or (python, -m, module)."""
    program = _program(argv)
    if program[0] != sys.executable:
        return program
    if argv[1] == "-m":
        return program + argv[1:3]
    return program + argv[1:2]


@pytest.mark.process
@pytest.mark.parametrize("command", FLAGS, ids=lambda c: c.id)
def test_an_entry_point_accepts_the_flags_the_page_shows(command):
    _, argv = plan(command)
    entry = _entry(argv)
    if len(entry) == 2 and entry[0] == sys.executable:
        assert os.path.exists(os.path.join(ROOT, entry[1])), f"{command.id}: {entry[1]} does not exist"
    status, output = _help(entry)
    assert status == 0, f"{command.id}: `{shlex.join(entry)} --help` exited {status}:\n{output[-2000:]}"
    known = set(re.findall(r"--(?:\[no\])?([A-Za-z0-9][\w-]*)", output))
    shown = [a.split("=", 1)[0][2:] for a in argv[len(entry) :] if a.startswith("--") and len(a) > 2]
    unknown = [f for f in shown if f not in known and not (f.startswith("no") and f[2:] in known)]
    assert unknown == [], f"{command.id}: `{shlex.join(entry)}` does not accept --{', --'.join(unknown)}"


# The entry points that parse their flags with common/cli.py's `main`: there a page's values go
# through the entry point's own flag definitions and validators (kinds, choices), with `run`
# replaced so nothing starts.
PARSE_ONLY = """
import runpy, sys
from common import cli
parse_then_run = cli.main
cli.main = lambda define_flags, run, *a, **k: parse_then_run(define_flags, lambda F: print("flags parsed"), *a, **k)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _parses_with_cli(script: str) -> bool:
    with open(os.path.join(ROOT, script), encoding="utf-8") as f:
        return re.search(r"\b(finetuning_)?cli\.(main|entry_point)\(", f.read()) is not None


def _script(command: Command) -> str:
    argv = plan(command)[1]
    return argv[1] if len(argv) > 1 and argv[1].endswith(".py") else ""


PARSED = [c for c in FLAGS if _script(c) and _parses_with_cli(_script(c))]


@pytest.mark.process
@pytest.mark.parametrize("command", PARSED, ids=lambda c: c.id)
def test_an_entry_point_parses_the_values_the_page_shows(command):
    _, argv = plan(command)
    status, output = _run((sys.executable, "-c", PARSE_ONLY, *argv[1:]), tuple(sorted(_env(command).items())))
    assert status == 0 and "flags parsed" in output, f"{command.id}: {shlex.join(argv)}\n{output[-2000:]}"


SUBMITTED = [c for c in COMMANDS if c.argv[:1] == ("sbatch",) and plan(c)[0] == "run"]


@pytest.mark.process
@pytest.mark.parametrize("command", SUBMITTED, ids=lambda c: c.id)
def test_a_submitted_command_runs_dry_under_run_sub(command, stand_in_root):
    """sbatch ... scripts/run.sub COMMAND: run.sub's BERT_DRY_RUN prints the line it would start
    (the COMMAND itself is checked by test_a_launcher_command_runs_dry)."""
    argv = ("bash", "scripts/run.sub", *_unwrap(command.argv))
    argv, env = _stand_ins(argv, dict(_env(command), BERT_DRY_RUN="1"), stand_in_root)
    status, output = _run(argv, tuple(sorted(env.items())))
    assert status == 0 and "[run.sub]" in output, f"{command.id}: {shlex.join(argv)}\n{output[-2000:]}"
    assert shlex.join(_unwrap(command.argv)[2:]) in output or _unwrap(command.argv)[1] in output
