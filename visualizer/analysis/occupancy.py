"""Exact CUDA occupancy calculator (pure Python, standard library only).

Paraphrases the algorithm of CUDA 13.0 ``cuda_occupancy.h``
(``cudaOccMaxActiveBlocksPerMultiprocessor`` and helpers); see docs/anchors §5 for the formula,
the per-architecture constants and the test vectors it was validated against.

Key details that simpler calculators get wrong:

* registers are allocated per *warp* (``roundup(R * 32, 256)``) and warps are spread over 4
  sub-partitions, so the register limit is ``floor(floor(regsPerSM / 4 / Rw) * 4 / W)``;
* the per-block register check assumes all 4 sub-partitions are allocated at once
  (``Rw * roundup(W, 4) > regsPerBlock`` means the launch fails);
* from Ampere on, the driver reserves 1 KB of shared memory per block;
* the shared-memory carveout is rounded up to a supported configuration, and grows when one block
  needs more than the preferred carveout.

Also the ``python -m visualizer occupancy`` command line (:func:`main`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import operator
import re
import sys
from dataclasses import dataclass, field

KB = 1024
WARP_SIZE = 32

# Order of the per-limit block counts; limiters are reported in this order.
LIMIT_NAMES = ("warps", "registers", "shared_memory", "blocks", "barriers")


@dataclass(frozen=True)
class Arch:
    """Per-SM resource limits of one compute capability (anchors §5.2)."""

    name: str  # "sm_90"
    label: str  # "H200 / H100 (sm_90)"
    compute_capability: tuple[int, int]
    max_warps_per_sm: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    max_threads_per_block: int
    regs_per_sm: int
    regs_per_block: int
    max_regs_per_thread: int
    reg_alloc_unit: int  # registers, allocated per warp
    sub_partitions: int  # warp allocation granularity for registers
    smem_per_sm: int  # bytes, largest carveout
    smem_carveout_configs: tuple[int, ...]  # bytes, ascending
    smem_per_block: int  # bytes, default per-block limit (and the static limit)
    smem_per_block_optin: int  # bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin
    smem_alloc_granularity: int  # bytes
    reserved_smem_per_block: int  # bytes the driver adds to every block (cc >= 8)
    barriers_per_sm: int
    barriers_limit_blocks: bool  # the barrier limit only enters the formula on cc >= 9
    num_sms: int  # SM count of the named GPU, for wave estimates

    @property
    def warp_size(self) -> int:
        return WARP_SIZE


def _kb(*sizes_kb: int) -> tuple[int, ...]:
    return tuple(size * KB for size in sizes_kb)


# what every architecture below shares: registers per SM and per block and their allocation unit, the
# largest block, the SM's four sub-partitions, 48 KB of shared memory per block without opting in
_EVERY_ARCH = dict(max_threads_per_block=1024, regs_per_sm=65536, regs_per_block=65536, max_regs_per_thread=255,
                   reg_alloc_unit=256, sub_partitions=4, smem_per_block=48 * KB)  # fmt: skip

# and what each has of its own, one row per architecture, in these fields' order
_ARCH_FIELDS = ("name", "label", "compute_capability", "max_warps_per_sm", "max_threads_per_sm", "max_blocks_per_sm",
                "smem_per_sm", "smem_carveout_configs", "smem_per_block_optin", "smem_alloc_granularity",
                "reserved_smem_per_block", "barriers_per_sm", "barriers_limit_blocks", "num_sms")  # fmt: skip
_ARCH_ROWS = (
    # name, label, cc, warps/SM, threads/SM, blocks/SM, smem/SM, carveout configs, opt-in smem/block,
    # smem allocation unit, reserved smem/block, barriers/SM, barriers limit blocks, SMs
    ("sm_75", "T4 / RTX 2080 (sm_75)", (7, 5), 32, 1024, 16, 64 * KB, _kb(32, 64), 64 * KB, 256, 0, 32, False, 40),
    ("sm_80", "A100 (sm_80)", (8, 0), 64, 2048, 32, 164 * KB, _kb(0, 8, 16, 32, 64, 100, 132, 164), 163 * KB,
     128, 1 * KB, 64, False, 108),
    ("sm_86", "RTX 3090 / A40 (sm_86)", (8, 6), 48, 1536, 16, 100 * KB, _kb(0, 8, 16, 32, 64, 100), 99 * KB, 128,
     1 * KB, 16, False, 82),
    ("sm_89", "RTX 4090 / L4 (sm_89)", (8, 9), 48, 1536, 24, 100 * KB, _kb(0, 8, 16, 32, 64, 100), 99 * KB, 128,
     1 * KB, 24, False, 128),
    ("sm_90", "H200 / H100 (sm_90)", (9, 0), 64, 2048, 32, 228 * KB, _kb(0, 8, 16, 32, 64, 100, 132, 164, 196, 228),
     227 * KB, 128, 1 * KB, 64, True, 132),
)  # fmt: skip

ARCHS: dict[str, Arch] = {
    row[0]: Arch(**_EVERY_ARCH, **dict(zip(_ARCH_FIELDS, row, strict=True))) for row in _ARCH_ROWS
}

_ARCH_PATTERN = re.compile(r"^(?:sm_?)?(\d)\.?(\d)$")


def get_arch(arch: str | Arch) -> Arch:
    """Look up an architecture; accepts "sm_90", "sm90", "90" and "9.0", case-insensitively."""
    if isinstance(arch, Arch):
        return arch
    match = _ARCH_PATTERN.match(str(arch).strip().lower())
    name = f"sm_{match.group(1)}{match.group(2)}" if match else None
    if name not in ARCHS:
        raise ValueError(f"unknown architecture {arch!r}; known: {', '.join(ARCHS)}")
    return ARCHS[name]


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def _ceil_div(value: int, divisor: int) -> int:
    return -(-value // divisor)


def _blocks(count: int) -> str:
    return f"{count} block" if count == 1 else f"{count} blocks"


@dataclass(frozen=True)
class Occupancy:
    """Result of :func:`occupancy`: active blocks per SM and what limits them."""

    arch: Arch
    threads: int
    regs: int
    smem_dynamic: int
    smem_static: int
    max_dynamic_smem: int  # the kernel's cudaFuncAttributeMaxDynamicSharedMemorySize
    carveout: int  # bytes of the shared-memory carveout the block count is based on
    blocks_per_sm: int
    warps_per_sm: int
    threads_per_sm: int
    occupancy: float  # active warps / max warps per SM, 0..1
    warps_per_block: int
    limits: dict[str, int | None]  # blocks per SM allowed by each limit; None = unlimited / not applied
    limiters: list[str]  # every limit equal to blocks_per_sm, in LIMIT_NAMES order
    registers_per_warp: int  # allocated: roundup(regs * 32, 256)
    registers_per_block: int  # allocated: registers_per_warp * warps_per_block
    shared_memory_per_block: int  # allocated, incl. the driver reserve and granularity rounding
    smem_per_block_limit: int  # per-block allocation limit that applied (incl. the reserve)
    reason: str
    block_barriers: int = 1
    notes: list[str] = field(default_factory=list)

    @property
    def launchable(self) -> bool:
        return self.blocks_per_sm > 0

    def as_dict(self) -> dict:
        """JSON-ready summary (the arch is reduced to its name and label)."""
        return {
            "arch": self.arch.name,
            "label": self.arch.label,
            "threads": self.threads,
            "regs": self.regs,
            "smem_dynamic": self.smem_dynamic,
            "smem_static": self.smem_static,
            "max_dynamic_smem": self.max_dynamic_smem,
            "carveout": self.carveout,
            "blocks_per_sm": self.blocks_per_sm,
            "warps_per_sm": self.warps_per_sm,
            "threads_per_sm": self.threads_per_sm,
            "max_warps_per_sm": self.arch.max_warps_per_sm,
            "occupancy": self.occupancy,
            "warps_per_block": self.warps_per_block,
            "limits": dict(self.limits),
            "limiters": list(self.limiters),
            "registers_per_warp": self.registers_per_warp,
            "registers_per_block": self.registers_per_block,
            "shared_memory_per_block": self.shared_memory_per_block,
            "smem_per_block_limit": self.smem_per_block_limit,
            "reason": self.reason,
        }


def _check_int(name: str, value: object, low: int, high: int | None = None) -> int:
    # operator.index accepts NumPy integers but not floats or strings.
    try:
        number = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer, got {value!r}") from None
    if number < low or (high is not None and number > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be {bound}, got {number}")
    return number


def _carveout_for(arch: Arch, preferred: int, smem_per_block: int) -> int:
    """Carveout the driver picks: preference rounded up to a supported config, grown to fit one block."""
    configs = arch.smem_carveout_configs
    carve = next((c for c in configs if c >= preferred), configs[-1])
    if carve < smem_per_block:
        # Volta+: the driver switches to the smallest config that holds one block.
        carve = next((c for c in configs if c >= smem_per_block), configs[-1])
    return carve


def occupancy(
    arch: str | Arch,
    threads: int,
    regs: int,
    smem_dynamic: int = 0,
    smem_static: int = 0,
    max_dynamic_smem: int | None = None,
    carveout: int | None = None,
    block_barriers: int = 1,
) -> Occupancy:
    """Active blocks per SM for a kernel launch, as ``cudaOccupancyMaxActiveBlocksPerMultiprocessor``.

    ``threads``: threads per block; ``regs``: registers per thread; ``smem_dynamic`` / ``smem_static``:
    shared-memory bytes per block. ``max_dynamic_smem`` is the kernel's
    cudaFuncAttributeMaxDynamicSharedMemorySize (default ``48 KB - smem_static``, as the driver sets it;
    raise it to opt in to more). ``carveout`` is the preferred shared-memory carveout in bytes (default:
    the largest). ``block_barriers`` is the number of named barriers per block (1 for ``__syncthreads``).
    Raises ``ValueError`` for inputs no launch could have.
    """
    spec = get_arch(arch)
    threads = _check_int("threads", threads, 1, spec.max_threads_per_block)
    regs = _check_int("regs", regs, 0, spec.max_regs_per_thread)
    smem_dynamic = _check_int("smem_dynamic", smem_dynamic, 0)
    smem_static = _check_int("smem_static", smem_static, 0)
    if max_dynamic_smem is None:
        max_dynamic_smem = max(0, spec.smem_per_block - smem_static)
    else:
        # cudaFuncSetAttribute rejects values past the opt-in limit.
        max_dynamic_smem = _check_int(
            "max_dynamic_smem",
            max_dynamic_smem,
            0,
            max(0, spec.smem_per_block_optin - smem_static),
        )
    if carveout is None:
        carveout = spec.smem_per_sm
    else:
        carveout = _check_int("carveout", carveout, 0)
    block_barriers = _check_int("block_barriers", block_barriers, 0)

    warps_per_block = _ceil_div(threads, WARP_SIZE)
    limits: dict[str, int | None] = dict.fromkeys(LIMIT_NAMES)
    why: dict[str, str] = {}
    notes: list[str] = []

    # Warps.
    limits["warps"] = spec.max_warps_per_sm // warps_per_block
    why["warps"] = (
        f"{warps_per_block} warps per block, {spec.max_warps_per_sm} warps per SM "
        f"allow {_blocks(limits['warps'])}"
    )

    # Registers: per-warp allocation; the per-block check assumes whole 4-warp groups.
    regs_per_warp = _round_up(regs * WARP_SIZE, spec.reg_alloc_unit)
    regs_assumed_per_block = regs_per_warp * _round_up(warps_per_block, spec.sub_partitions)
    if regs_assumed_per_block > spec.regs_per_block:
        limits["registers"] = 0
        why["registers"] = (
            f"{regs} regs x {threads} threads needs {regs_assumed_per_block} registers "
            f"({regs_per_warp} per warp, counted in groups of {spec.sub_partitions} warps), "
            f"over the {spec.regs_per_block} per-block limit"
        )
    elif regs_per_warp > 0:
        warps_per_sub_partition = (spec.regs_per_sm // spec.sub_partitions) // regs_per_warp
        limits["registers"] = warps_per_sub_partition * spec.sub_partitions // warps_per_block
        why["registers"] = (
            f"{regs} regs x {threads} threads, allocated {regs_per_warp} per warp, "
            f"fit {warps_per_sub_partition * spec.sub_partitions} warps per SM "
            f"= {_blocks(limits['registers'])} of {warps_per_block} warps"
        )

    # Shared memory.
    reserve = spec.reserved_smem_per_block
    smem_per_block = _round_up(smem_static + smem_dynamic + reserve, spec.smem_alloc_granularity)
    max_smem_use = smem_static + reserve + max_dynamic_smem
    smem_limit = (
        spec.smem_per_block_optin if max_smem_use > spec.smem_per_block else spec.smem_per_block
    ) + reserve
    carve = _carveout_for(spec, carveout, smem_per_block)
    reserve_text = f" incl. {reserve} B reserve" if reserve else ""
    if smem_static > spec.smem_per_block:
        # The formula would accept it, but ptxas refuses static shared memory over 48 KB.
        limits["shared_memory"] = 0
        why["shared_memory"] = (
            f"static shared memory {smem_static} B is over the {spec.smem_per_block} B static limit "
            f"(use dynamic shared memory)"
        )
    elif smem_dynamic > max_dynamic_smem:
        limits["shared_memory"] = 0
        why["shared_memory"] = (
            f"dynamic shared memory {smem_dynamic} B is over the kernel's maximum {max_dynamic_smem} B "
            f"(raise cudaFuncAttributeMaxDynamicSharedMemorySize, up to "
            f"{spec.smem_per_block_optin - smem_static} B)"
        )
    elif smem_per_block > smem_limit:
        limits["shared_memory"] = 0
        why["shared_memory"] = (
            f"{smem_per_block} B of shared memory per block{reserve_text} is over "
            f"the {smem_limit} B per-block limit"
        )
    elif smem_per_block > 0:
        limits["shared_memory"] = carve // smem_per_block
        why["shared_memory"] = (
            f"{smem_per_block} B per block{reserve_text} in a {carve} B carveout "
            f"allows {_blocks(limits['shared_memory'])}"
        )
    if carve != carveout and carveout != spec.smem_per_sm:
        notes.append(f"carveout preference {carveout} B becomes {carve} B (next supported configuration)")

    # Hardware block slots.
    limits["blocks"] = spec.max_blocks_per_sm
    why["blocks"] = f"the hardware allows at most {spec.max_blocks_per_sm} blocks per SM"

    # Barriers: only part of the formula from compute capability 9.
    if spec.barriers_limit_blocks and block_barriers > 0:
        limits["barriers"] = spec.barriers_per_sm // block_barriers
        why["barriers"] = (
            f"{spec.barriers_per_sm} barriers per SM at {block_barriers} per block "
            f"allow {_blocks(limits['barriers'])}"
        )

    blocks = min(value for value in limits.values() if value is not None)
    limiters = [name for name in LIMIT_NAMES if limits[name] == blocks]
    details = "; ".join(why[name] for name in limiters)
    names = " and ".join(name.replace("_", " ") for name in limiters)
    if blocks == 0:
        reason = f"Cannot launch ({names}): {details}."
    else:
        reason = f"Limited by {names}: {details}."

    warps_per_sm = blocks * warps_per_block
    return Occupancy(
        arch=spec,
        threads=threads,
        regs=regs,
        smem_dynamic=smem_dynamic,
        smem_static=smem_static,
        max_dynamic_smem=max_dynamic_smem,
        carveout=carve,
        blocks_per_sm=blocks,
        warps_per_sm=warps_per_sm,
        threads_per_sm=blocks * threads,
        occupancy=warps_per_sm / spec.max_warps_per_sm,
        warps_per_block=warps_per_block,
        limits=limits,
        limiters=limiters,
        registers_per_warp=regs_per_warp,
        registers_per_block=regs_per_warp * warps_per_block,
        shared_memory_per_block=smem_per_block,
        smem_per_block_limit=smem_limit,
        reason=reason,
        block_barriers=block_barriers,
        notes=notes,
    )


# ---------------------------------------------------------------------------------------------------
# Sweeps for "impact of varying X" charts (as in Nsight Compute's occupancy section).


def sweep_threads(
    arch: str | Arch,
    regs: int,
    smem_dynamic: int,
    smem_static: int = 0,
    *,
    current: int | None = None,
    max_dynamic_smem: int | None = None,
    carveout: int | None = None,
) -> list[tuple[int, Occupancy]]:
    """Occupancy for block sizes 32..1024 in steps of 32 (plus ``current``, if given)."""
    spec = get_arch(arch)
    sizes = set(range(WARP_SIZE, spec.max_threads_per_block + 1, WARP_SIZE))
    if current is not None:
        sizes.add(current)
    return [
        (
            size,
            occupancy(spec, size, regs, smem_dynamic, smem_static, max_dynamic_smem, carveout),
        )
        for size in sorted(sizes)
    ]


def sweep_registers(
    arch: str | Arch,
    threads: int,
    smem_dynamic: int,
    smem_static: int = 0,
    *,
    max_dynamic_smem: int | None = None,
    carveout: int | None = None,
) -> list[tuple[int, Occupancy]]:
    """Occupancy for every register count 0..255."""
    spec = get_arch(arch)
    return [
        (
            regs,
            occupancy(
                spec,
                threads,
                regs,
                smem_dynamic,
                smem_static,
                max_dynamic_smem,
                carveout,
            ),
        )
        for regs in range(spec.max_regs_per_thread + 1)
    ]


def sweep_shared_memory(
    arch: str | Arch,
    threads: int,
    regs: int,
    smem_static: int = 0,
    *,
    current: int | None = None,
    max_dynamic_smem: int | None = None,
    carveout: int | None = None,
) -> list[tuple[int, Occupancy]]:
    """Occupancy for dynamic shared memory from 0 to the opt-in maximum.

    The kernel is assumed to have opted in to the maximum (``max_dynamic_smem`` defaults to
    ``smem_per_block_optin - smem_static``). Points lie on a grid of 8 allocation units, plus, for each
    step in the block count, the last size with the old count and the first byte with the new one,
    so a step chart is exact. At most about 300 points.
    """
    spec = get_arch(arch)
    top = max(0, spec.smem_per_block_optin - smem_static)
    if max_dynamic_smem is None:
        max_dynamic_smem = top

    def at(size: int) -> Occupancy:
        return occupancy(spec, threads, regs, size, smem_static, max_dynamic_smem, carveout)

    results = {size: at(size) for size in range(0, top + 1, spec.smem_alloc_granularity * 8)}
    results.setdefault(top, at(top))
    if current is not None and 0 <= current <= top:
        results.setdefault(current, at(current))

    def refine(low: int, high: int) -> None:
        # Bisect until each change in the block count sits between two adjacent byte counts.
        if results[low].blocks_per_sm == results[high].blocks_per_sm or high - low <= 1:
            return
        middle = (low + high) // 2
        results.setdefault(middle, at(middle))
        refine(low, middle)
        refine(middle, high)

    grid = sorted(results)
    for low, high in itertools.pairwise(grid):
        refine(low, high)
    # Keep only the grid and the points on either side of each step (bisection midpoints are scaffolding).
    keep = set(grid)
    ordered = sorted(results)
    for low, high in itertools.pairwise(ordered):
        if high - low == 1 and results[low].blocks_per_sm != results[high].blocks_per_sm:
            keep.update((low, high))
    return [(size, results[size]) for size in sorted(keep)]


# ---------------------------------------------------------------------------------------------------
# Command line: python -m visualizer occupancy ...


class _UsageError(Exception):
    pass


class _ArgumentParser(argparse.ArgumentParser):
    # argparse prints the usage block plus an error line; the CLI contract is one "error: ..." line.
    def error(self, message: str):  # type: ignore[override]
        raise _UsageError(message)


def _parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(
        prog="python -m visualizer occupancy",
        description="Exact CUDA occupancy (blocks per SM) for a kernel launch, as cuda_occupancy.h.",
    )
    parser.add_argument("--arch", default="sm_90", help=f"one of {', '.join(ARCHS)} (default sm_90)")
    parser.add_argument("--threads", type=int, required=True, help="threads per block (1..1024)")
    parser.add_argument("--regs", type=int, required=True, help="registers per thread (0..255)")
    parser.add_argument("--smem", type=int, default=0, help="dynamic shared memory per block, bytes")
    parser.add_argument("--static-smem", type=int, default=0, help="static shared memory per block, bytes")
    parser.add_argument(
        "--max-dynamic-smem",
        type=int,
        default=None,
        help="cudaFuncAttributeMaxDynamicSharedMemorySize in bytes (default 48 KB minus static)",
    )
    parser.add_argument(
        "--carveout",
        type=int,
        default=None,
        help="preferred shared-memory carveout, bytes (default largest)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def format_report(result: Occupancy) -> str:
    """Short human-readable report."""
    arch = result.arch
    lines = [
        (
            f"{arch.label}: {result.threads} threads/block, {result.regs} regs/thread, "
            f"{result.smem_dynamic} B dynamic + {result.smem_static} B static shared memory"
        ),
        f"Blocks per SM:  {result.blocks_per_sm}",
        f"Warps per SM:   {result.warps_per_sm} / {arch.max_warps_per_sm}",
        f"Occupancy:      {result.occupancy * 100:.1f}%",
        "Blocks per SM allowed by each limit:",
    ]
    for name in LIMIT_NAMES:
        value = result.limits[name]
        shown = "unlimited" if value is None else str(value)
        mark = "  <- limiter" if name in result.limiters else ""
        lines.append(f"  {name:<14}{shown:>9}{mark}")
    lines.append(f"Limiter(s):     {', '.join(result.limiters)}")
    lines.append(f"Reason:         {result.reason}")
    lines.extend(f"Note:           {note}" for note in result.notes)
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """CLI entry point; returns the exit status (2 for bad input, with one ``error:`` line on stderr)."""
    try:
        args = _parser().parse_args(argv)
        result = occupancy(
            args.arch,
            args.threads,
            args.regs,
            smem_dynamic=args.smem,
            smem_static=args.static_smem,
            max_dynamic_smem=args.max_dynamic_smem,
            carveout=args.carveout,
        )
    except (_UsageError, ValueError) as error:
        message = " ".join(str(error).split())  # keep it to one line
        print(f"error: {message}", file=sys.stderr)
        return 2
    except SystemExit as exit_request:  # --help
        return exit_request.code if isinstance(exit_request.code, int) else 0
    if args.json:
        print(json.dumps(result.as_dict()))
    else:
        print(format_report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
