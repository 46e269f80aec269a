"""A throwaway PostgreSQL cluster for the tests: ``initdb`` in a temporary directory, the
server on a Unix socket there (no TCP, unless a test asks for a loopback port), ``fsync``
on, stopped and removed at the end.

One cluster per pytest process (each xdist worker has its own), one fresh database per
test. As root (CI), ``initdb`` and ``pg_ctl`` run as the ``postgres`` system user, which
owns the directory. When the server cannot start, the tests that need it fail with the
reason: they never skip.
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

SUPERUSER = "tracelock"
#: A role that must log in with its password (scram), for the tests of failed logins.
PASSWORD_ROLE = "tl_secret_role"
PASSWORD = "s3cret-Pa55word!"
#: A role without the right to create tables in the test databases.
LIMITED_ROLE = "tl_limited"


class ServerError(Exception):
    pass


def find_bindir() -> Path:
    """The directory with ``initdb`` and ``pg_ctl``: ``pg_config --bindir``, else Debian's
    versioned directories (newest first)."""
    candidates: list[Path] = []
    if shutil.which("pg_config"):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=False)
        if out.returncode == 0 and out.stdout.strip():
            candidates.append(Path(out.stdout.strip()))
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0, reverse=True)
    candidates += [Path(p) for p in found]
    for directory in candidates:
        if (directory / "initdb").is_file() and (directory / "pg_ctl").is_file():
            return directory
    raise ServerError(
        "PostgreSQL's initdb and pg_ctl were not found (pg_config --bindir, /usr/lib/postgresql/*/bin): "
        "install Debian's postgresql package (`make test` does)"
    )


@dataclass
class Cluster:
    base: Path
    bindir: Path
    prefix: list[str]
    #: The TCP port on 127.0.0.1 (also the number in the Unix socket's name), or None:
    #: the Unix socket only, on the default port number.
    port: int | None = None

    @property
    def socket_dir(self) -> Path:
        return self.base / "sock"

    @property
    def data_dir(self) -> Path:
        return self.base / "data"

    def url(self, database: str, user: str = SUPERUSER, password: str | None = None) -> str:
        auth = user if password is None else f"{user}:{quote(password, safe='')}"
        port = "" if self.port is None else f"&port={self.port}"
        return f"postgresql://{auth}@/{database}?host={self.socket_dir}{port}"

    def tcp_url(self, database: str) -> str:
        """The superuser's connection string over TCP (loopback; a TCP cluster only)."""
        assert self.port is not None, "a cluster started with tcp=True"
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def server_pids(self) -> list[int]:
        """The postmaster's pid, then its children's (the backends and the helpers)."""
        postmaster = int((self.data_dir / "postmaster.pid").read_text().split()[0])
        children = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rpartition(")")[2].split()
            except OSError:
                continue  # a process that ended meanwhile
            if int(fields[1]) == postmaster:
                children.append(int(stat.parent.name))
        return [postmaster, *children]

    @contextmanager
    def paused(self) -> Iterator[None]:
        """A server that is gone without closing its sockets: every server process stopped
        (SIGSTOP) for the block, continued (SIGCONT) at its end whatever happens. The
        kernel still answers TCP for it, as for a hung process on a live host."""
        pids = self.server_pids()
        stopped: list[int] = []
        try:
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
            yield
        finally:
            for pid in stopped:
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.prefix, *args], capture_output=True, text=True, check=False)

    def stop(self) -> None:
        # Immediate: the cluster is deleted next, so its shutdown checkpoint would be wasted.
        self.run(str(self.bindir / "pg_ctl"), "-D", str(self.data_dir), "-m", "immediate", "-w", "stop")

    def crash(self) -> None:
        """Stop the server the way a crash does (``pg_ctl stop -m immediate``: no shutdown
        checkpoint, every session cut off); :meth:`restart` then runs crash recovery."""
        done = self.run(str(self.bindir / "pg_ctl"), "-D", str(self.data_dir), "-m", "immediate", "-w", "stop")
        if done.returncode != 0:
            raise ServerError(f"pg_ctl stop -m immediate failed: {done.stderr.strip()}")

    def restart(self) -> None:
        """Start the server again (after :meth:`crash`) with the options it first had."""
        log = self.base / "server.log"
        done = self.run(
            str(self.bindir / "pg_ctl"), "-D", str(self.data_dir), "-o", server_options(self), "-l", str(log), "-w", "-t", "60", "start"
        )
        if done.returncode != 0:
            raise ServerError(f"pg_ctl start failed: {done.stderr.strip()}")


def server_options(cluster: Cluster) -> str:
    """The server's settings: Unix socket only (or also a loopback port), durable commits
    (``fsync`` on)."""
    listen = ["-c listen_addresses=''"] if cluster.port is None else ["-c listen_addresses=127.0.0.1", f"-c port={cluster.port}"]
    return " ".join(
        [
            *listen,
            f"-c unix_socket_directories={cluster.socket_dir}",
            "-c fsync=on",
            "-c synchronous_commit=on",
            "-c full_page_writes=on",
            "-c shared_buffers=16MB",
            "-c max_connections=60",
        ]
    )


def free_port() -> int:
    """A loopback TCP port nobody listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def start_cluster(*, tcp: bool = False) -> Cluster:
    """A new cluster; ``tcp``: also listening on a free loopback port (the superuser logs
    in there by trust)."""
    bindir = find_bindir()
    base = Path(tempfile.mkdtemp(prefix="tlpg-"))  # short: a socket path has ~100 bytes at most
    prefix: list[str] = []
    if os.geteuid() == 0:
        try:
            account = pwd.getpwnam("postgres")
        except KeyError:
            raise ServerError("running as root, and there is no postgres system user to run the server") from None
        os.chown(base, account.pw_uid, account.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    cluster = Cluster(base, bindir, prefix, free_port() if tcp else None)
    cluster.run("mkdir", str(cluster.socket_dir))
    init = cluster.run(
        str(bindir / "initdb"), "-D", str(cluster.data_dir), "-U", SUPERUSER, "-E", "UTF8",
        "--locale=C", "--auth-local=trust", "--auth-host=reject",
    )
    if init.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        raise ServerError(f"initdb failed ({init.returncode}): {init.stderr.strip() or init.stdout.strip()}")
    hba = cluster.data_dir / "pg_hba.conf"
    # The password role logs in with its password, everyone else by trust on the socket.
    rules = f"local all {PASSWORD_ROLE} scram-sha-256\n" + hba.read_text()
    if tcp:
        rules = f"host all {SUPERUSER} 127.0.0.1/32 trust\n" + rules
    hba.write_text(rules)
    options = server_options(cluster)
    log = cluster.base / "server.log"
    cluster.run("touch", str(log))
    started = cluster.run(str(bindir / "pg_ctl"), "-D", str(cluster.data_dir), "-o", options, "-l", str(log), "-w", "-t", "60", "start")
    if started.returncode != 0:
        text = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        shutil.rmtree(base, ignore_errors=True)
        raise ServerError(f"pg_ctl start failed ({started.returncode}): {started.stderr.strip()} {text}")
    try:
        admin(cluster, f"CREATE ROLE {PASSWORD_ROLE} LOGIN PASSWORD '{PASSWORD}'", f"CREATE ROLE {LIMITED_ROLE} LOGIN")
    except BaseException:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)
        raise
    return cluster


def admin(cluster: Cluster, *statements: str, database: str = "postgres") -> None:
    import psycopg

    with psycopg.connect(cluster.url(database), autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement.encode())


def stop_cluster(cluster: Cluster) -> None:
    cluster.stop()
    shutil.rmtree(cluster.base, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        pytest.fail(f"the PostgreSQL tests need psycopg and psycopg_pool (`make test` installs them): {exc}")
    try:
        cluster = start_cluster()
    except ServerError as exc:
        pytest.fail(f"cannot start a PostgreSQL server for the tests: {exc}")
    yield cluster
    stop_cluster(cluster)


_numbers = itertools.count()


@pytest.fixture
def pg_database(pg_cluster: Cluster) -> str:
    """The name of a fresh, empty database of the test cluster."""
    name = f"t{os.getpid()}_{next(_numbers)}"
    admin(pg_cluster, f"CREATE DATABASE {name}")
    return name


@pytest.fixture
def own_pg_cluster() -> Iterator[Cluster]:
    """A cluster of the test's own, for a test that stops and restarts its server."""
    try:
        cluster = start_cluster()
    except ServerError as exc:
        pytest.fail(f"cannot start a PostgreSQL server for the test: {exc}")
    yield cluster
    stop_cluster(cluster)


@pytest.fixture
def own_tcp_pg_cluster() -> Iterator[Cluster]:
    """A cluster of the test's own that also listens on a loopback TCP port."""
    try:
        cluster = start_cluster(tcp=True)
    except ServerError as exc:
        pytest.fail(f"cannot start a PostgreSQL server for the test: {exc}")
    yield cluster
    stop_cluster(cluster)


@pytest.fixture
def pg_url(pg_cluster: Cluster, pg_database: str) -> str:
    """A connection string to a fresh database (the superuser, over the socket)."""
    return pg_cluster.url(pg_database)


@pytest.fixture(params=["directory", "postgresql"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A new store's location, once a directory and once a fresh PostgreSQL database."""
    if request.param == "directory":
        return str(tmp_path / "store")
    url: str = request.getfixturevalue("pg_url")
    return url
