"""A real remote execution engine on 127.0.0.1, for the tests and for trying the hub's workspaces by hand:
PostgreSQL (BuildGrid's scheduler needs it), BuildGrid 0.4.4 (the REAPI server: CAS, ActionCache, Execution and
Bots), buildbox-casd (the worker's local CAS) and buildbox-worker running each action with
buildbox-run-bubblewrap (a sandbox holding the action's inputs and the worker root's system, nothing of the
host's). Installed by tools/remote/provision (CI: .ci/run); this module only starts and stops it.

Every process is started by this module in a session of its own, run in the engine's root (entered by pivot_root
in a private mount namespace; BuildGrid runs on the host, under the host's Python, from the root's virtual
environment), and stopped by its process group id when
the ``with`` block ends, also on failure; each one also gets SIGKILL from the kernel if the process that started
it dies (``PR_SET_PDEATHSIG``), so a starter killed mid-start leaves nothing behind. The pids are listed in
``WORK/pids`` as they start, for whoever checks that.

``input_limit``: the engine refuses an action whose input tree (every file the runner staged for it, hard links
counted once) holds more than that many bytes. BuildGrid and buildbox offer no such limit themselves (casd's
quota bounds its cache, not an action): the bubblewrap runner finds ``WORK/limit-runner/bwrap`` first on its PATH,
a wrapper of bwrap that measures the staged input root before running the command and fails the action with a
one-line message when over.

    python3.11 tools/remote/engine.py [--input-limit BYTES] [--work DIR]   # serves until Ctrl-C or SIGTERM
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

HERE = Path(__file__).resolve().parent
PROVISION = HERE / "provision"
POSTGRES_USER = "postgres"  # the root's own account: PostgreSQL refuses to run as root
DATABASE = "bgd"
INSTANCE = ""  # BuildGrid's unnamed instance: Bazel needs no --remote_instance_name
START_TIMEOUT = 120.0
# BuildGrid serves as many RPCs at once as it has threads (default: five per core) and refuses the rest
# (RESOURCE_EXHAUSTED: Concurrent RPC limit exceeded!), which Bazel does not retry; Bazel uploads an action's
# missing inputs a hundred at a time.
GRPC_THREADS = 256
# The worker's system, bound read-only into each action's sandbox, whose root is the action's staged input tree
# (a worker image, as a real engine's workers have one): the shell and coreutils Bazel's test runner needs, and
# the worker's own python3, which a test runs under when no Python toolchain is registered.
WORKER_SYSTEM = ("/usr", "/bin", "/lib", "/lib64", "/sbin", "/etc")
LIMIT_MESSAGE = "remote engine: input tree of"  # how a refused action's stderr begins


@dataclass(frozen=True)
class Engine:
    endpoint: str
    """``grpc://127.0.0.1:PORT``: BuildGrid, for ``--remote_executor``."""
    work: Path
    """The logs (``*.log``), databases and caches of this run."""

    def bazel_flags(self) -> list[str]:
        """What a ``bazel test`` needs to run every action on this engine and none from its cache.

        ``--remote_max_connections=1``: Bazel makes up to 100 RPCs at once per connection and opens up to 100
        connections; the root example's ~7,600 missing inputs per test then took every one of BuildGrid's
        GRPC_THREADS (uploads failed with ``Concurrent RPC limit exceeded!``) and the worker, refused its bot
        session update, exited (benchmarks/bench_remote.py, 2026-11-29). One connection keeps Bazel to 100."""
        return [
            f"--remote_executor={self.endpoint}",
            "--noremote_accept_cached",
            "--remote_timeout=600",
            "--remote_max_connections=1",
        ]


class EngineError(RuntimeError):
    """The engine could not start: names the process and the end of its log."""


def _provision(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PROVISION), *args], capture_output=True, text=True, check=False)


def root_path() -> Path:
    """The engine's root, installed by tools/remote/provision if missing (minutes, once per recipe)."""
    completed = _provision()
    if completed.returncode != 0:
        raise EngineError(completed.stderr.strip().splitlines()[-1] if completed.stderr.strip() else "provision failed")
    return Path(completed.stdout.strip())


def available() -> str | None:
    """None when the engine is installed and can be started here; else why not (for a test's skip)."""
    if os.geteuid() != 0:
        return "the remote engine runs in a root of its own (pivot_root): it needs root"
    completed = _provision("--check")
    if completed.returncode == 3:
        return "the remote engine is not installed (tools/remote/provision; .ci/run installs it)"
    if completed.returncode != 0:
        return completed.stderr.strip().splitlines()[-1] if completed.stderr.strip() else "provision --check failed"
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# Run by unshare in a private mount namespace (gone with the process): /proc, /dev, /sys and the work folder (at
# /engine, so that no run leaves a folder in the shared root) are bound into the root, which becomes the
# namespace's root by pivot_root, the host's tree unmounted below it (a chroot would not do: the kernel refuses a
# user namespace, which bubblewrap makes, to a chrooted process). The command runs as argv[3] (a user name, or ""
# for root). The mounts never appear on the host.
_CHROOT = """\
set -e
root="$1"; work="$2"; user="$3"; shift 3
mount --rbind "$root" "$root"
for dir in proc dev sys; do mount --rbind "/$dir" "$root/$dir"; done
mkdir -p "$root/.host" "$root/engine"
mount --bind "$work" "$root/engine"
cd "$root"
pivot_root . .host
umount -l /.host
cd /
# A change of user clears the parent-death signal (prctl(2)): setpriv sets it again after the change.
if [ -n "$user" ]; then
  exec setpriv --reuid="$user" --regid="$user" --clear-groups --pdeathsig=KILL /usr/bin/env -i PATH=/usr/bin:/bin HOME=/tmp "$@"
fi
exec /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root "$@"
"""


def _die_with_parent() -> None:
    """Run in each child before exec: its own session (one group id to stop it and what it forks by), and
    SIGKILL from the kernel when the starter dies, whatever killed it."""
    os.setsid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@dataclass
class _Processes:
    """The processes started so far, stopped in reverse order by their group id."""

    work: Path
    started: list[tuple[str, subprocess.Popen[bytes]]]

    def start(self, name: str, argv: Sequence[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = (self.work / f"{name}.log").open("wb")
        with log:
            process = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                preexec_fn=_die_with_parent,
            )
        self.started.append((name, process))
        with (self.work / "pids").open("a", encoding="utf-8") as pids:
            pids.write(f"{process.pid} {name}\n")
        return process

    def stop(self) -> None:
        for name, process in reversed(self.started):
            # PostgreSQL's fast shutdown is SIGINT (SIGTERM waits for its clients to leave).
            _stop(process, signal.SIGINT if name == "postgres" else signal.SIGTERM)


def _stop(process: subprocess.Popen[bytes], first: signal.Signals) -> None:
    """``first`` to the process's group, SIGKILL if it lingers (PostgreSQL's backends, the worker's runners): the
    engine's state is thrown away, nothing needs a slow shutdown."""
    for sig, wait in ((first, 5.0), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        # The leader is gone; what it forked in its group may not be yet.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        return


def _log_tail(work: Path, name: str, lines: int = 15) -> str:
    path = work / f"{name}.log"
    text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
    return "\n".join(text.splitlines()[-lines:])


def _wait(
    what: str, ready: Callable[[], bool], processes: Sequence[tuple[str, subprocess.Popen[bytes]]], work: Path
) -> None:
    """Polls ``ready`` until it holds; fails naming the process that exited, or on the timeout."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        for name, process in processes:
            if process.poll() is not None:
                raise EngineError(f"{name} exited {process.returncode} before {what}:\n{_log_tail(work, name)}")
        if ready():
            return
        time.sleep(0.2)
    raise EngineError(
        f"no {what} within {START_TIMEOUT:.0f} s:\n" + "\n".join(_log_tail(work, n) for n, _ in processes)
    )


def _listening(port: int) -> Callable[[], bool]:
    def ready() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            return False

    return ready


def _buildgrid_config(work: Path, port: int, database: str) -> str:
    """BuildGrid's configuration: every service on one unauthenticated loopback port, blobs on disk, the
    scheduler in PostgreSQL through psycopg2 (``postgresql://`` alone picks psycopg 3, whose connections lack
    the ``poll`` the job notifier calls: jobs then never leave the queue)."""
    return f"""\
server:
  - !channel
    address: "127.0.0.1:{port}"
    insecure-mode: true
thread-pool-size: {GRPC_THREADS}
authorization:
  method: none
connections:
  - !sql-connection &sql
    connection-string: {database}
    pool-size: 5
    max-overflow: 10
storages:
  - !disk-storage &storage
    path: {work / "buildgrid-cas"}
caches:
  - !lru-action-cache &cache
    storage: *storage
    max-cached-refs: 10000
    allow-updates: true
    cache-failed-actions: false
schedulers:
  - !sql-scheduler &scheduler
    sql: *sql
    storage: *storage
    action-cache: *cache
    bot-session-keepalive-timeout: 60
instances:
  - name: "{INSTANCE}"
    services:
      - !action-cache
        cache: *cache
      - !execution
        scheduler: *scheduler
      - !cas
        storage: *storage
      - !bytestream
        storage: *storage
"""


def _limit_runner(limit: int) -> str:
    """The worker's runner when an input limit is set: bubblewrap's runner, with ``bwrap`` on its PATH replaced by
    this script, which finds the staged input root among bwrap's arguments (the directory bound at the action's
    working root), sums its files' sizes (hard links once) and refuses the action when over ``limit``."""
    return f"""\
#!/bin/sh
# Written by tools/remote/engine.py: bwrap, refusing an action whose staged input tree exceeds {limit} bytes.
previous=""
for arg in "$@"; do
  if [ "$previous" = "--bind" ] && [ -z "$staged" ]; then staged="$arg"; fi
  previous="$arg"
done
if [ -n "$staged" ]; then
  size=$(du -s -b "$staged" | cut -f1)
  if [ "$size" -gt {limit} ]; then
    echo "{LIMIT_MESSAGE} $size bytes exceeds the engine's limit of {limit} bytes" >&2
    exit 1
  fi
fi
exec /usr/bin/bwrap "$@"
"""


@contextlib.contextmanager
def serve(work: Path, *, input_limit: int | None = None, root: Path | None = None) -> Iterator[Engine]:
    """Starts the engine (``work``, created, holds its logs and state) and stops every process of it when the
    block ends. ``root``: the engine's installed root (default: tools/remote/provision's)."""
    work = work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    root = root or root_path()
    processes = _Processes(work, [])
    try:
        yield _start(root, work, processes, input_limit)
    finally:
        processes.stop()


def _start(root: Path, work: Path, processes: _Processes, input_limit: int | None) -> Engine:
    def chrooted(user: str, *argv: str) -> list[str]:
        return [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            _CHROOT,
            "sh",
            str(root),
            str(work),
            user,
            *argv,
        ]

    pg_port, grid_port = free_port(), free_port()
    pgdata = work / "pgdata"
    if pgdata.exists():
        raise EngineError(f"{work} already holds an engine's state: give a new work folder")
    pgdata.mkdir()
    uid, gid = _account(root, POSTGRES_USER)
    os.chown(pgdata, uid, gid)
    pg_bin = _postgres_bin(root)
    initdb = subprocess.run(
        chrooted(
            POSTGRES_USER, f"{pg_bin}/initdb", "-D", "/engine/pgdata", "-U", DATABASE, "--auth=trust", "-E", "UTF8"
        ),
        capture_output=True,
        text=True,
        check=False,
        preexec_fn=_die_with_parent,
    )
    if initdb.returncode != 0:
        raise EngineError(f"initdb failed:\n{initdb.stdout[-2000:]}{initdb.stderr[-2000:]}")
    processes.start(
        "postgres",
        chrooted(
            POSTGRES_USER,
            f"{pg_bin}/postgres",
            "-D",
            "/engine/pgdata",
            "-h",
            "127.0.0.1",
            "-p",
            str(pg_port),
            "-k",
            "/engine/pgdata",
        ),
    )
    _wait("PostgreSQL listening", _listening(pg_port), processes.started, work)
    database = f"postgresql+psycopg2://{DATABASE}@127.0.0.1:{pg_port}/postgres"
    python = root / "opt" / "buildgrid" / "bin" / "python"
    bgd = [str(python), "-c", "import sys; from buildgrid.server.app import cli; sys.exit(cli())"]
    migrate = subprocess.run([*bgd, "migrate", "apply", database], capture_output=True, text=True, check=False)
    if migrate.returncode != 0:
        raise EngineError(f"BuildGrid's database migration failed:\n{migrate.stderr[-3000:]}")
    config = work / "buildgrid.yml"
    config.write_text(_buildgrid_config(work, grid_port, database), encoding="utf-8")
    processes.start("buildgrid", [*bgd, "server", "start", str(config)])
    _wait("BuildGrid listening", _listening(grid_port), processes.started, work)
    casd_socket = work / "casd.sock"
    processes.start(
        "casd",
        chrooted(
            "", "buildbox-casd", f"--cas-remote=http://127.0.0.1:{grid_port}", "--bind=unix:/engine/casd.sock",
            "--log-level=info", "/engine/casd-cache",
        ),
    )  # fmt: skip
    _wait("buildbox-casd's socket", casd_socket.exists, processes.started, work)
    runner_path = "/usr/bin:/bin"
    if input_limit is not None:
        wrapper = work / "limit-runner"
        wrapper.mkdir()
        (wrapper / "bwrap").write_text(_limit_runner(input_limit), encoding="utf-8")
        (wrapper / "bwrap").chmod(0o755)
        runner_path = f"/engine/limit-runner:{runner_path}"
    processes.start(
        "worker",
        chrooted(
            "", "/usr/bin/env", f"PATH={runner_path}", "buildbox-worker",
            f"--bots-remote=http://127.0.0.1:{grid_port}", "--cas-remote=unix:/engine/casd.sock",
            "--buildbox-run=/usr/bin/buildbox-run-bubblewrap", "--log-level=info", "--concurrent-jobs=2",
            "--runner-arg=--staging-mode=copy-or-link",
            *(f"--runner-arg=--ro-bind-mount={system}:{system}" for system in WORKER_SYSTEM),
            f"rpw-worker-{os.getpid()}",
        ),
    )  # fmt: skip
    _wait("worker registered with BuildGrid", _bot_registered(python, database), processes.started, work)
    return Engine(f"grpc://127.0.0.1:{grid_port}", work)


def _bot_registered(python: Path, database: str) -> Callable[[], bool]:
    """True once BuildGrid holds a bot session (its ``bots`` table has a row)."""
    query = (
        "import sys, sqlalchemy as s; e = s.create_engine(sys.argv[1]);"
        "c = e.connect(); print(c.execute(s.text('select count(*) from bots')).scalar())"
    )

    def ready() -> bool:
        completed = subprocess.run([str(python), "-c", query, database], capture_output=True, text=True, check=False)
        return completed.returncode == 0 and completed.stdout.strip() not in ("", "0")

    return ready


def _account(root: Path, user: str) -> tuple[int, int]:
    """The uid and gid of ``user`` in the root's /etc/passwd."""
    for line in (root / "etc" / "passwd").read_text(encoding="utf-8").splitlines():
        fields = line.split(":")
        if fields[0] == user:
            return int(fields[2]), int(fields[3])
    raise EngineError(f"{root}/etc/passwd has no {user} account (is PostgreSQL installed there?)")


def _postgres_bin(root: Path) -> str:
    """The root's PostgreSQL server binaries (/usr/lib/postgresql/MAJOR/bin), the newest if several."""
    found = sorted((root / "usr" / "lib" / "postgresql").glob("*/bin/postgres"), key=lambda p: int(p.parts[-3]))
    if not found:
        raise EngineError(f"{root} has no PostgreSQL server under /usr/lib/postgresql")
    return "/" + str(found[-1].parent.relative_to(root))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/remote/engine.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--input-limit", type=int, help="refuse actions whose input tree holds more bytes")
    parser.add_argument("--work", type=Path, help="logs and state (default: a new temporary folder)")
    args = parser.parse_args(argv)
    if args.input_limit is not None and args.input_limit <= 0:
        parser.error(f"--input-limit {args.input_limit}: a number of bytes above 0")
    work = args.work or Path(tempfile.mkdtemp(prefix="rpw-remote-engine-"))
    # SIGTERM ends the block as Ctrl-C does, so the engine stops too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        with serve(work, input_limit=args.input_limit) as engine:
            print(
                f"engine ready: bazel test {' '.join(engine.bazel_flags())} … (logs in {engine.work}); Ctrl-C stops it",
                flush=True,
            )
            signal.pause()
    except (EngineError, OSError) as error:
        print(f"tools/remote/engine.py: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
