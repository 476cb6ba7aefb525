"""Storage faults: a damaged checkpoint, a full disk, a read-only or vanished directory,
kill -9 anywhere. Each case asserts its one sentence, the exit status, and that after the fault is
fixed the same command ends with exactly the weights of a run that met no fault.

The matrix runs tiny pretraining runs (10 updates, a checkpoint every 2, the newest 3 kept) in
children forked from one warm launcher (tests/storage_runs.py), so TensorFlow is imported once;
the two-worker case runs under horovodrun --gloo. Mounts (a small tmpfs, a read-only bind mount)
need root; those cases skip, saying so, where mounting is impossible.
"""

import errno
import glob
import json
import os
import random
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from common.errors import PREEMPTED_EXIT_STATUS
from conftest import BIN, ROOT, worker_env
from tools import tiny_pretraining as tiny

pytestmark = [pytest.mark.slow, pytest.mark.process]
STEPS, SAVE_EVERY, KEEP = 10, 2, 3  # checkpoints at 2, 4, ..., 10; 6, 8 and 10 are kept
DATA = "ckpt-{}.data-00000-of-00001"
KILLS, KILL_SEED, KILL_EVENTS = 20, 35, 60  # each kill lands before one of a child's first 60 events
HOROVODRUN = [os.path.join(BIN, "horovodrun"), "-np", "2", "-H", "localhost:2", "--gloo", sys.executable]


def _flags(data, output_dir, **overrides):
    # bin_size None: one padded shape (the tiny records are shorter than the default bin).
    values = dict(
        num_train_steps=STEPS,
        save_checkpoints_steps=SAVE_EVERY,
        keep_checkpoints=KEEP,
        use_xla=False,
        bin_size=None,
        seed=7,
    )
    return tiny.flags(data, output_dir, **{**values, **overrides})


class Launcher:
    """tests/storage_runs.py: runs entry points in children forked from one warm process."""

    def __init__(self):
        env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
        self.process = subprocess.Popen(
            [sys.executable, os.path.join(ROOT, "tests", "storage_runs.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        assert json.loads(self.process.stdout.readline()) == {"ready": True}

    def run(self, output_dir, argv, module="run_pretraining", **request):
        """(exit status or minus the signal, stdout, stderr, events) of one child."""
        base = str(output_dir).rstrip("/")
        request = dict(module=module, argv=argv, out=base + ".stdout", err=base + ".stderr", **request)
        request.setdefault("events", base + ".events")
        if os.path.exists(request["events"]):
            os.remove(request["events"])
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        status = json.loads(self.process.stdout.readline())["status"]
        texts = []
        for path in (request["out"], request["err"], request["events"]):
            with open(path) if os.path.exists(path) else open(os.devnull) as f:
                texts.append(f.read())
        events = [json.loads(line) for line in texts[2].splitlines()]
        return status, texts[0], texts[1], events

    def close(self):
        self.process.stdin.close()
        self.process.wait(timeout=60)


@pytest.fixture(scope="module")
def launcher():
    warm = Launcher()
    yield warm
    warm.close()


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return tiny.setup(tmp_path_factory.mktemp("storage_data"), files=2, per_file=40)


@pytest.fixture(scope="module")
def straight(launcher, data, tmp_path_factory):
    """The run that meets no fault: its directory (checkpoints 6, 8 and 10)."""
    output_dir = tmp_path_factory.mktemp("storage") / "straight"
    status, _, err, _ = launcher.run(output_dir, _flags(data, output_dir))
    assert status == 0, err[-3000:]
    return output_dir


def _arrays(prefix):
    reader = tf.train.load_checkpoint(str(prefix))
    return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()}


def _assert_same_final(got_dir, want_dir, step=STEPS):
    got, want = _arrays(got_dir / f"ckpt-{step}"), _arrays(want_dir / f"ckpt-{step}")
    assert set(got) == set(want) and "training_state/optimizer/iterations" in got
    differing = [n for n in want if not np.array_equal(got[n], want[n])]
    assert not differing, differing[:5]


def _temporaries(directory) -> list[str]:
    return [
        os.path.join(folder, name)
        for folder, dirs, files in os.walk(directory)
        for name in dirs + files
        if ".tmp-" in name
    ]


def _stopped_at_8(straight, output_dir):
    """A copy of the straight run as a run stopped after its checkpoint at 8 leaves it."""
    from bert.checkpoints import write_checkpoint_index

    shutil.copytree(straight, output_dir)
    for path in glob.glob(str(output_dir / "ckpt-10.*")) + glob.glob(
        str(output_dir / "worker_state/ckpt-10-*")
    ):
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    write_checkpoint_index(str(output_dir), [str(output_dir / "ckpt-6"), str(output_dir / "ckpt-8")])
    return output_dir


def _resumed_from(stdout, prefix):
    assert f"Resuming from {prefix}." in stdout, stdout[-2000:]


# ---- a damaged newest checkpoint ---------------------------------------------------------------


def _truncate(path):
    os.truncate(path, os.path.getsize(path) // 2)
    return os.path.getsize(path)


def _flip_a_byte(path):
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))


@pytest.mark.parametrize(
    "damage", ["truncated data file", "truncated index", "missing data file", "flipped byte"]
)
def test_a_damaged_newest_checkpoint_is_set_aside_and_the_one_before_continues(
    launcher, data, straight, tmp_path, damage
):
    out = tmp_path / "run"
    shutil.copytree(straight, out)
    data_file, index_file = out / DATA.format(10), out / "ckpt-10.index"
    written = {p: os.path.getsize(p) for p in (data_file, index_file)}
    if damage == "truncated data file":
        what = f"{data_file.name} is {_truncate(data_file)} bytes but {written[data_file]} were written"
    elif damage == "truncated index":
        what = f"{index_file.name} is {_truncate(index_file)} bytes but {written[index_file]} were written"
    elif damage == "missing data file":
        os.remove(data_file)
        what = f"{data_file.name} is missing"
    else:  # same size, other bytes: TensorFlow's per-tensor checksum finds it
        _flip_a_byte(data_file)
        what = r"tensor \S+ of ckpt-10 does not read back \(.*Checksum does not match.*\)"
    status, stdout, err, _ = launcher.run(out, _flags(data, out))
    assert status == 0, err[-3000:]
    sentence = (
        f"Checkpoint {out}/ckpt-10 is damaged ({what}): set aside as {out}/damaged/ckpt-10; "
        f"continuing from {out}/ckpt-8, the newest intact checkpoint."
    )
    if damage == "flipped byte":
        assert re.search(re.escape(sentence).replace(re.escape(what), what), err), err[-3000:]
    else:
        assert sentence in err, err[-3000:]
    _resumed_from(stdout, out / "ckpt-8")
    # Set aside, never deleted: the damaged files are there as they were found.
    aside = out / "damaged" / "ckpt-10"
    kept = {"ckpt-10.index", "ckpt-10.manifest.json", "worker_state"}
    assert set(os.listdir(aside)) == kept | ({DATA.format(10)} if damage != "missing data file" else set())
    assert os.listdir(aside / "worker_state") == ["ckpt-10-rank-0-of-1"]
    if damage == "truncated data file":
        assert os.path.getsize(aside / DATA.format(10)) == written[data_file] // 2
    _assert_same_final(out, straight)


def test_no_intact_checkpoint_is_one_sentence_and_status_2_and_moves_nothing(
    launcher, data, straight, tmp_path
):
    out = _stopped_at_8(straight, tmp_path / "run")
    originals = {n: (out / n).read_bytes() for n in (DATA.format(6), DATA.format(8))}
    sizes = {n: _truncate(out / n) for n in originals}
    status, _, err, _ = launcher.run(out, _flags(data, out))
    assert status == 2, err[-3000:]
    assert (
        f"run_pretraining: error: No checkpoint in {out} is intact (ckpt-8: {DATA.format(8)} is "
        f"{sizes[DATA.format(8)]} bytes but {len(originals[DATA.format(8)])} were written; ckpt-6: "
        f"{DATA.format(6)} is {sizes[DATA.format(6)]} bytes but {len(originals[DATA.format(6)])} were "
        "written): restore their files, or move them away to start afresh, and re-run."
    ) in err, err[-3000:]
    assert not (out / "damaged").exists() and (out / "ckpt-8.index").exists()
    for name, content in originals.items():  # the fix: the files restored
        (out / name).write_bytes(content)
    status, stdout, err, _ = launcher.run(out, _flags(data, out))
    assert status == 0, err[-3000:]
    _resumed_from(stdout, out / "ckpt-8")
    _assert_same_final(out, straight)


def test_a_corrupted_checkpoint_index_loses_nothing(launcher, data, straight, tmp_path):
    out = _stopped_at_8(straight, tmp_path / "run")
    (out / "checkpoint").write_bytes(bytes(range(256)) * 4)
    status, stdout, err, _ = launcher.run(out, _flags(data, out))
    assert status == 0, err[-3000:]
    assert (
        f"The checkpoint index {out}/checkpoint could not be read: rewritten from the checkpoints' "
        f"records (the newest intact is {out}/ckpt-8)."
    ) in err, err[-3000:]
    _resumed_from(stdout, out / "ckpt-8")
    assert tf.train.latest_checkpoint(str(out)) == str(out / "ckpt-10")  # TF's tools read it again
    _assert_same_final(out, straight)


# ---- a save that fails ---------------------------------------------------------------------------


def _unmount(target, mounts):
    subprocess.run(["umount", str(target)], check=True)
    mounts.made.remove(str(target))


@pytest.mark.parametrize("fault", ["disk_full", "read_only", "vanish"])
def test_a_failed_save_is_one_sentence_leaves_nothing_behind_and_the_rerun_continues(
    launcher, data, straight, tmp_path, mounts, fault
):
    root = tmp_path
    if fault == "disk_full":
        root = tmp_path / "small_disk"
        root.mkdir()
        mounts("-t", "tmpfs", "-o", "size=4m", "tmpfs", target=root)
    elif fault == "read_only":  # the child bind-mounts the directory read-only: can this machine?
        probe = tmp_path / "probe"
        probe.mkdir()
        mounts("--bind", str(probe), target=probe)
        _unmount(probe, mounts)
    out = root / "run"
    request = {"at_save": 6, "kind": fault, "ballast": str(root / "ballast"), "leave": 64 << 10}
    status, _, err, _ = launcher.run(out, _flags(data, out), fault=request)
    if fault == "read_only":
        mounts.made.append(str(out))  # the child mounted it: unmounted after the test whatever happens
    assert status == 2 and status != PREEMPTED_EXIT_STATUS, err[-3000:]
    reason, last, fix = {
        "disk_full": (
            r"no space left on the device: about [\d.]+ KiB \((\d+) bytes\) are needed and "
            r"[\d.]+ KiB \((\d+) bytes\) are free",
            f"the last intact checkpoint is {out}/ckpt-4",
            "free space there",
        ),
        "read_only": (
            re.escape("the file system is read-only"),
            f"the last intact checkpoint is {out}/ckpt-4",
            "make the directory writable",
        ),
        "vanish": (
            re.escape("the directory no longer exists"),
            f"the last intact checkpoint was {out}/ckpt-4",
            "bring the directory back",
        ),
    }[fault]
    sentence = re.search(
        rf"run_pretraining: error: Could not write checkpoint 6 in {re.escape(str(out))} \({reason}\); "
        rf"{re.escape(last)}: {fix}, then re-run the same command to continue from there\.",
        err,
    )
    assert sentence, err[-3000:]
    if fault == "disk_full":
        needed, free = int(sentence.group(1)), int(sentence.group(2))
        assert needed > free and needed > os.path.getsize(straight / DATA.format(6))
        os.remove(root / "ballast")  # the fix
    elif fault == "read_only":
        _unmount(out, mounts)
    else:
        os.rename(str(out) + ".gone", out)
    # Nothing of the failed save is left: no temporary, no file of checkpoint 6.
    assert _temporaries(out) == []
    assert not glob.glob(str(out / "ckpt-6*")) and not glob.glob(str(out / "worker_state" / "ckpt-6-*"))
    assert tf.train.latest_checkpoint(str(out)) == str(out / "ckpt-4")

    status, stdout, err, _ = launcher.run(out, _flags(data, out))
    assert status == 0, err[-3000:]
    _resumed_from(stdout, out / "ckpt-4")
    _assert_same_final(out, straight)


# ---- kill -9 -------------------------------------------------------------------------------------


def test_kill_9_at_20_seeded_moments_inside_and_between_saves_loses_nothing(
    launcher, data, straight, tmp_path
):
    """Each child is killed (SIGKILL, no cleanup) just before its k-th file-system event or logged
    update, k drawn by random.Random(KILL_SEED) from 1..KILL_EVENTS; the next child is the same
    command again. A chain that ends is checked against the straight run and a new one starts."""
    from bert.checkpoints import checkpoint_problem
    from training.checkpointing import committed_checkpoints

    rng = random.Random(KILL_SEED)
    kills, completed, chain = [], 0, 0
    out = tmp_path / f"chain_{chain}"
    while True:
        k = rng.randint(1, KILL_EVENTS) if len(kills) < KILLS else None
        status, stdout, err, events = launcher.run(out, _flags(data, out), kill_at=k or 10**9)
        assert "damaged" not in err and "could not be read" not in err, err[-3000:]  # no kill damages
        if status == -9:
            (event,) = events
            kills.append(event)
            # What a re-run will trust is intact: every finished checkpoint reads back.
            for prefix in committed_checkpoints(str(out)):
                assert checkpoint_problem(prefix) is None, (event, prefix)
            continue
        assert status == 0, err[-3000:]
        _assert_same_final(out, straight)
        assert not (out / "damaged").exists()
        completed += 1
        if len(kills) >= KILLS:
            break
        chain += 1
        out = tmp_path / f"chain_{chain}"
    inside = [e for e in kills if e["where"].startswith("inside save")]
    print(f"{len(kills)} kills ({len(inside)} inside saves) over {completed} completed run(s):")
    for event in kills:
        print(f"  event {event['event']}: {event['what']} {event['file']} ({event['where']})")
    assert len(kills) == KILLS and len(inside) >= 5 and len(kills) - len(inside) >= 5


# ---- two workers ---------------------------------------------------------------------------------


def test_a_missing_worker_state_of_rank_1_sets_the_checkpoint_aside_on_both_workers(tmp_path):
    data = tiny.setup(tmp_path / "data", files=2, per_file=40)
    env = worker_env()

    def command(output_dir):
        flags = _flags(data, output_dir, num_train_steps=6, use_horovod=True)
        return [*HOROVODRUN, os.path.join(ROOT, "run_pretraining.py"), *flags]

    straight, out = tmp_path / "straight", tmp_path / "run"
    result = subprocess.run(command(straight), env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    shutil.copytree(straight, out)
    shutil.rmtree(out / "worker_state" / "ckpt-6-rank-1-of-2")
    result = subprocess.run(command(out), env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    missing = re.escape("worker_state/ckpt-6-rank-1-of-2/state.data-00000-of-00001 is missing")
    sentences = re.findall(
        rf"Checkpoint {re.escape(str(out))}/ckpt-6 is damaged \({missing}\): set aside as "
        rf"{re.escape(str(out))}/damaged/ckpt-6; continuing from {re.escape(str(out))}/ckpt-4, the newest "
        r"intact checkpoint\.",
        result.stdout + result.stderr,
    )
    assert len(sentences) == 1, (result.stdout + result.stderr)[-3000:]  # rank 0 says it, once
    assert f"Resuming from {out}/ckpt-4." in result.stdout
    assert sorted(os.listdir(out / "damaged" / "ckpt-6" / "worker_state")) == ["ckpt-6-rank-0-of-2"]
    _assert_same_final(out, straight, step=6)


# ---- fine-tuning -------------------------------------------------------------------------------


def test_fine_tuning_sets_a_damaged_newest_checkpoint_aside_too(launcher, model_files, tmp_path):
    from finetuning_runs import GLUE
    from finetuning_runs import _flags as finetuning_flags

    def flags(output_dir):
        values = dict(task_name="MRPC", data_dir=GLUE, num_train_epochs=2.5, save_checkpoints_steps=2)
        return finetuning_flags(
            model_files, output_dir, "--do_train", keep_checkpoints=KEEP, seed=7, **values
        )

    straight, out = tmp_path / "straight", tmp_path / "run"
    status, _, err, _ = launcher.run(straight, flags(straight), module="run_classifier")
    assert status == 0, err[-3000:]
    shutil.copytree(straight, out)
    written = os.path.getsize(out / DATA.format(5))
    cut = _truncate(out / DATA.format(5))
    status, _, err, _ = launcher.run(out, flags(out), module="run_classifier")
    assert status == 0, err[-3000:]
    assert (
        f"Checkpoint {out}/ckpt-5 is damaged ({DATA.format(5)} is {cut} bytes but {written} were written): "
        f"set aside as {out}/damaged/ckpt-5; continuing from {out}/ckpt-4, the newest intact checkpoint."
    ) in err, err[-3000:]
    _assert_same_final(out, straight, step=5)


def test_write_errors_read_as_their_cause():
    from common.files import describe_write_error, write_error_number

    full = tf.errors.ResourceExhaustedError(None, None, "/x/.ckpt-8.tmp-1/ckpt.data; No space left on device")
    assert write_error_number(full) == errno.ENOSPC
    assert write_error_number(OSError(errno.EROFS, "Read-only file system")) == errno.EROFS
    assert (
        describe_write_error(PermissionError(errno.EACCES, "Permission denied"), "/") == "permission denied"
    )
    assert describe_write_error(full, "/", 3 << 20).startswith(
        "no space left on the device: about 3.0 MiB (3145728 bytes) are needed and "
    )
    assert describe_write_error(RuntimeError("something else.\nmore"), "/") == "something else"
