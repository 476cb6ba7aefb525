"""A real SLURM cluster on this machine for the tests: munged, slurmctld and slurmd (Debian's
slurm-wlm and munge, installed by scripts/install_test_slurm.sh), started as root with a key,
sockets, state and a slurm.conf made for the run under a temporary directory.

One node (the `slurm_cluster` fixture, one per session): this machine, talking over the loopback
interface. slurmctld and slurmd listen on the loopback address this machine's name resolves to
(they bind to that name's address); where it resolves elsewhere, they talk on 127.0.0.1 but listen
on every address, accepting only requests signed with the run's munge key.

Two nodes: given tests/netns_hosts.py's two hosts, a slurmd runs on each (in its network and UTS
namespace, named and addressed as the host), slurmctld on the first, and the client commands
(sbatch, scontrol, ...) run there too; munged's socket is a file, which both namespaces reach.

Each node declares CPUS task slots (config_overrides: more than this machine's cores, as a GPU
node has one task per GPU)."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time

import psutil
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Twice scripts/run.sub's default --ntasks-per-node (8): beside tests/test_slurm.py's time-limited
# job, which asks for that default, its jobs of 2 tasks (two requeued, the straight one, the killed
# one) find slots at once instead of waiting for it to end.
CPUS = 16
# How long a job step's credential stays valid, and so how long a requeued job waits before it may
# start again: 30 s instead of SLURM's 120, still ample for a step to start on two busy cores.
CRED_EXPIRE_S = 30
MARK = "BERT_TEST_SLURM_CLUSTER"  # in the daemons' environment, so teardown finds their children


def _free_port(address: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((address, 0))
        return s.getsockname()[1]


class SlurmError(Exception):
    """The cluster could not be started; the message says which part and where its log is."""


class SlurmCluster:
    """munged + slurmctld + slurmd under `root`; `env` is the environment in which sbatch, scontrol
    and the other client commands (and the jobs they submit) use this cluster."""

    def __init__(self, root: str, hosts=None):
        """`hosts`: netns_hosts.TwoHosts, started (a node on each), or None (this machine)."""
        self.root = root
        self.name = f"bert{os.getpid()}{secrets.token_hex(3)}"  # a fresh StateSaveLocation's name
        self.hosts = list(hosts.hosts) if hosts else []
        if self.hosts:
            self.nodes = [(h.name, h.address) for h in self.hosts]
            self.loopback_name = False
        else:
            node = socket.gethostname().split(".")[0]
            try:
                resolved = socket.gethostbyname(node)
            except OSError:
                resolved = ""
            self.loopback_name = resolved.startswith("127.")
            self.nodes = [(node, resolved if self.loopback_name else "127.0.0.1")]
        self.node, self.address = self.nodes[0]  # slurmctld's
        self.conf = os.path.join(root, "slurm.conf")
        self.munge_socket = os.path.join(root, "munge", "munge.socket")
        self.env = self.environment(os.environ)
        self.daemons: dict[str, subprocess.Popen] = {}

    def environment(self, env) -> dict:
        """`env` for this cluster: its SLURM_CONF and mark, without an enclosing allocation's
        SLURM_*, SBATCH_*, SRUN_* and SALLOC_* settings (they would steer the tests' jobs)."""
        kept = {k: v for k, v in env.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))}
        return {**kept, "SLURM_CONF": self.conf, MARK: self.name}

    def log(self, daemon: str) -> str:
        return os.path.join(self.root, f"{daemon}.log")

    def _write_config(self) -> None:
        munge_dir = os.path.dirname(self.munge_socket)
        os.makedirs(munge_dir, mode=0o700)
        os.makedirs(os.path.join(self.root, "state"))
        for node, _ in self.nodes:
            for d in ("spool", "tmp"):
                os.makedirs(os.path.join(self.root, d, node))
        key = os.path.join(munge_dir, "munge.key")
        with open(os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400), "wb") as f:
            f.write(secrets.token_bytes(128))
        settings = {
            "ClusterName": self.name,
            "SlurmctldHost": f"{self.node}({self.address})",
            # A namespaced host's ports are all free: any number this machine has free will do.
            "SlurmctldPort": _free_port("127.0.0.1" if self.hosts else self.address),
            "SlurmdPort": _free_port("127.0.0.1" if self.hosts else self.address),
            "SlurmUser": "root",
            "SlurmdUser": "root",
            "AuthType": "auth/munge",
            "CredType": "cred/munge",
            # A requeued job waits cred_expire seconds before it may start again (120 by default).
            "AuthInfo": f"socket={self.munge_socket},cred_expire={CRED_EXPIRE_S}",
            "StateSaveLocation": os.path.join(self.root, "state"),
            "SlurmdSpoolDir": os.path.join(self.root, "spool", "%n"),  # %n: the node's name
            # srun --mpi=pmix's directories: per node, as the nodes share this machine's /tmp.
            "TmpFS": os.path.join(self.root, "tmp", "%n"),
            "SlurmctldPidFile": os.path.join(self.root, "slurmctld.pid"),
            "SlurmdPidFile": os.path.join(self.root, "slurmd-%n.pid"),
            "SlurmctldLogFile": self.log("slurmctld"),
            "SlurmdLogFile": self.log("slurmd-%n"),
            "SlurmctldDebug": "info",
            "SlurmdDebug": "info",
            "SelectType": "select/cons_tres",
            "SelectTypeParameters": "CR_CPU",
            "ProctrackType": "proctrack/linuxproc",
            "TaskPlugin": "task/none",
            "MpiDefault": "none",
            "JobAcctGatherType": "jobacct_gather/none",
            "AccountingStorageType": "accounting_storage/none",
            "SlurmdParameters": "config_overrides",
            "PlugStackConfig": os.path.join(self.root, "plugstack.conf"),  # not the host's plugins
            "JobRequeue": 1,
            "ReturnToService": 2,
            "MinJobAge": 3600,  # finished jobs stay visible to scontrol for the session
            "SchedulerParameters": "sched_interval=2",
        }
        if self.loopback_name:
            settings["CommunicationParameters"] = "NoCtldInAddrAny,NoInAddrAny"
        lines = [f"{k}={v}" for k, v in settings.items()]
        lines += [
            f"NodeName={node} NodeAddr={address} CPUs={CPUS} State=UNKNOWN" for node, address in self.nodes
        ]
        names = ",".join(node for node, _ in self.nodes)
        lines.append(f"PartitionName=test Nodes={names} Default=YES MaxTime=INFINITE State=UP")
        with open(settings["PlugStackConfig"], "w") as f:
            f.write("")
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")

    def _on(self, host, argv: list) -> list:
        """argv as run on `host` (a netns_hosts.Host), or here when None."""
        return host.command(argv, own_sysfs=False) if host else list(argv)

    def _start(self, name: str, argv: list, host=None) -> None:
        with open(self.log(name + ".out"), "w") as out:
            self.daemons[name] = subprocess.Popen(
                self._on(host, argv),
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _wait(self, what: str, ready, timeout_s: float, log: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            for name, process in self.daemons.items():
                if process.poll() is not None:
                    raise SlurmError(
                        f"{name} exited with status {process.returncode} before {what}; see {log}."
                    )
            if time.monotonic() > deadline:
                raise SlurmError(f"no {what} after {timeout_s:.0f} s; see {log}.")
            time.sleep(0.2)

    def start(self, timeout_s: float = 120) -> None:
        """Starts the daemons in the foreground (children of this process) and waits until sinfo
        shows every node idle."""
        self._write_config()
        munge_dir = os.path.dirname(self.munge_socket)
        self._start(
            "munged",
            [
                "/usr/sbin/munged",
                "--foreground",
                "--force",  # as root, with its files under a temporary directory
                f"--socket={self.munge_socket}",
                f"--key-file={munge_dir}/munge.key",
                f"--pid-file={munge_dir}/munged.pid",
                f"--seed-file={munge_dir}/munged.seed",
                f"--log-file={self.log('munged')}",
            ],
        )
        self._wait("munge socket", lambda: os.path.exists(self.munge_socket), timeout_s, self.log("munged"))
        controller = self.hosts[0] if self.hosts else None
        self._start("slurmctld", ["/usr/sbin/slurmctld", "-D", "-i", "-f", self.conf], controller)
        self._wait(
            "slurmctld answering",
            lambda: self.call("scontrol", "ping").returncode == 0,
            timeout_s,
            self.log("slurmctld"),
        )
        for i, (node, _) in enumerate(self.nodes):
            host = self.hosts[i] if self.hosts else None
            self._start(f"slurmd-{node}", ["/usr/sbin/slurmd", "-D", "-f", self.conf, "-N", node], host)
        self._wait(
            "every node idle in sinfo",
            lambda: set(self.node_states().values()) == {"idle"},
            timeout_s,
            self.log(f"slurmd-{self.node}"),
        )

    def call(self, *argv, timeout_s: float = 60) -> subprocess.CompletedProcess:
        """Runs a SLURM client command against this cluster (on slurmctld's host)."""
        argv = self._on(self.hosts[0] if self.hosts else None, argv)
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=timeout_s)

    def node_states(self) -> dict:
        """{node: sinfo's short state}; {} while slurmctld does not answer."""
        result = self.call("sinfo", "-h", "-N", "-o", "%N %t")
        if result.returncode != 0:
            return {}
        states = dict(line.split() for line in result.stdout.splitlines() if line.strip())
        return {node: states.get(node, "") for node, _ in self.nodes}

    def sbatch(self, *argv, env: dict, cwd: str = ROOT) -> str:
        """Submits a batch job from `cwd` with `env` (made this cluster's); its id."""
        result = subprocess.run(
            self._on(self.hosts[0] if self.hosts else None, ["sbatch", "--parsable", *argv]),
            env=self.environment(env),
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, f"sbatch failed: {result.stderr}"
        return result.stdout.strip().split(";")[0]

    def job(self, job_id: str) -> dict:
        """scontrol's fields of job `job_id` (JobState, Restarts, ExitCode, ...)."""
        result = self.call("scontrol", "-o", "show", "job", job_id)
        assert result.returncode == 0, f"scontrol show job {job_id}: {result.stderr}"
        return dict(re.findall(r"(\S+?)=(\S*)", result.stdout))

    def wait_job(self, job_id: str, done, timeout_s: float, what: str) -> dict:
        """Polls job `job_id` until done(fields) holds; fails naming `what` and the last state."""
        deadline = time.monotonic() + timeout_s
        while True:
            fields = self.job(job_id)
            if done(fields):
                return fields
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"job {job_id} not {what} after {timeout_s:.0f} s: JobState={fields.get('JobState')} "
                    f"Reason={fields.get('Reason')}; see {self.root}"
                )
            time.sleep(0.5)

    def _leftovers(self) -> list:
        """Processes started for this cluster (daemons, slurmstepd, job tasks) still running."""
        found = []
        for process in psutil.process_iter():
            try:
                if process.pid != os.getpid() and process.environ().get(MARK) == self.name:
                    found.append(process)
            except psutil.Error:
                continue
        return found

    def stop(self) -> None:
        """Cancels every job, stops the daemons and kills whatever they left running."""
        if "slurmctld" in self.daemons and self.daemons["slurmctld"].poll() is None:
            self.call("scancel", "--full", "--state=RUNNING")
            self.call("scancel", "--state=PENDING")
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and self.call("squeue", "-h", "-t", "RUNNING").stdout.strip():
                time.sleep(0.5)
        slurmds = [name for name in self.daemons if name.startswith("slurmd-")]
        for name in (*slurmds, "slurmctld", "munged"):
            process = self.daemons.get(name)
            if process and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        leftovers = self._leftovers()
        for process in leftovers:
            try:
                process.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(leftovers, timeout=30)


def install_and_start(root: str, hosts=None) -> SlurmCluster:
    """Installs what is missing (scripts/install_test_slurm.sh) and starts a cluster under
    `root` (a node on each of `hosts`, else this machine); fails the calling test with one
    sentence when either cannot be done."""
    install = subprocess.run(
        ["bash", os.path.join(ROOT, "scripts", "install_test_slurm.sh")], capture_output=True, text=True
    )
    if install.returncode != 0:
        pytest.fail(f"SLURM tests need slurm-wlm and munge: {install.stderr.strip()}", pytrace=False)
    if os.geteuid() != 0:
        pytest.fail(
            "SLURM tests start munged, slurmctld and slurmd as root: run them as root.", pytrace=False
        )
    cluster = SlurmCluster(root, hosts)
    try:
        cluster.start()
    except (SlurmError, OSError, subprocess.TimeoutExpired) as e:
        cluster.stop()
        pytest.fail(f"the test SLURM cluster did not start: {e}", pytrace=False)
    return cluster


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """One running SLURM cluster for the session, stopped (with its jobs) at the end."""
    cluster = install_and_start(str(tmp_path_factory.mktemp("slurm")))
    yield cluster
    cluster.stop()
    assert not cluster._leftovers(), "the test SLURM cluster left processes running"
    shutil.rmtree(os.path.join(cluster.root, "munge"), ignore_errors=True)  # the key
