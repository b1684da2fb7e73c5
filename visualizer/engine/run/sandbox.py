"""Where visitor code runs: a fresh process for every run, hard limits set before any visitor line,
its own process session, and where bubblewrap works, its own namespaces over a read-only view.

Host side (the server, the CLI): ``popen_args(fd, backend)`` is how UserRunner starts one sandboxed
worker; ``isolation()`` says in words which isolation is in force. Sandbox side:
``python -m visualizer.engine.run.sandbox FD BACKEND`` drops to ``nobody`` where it started as root,
sets hard rlimits (soft = hard: the code cannot raise them), imports numba for the backend, then sets
the CPU-time and memory limits, serves exactly ONE request and exits. Nothing of a run survives it.

With bubblewrap (``/usr/bin/bwrap``, Debian's ``bubblewrap``): new PID, network, IPC and UTS
namespaces (``--unshare-all``; as root the user namespace is left out so that the worker can become
``nobody``, whose process limit applies), ``--die-with-parent`` and ``--new-session``; the filesystem
is a fresh root holding, read-only, /usr, a few files of /etc (the loader's cache), Python's own
directories and the project's ``visualizer`` and ``kernels`` packages; /tmp is a private tmpfs of
``tmp_limit_mb()`` MiB, taken from the run's memory limit; /dev is a minimal one (plus /dev/nvidia*
for the GPU); and a seccomp filter (engine/run/syscall_filter.py, ``--seccomp``) where it loads. When the worker dies, its PID namespace dies with it:
no child survives, whatever it did (``setsid``, double fork).

Without a working bubblewrap (not installed, or namespaces refused, as in some containers) the same
worker runs with the same rlimits in its own session, and the whole process group is killed after
each run; ``isolation()`` then says "rlimits only". ``VISUALIZER_SANDBOX=rlimits`` forces that.
"""

from __future__ import annotations

import functools
import glob
import os
import resource
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SANDBOX_ENV = "VISUALIZER_SANDBOX"  # auto (default): bubblewrap where it works; rlimits: never
BWRAP_ENV = "VISUALIZER_BWRAP"  # the bubblewrap program (default: bwrap on PATH, then /usr/bin/bwrap)

# The limits of one run of visitor code (the runner adds the wall-clock limit, VISUALIZER_USER_TIMEOUT_S)
CPU_LIMIT_S = int(os.environ.get("VISUALIZER_USER_CPU_S", "120"))
MEMORY_LIMIT_MB = int(os.environ.get("VISUALIZER_USER_MEMORY_MB", "4096"))
# processes and threads (RLIMIT_NPROC) of the sandbox's user: per run in a user namespace; as the
# user nobody (a server running as root), of every sandbox at once. A simulator run needs 2.
MAX_PROCESSES = 32
MAX_FILE_BYTES = 64 << 20  # largest file it may write (RLIMIT_FSIZE): /tmp is private and dies with it
MAX_OPEN_FILES = 256  # RLIMIT_NOFILE (the CUDA driver alone opens a few dozen)
# the sandbox's private /tmp (a tmpfs: memory) is part of the run's memory, not beside it: the process
# may use MEMORY_LIMIT_MB less this, so the two together stay within MEMORY_LIMIT_MB
TMP_LIMIT_MB_DEFAULT = 256
TMP_ENV = "VISUALIZER_SANDBOX_TMP_MB"  # set for the worker: the MiB of its /tmp, taken from its memory
SECCOMP_ENV = "VISUALIZER_SECCOMP"  # on (default) where bubblewrap loads it; off: never (for a test)
NOBODY = 65534

BWRAP_WORDS = "bubblewrap: no network, read-only filesystem, private /tmp, own PID namespace"


def tmp_limit_mb() -> int:
    """MiB of the sandbox's /tmp (VISUALIZER_USER_TMP_MB), at most half the run's memory."""
    try:
        want = int(os.environ.get("VISUALIZER_USER_TMP_MB", str(TMP_LIMIT_MB_DEFAULT)))
    except ValueError:
        want = TMP_LIMIT_MB_DEFAULT
    return max(1, min(want, MEMORY_LIMIT_MB // 2))


RLIMITS_WORDS = "rlimits only"


# --- host side ------------------------------------------------------------------------------------


def bwrap_program() -> str | None:
    named = os.environ.get(BWRAP_ENV)
    if named:
        return named if os.access(named, os.X_OK) else None
    found = shutil.which("bwrap")
    if found:
        return found
    return "/usr/bin/bwrap" if os.access("/usr/bin/bwrap", os.X_OK) else None


def _python_dirs() -> list[str]:
    """Directories Python and its packages load from, never the project's root or a folder above it."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    paths |= {
        p for k, p in sysconfig.get_paths().items() if k in ("stdlib", "platstdlib", "purelib", "platlib")
    }
    paths |= set(site.getsitepackages())
    user_site = site.getusersitepackages()
    if isinstance(user_site, str):
        paths.add(user_site)
    paths |= set(filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep)))
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}

    def library(p: str) -> bool:  # not the server's working directory ('' or a script's folder on sys.path)
        real = os.path.realpath(p)
        parts = Path(real).parts
        return (
            any(real.startswith(q + "/") for q in prefixes)
            or "site-packages" in parts
            or "dist-packages" in parts
        )

    paths |= {p for p in sys.path if p and library(p)}
    root = str(ROOT)
    keep = []
    for p in sorted(paths):
        real = os.path.realpath(p)
        if not os.path.isdir(real) or real == "/":
            continue
        if root == real or root.startswith(real.rstrip("/") + "/"):
            continue  # the project root (tests, captures, .git) or a folder holding it: not visible
        if real.startswith(root + "/") and not any(real == q or real.startswith(q + "/") for q in prefixes):
            continue  # inside the project only a virtual environment (.venv) is Python's; not tests/
        if real.startswith("/usr/") or real == "/usr":
            continue  # bound whole
        keep.append(p)
    return keep


def bwrap_args(backend: str, as_root: bool | None = None) -> list[str]:
    """bubblewrap's arguments (without the program and the command) for one worker of ``backend``."""
    as_root = os.geteuid() == 0 if as_root is None else as_root
    if as_root:
        # no user namespace, so that the worker can become the real user nobody (whose RLIMIT_NPROC
        # counts; root's does not), with only the two capabilities it needs for that step
        args = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        args = ["--unshare-all"]
    args += ["--die-with-parent", "--new-session", "--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    args += ["--perms", "0755", "--dir", "/etc"]  # bubblewrap would make it 0700: nobody could not read it
    for f in ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "passwd", "group"):
        args += ["--ro-bind-try", f"/etc/{f}", f"/etc/{f}"]
    # /tmp sized: without --size a tmpfs may take half the machine's memory, outside every rlimit
    args += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(tmp_limit_mb() << 20)]
    args += ["--tmpfs", "/tmp"]
    made = {"/", "/tmp", "/usr", "/proc", "/dev", "/etc"}

    def bind(path: str, how: str = "--ro-bind") -> None:
        # the folders above a bound one: readable by all (bubblewrap would make them 0700, which
        # the worker, once it is nobody, could not pass)
        for parent in reversed(Path(path).parents):
            if str(parent) not in made and not str(parent).startswith("/usr/"):
                made.add(str(parent))
                args.extend(["--perms", "0755", "--dir", str(parent)])
        args.extend([how, path, path])

    for p in _python_dirs():
        bind(p)
    # a checkout's device code is its kernels/ folder (visualizer.kernels); a wheel has it inside visualizer/
    for package in ("visualizer", "kernels"):
        if (ROOT / package).is_dir():
            bind(str(ROOT / package))
    if backend == "gpu":
        for dev in sorted(glob.glob("/dev/nvidia*")):
            args += ["--dev-bind", dev, dev]
        args += ["--ro-bind", "/sys", "/sys", "--ro-bind-try", "/etc/nvidia", "/etc/nvidia"]
        for var in ("CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH"):
            for p in filter(None, os.environ.get(var, "").split(os.pathsep)):
                if os.path.isdir(p) and not p.startswith("/usr/") and p not in made:
                    bind(p)
    return args + ["--chdir", "/tmp"]


def sandbox_env(backend: str) -> dict[str, str]:
    """The environment of a sandboxed worker: nothing of the server's but what Python, numba and
    the limits need."""
    keep_prefixes = ("NUMBA_", "CUDA_", "NVIDIA_", "FASTSIM_", "VISUALIZER_USER_", "LD_LIBRARY_PATH")
    env = {k: v for k, v in os.environ.items() if k.startswith(keep_prefixes)}
    others = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(ROOT)]
    env.update(
        PATH="/usr/local/bin:/usr/bin:/bin",
        HOME="/tmp",
        LANG="C.UTF-8",
        PYTHONPATH=os.pathsep.join([str(ROOT), *others]),
        PYTHONDONTWRITEBYTECODE="1",
        OPENBLAS_NUM_THREADS="1",
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        CUDA_CACHE_DISABLE="1",
    )
    env[SANDBOX_ENV + "_MODE"] = isolation_mode(backend)
    return env


def _wants_bwrap() -> bool:
    return os.environ.get(SANDBOX_ENV, "auto").strip().lower() not in ("rlimits", "off", "0", "none")


def _wants_seccomp() -> bool:
    return os.environ.get(SECCOMP_ENV, "on").strip().lower() not in ("off", "0", "no", "false")


def _run_probe(program: str, backend: str, seccomp: bool, check: str) -> str | None:
    """Run ``check`` (Python code) in bubblewrap with this backend's arguments (and the seccomp filter);
    None if it exits 0, else the last line said."""
    from visualizer.engine.run import syscall_filter

    fds = [syscall_filter.pipe_fd()] if seccomp else []
    extra = ["--seccomp", str(fds[0])] if seccomp else []
    try:
        done = subprocess.run(
            [program, *bwrap_args(backend), *extra, "--", sys.executable, "-c", check],
            env=sandbox_env_base(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=60,
            pass_fds=fds,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{type(exc).__name__}: {exc}"[:200]
    finally:
        for fd in fds:
            os.close(fd)
    if done.returncode == 0:
        return None
    lines = done.stderr.decode(errors="replace").strip().splitlines() or [f"exit code {done.returncode}"]
    return lines[-1][:200]


@functools.cache
def _bwrap_probe(program: str, backend: str) -> str | None:
    """Does bubblewrap start Python with numpy here (namespaces allowed, every bind found)? None if it
    does, else the last line it said."""
    return _run_probe(program, backend, False, "import numpy")


SECCOMP_CHECK = (
    "import socket, numpy\n"
    "try:\n    socket.socket(socket.AF_INET)\nexcept PermissionError:\n    pass\n"
    "else:\n    raise SystemExit('the filter let an AF_INET socket through')\n"
)


@functools.cache
def _seccomp_probe(program: str, backend: str) -> str | None:
    """Does bubblewrap load the seccomp filter here, and does it hold (an AF_INET socket refused)?"""
    return _run_probe(program, backend, True, SECCOMP_CHECK)


def seccomp_on(backend: str = "sim") -> bool:
    """Whether sandboxed runs get the seccomp filter (bubblewrap in force, and the filter loads)."""
    program = bwrap_program()
    kind = "gpu" if backend == "gpu" else "sim"
    return (
        _wants_seccomp()
        and isolation_mode(backend) == "bwrap"
        and program is not None
        and _seccomp_probe(program, kind) is None
    )


def sandbox_env_base() -> dict[str, str]:
    others = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(ROOT)]
    return {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "PYTHONPATH": os.pathsep.join([str(ROOT), *others])}


def isolation_mode(backend: str = "sim") -> str:
    """'bwrap' where bubblewrap works for this backend, else 'rlimits'."""
    program = bwrap_program()
    if _wants_bwrap() and program and _bwrap_probe(program, "gpu" if backend == "gpu" else "sim") is None:
        return "bwrap"
    return "rlimits"


def isolation(backend: str = "sim") -> str:
    """The isolation in force for visitor code, in words (the Your kernel page and the README say it)."""
    if isolation_mode(backend) == "bwrap":
        words = BWRAP_WORDS + (", runs as the user nobody" if os.geteuid() == 0 else "")
        if seccomp_on(backend):
            from visualizer.engine.run.syscall_filter import DESCRIPTION

            return f"{words}; {DESCRIPTION}"
        program = bwrap_program()
        why = (
            f"turned off by {SECCOMP_ENV}"
            if not _wants_seccomp()
            else _seccomp_probe(program, "gpu" if backend == "gpu" else "sim")
        )
        return f"{words}; no seccomp filter ({why})"
    program = bwrap_program()
    if not _wants_bwrap():
        why = f"bubblewrap is turned off by {SANDBOX_ENV}"
    elif not program:
        why = "bubblewrap (bwrap) is not installed"
    else:
        why = f"bubblewrap cannot start here: {_bwrap_probe(program, 'gpu' if backend == 'gpu' else 'sim')}"
    return f"{RLIMITS_WORDS} ({why}): own process group, killed after each run; no filesystem or network isolation, no seccomp filter"


def limits_text() -> str:
    return (
        f"{CPU_LIMIT_S} s of CPU time, {MEMORY_LIMIT_MB} MiB of memory beyond Python and numba "
        f"(address space on the simulator, data segment on a GPU; with bubblewrap {tmp_limit_mb()} MiB of it "
        f"is the private /tmp), {MAX_PROCESSES} processes, {MAX_FILE_BYTES >> 20} MiB files, "
        f"{MAX_OPEN_FILES} open files"
    )


def popen_args(fd: int, backend: str) -> dict:
    """subprocess.Popen's arguments for one sandboxed worker that talks over ``fd``."""
    command = [sys.executable, "-m", "visualizer.engine.run.sandbox", str(fd), backend]
    env = sandbox_env(backend)
    fds, close_after = [fd], []
    if env[SANDBOX_ENV + "_MODE"] == "bwrap":
        # the worker sees the fd under the same number: bubblewrap passes inherited descriptors on
        seccomp = []
        if seccomp_on(backend):  # bubblewrap reads the filter from this pipe and loads it before the exec
            from visualizer.engine.run import syscall_filter

            filter_fd = syscall_filter.pipe_fd()
            fds.append(filter_fd)
            close_after.append(filter_fd)
            seccomp = ["--seccomp", str(filter_fd)]
        command = [bwrap_program(), *bwrap_args(backend), *seccomp, "--", *command]
        cwd = "/"
        env[TMP_ENV] = str(tmp_limit_mb())
    else:
        cwd = "/tmp" if os.path.isdir("/tmp") else "/"
        env[TMP_ENV] = "0"  # no private /tmp: nothing of the memory limit goes to it
    # what the visitor's code prints goes nowhere: never into the operator's terminal or the server's log
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    return {
        "args": command,
        "env": env,
        "cwd": cwd,
        "pass_fds": fds,
        "start_new_session": True,
        "close_after": close_after,  # descriptors the caller closes once the process started
        **quiet,
    }


def exit_status(code: int | None, mode: str) -> int | None:
    """A worker's exit status as Popen reports a signal (-N): bubblewrap exits with 128 + N."""
    if mode == "bwrap" and code is not None and 128 < code < 128 + 65:
        return -(code - 128)
    return code


# --- sandbox side ------------------------------------------------------------------------------------


def _hard(which: int, value: int) -> None:
    _, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, value))


def drop_root() -> None:
    """Started as root (inside bubblewrap, with CAP_SETUID/CAP_SETGID only): become nobody, for good."""
    if os.geteuid() != 0:
        return
    os.setgroups([])
    os.setresgid(NOBODY, NOBODY, NOBODY)
    os.setresuid(NOBODY, NOBODY, NOBODY)  # from root to nobody: the kernel clears every capability
    if os.geteuid() == 0 or os.getuid() == 0:
        raise SystemExit("could not leave root")


def early_limits() -> None:
    """Before anything else: no core files, bounded files and processes (soft = hard)."""
    _hard(resource.RLIMIT_CORE, 0)
    _hard(resource.RLIMIT_FSIZE, MAX_FILE_BYTES)
    _hard(resource.RLIMIT_NOFILE, MAX_OPEN_FILES)
    _hard(resource.RLIMIT_NPROC, MAX_PROCESSES)


def _vm_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def run_limits(backend) -> dict:
    """After numba is imported for the backend, before the request is read: CPU time and memory.

    CPU: SIGXCPU (which ends the worker) at the limit; the hard limit one second later is SIGKILL for
    code that catches SIGXCPU. Memory: on the simulator the address space (RLIMIT_AS), on a GPU the data
    segment (RLIMIT_DATA: private writable memory, which a CUDA context's huge PROT_NONE reservations
    are not, so the driver keeps working), each the size now plus VISUALIZER_USER_MEMORY_MB.
    """
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(usage.ru_utime + usage.ru_stime) + 1 + CPU_LIMIT_S
    resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + 1))
    which, field = (resource.RLIMIT_AS, "VmSize") if backend.simulator else (resource.RLIMIT_DATA, "VmData")
    tmp_mb = int(os.environ.get(TMP_ENV, "0") or 0)  # the private /tmp's share of the memory limit
    cap = (_vm_kib(field) << 10) + ((MEMORY_LIMIT_MB - tmp_mb) << 20)
    _hard(which, cap)
    return {"cpu_s": soft, "memory_bytes": cap}


def main(fd: int, backend_name: str) -> None:
    if os.environ.get(SANDBOX_ENV + "_MODE") == "bwrap":
        drop_root()  # without bubblewrap's fresh root, nobody could not read a Python under /root
    early_limits()
    from multiprocessing.connection import Connection

    from visualizer.engine.run import worker
    from visualizer.engine.run.wire import Channel

    channel = Channel(Connection(fd), max_bytes=(MEMORY_LIMIT_MB + 64) << 20)  # no pickles either way
    worker.serve(channel, backend_name, after_ready=run_limits, once=True, user_code=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
