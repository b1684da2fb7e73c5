"""The sandbox's seccomp filter (engine/run/syscall_filter.py) and its sized /tmp: the BPF program's
decisions checked instruction by instruction, its numbers against the kernel's headers, then the real
thing: visitor code in bubblewrap trying each denied call."""

import ast
import errno
import os
import platform
import re

import pytest

from tests.engine.test_sandbox import one_line_error, plan, source
from visualizer.engine.run import sandbox
from visualizer.engine.run import syscall_filter as sf
from visualizer.engine.run.user_runner import UserRunner

pytestmark = pytest.mark.usefixtures("visitor_runs_on_fastsim")  # tests/conftest.py: why

BWRAP = sandbox.isolation_mode("sim") == "bwrap"
needs_bwrap = pytest.mark.skipif(not BWRAP, reason=f"isolation here: {sandbox.isolation('sim')}")
EPERM = sf.RET_ERRNO | errno.EPERM
ALLOW = sf.RET_ALLOW
ARCH_COLUMN = {"x86_64": 0, "aarch64": 1}


def decide(name: str, arch: str = "x86_64", *args: int) -> int:
    audit, column = sf.ARCHES[arch]
    return sf.run(sf.program(), sf.SYSCALLS[name][column], audit, args)


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_the_program_denies_each_listed_call_with_eperm_and_allows_the_rest(arch):
    audit, column = sf.ARCHES[arch]
    code = sf.program()
    for name in sf.DENIED:
        nr = sf.SYSCALLS[name][column]
        if nr is not None:
            assert sf.run(code, nr, audit) == EPERM, name
    denied = {sf.SYSCALLS[n][column] for n in sf.SYSCALLS}
    for nr in range(0, 460):  # read, write, mmap, ioctl, futex, openat, execve... pass
        if nr not in denied:
            assert sf.run(code, nr, audit, (2, 0)) == ALLOW, nr


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_sockets_only_of_the_unix_family(arch):
    for name in ("socket", "socketpair"):
        assert decide(name, arch, 1, 1) == ALLOW  # AF_UNIX
        for family in (2, 10, 16, 17, 40, 0, 0xFFFF):  # INET, INET6, NETLINK, PACKET, VSOCK, ...
            assert decide(name, arch, family, 1) == EPERM, (name, family)
        assert decide(name, arch, 1 | (40 << 32), 1) == ALLOW  # the kernel reads an int: the low half


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_no_new_namespaces_no_personality_changes_and_clone3_falls_back(arch):
    threads = 0x3D0F00  # what glibc's pthread_create passes: CLONE_VM|FS|FILES|SIGHAND|THREAD|...
    assert decide("clone", arch, threads) == ALLOW
    for ns in (0x10000000, 0x20000000, 0x40000000, 0x00020000, 0x08000000, 0x04000000, 0x02000000):
        assert decide("clone", arch, threads | ns) == EPERM, hex(ns)
    assert decide("clone3", arch) == sf.RET_ERRNO | errno.ENOSYS  # glibc then uses clone
    assert decide("personality", arch, 0xFFFFFFFF) == ALLOW and decide("personality", arch, 0) == ALLOW
    assert decide("personality", arch, 0x0040000) == EPERM  # ADDR_NO_RANDOMIZE


def test_a_foreign_abi_is_killed():
    code = sf.program()
    assert sf.run(code, 0, 0x40000003) == sf.RET_KILL_PROCESS  # i386 calls on an x86_64 kernel
    assert sf.run(code, sf.X32_SYSCALL_BIT | 41, sf.AUDIT_ARCH_X86_64, (1,)) == EPERM  # the x32 ABI


def _header_numbers(path: str, pattern: str) -> dict[str, int]:
    with open(path) as f:
        return {m[0]: int(m[1]) for m in re.findall(pattern, f.read())}


@pytest.mark.parametrize(
    "column, path, pattern",
    [
        (0, "/usr/include/x86_64-linux-gnu/asm/unistd_64.h", r"#define __NR_(\w+)\s+(\d+)"),
        (1, "/usr/include/asm-generic/unistd.h", r"#define __NR(?:3264)?_(\w+)\s+(\d+)"),
    ],
)
def test_the_numbers_are_the_kernels(column, path, pattern):
    if not os.path.exists(path):
        pytest.skip(f"{path} is not here (linux-libc-dev)")
    known = _header_numbers(path, pattern)
    for name, numbers in sf.SYSCALLS.items():
        if numbers[column] is not None:
            assert known.get(name) == numbers[column], (name, known.get(name), numbers[column])


def test_the_words_say_whether_the_filter_is_on(monkeypatch):
    if BWRAP:
        assert "seccomp filter: sockets only AF_UNIX" in sandbox.isolation("sim")
        monkeypatch.setenv(sandbox.SECCOMP_ENV, "off")
        assert sandbox.isolation("sim").endswith(f"no seccomp filter (turned off by {sandbox.SECCOMP_ENV})")
    monkeypatch.setenv(sandbox.SANDBOX_ENV, "rlimits")  # no bubblewrap: the words say what there is
    words = sandbox.isolation("sim")
    assert words.startswith("rlimits only") and words.endswith(
        "no filesystem or network isolation, no seccomp filter"
    )
    assert "seccomp filter:" not in words


PROBE = """
import ctypes, os, socket
libc = ctypes.CDLL(None, use_errno=True)
seen = {{}}
def call(name, nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *args)
    seen[name] = ctypes.get_errno() if r == -1 else "allowed"
for name, family in (("AF_VSOCK", 40), ("AF_INET", 2), ("AF_INET6", 10), ("AF_NETLINK", 16), ("AF_PACKET", 17)):
    try:
        socket.socket(family, socket.SOCK_DGRAM if family == 16 else socket.SOCK_STREAM).close()
        seen[name] = "allowed"
    except OSError as exc:
        seen[name] = exc.errno
params = ctypes.create_string_buffer(120)
call("io_uring_setup", {io_uring_setup}, ctypes.c_uint(8), params)
call("add_key", {add_key}, b"user", b"visitor", b"left-for-the-next-run", ctypes.c_size_t(21), ctypes.c_int(-2))
call("keyctl", {keyctl}, ctypes.c_int(0), ctypes.c_int(-2), ctypes.c_int(0))
call("ptrace", {ptrace}, ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0))
call("personality", {personality}, ctypes.c_ulong(0x0040000))
call("unshare", {unshare}, ctypes.c_int(0x10000000))
call("bpf", {bpf}, ctypes.c_int(0), None, ctypes.c_uint(0))
call("userfaultfd", {userfaultfd}, ctypes.c_int(0))
a, b = socket.socketpair()  # AF_UNIX: allowed (numba, multiprocessing)
seen["AF_UNIX"] = "allowed"
raise RuntimeError(repr(seen))
"""


@needs_bwrap
def test_denied_calls_fail_with_eperm_inside_a_real_sandbox_and_a_capture_still_works():
    column = ARCH_COLUMN.get(platform.machine())
    if column is None:
        pytest.skip(f"the filter knows x86_64 and aarch64, not {platform.machine()}")
    numbers = {name: nums[column] for name, nums in sf.SYSCALLS.items()}
    with UserRunner("sim") as runner:
        msg = one_line_error(runner, source(PROBE.format(**numbers)))
        seen = ast.literal_eval(msg.rsplit("RuntimeError: ", 1)[1])
        assert seen.pop("AF_UNIX") == "allowed"
        assert seen == {name: errno.EPERM for name in seen}, seen
        assert len(seen) == 13
        assert runner.capture_source(plan(source())).check["correct"] is True  # an ordinary run


@needs_bwrap
def test_writing_past_the_sandboxs_tmp_fails_inside_it(monkeypatch):
    monkeypatch.setenv("VISUALIZER_USER_TMP_MB", "8")
    fill = (
        "data = b'x' * (1 << 20)\n"
        "for i in range(4):\n"
        "    with open(f'/tmp/fill{i}', 'wb') as f:\n"
        "        for _ in range(4):\n"
        "            f.write(data)\n"
        "            f.flush()\n"
    )
    with UserRunner("sim") as runner:
        msg = one_line_error(runner, source(fill))
    assert re.search(r"OSError: \[Errno 28\] No space left on device", msg), msg
    assert "8 MiB of it is the private /tmp" in sandbox.limits_text()
