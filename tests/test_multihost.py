"""The pretraining launcher across two real hosts: two network namespaces joined by a veth pair,
each with its own address, host name and sshd (tests/netns_hosts.py).

`bash scripts/run_pretraining_lamb.sh` runs both phases with num_gpus=2 from the first host,
- through horovodrun -H host1:1,host2:1 (Gloo; rank 1 started over ssh on the second host),
- through mpirun --hostfile (OpenMPI's daemons over ssh; Horovod's MPI controller),
- submitted with `sbatch -N 2 scripts/run.sub` to a real SLURM whose two nodes are the two hosts
  (tests/slurm_cluster.py), phase 1 alone: with mpirun, which takes the allocation from SLURM and
  starts its daemon on the second node through srun, and with horovodrun, whose -H the launcher
  makes from the allocation (SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE),
and every run ends with both ranks holding the same weights, equal (float32 summation order
aside) to one process trained with the doubled batch and the doubled peak rate. Under the same
SLURM, two MPI ranks started by run.sub's srun meet although one sees its PMIx fences' releases
late (tests/late_fence.c), where a plain srun's ranks end in a segmentation fault.

Rank 0 writes the checkpoints; what rank 1 holds is recorded by a sitecustomize module put on the
ranks' PYTHONPATH (horovodrun passes the environment, mpirun gets -x): in a process running
run_pretraining.py it wraps training.job.run, which returns the trained model, and
saves each rank's final weights, host name and network namespace. Nothing else is replaced.

The comparison is exact because the data order does not depend on the worker count
(training/data_order.py): both runs read the same files, the one process a micro-batch of 2B where
the two workers take a micro-batch of B each, the same sequences in every update.
"""

import json
import os
import random
import shlex
import subprocess
import sys
import time

import numpy as np
import pytest

import netns_hosts
from conftest import LAUNCH_ENV, ROOT, worker_env
from launch.workers import UsageError, expand_hostlist, slurm_hosts, tasks_per_node, trial_prefix
from tools import tiny_pretraining as tiny

BATCH = {1: 2, 2: 1}  # per-worker micro-batch of each phase (phase 2: 2 updates from 1 phase-1 update)
SHAPES = {1: (128, 20), 2: (512, 80)}  # the launcher's phases
UPDATES = {1: 4, 2: 2}  # train_steps 5: 90% -> 4, then (5 - 4) x 4 / 2 = 2
RATES = (1e-2, 5e-3)  # per worker; the one-process run takes them doubled
RUN_FLAGS = ["--shuffle_buffer=1", "--seed=7", "--log_every_n_steps=1"]

RECORDER = """
import os, sys

if os.path.basename(sys.argv[0]) == "run_pretraining.py" and os.environ.get("RANK_WEIGHTS_DIR"):
    from training import job

    _run = job.run

    def run(settings, *args, **kwargs):
        result = _run(settings, *args, **kwargs)
        import socket
        import numpy as np
        from bert.checkpoints import model_variables
        from launch.workers import launched_world

        size, rank = launched_world(os.environ)
        weights = {n.replace("/", "."): v.numpy() for n, v in model_variables(result["model"]).items()}
        name = f"{os.path.basename(settings.output_dir)}.rank{rank}-of-{size}.npz"
        where = dict(host=socket.gethostname(), netns=os.stat("/proc/self/ns/net").st_ino)
        np.savez(os.path.join(os.environ["RANK_WEIGHTS_DIR"], name), **where, **weights)
        return result

    job.run = run
"""


def _record(rng, seq, predictions) -> bytes:
    """A short pair padded to the phase's shape, with 1 to 6 masked positions."""
    from data.pretraining import schema

    body = [rng.randrange(5, tiny.VOCAB) for _ in range(rng.randrange(6, 30))]
    split = rng.randrange(1, len(body))
    ids = [2] + body[:split] + [3] + body[split:] + [3]
    segments = [0] * (split + 2) + [1] * (len(ids) - split - 2)
    candidates = [i for i, t in enumerate(ids) if t not in (2, 3)]
    positions = sorted(rng.sample(candidates, rng.randrange(1, 7)))
    labels = [ids[p] for p in positions]
    masked = [4 if i in positions else t for i, t in enumerate(ids)]
    features = schema.pad_features(masked, segments, positions, labels, rng.random() < 0.5, seq, predictions)
    return schema.serialize_example(features)


def _write(path, records) -> None:
    from data.pretraining import tfrecord

    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tfrecord.RecordWriter(str(path)) as w:
        for record in records:
            w.write(record)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Config (the tests' tiny model, dropout off, 512 positions), vocab, and per phase two
    training files."""
    root = tmp_path_factory.mktemp("corpus")
    paths = tiny.setup(root / "tiny", files=1, per_file=1, eval_per_file=1, dropout=False)
    with open(paths["bert_config_file"]) as f:
        config = dict(json.load(f), max_position_embeddings=512)
    (root / "bert_config.json").write_text(json.dumps(config))
    for phase, (seq, predictions) in SHAPES.items():
        rng = random.Random(phase)
        n = BATCH[phase] * UPDATES[phase]
        for k in range(2):
            records = [_record(rng, seq, predictions) for _ in range(n)]
            _write(root / "data" / f"phase{phase}" / "training" / f"part-{k:02d}.tfrecord", records)
    return {"root": root, "config": str(root / "bert_config.json"), "vocab": paths["vocab_file"]}


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    with netns_hosts.started(tmp_path_factory.mktemp("hosts")) as two:
        yield two


def _launch(
    corpus,
    results,
    workers,
    first_host=None,
    script=("scripts/run_pretraining_lamb.sh",),
    submit=None,
    **env,
):
    """run_pretraining_lamb.sh with the tiny settings: num_gpus=`workers`, per-worker batches
    BATCH (doubled with one worker), peak rates RATES per worker (doubled with one worker). Run
    here, or from `first_host`, or by `submit(command, env)` (a SLURM job), which returns the
    command's output."""
    scale = 2 if workers == 1 else 1
    args = [
        str(BATCH[1] * scale),
        str(BATCH[2] * scale),
        "2",
        str(RATES[0] * scale),
        str(RATES[1] * scale),
        "fp32",
        "false",
        str(workers),
        "1",
        "1",
        "5",
        "100",
        "1",
        "1",
        "tiny",
        "--do_eval=false",
        "--",
        *RUN_FLAGS,
    ]
    data = corpus["root"] / "data"
    weights = results / "ranks"
    weights.mkdir(parents=True)
    (results / "site").mkdir()
    (results / "site" / "sitecustomize.py").write_text(RECORDER)
    full_env = {k: v for k, v in worker_env().items() if k not in LAUNCH_ENV and not k.startswith("SLURM_")}
    full_env.update(
        PYTHONPATH=f"{results / 'site'}{os.pathsep}{ROOT}",
        RANK_WEIGHTS_DIR=str(weights),
        BERT_CONFIG=corpus["config"],
        VOCAB_FILE=corpus["vocab"],
        PHASE1_DATA=str(data / "phase1"),
        PHASE2_DATA=str(data / "phase2"),
        RESULTS_DIR=str(results),
        CUDA_VISIBLE_DEVICES="",
        **env,
    )
    command = ["bash", *script, *args]
    if submit is not None:
        started = time.monotonic()
        stdout = submit(command, full_env)
        print(f"{' '.join(script)} as a SLURM job: {time.monotonic() - started:.1f} s")
        return subprocess.CompletedProcess(command, 0, stdout, ""), _rank_weights(weights)
    if first_host is not None:
        # The environment goes through env(1): `ip netns exec` keeps it, unshare and sh too.
        command = first_host.command(["env", "-i", *(f"{k}={v}" for k, v in full_env.items()), *command])
    started = time.monotonic()
    result = subprocess.run(command, env=full_env, cwd=ROOT, capture_output=True, text=True, timeout=400)
    elapsed = time.monotonic() - started
    assert result.returncode == 0, f"{command}\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    print(f"{' '.join(script)} with {workers} worker(s): {elapsed:.1f} s")
    return result, _rank_weights(weights)


def _rank_weights(directory) -> dict:
    return {p.name: dict(np.load(p)) for p in directory.iterdir()}


@pytest.fixture(scope="module")
def one_process(corpus, tmp_path_factory):
    """The reference: one process, the doubled batch and rate, on this machine's own namespace."""
    results = tmp_path_factory.mktemp("one_process")
    result, ranks = _launch(corpus, results, 1)
    assert "workers: 1 (one process)" in result.stdout
    for phase in (1, 2):  # what the recorder saves is what the process trained (and checkpointed)
        recorded = ranks[f"phase_{phase}.rank0-of-1.npz"]
        recorded.pop("host"), recorded.pop("netns")
        saved = _checkpoint(results, phase)
        assert set(recorded) == set(saved)
        for name, value in saved.items():
            np.testing.assert_array_equal(recorded[name], value, err_msg=name)
    return results, ranks


def _checkpoint(results, phase):
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(results / f"phase_{phase}" / f"ckpt-{UPDATES[phase]}"))
    names = [n for n in reader.get_variable_to_shape_map() if n.startswith(("bert/", "cls/"))]
    names = [n for n in names if not n.endswith(("/adam_m", "/adam_v"))]
    return {n.replace("/", "."): reader.get_tensor(n) for n in names}


def _across_two_hosts(
    hosts,
    corpus,
    reference,
    results,
    launcher,
    launcher_args,
    phases=(1, 2),
    script=None,
    submit=None,
    **env,
):
    """The launcher (or `script`) run from the first host (or as `submit` runs it) with
    HOROVOD_LAUNCHER=`launcher`; checks that rank r ran on host r inside its namespace, that the
    gradients crossed the veth, and that both ranks end equal to each other and to the one-process
    run."""
    a, b = hosts.hosts
    before = hosts.nic_bytes()
    result, ranks = _launch(
        corpus,
        results,
        2,
        first_host=a,
        script=script or ("scripts/run_pretraining_lamb.sh",),
        submit=submit,
        HOROVOD_LAUNCHER=launcher,
        LAUNCHER_ARGS=shlex.join(launcher_args),
        **env,
    )
    after = hosts.nic_bytes()
    one_results, _ = reference
    for phase in phases:
        rank0, rank1 = (ranks[f"phase_{phase}.rank{r}-of-2.npz"] for r in (0, 1))
        # Each rank ran on its own host (rank 1 through ssh on the second), in its namespace.
        for rank, host in ((rank0, a), (rank1, b)):
            assert (str(rank.pop("host")), int(rank.pop("netns"))) == (host.name, hosts.netns_id(host))
        saved, expected = _checkpoint(results, phase), _checkpoint(one_results, phase)
        assert set(saved) == set(rank0) == set(expected) and len(saved) == 2 * 16 + 5 + 2 + 5 + 2
        start = _checkpoint(results, 1) if phase == 2 else None
        moved = off = 0.0
        for name, value in saved.items():
            # Both ranks hold the same weights bit for bit, and rank 0 saved them.
            np.testing.assert_array_equal(rank1[name], rank0[name], err_msg=name)
            np.testing.assert_array_equal(value, rank0[name], err_msg=name)
            # ...equal to one process with the doubled batch, but for float32 summation order.
            np.testing.assert_allclose(
                value, expected[name], rtol=0, atol=1e-6, err_msg=f"phase {phase} {name}"
            )
            off = max(off, float(np.abs(value - expected[name]).max()))
            if start is not None:
                moved = max(moved, float(np.abs(value - start[name]).max()))
        print(f"phase {phase}: max |two hosts - one process| = {off:.2e}")
        if start is not None:
            assert moved > 1e-3  # phase 2 trained: the equality above says something
    # Every update's float32 gradients crossed the veth both ways: a two-rank ring allreduce sends
    # half the model each way to reduce and half to gather (ssh and logs are a few kB).
    model_bytes = sum(v.nbytes for v in saved.values())
    for host in hosts.hosts:
        sent, received = (after[host.name][i] - before[host.name][i] for i in (0, 1))
        assert min(sent, received) > model_bytes * sum(UPDATES[p] for p in phases) / 2, (host, sent, received)
    with open(results / "phase_1" / "resolved_config.json") as f:
        resolved = json.load(f)
    assert resolved["workers"] == 2 and resolved["global_batch_size"] == 2 * BATCH[1]
    assert _logged(results / "phase_1") == list(range(1, UPDATES[1] + 1))
    return result


def _logged(output_dir):
    with open(output_dir / "log.jsonl") as f:
        return [json.loads(line)["step"] for line in f]


def _horovodrun_args(hosts) -> list:
    """horovodrun's ssh port and key, and the NIC Gloo uses (the same name on every host)."""
    return ["-p", str(hosts.port), "--ssh-identity-file", hosts.key, "--network-interface", hosts.nic]


@pytest.mark.process
@pytest.mark.slow
def test_horovodrun_across_two_hosts_equals_one_process_with_doubled_batch(
    hosts, corpus, one_process, tmp_path
):
    a, b = hosts.hosts
    hosts_arg = f"{a.address}:1,{b.address}:1"
    args = ["-H", hosts_arg, *_horovodrun_args(hosts), "--disable-cache"]
    result = _across_two_hosts(hosts, corpus, one_process, tmp_path, "horovodrun", args)
    assert f"workers: 2 (horovodrun -np 2 on {hosts_arg})" in result.stdout


@pytest.mark.process
@pytest.mark.slow
def test_mpirun_hostfile_across_two_hosts_equals_one_process_with_doubled_batch(
    hosts, corpus, one_process, tmp_path
):
    a, b = hosts.hosts
    hostfile = tmp_path / "hostfile"
    hostfile.write_text(f"{a.name} slots=1\n{b.name} slots=1\n")
    args = ["--hostfile", str(hostfile), "--mca", "plm_rsh_args", shlex.join(hosts.ssh_options())]
    for component in ("btl_tcp_if_include", "oob_tcp_if_include"):  # MPI's traffic and its daemons'
        args += ["--mca", component, hosts.nic]
    args += ["-x", "RANK_WEIGHTS_DIR"]  # the recorder's; the launcher forwards PYTHONPATH itself
    result = _across_two_hosts(hosts, corpus, one_process, tmp_path, "mpirun", args)
    assert "workers: 2 (mpirun -np 2)" in result.stdout


@pytest.fixture(scope="module")
def slurm_nodes(hosts, tmp_path_factory):
    """A real SLURM cluster with a node on each host (tests/slurm_cluster.py), for this module."""
    import slurm_cluster

    cluster = slurm_cluster.install_and_start(str(tmp_path_factory.mktemp("slurm_nodes")), hosts)
    yield cluster
    cluster.stop()
    assert not cluster._leftovers(), "the two-node SLURM cluster left processes running"


def _sbatch(cluster, log):
    """A submit for _launch: `sbatch -N 2 --ntasks-per-node=1 scripts/run.sub COMMAND` (from the
    first host, as a user on a login node), waited for; the job must complete, and its output
    (`log`) is returned."""

    def submit(command, env) -> str:
        job = cluster.sbatch(
            "-N",
            "2",
            "--ntasks-per-node=1",
            f"--output={log}",
            "scripts/run.sub",
            *command,
            env=env,
            cwd=ROOT,
        )
        fields = cluster.wait_job(
            job,
            lambda f: f["JobState"] not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"),
            400,
            "ended",
        )
        output = log.read_text() if log.exists() else f"(no {log})"
        assert (fields["JobState"], fields["ExitCode"]) == ("COMPLETED", "0:0"), f"{fields}\n{output[-4000:]}"
        return output

    return submit


@pytest.mark.process
@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["srun", "mpirun", "horovodrun"])
def test_run_sub_trains_across_two_slurm_nodes(hosts, slurm_nodes, corpus, one_process, tmp_path, launcher):
    """sbatch -N 2 scripts/run.sub under a real SLURM whose two nodes are the two hosts: srun
    starts a task on each node (CONT=none: no container), each running the launcher, whose worker
    joins the other through PMIx; mpirun takes the allocation from SLURM and starts its daemon on
    the second node through srun; horovodrun gets the allocation's hosts from the launcher
    (SLURM_JOB_NODELIST) and reaches the second over ssh."""
    a, b = hosts.hosts
    env = {}
    if launcher == "srun":
        args, env["CONT"] = [], "none"
        ran = f"[run.sub] 2 node(s) x 1 task(s) = 2 workers; no container (CONT=none); code {ROOT}"
        workers = "workers: 2 (this process is one)"
    elif launcher == "mpirun":
        args = [
            arg for nic in ("btl_tcp_if_include", "oob_tcp_if_include") for arg in ("--mca", nic, hosts.nic)
        ]
        args += ["-x", "RANK_WEIGHTS_DIR"]  # the recorder's; the launcher forwards PYTHONPATH itself
        workers = "workers: 2 (mpirun -np 2)"
    else:
        args = [*_horovodrun_args(hosts), "--disable-cache"]
        workers = f"workers: 2 (horovodrun -np 2 on {a.name}:1,{b.name}:1 (the SLURM allocation))"
    if launcher != "srun":
        ran = f"[run.sub] nodes {hosts.nodelist} (1(x2) task(s) per node, 2 in all) through {launcher} from {a.name}"
    # Phase 1 alone (the phase scripts share the engine): how the ranks start is what this is about.
    result = _across_two_hosts(
        hosts,
        corpus,
        one_process,
        tmp_path,
        "" if launcher == "srun" else launcher,
        args,
        phases=(1,),
        script=("scripts/run_pretraining_lamb_phase1.sh",),
        submit=_sbatch(slurm_nodes, tmp_path / "job.out"),
        **env,
    )
    assert ran in result.stdout
    assert workers in result.stdout
    assert not (tmp_path / "phase_2").exists()


# Two MPI ranks that talk at once after MPI_Init, as a data stage's ranks (mpi4py) or Horovod's do.
MPI_TALK = (
    "from mpi4py import MPI; world = MPI.COMM_WORLD.Dup(); "
    "print('rank', world.Get_rank(), 'of', world.Get_size(), 'sum', world.allreduce(world.Get_rank()))"
)


@pytest.mark.process
@pytest.mark.slow
def test_run_sub_tasks_wait_for_a_late_rank_in_mpi_init(hosts, slurm_nodes, tmp_path):
    """A rank that sees its PMIx fences' releases late (tests/late_fence.c, one second on rank 0:
    a worker a busy machine keeps from the CPU) under this SLURM's default fences: the barrier that
    ends MPI_Init holds no one (each node's tree fence releases its own task), rank 1 sends while
    rank 0 still waits for the modex, and OpenMPI ends rank 0 with a segmentation fault (what a
    loaded machine meets now and then: 1 in 80 such starts here). run.sub's srun path asks for the
    ring fence, and the same ranks meet."""
    shim = tmp_path / "late_fence.so"
    build = [
        "gcc",
        "-shared",
        "-fPIC",
        "-o",
        str(shim),
        os.path.join(ROOT, "tests", "late_fence.c"),
        "-ldl",
        "-lpthread",
    ]
    subprocess.run(build, check=True, capture_output=True, text=True)
    python = sys.executable
    plain = slurm_nodes.call(
        "env",
        f"LD_PRELOAD={shim}",
        "srun",
        "--mpi=pmix",
        "-N",
        "2",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
        python,
        "-c",
        MPI_TALK,
        timeout_s=120,
    )
    printed = plain.stdout + plain.stderr
    assert plain.returncode != 0 and "Segmentation fault" in printed, printed[-4000:]
    env = {k: v for k, v in worker_env().items() if k not in LAUNCH_ENV and not k.startswith("SLURM_")}
    env.update(CONT="none", LD_PRELOAD=str(shim))
    output = _sbatch(slurm_nodes, tmp_path / "job.out")([python, "-c", MPI_TALK], env)
    assert "0: rank 0 of 2 sum 1" in output and "1: rank 1 of 2 sum 1" in output, output[-4000:]


# ---- the launcher engine's part (launch/workers.py), without hosts -----------------------------


@pytest.mark.parametrize(
    "nodelist, hosts",
    [
        ("gpu[01-03,7],login", ["gpu01", "gpu02", "gpu03", "gpu7", "login"]),
        ("rack[1-2]-n[08-09]", ["rack1-n08", "rack1-n09", "rack2-n08", "rack2-n09"]),
        ("dgx-a100-17", ["dgx-a100-17"]),
        ("a,b[9-10]", ["a", "b9", "b10"]),
    ],
)
def test_slurm_node_lists_expand_as_scontrol_show_hostnames_does(nodelist, hosts):
    assert expand_hostlist(nodelist) == hosts


def test_slurm_task_slots_per_node():
    assert tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-3]"}
    assert slurm_hosts({**env, "SLURM_TASKS_PER_NODE": "4,2(x2)"}) == [("n1", 4), ("n2", 2), ("n3", 2)]
    assert slurm_hosts({**env, "SLURM_NTASKS_PER_NODE": "8"}) == [("n1", 8), ("n2", 8), ("n3", 8)]
    assert slurm_hosts({"SLURM_JOB_NODELIST": "n[1-3]"}) == []  # not in an allocation
    with pytest.raises(UsageError, match="names 3 node"):
        slurm_hosts({**env, "SLURM_TASKS_PER_NODE": "2(x2)"})
    with pytest.raises(UsageError, match=r"cannot read the range \[a-b\]"):
        expand_hostlist("n[a-b]")


ALLOCATION = {
    "SLURM_JOB_ID": "7",
    "SLURM_JOB_NODELIST": "gpu[01-02]",
    "SLURM_TASKS_PER_NODE": "2(x2)",
    "HOROVOD_LAUNCHER": "horovodrun",
}


def test_horovodrun_in_an_allocation_starts_ranks_on_its_hosts():
    prefix = trial_prefix(4, ALLOCATION, "/v/bin/python", ["-p", "2222"])
    assert prefix[1:] == ["-np", "4", "--gloo", "-H", "gpu01:2,gpu02:2", "-p", "2222", "/v/bin/python"]
    # Hosts the user gave win; outside an allocation nothing is added; mpirun reads it itself.
    given = trial_prefix(4, ALLOCATION, "/v/bin/python", ["--hostfile", "h"])
    assert "-H" not in given and given[-3:-1] == ["--hostfile", "h"]
    assert "-H" not in trial_prefix(4, {"HOROVOD_LAUNCHER": "horovodrun"}, "/v/bin/python", [])
    assert "-H" not in trial_prefix(4, {**ALLOCATION, "HOROVOD_LAUNCHER": "mpirun"}, "/v/bin/python", [])
    with pytest.raises(
        UsageError, match=r"num_gpus=8 but the SLURM allocation has 4 task slot\(s\) on 2 node"
    ):
        trial_prefix(8, ALLOCATION, "/v/bin/python", [])


def test_horovodrun_meets_through_gloo_unless_told_otherwise():
    # Horovod built with MPI would otherwise pick mpirun, with options OpenMPI 5 misreads.
    assert trial_prefix(2, {}, "/v/bin/python", [])[1:4] == ["-np", "2", "--gloo"]
    assert "--gloo" not in trial_prefix(2, {}, "/v/bin/python", ["--mpi"])


def test_mpirun_forwards_the_project_and_horovod_nccl_tf_settings_to_remote_ranks():
    env = {
        "HOROVOD_LAUNCHER": "mpirun",
        "PYTHONPATH": "/r",
        "NCCL_DEBUG": "INFO",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    prefix = trial_prefix(2, {**env, "HOME": "/root", "SECRET": "x"}, "/v/bin/python", [])
    forwarded = [prefix[i + 1] for i, a in enumerate(prefix) if a == "-x"]
    assert forwarded == ["PATH", "HOROVOD_LAUNCHER", "NCCL_DEBUG", "PYTHONPATH", "TF_CPP_MIN_LOG_LEVEL"]


@pytest.mark.process
def test_the_launcher_shows_the_allocations_hosts():
    from test_pretraining_launcher import dry_run

    _, _, commands = dry_run("--num_gpus=4", env=ALLOCATION)
    assert commands[1][1:6] == ["-np", "4", "--gloo", "-H", "gpu01:2,gpu02:2"]
    result = subprocess.run(
        ["bash", "scripts/run_pretraining_lamb.sh", "--num_gpus=4", "--dry_run"],
        cwd=ROOT,
        env={**{k: v for k, v in os.environ.items() if k not in LAUNCH_ENV}, **ALLOCATION},
        capture_output=True,
        text=True,
    )
    assert "workers: 4 (horovodrun -np 4 on gpu01:2,gpu02:2 (the SLURM allocation))" in result.stdout
