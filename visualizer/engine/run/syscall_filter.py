"""The sandbox's seccomp filter: a classic-BPF program that bubblewrap loads (``--seccomp FD``) before
it starts the worker, so nothing the visitor's code runs can make these system calls.

Built here in pure Python (no libseccomp binding needed): it checks the architecture (x86_64 or
aarch64; any other, e.g. 32-bit calls on an x86_64 kernel or the x32 ABI, is killed), then per call:

* ``socket``/``socketpair``: only AF_UNIX (no AF_INET/AF_INET6, AF_VSOCK, AF_NETLINK, AF_PACKET...);
* ``clone`` with a namespace flag, ``unshare``, ``setns``: no new namespaces;
* ``personality``: only asking (0xffffffff) or PER_LINUX (0), never ADDR_NO_RANDOMIZE and the like;
* ``clone3``: ENOSYS, so that glibc falls back to ``clone``, whose flags this filter can read;
* denied outright (``DENIED``): io_uring, the kernel keyring, ptrace and its relatives, bpf,
  perf_event_open, userfaultfd, the mount family, kexec and kernel modules, and a few more.

Denied calls fail with EPERM (Python raises a clean ``PermissionError``), not a kill: the visitor's
code gets one line naming its line. docs/sandbox.md lists the filter for the threat model.
"""

from __future__ import annotations

import errno
import os
import struct

AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_AARCH64 = 0xC00000B7
X32_SYSCALL_BIT = 0x40000000

RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000

# classic BPF opcodes (linux/bpf_common.h)
LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K
RET_K = 0x06  # BPF_RET | BPF_K

# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6] (little-endian on both)
NR_OFFSET, ARCH_OFFSET = 0, 4


def arg_low(i: int) -> int:
    """The offset of the low 32 bits of argument i (an int argument is its low half: the kernel truncates)."""
    return 16 + 8 * i


AF_UNIX = 1
PER_LINUX, PER_QUERY = 0, 0xFFFFFFFF
CLONE_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET

# (x86_64, aarch64) system call numbers; None where the call does not exist on that architecture
SYSCALLS: dict[str, tuple[int | None, int | None]] = {
    "socket": (41, 198),
    "socketpair": (53, 199),
    "clone": (56, 220),
    "clone3": (435, 435),
    "personality": (135, 92),
    # denied outright
    "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427),
    "add_key": (248, 217),
    "request_key": (249, 218),
    "keyctl": (250, 219),
    "ptrace": (101, 117),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
    "kcmp": (312, 272),
    "pidfd_getfd": (438, 438),
    "bpf": (321, 280),
    "perf_event_open": (298, 241),
    "userfaultfd": (323, 282),
    "unshare": (272, 97),
    "setns": (308, 268),
    "mount": (165, 40),
    "umount2": (166, 39),
    "pivot_root": (155, 41),
    "chroot": (161, 51),
    "open_tree": (428, 428),
    "move_mount": (429, 429),
    "fsopen": (430, 430),
    "fsconfig": (431, 431),
    "fsmount": (432, 432),
    "fspick": (433, 433),
    "mount_setattr": (442, 442),
    "kexec_load": (246, 104),
    "kexec_file_load": (320, 294),
    "init_module": (175, 105),
    "finit_module": (313, 273),
    "delete_module": (176, 106),
    "reboot": (169, 142),
    "swapon": (167, 224),
    "swapoff": (168, 225),
    "acct": (163, 89),
    "quotactl": (179, 60),
    "syslog": (103, 116),
    "lookup_dcookie": (212, 18),
    "name_to_handle_at": (303, 264),
    "open_by_handle_at": (304, 265),
    "fanotify_init": (300, 262),
    "settimeofday": (164, 170),
    "clock_settime": (227, 112),
    "clock_adjtime": (305, 266),
    "adjtimex": (159, 171),
    "vhangup": (153, 58),
    "iopl": (172, None),
    "ioperm": (173, None),
    "modify_ldt": (154, None),
    "uselib": (134, None),
    "_sysctl": (156, None),
}
CHECKED = ("socket", "socketpair", "clone", "clone3", "personality")
DENIED = tuple(name for name in SYSCALLS if name not in CHECKED)
ARCHES = {"x86_64": (AUDIT_ARCH_X86_64, 0), "aarch64": (AUDIT_ARCH_AARCH64, 1)}


class _Asm:
    """A few classic-BPF instructions with forward jumps to labels (offsets resolved at the end)."""

    def __init__(self):
        self.code: list[tuple] = []
        self.labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def ld(self, offset: int) -> None:
        self.code.append((LD_W_ABS, None, None, offset))

    def jump(self, op: int, k: int, true: str | None, false: str | None = None) -> None:
        self.code.append((op, true, false, k))  # None: the next instruction

    def ret(self, value: int) -> None:
        self.code.append((RET_K, None, None, value))

    def assemble(self) -> bytes:
        out = []
        for i, (op, true, false, k) in enumerate(self.code):
            jt = jf = 0
            if op in (JEQ_K, JGE_K, JSET_K):
                jt = 0 if true is None else self.labels[true] - (i + 1)
                jf = 0 if false is None else self.labels[false] - (i + 1)
                if not (0 <= jt <= 255 and 0 <= jf <= 255):
                    raise ValueError(f"a jump of instruction {i} is out of reach ({jt}, {jf})")
            out.append(struct.pack("=HBBI", op, jt, jf, k))
        return b"".join(out)


def _arch_section(asm: _Asm, arch: str, column: int) -> None:
    deny = f"{arch}_deny"
    nr = {name: nums[column] for name, nums in SYSCALLS.items() if nums[column] is not None}
    asm.label(arch)
    asm.ld(NR_OFFSET)
    if arch == "x86_64":  # the x32 ABI: the same numbers with a bit set; nothing here uses it
        asm.jump(JGE_K, X32_SYSCALL_BIT, deny)
    for name in DENIED:
        if name in nr:
            asm.jump(JEQ_K, nr[name], deny)
    asm.jump(JEQ_K, nr["clone3"], f"{arch}_nosys")
    for name in ("socket", "socketpair"):
        asm.jump(JEQ_K, nr[name], f"{arch}_{name}")
    asm.jump(JEQ_K, nr["clone"], f"{arch}_clone")
    asm.jump(JEQ_K, nr["personality"], f"{arch}_personality")
    asm.ret(RET_ALLOW)
    for name in ("socket", "socketpair"):  # every jump goes forward: each block ends in its own allow
        asm.label(f"{arch}_{name}")
        asm.ld(arg_low(0))  # the family
        asm.jump(JEQ_K, AF_UNIX, None, deny)
        asm.ret(RET_ALLOW)
    asm.label(f"{arch}_clone")
    asm.ld(arg_low(0))  # the flags (argument 0 on both architectures)
    asm.jump(JSET_K, CLONE_NAMESPACES, deny)
    asm.ret(RET_ALLOW)
    asm.label(f"{arch}_personality")
    asm.ld(arg_low(0))
    asm.jump(JEQ_K, PER_QUERY, f"{arch}_persona_ok")
    asm.jump(JEQ_K, PER_LINUX, None, deny)
    asm.label(f"{arch}_persona_ok")
    asm.ret(RET_ALLOW)
    asm.label(f"{arch}_nosys")
    asm.ret(RET_ERRNO | errno.ENOSYS)
    asm.label(deny)
    asm.ret(RET_ERRNO | errno.EPERM)


def program() -> bytes:
    """The filter as bubblewrap reads it from ``--seccomp FD``: an array of struct sock_filter."""
    asm = _Asm()
    asm.ld(ARCH_OFFSET)
    asm.jump(JEQ_K, AUDIT_ARCH_X86_64, "x86_64")
    asm.jump(JEQ_K, AUDIT_ARCH_AARCH64, "aarch64")
    asm.ret(RET_KILL_PROCESS)  # a foreign ABI (i386 calls on x86_64): nothing legitimate uses one
    for arch, (_, column) in ARCHES.items():
        _arch_section(asm, arch, column)
    return asm.assemble()


def pipe_fd() -> int:
    """A file descriptor that reads the program (a pipe, written in full: it is a few hundred bytes);
    the caller passes it to bubblewrap and closes it once bubblewrap has started."""
    data = program()
    read, write = os.pipe()
    try:
        os.write(write, data)
    finally:
        os.close(write)
    return read


def run(code: bytes, nr: int, arch: int, args: tuple[int, ...] = (), max_steps: int = 10_000) -> int:
    """What the kernel would answer for one call: an interpreter of the instructions ``program`` emits
    (the tests check the filter's decisions with it, then run the real thing in a sandbox)."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *(list(args) + [0] * 6)[:6])
    insns = [struct.unpack("=HBBI", code[i : i + 8]) for i in range(0, len(code), 8)]
    pc, acc = 0, 0
    for _ in range(max_steps):
        op, jt, jf, k = insns[pc]
        if op == LD_W_ABS:
            (acc,) = struct.unpack_from("<I", data, k)
            pc += 1
        elif op == RET_K:
            return k
        elif op in (JEQ_K, JGE_K, JSET_K):
            hit = acc == k if op == JEQ_K else acc >= k if op == JGE_K else bool(acc & k)
            pc += 1 + (jt if hit else jf)
        else:
            raise ValueError(f"instruction {op:#x} is not one program() emits")
    raise RuntimeError("the program did not return")


DESCRIPTION = (
    "seccomp filter: sockets only AF_UNIX (no vsock, inet, netlink, packet), no io_uring, keyring, "
    "ptrace, bpf, perf_event_open, userfaultfd, mount, namespaces, kexec, modules, personality changes"
)
