"""Two hosts on this machine for the multi-host tests: two Linux network namespaces joined by a
veth pair, each with its own address, host name (its own UTS namespace) and sshd.

    bert-<token>-1  10.77.0.1/24 on bert0  <-- veth -->  bert0 on 10.77.0.2/24  bert-<token>-2

Both ends of the veth carry the same name, as every node of a cluster has the same NIC name
(horovodrun --network-interface and OpenMPI's *_if_include name one interface for all hosts).
Each namespace's /etc/hosts (`ip netns exec` bind-mounts /etc/netns/NS/hosts over it) names both
hosts, and its /etc/ssh/ssh_config keeps ssh's known_hosts in the run's directory, so nothing is
written under ~/.ssh. Each sshd has its own config, host key and authorized_keys in that directory,
listens only on its host's address, and accepts the run's own key. Names are unique per run, so a
leftover of a killed run never collides with the next; `stop` removes everything `start` made.

Needs root, `ip netns`, and Debian's openssh-server (scripts/install_test_hosts.sh installs it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import shutil
import signal
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUBNET = "10.77.0"
NIC = "bert0"
SSH_PORT = 2222
SSHD = "/usr/sbin/sshd"


@dataclasses.dataclass(frozen=True)
class Host:
    namespace: str  # the network namespace, unique per run
    name: str  # its host name (uname and /etc/hosts inside both namespaces)
    address: str

    def command(self, argv, own_sysfs: bool = True) -> list:
        """argv run on this host: in its network namespace and a UTS namespace named after it.
        `ip netns exec` also mounts the namespace's own /sys, which hides the machine's cgroup
        file systems; with own_sysfs=False, the machine's /sys stays (slurmd needs its cgroups)
        and the host's /etc/hosts is bound as `ip netns exec` binds it."""
        if not own_sysfs:
            hosts = os.path.join("/etc/netns", self.namespace, "hosts")
            rename = f'mount --bind {hosts} /etc/hosts && echo "$0" > /proc/sys/kernel/hostname && exec "$@"'
            return [
                "nsenter",
                f"--net=/run/netns/{self.namespace}",
                "unshare",
                "--uts",
                "--mount",
                "--",
                "sh",
                "-c",
                rename,
                self.name,
                *argv,
            ]
        rename = 'echo "$0" > /proc/sys/kernel/hostname && exec "$@"'
        return [
            "ip",
            "netns",
            "exec",
            self.namespace,
            "unshare",
            "--uts",
            "--",
            "sh",
            "-c",
            rename,
            self.name,
            *argv,
        ]


def unavailable_reason() -> str | None:
    """Why two namespaced hosts cannot be made here, or None when they can."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "network namespaces need root (ip netns add); this test runs as root in CI"
    if not shutil.which("ip") or not shutil.which("unshare"):
        return "iproute2's ip or util-linux's unshare is missing"
    probe = f"bert-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` fails on this machine: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def install_ssh() -> None:
    """Debian's openssh-server, installed by the project's script when missing (idempotent)."""
    script = os.path.join(ROOT, "scripts", "install_test_hosts.sh")
    result = subprocess.run(["bash", script], capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f"{script} failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")


def _run(*argv) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {result.stderr.strip()}")
    return result.stdout


class TwoHosts:
    """hostA and hostB with sshd running; `stop()` undoes everything, also after a failure."""

    def __init__(self, workdir):
        self.workdir = str(workdir)
        token = f"{os.getpid():x}{secrets.token_hex(2)}"
        # Named as a cluster's nodes are, so SLURM's compressed form covers both: bert-<token>-[1-2].
        self.hosts = [Host(f"bert-{token}-{i}", f"bert-{token}-{i}", f"{SUBNET}.{i}") for i in (1, 2)]
        self.nodelist = f"bert-{token}-[1-2]"
        self.key = os.path.join(self.workdir, "id_ed25519")
        self.known_hosts = os.path.join(self.workdir, "known_hosts")
        self.port = SSH_PORT
        self.nic = NIC
        self._sshd: list[subprocess.Popen] = []
        self._made: list[str] = []  # namespaces made so far, for stop()

    def ssh_options(self) -> list:
        """ssh options for tools that take them (mpirun's plm_rsh_args)."""
        return ["-i", self.key, "-p", str(self.port), "-o", "BatchMode=yes"]

    def start(self) -> "TwoHosts":
        a, b = self.hosts
        for host in self.hosts:
            _run("ip", "netns", "add", host.namespace)
            self._made.append(host.namespace)
        # Both ends are made inside their namespaces: nothing of this run is in the machine's own.
        _run(
            "ip",
            "-n",
            a.namespace,
            "link",
            "add",
            NIC,
            "type",
            "veth",
            "peer",
            "name",
            NIC,
            "netns",
            b.namespace,
        )
        for host in self.hosts:
            _run("ip", "-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", NIC)
            _run("ip", "-n", host.namespace, "link", "set", NIC, "up")
            _run("ip", "-n", host.namespace, "link", "set", "lo", "up")
            self._write_etc(host)
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "bert-multihost-test", "-f", self.key)
        with open(self.key + ".pub") as src, open(os.path.join(self.workdir, "authorized_keys"), "w") as dst:
            dst.write(src.read())
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege-separation directory
        for host in self.hosts:
            self._start_sshd(host)
        for host in self.hosts:  # each sshd answers from the other host
            other = b if host is a else a
            self._wait_for_ssh(other, host)
        return self

    def _write_etc(self, host: Host) -> None:
        etc = os.path.join("/etc/netns", host.namespace)
        os.makedirs(os.path.join(etc, "ssh"), exist_ok=True)
        with open(os.path.join(etc, "hosts"), "w") as f:
            f.write("127.0.0.1 localhost\n" + "".join(f"{h.address} {h.name}\n" for h in self.hosts))
        with open(os.path.join(etc, "ssh", "ssh_config"), "w") as f:
            f.write(
                "Host *\n"
                f"  UserKnownHostsFile {self.known_hosts}\n"
                "  StrictHostKeyChecking accept-new\n"
                "  LogLevel ERROR\n"
            )

    def _start_sshd(self, host: Host) -> None:
        home = os.path.join(self.workdir, host.name)
        os.makedirs(home, exist_ok=True)
        host_key = os.path.join(home, "ssh_host_ed25519_key")
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", host_key)
        config = os.path.join(home, "sshd_config")
        with open(config, "w") as f:
            f.write(
                f"ListenAddress {host.address}\n"
                f"Port {self.port}\n"
                f"HostKey {host_key}\n"
                f"AuthorizedKeysFile {os.path.join(self.workdir, 'authorized_keys')}\n"
                f"PidFile {os.path.join(home, 'sshd.pid')}\n"
                "PermitRootLogin prohibit-password\n"
                "PasswordAuthentication no\n"
                "KbdInteractiveAuthentication no\n"
                "UsePAM no\n"
                "StrictModes no\n"  # the key files live in a temporary directory
                "PrintMotd no\n"
                "MaxStartups 64\n"  # horovodrun and mpirun open several sessions at once
                "LogLevel ERROR\n"
            )
        log = open(os.path.join(home, "sshd.log"), "w")
        self._sshd.append(
            subprocess.Popen(host.command([SSHD, "-D", "-e", "-f", config]), stdout=log, stderr=log)
        )
        log.close()

    def _wait_for_ssh(self, client: Host, server: Host, timeout_s: float = 30) -> None:
        probe = client.command(["ssh", *self.ssh_options(), server.address, "hostname"])
        deadline = time.monotonic() + timeout_s
        while True:
            result = subprocess.run(probe, capture_output=True, text=True, timeout=30)
            if result.returncode == 0 and result.stdout.strip() == server.name:
                return
            if time.monotonic() > deadline:
                log = os.path.join(self.workdir, server.name, "sshd.log")
                with open(log) as f:
                    raise RuntimeError(
                        f"ssh from {client.name} to {server.name} failed: {result.stderr.strip()}\n"
                        f"sshd log: {f.read()[-2000:]}"
                    )
            time.sleep(0.2)

    def pids(self) -> list:
        """Processes inside this run's namespaces (sshd, its sessions, ranks left behind)."""
        found = []
        for namespace in self._made:
            result = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True)
            found += [int(p) for p in result.stdout.split()]
        return found

    def netns_id(self, host: Host) -> int:
        """The inode of the host's network namespace (what /proc/PID/ns/net of its processes shows)."""
        return os.stat(os.path.join("/run/netns", host.namespace)).st_ino

    def nic_bytes(self) -> dict:
        """{host name: (bytes sent, bytes received)} on each host's end of the veth."""
        counters = {}
        for host in self.hosts:
            read = "cat /sys/class/net/{0}/statistics/tx_bytes /sys/class/net/{0}/statistics/rx_bytes".format(
                NIC
            )
            out = _run("ip", "netns", "exec", host.namespace, "sh", "-c", read).split()
            counters[host.name] = (int(out[0]), int(out[1]))
        return counters

    def stop(self) -> None:
        """Stops the sshds and anything else left in the namespaces, then removes the namespaces
        (which removes the veth) and their /etc/netns entries."""
        for process in self._sshd:
            if process.poll() is None:
                process.terminate()
        for process in self._sshd:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
        for pid in self.pids():  # only processes of this run's namespaces
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for namespace in self._made:
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
            shutil.rmtree(os.path.join("/etc/netns", namespace), ignore_errors=True)
        self._made = []


@contextlib.contextmanager
def started(directory):
    """Two hosts with sshd running, for a module-scoped fixture; removed (namespaces, veth, sshd,
    ranks left) even on failure. Skips the test when they cannot be made here."""
    import pytest

    reason = unavailable_reason()
    if reason:
        pytest.skip(f"two namespaced hosts cannot be made here: {reason}")
    install_ssh()
    two = TwoHosts(directory)
    try:
        two.start()
        yield two
    finally:
        two.stop()
