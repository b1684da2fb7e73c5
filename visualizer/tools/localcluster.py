"""A real Dask cluster on this machine, bound to 127.0.0.1 only: one scheduler, N workers.

``python -m visualizer.tools.localcluster --workers 2`` prints the scheduler's address and runs until
interrupted (``serve --cluster ADDRESS`` then sends captures to it). tests/engine/test_cluster.py and the
load test (``--cluster``) start one the same way. Every process is started with loopback addresses
and no dashboard, so nothing listens beyond this machine and nothing contacts another one;
``sockets_off_loopback`` checks that from /proc for any process and its children.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOOPBACK = "127.0.0.1"


class ClusterUnavailable(RuntimeError):
    """The cluster cannot start here (a missing package); the message is one line."""


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return env


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


class LocalCluster:
    """``dask scheduler`` and ``dask worker`` processes on 127.0.0.1 (each worker under a nanny, which
    starts it again if it is killed)."""

    def __init__(
        self,
        workers: int = 2,
        gpu_workers: int = 0,
        log_dir: Path | None = None,
        allowed_failures=None,
        gpu_ids=None,
    ):
        """``allowed_failures``: how many lost workers a task survives (Dask's default is 3: it runs
        again elsewhere); 0 makes a worker killed mid-run the visitor's one-line error. ``gpu_ids``: the
        CUDA_VISIBLE_DEVICES of each GPU worker (default 0, 1, ...)."""
        if importlib.util.find_spec("distributed") is None:
            raise ClusterUnavailable(
                "the local cluster needs Dask's distributed package: pip install -r requirements-cluster.txt"
            )
        self.port = free_port()
        self.address = f"tcp://{LOOPBACK}:{self.port}"
        self.dir = Path(tempfile.mkdtemp(prefix="visualizer-dask-"))  # the workers' scratch, removed in stop
        self.log_dir = Path(log_dir or self.dir / "logs")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.procs: list[subprocess.Popen] = []
        self._logs = []
        try:
            self._start_all(workers, gpu_workers, allowed_failures, gpu_ids)
        except BaseException:
            self.stop()  # no process or temp dir outlives a cluster that did not start
            raise

    def _start_all(self, workers, gpu_workers, allowed_failures, gpu_ids) -> None:
        scheduler = [
            sys.executable, "-m", "distributed.cli.dask_scheduler",
            "--host", LOOPBACK, "--port", str(self.port), "--no-dashboard", "--no-jupyter",
            # without a dashboard the scheduler still serves its HTTP routes, on 0.0.0.0:8787 by default
            "--dashboard-address", f"{LOOPBACK}:0",
        ]  # fmt: skip
        extra = {}
        if allowed_failures is not None:
            extra["DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES"] = str(int(allowed_failures))
        self._start("scheduler", scheduler, extra)
        for i in range(workers + gpu_workers):
            gpu = i >= workers
            cmd = [
                sys.executable, "-m", "distributed.cli.dask_worker", self.address,
                "--host", LOOPBACK, "--no-dashboard", "--dashboard-address", f"{LOOPBACK}:0",
                "--nthreads", "1", "--nworkers", "1",
                "--name", f"{'gpu' if gpu else 'sim'}-{i}", "--local-directory", str(self.dir),
                "--memory-limit", "0", "--death-timeout", "60",
            ]  # fmt: skip
            if gpu:
                cmd += ["--resources", "GPU=1"]
            gpu_id = (gpu_ids[i - workers] if gpu_ids else str(i - workers)) if gpu else None
            self._start(f"worker-{i}", cmd, {"CUDA_VISIBLE_DEVICES": gpu_id} if gpu else None)
        self.wait_for_workers(workers + gpu_workers)

    def _start(self, name: str, cmd: list[str], extra: dict | None = None) -> None:
        log = open(self.log_dir / f"dask-{name}.log", "w")  # noqa: SIM115 (closed in stop)
        self._logs.append(log)
        env = {**_env(), **(extra or {})}
        self.procs.append(
            subprocess.Popen(
                cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        )

    def wait_for_workers(self, n: int, timeout: float = 120) -> None:
        from distributed import Client

        deadline = time.monotonic() + timeout
        while True:
            try:
                with Client(self.address, timeout=5, set_as_default=False) as client:
                    client.wait_for_workers(n, timeout=max(1, deadline - time.monotonic()))
                    return
            except (OSError, TimeoutError):
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"the local Dask cluster did not get {n} workers in {timeout:g} s"
                    ) from None
                time.sleep(0.5)

    def pids(self) -> list[int]:
        """Every process of the cluster: scheduler, nannies, workers and the project's workers."""
        out = []
        for p in self.procs:
            out += [p.pid, *descendants(p.pid)]
        return out

    def worker_pids(self) -> list[int]:
        """The Dask worker processes (children of the nannies), not the nannies themselves."""
        out = []
        for p in self.procs[1:]:
            # the nanny starts its worker through multiprocessing's spawn
            out += [c for c in children(p.pid) if "multiprocessing.spawn" in cmdline(c)]
        return out

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except OSError:
                    pass
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=5)
        for log in self._logs:
            log.close()
        shutil.rmtree(self.dir, ignore_errors=True)  # the workers' scratch (and the logs, unless log_dir)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


# --- processes and their sockets, from /proc --------------------------------------------------------


def children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                out.append(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    return out


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        kids = children(todo.pop())
        out += kids
        todo += kids
    return out


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _addr(hexaddr: str) -> str:
    import ipaddress

    host, port = hexaddr.split(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        ip = ipaddress.IPv4Address(raw[::-1])
    else:  # four little-endian 32-bit words
        ip = ipaddress.IPv6Address(b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4)))
        if ip.ipv4_mapped:
            ip = ip.ipv4_mapped
    return f"{ip}:{int(port, 16)}"


def _is_local(addr: str, listening: bool) -> bool:
    import ipaddress

    host = ipaddress.ip_address(addr.rsplit(":", 1)[0])
    return host.is_loopback or (not listening and host.is_unspecified)


def sockets(pid: int) -> list[tuple[str, str, str]]:
    """(protocol, local address, remote address) of every inet socket process ``pid`` holds."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    except OSError:
        return []
    out = []
    for proto in ("tcp", "tcp6", "udp", "udp6"):
        try:
            with open(f"/proc/{pid}/net/{proto}") as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if len(cols) > 9 and cols[9] in inodes:
                        out.append((proto, _addr(cols[1]), _addr(cols[2])))
        except (OSError, StopIteration, ValueError):
            continue
    return out


def sockets_off_loopback(pids) -> list[str]:
    """Every socket of these processes bound or connected to an address that is not this machine's
    loopback (a listener on 0.0.0.0 counts: it would answer other machines)."""
    bad = []
    for pid in pids:
        for proto, local, remote in sockets(pid):
            if not _is_local(local, listening=True) or not _is_local(remote, listening=False):
                bad.append(f"pid {pid} ({cmdline(pid)[:80]}): {proto} {local} -> {remote}")
    return bad


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m visualizer.tools.localcluster")
    p.add_argument("--workers", type=int, default=2, help="simulator workers (default 2)")
    p.add_argument("--gpu-workers", type=int, default=0, help="GPU workers, one per GPU (--resources GPU=1)")
    args = p.parse_args(argv)
    if not 0 <= args.workers <= 64 or not 0 <= args.gpu_workers <= 16 or args.workers + args.gpu_workers < 1:
        print("error: --workers 0..64 and --gpu-workers 0..16, at least one worker in all", file=sys.stderr)
        return 2
    try:
        cluster = LocalCluster(args.workers, args.gpu_workers)
    except (ClusterUnavailable, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ClusterUnavailable) else 1
    with cluster:
        print(f"Dask scheduler: {cluster.address} (127.0.0.1 only); serve --cluster {cluster.address}")
        sys.stdout.flush()
        try:
            while all(p.poll() is None for p in cluster.procs[:1]):
                time.sleep(1)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
