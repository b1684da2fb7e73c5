"""Tests for the occupancy calculator (visualizer/analysis/occupancy.py).

Expected values are worked out by hand from the formula in docs/anchors §5.1 (cuda_occupancy.h) and
the §5.2 constants, never taken from the code under test. Notation in the comments:
W = warps per block, Rw = registers allocated per warp = roundup(R * 32, 256),
A = allocated shared memory per block = roundup(static + dynamic + reserve, granularity).
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from visualizer.analysis.occupancy import (
    ARCHS,
    LIMIT_NAMES,
    get_arch,
    main,
    occupancy,
    sweep_registers,
    sweep_shared_memory,
    sweep_threads,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
KB = 1024


# --- anchors §5.1 test vectors -------------------------------------------------------------------


def test_sm90_static_smem_with_reserve_measured_17_blocks():
    # A = roundup(12288 + 1024, 128) = 13312; 233472 // 13312 = 17 (17 * 13312 = 226304).
    # Warps 64 // 1 = 64, registers (Rw = 512): 16384 // 512 * 4 // 1 = 128, blocks 32, barriers 64.
    result = occupancy("sm_90", threads=32, regs=12, smem_static=12288)
    assert result.blocks_per_sm == 17
    assert result.shared_memory_per_block == 13312
    assert result.limiters == ["shared_memory"]
    assert result.occupancy == pytest.approx(17 / 64)


def test_sm90_warp_limited_measured_21_blocks():
    # W = 3: 64 // 3 = 21 blocks; 21 * 3 / 64 = 98.4 %. Registers: Rw = 512 -> 32 * 4 // 3 = 42.
    result = occupancy("sm_90", threads=96, regs=10)
    assert result.blocks_per_sm == 21
    assert result.warps_per_sm == 63
    assert result.occupancy == pytest.approx(63 / 64)
    assert result.limiters == ["warps"]
    assert result.limits["registers"] == 42


def test_sm90_register_limited_measured_1_block():
    # W = 20, Rw = 2048: 16384 // 2048 = 8 warps per sub-partition, 8 * 4 // 20 = 1. Warps: 64 // 20 = 3.
    result = occupancy("sm_90", threads=640, regs=64)
    assert result.blocks_per_sm == 1
    assert result.limiters == ["registers"]
    assert result.limits["warps"] == 3


@pytest.mark.parametrize("arch", sorted(ARCHS))
@pytest.mark.parametrize(
    ("threads", "regs", "expected_register_limit"),
    [
        # W = 7, Rw = 1280: 16384 // 1280 = 12 -> 48 // 7 = 6 (per-block rounding would say 7).
        (224, 40, 6),
        # W = 15, Rw = roundup(1088, 256) = 1280: 12 * 4 // 15 = 3 (naive says 4).
        (480, 34, 3),
        # W = 31, Rw = roundup(2080, 256) = 2304; 2304 * roundup(31, 4) = 73728 > 65536 -> launch fails.
        (992, 65, 0),
    ],
)
def test_register_limit_uses_per_warp_rounding(arch, threads, regs, expected_register_limit):
    # Every listed architecture has a 64 K register file and a 64 K per-block limit.
    result = occupancy(arch, threads=threads, regs=regs)
    assert result.limits["registers"] == expected_register_limit


def test_register_limit_cannot_launch_names_registers():
    result = occupancy("sm_90", threads=992, regs=65)
    assert result.blocks_per_sm == 0
    assert result.occupancy == 0
    assert result.limiters == ["registers"]
    assert not result.launchable
    assert "73728" in result.reason


@pytest.mark.parametrize("arch", ["sm_86", "sm_89"])
def test_48_warp_sm_768_threads_40_regs_is_full(arch):
    # W = 24: warps 48 // 24 = 2; registers Rw = 1280 -> 12 * 4 // 24 = 2. 2 * 24 / 48 = 100 %.
    result = occupancy(arch, threads=768, regs=40)
    assert result.blocks_per_sm == 2
    assert result.occupancy == 1.0
    assert result.limiters == ["warps", "registers"]


@pytest.mark.parametrize("arch", ["sm_86", "sm_89"])
@pytest.mark.parametrize("regs", [0, 1, 16, 32])
def test_48_warp_sm_1024_threads_is_two_thirds(arch, regs):
    # W = 32: warps 48 // 32 = 1 block; 32 / 48 = 66.7 %. Registers at R = 32: Rw = 1024 -> 16 * 4 // 32 = 2.
    result = occupancy(arch, threads=1024, regs=regs)
    assert result.blocks_per_sm == 1
    assert result.occupancy == pytest.approx(2 / 3)
    assert result.limiters == ["warps"]


def test_sm75_96_threads_16_regs():
    # W = 3: 32 // 3 = 10 blocks -> 30 / 32 = 93.75 %. Registers Rw = 512 -> 32 * 4 // 3 = 42.
    result = occupancy("sm_75", threads=96, regs=16)
    assert result.blocks_per_sm == 10
    assert result.occupancy == 0.9375
    assert result.limiters == ["warps"]


# --- registers and block size edge cases ---------------------------------------------------------


def test_zero_registers_is_unlimited():
    result = occupancy("sm_90", threads=256, regs=0)
    assert result.limits["registers"] is None
    assert result.registers_per_block == 0
    # W = 8: 64 // 8 = 8 blocks = 100 %.
    assert result.blocks_per_sm == 8
    assert result.occupancy == 1.0


def test_1024_threads_at_the_per_block_register_limit():
    # W = 32, R = 64: Rw = 2048, 2048 * 32 = 65536 <= 65536 fits; 8 * 4 // 32 = 1 block.
    # Warps 64 // 32 = 2, so registers bind: 32 / 64 = 50 %.
    fits = occupancy("sm_90", threads=1024, regs=64)
    assert fits.blocks_per_sm == 1
    assert fits.limiters == ["registers"]
    assert fits.occupancy == 0.5
    assert fits.registers_per_block == 65536
    # R = 65: Rw = 2304, 2304 * 32 = 73728 > 65536.
    over = occupancy("sm_90", threads=1024, regs=65)
    assert over.blocks_per_sm == 0
    assert over.limiters == ["registers"]


def test_partial_warp_rounds_up():
    # 33 threads -> W = 2; sm_90 warps limit 64 // 2 = 32, blocks limit 32: both bind.
    result = occupancy("sm_90", threads=33, regs=0)
    assert result.warps_per_block == 2
    assert result.blocks_per_sm == 32
    assert result.threads_per_sm == 32 * 33
    assert result.limiters == ["warps", "blocks"]


def test_register_check_rounds_warps_to_four_sub_partitions():
    # T = 160 -> W = 5, R = 255 -> Rw = roundup(8160, 256) = 8192. The hardware check counts
    # roundup(5, 4) = 8 warps: 8192 * 8 = 65536 <= 65536 fits; 16384 // 8192 = 2 -> 2 * 4 // 5 = 1.
    assert occupancy("sm_90", threads=160, regs=255).blocks_per_sm == 1
    # T = 256 -> W = 8 -> exactly 65536: 1 block.
    assert occupancy("sm_90", threads=256, regs=255).blocks_per_sm == 1
    # T = 288 -> W = 9, R = 176 -> Rw = 5632: 9 real warps need 50688 <= 65536, but the check counts
    # 12 warps: 67584 > 65536, so the launch fails.
    fails = occupancy("sm_90", threads=288, regs=176)
    assert fails.blocks_per_sm == 0
    assert fails.limiters == ["registers"]
    assert "Cannot launch" in fails.reason


# --- shared memory -------------------------------------------------------------------------------


def test_reserve_is_charged_from_ampere_on():
    # sm_90 with no shared memory still allocates the 1 KB reserve: 233472 // 1024 = 228.
    sm90 = occupancy("sm_90", threads=32, regs=0)
    assert sm90.shared_memory_per_block == 1024
    assert sm90.limits["shared_memory"] == 228
    # sm_75 has no reserve: A = 0 -> unlimited.
    sm75 = occupancy("sm_75", threads=32, regs=0)
    assert sm75.shared_memory_per_block == 0
    assert sm75.limits["shared_memory"] is None


def test_sm90_default_48k_dynamic_cap():
    # Default max dynamic = 49152 - 0. At 49152: A = 50176, 233472 // 50176 = 4 (5 * 50176 = 250880).
    at_cap = occupancy("sm_90", threads=128, regs=0, smem_dynamic=48 * KB)
    assert at_cap.blocks_per_sm == 4
    assert at_cap.limiters == ["shared_memory"]
    # One byte over the kernel's max dynamic size without opting in: cannot launch.
    over = occupancy("sm_90", threads=128, regs=0, smem_dynamic=48 * KB + 1)
    assert over.blocks_per_sm == 0
    assert over.limiters == ["shared_memory"]
    assert "cudaFuncAttributeMaxDynamicSharedMemorySize" in over.reason


def test_default_dynamic_cap_is_48k_minus_static():
    # static 16384 -> default max dynamic 49152 - 16384 = 32768.
    fits = occupancy("sm_90", threads=128, regs=0, smem_dynamic=32768, smem_static=16384)
    assert fits.max_dynamic_smem == 32768
    assert fits.blocks_per_sm == 4  # A = 50176 as above
    over = occupancy("sm_90", threads=128, regs=0, smem_dynamic=32769, smem_static=16384)
    assert over.blocks_per_sm == 0


@pytest.mark.parametrize(
    ("arch", "optin", "reserve"),
    [
        ("sm_75", 65536, 0),
        ("sm_80", 166912, 1024),
        ("sm_86", 101376, 1024),
        ("sm_89", 101376, 1024),
    ]
    + [("sm_90", 232448, 1024)],
)
def test_opt_in_maximum_fits_exactly_one_block(arch, optin, reserve):
    # A = optin + reserve equals the per-block limit and the largest carveout: exactly 1 block.
    result = occupancy(arch, threads=32, regs=0, smem_dynamic=optin, max_dynamic_smem=optin)
    assert result.blocks_per_sm == 1
    assert result.shared_memory_per_block == optin + reserve
    assert result.limiters == ["shared_memory"]
    over = occupancy(arch, threads=32, regs=0, smem_dynamic=optin + 1, max_dynamic_smem=optin)
    assert over.blocks_per_sm == 0
    # cudaFuncSetAttribute would reject a maximum past the opt-in limit.
    with pytest.raises(ValueError, match="max_dynamic_smem"):
        occupancy(arch, threads=32, regs=0, max_dynamic_smem=optin + 1)


@pytest.mark.parametrize(
    ("arch", "dynamic", "expected_blocks"),
    [
        # sm_90: 2 blocks need A <= 233472 / 2 = 116736 -> dynamic <= 116736 - 1024 = 115712.
        ("sm_90", 115712, 2),
        # 115713 -> A = roundup(116737, 128) = 116864 -> 233472 // 116864 = 1.
        ("sm_90", 115713, 1),
        # 3 blocks: A <= 77824 -> dynamic <= 76800; 76801 -> A = 77952 -> 2.
        ("sm_90", 76800, 3),
        ("sm_90", 76801, 2),
        # sm_80: 167936 / 2 = 83968 -> dynamic <= 82944.
        ("sm_80", 82944, 2),
        ("sm_80", 82945, 1),
        # sm_86: 102400 / 2 = 51200 -> dynamic <= 50176.
        ("sm_86", 50176, 2),
        ("sm_86", 50177, 1),
        # sm_75: no reserve, 256 B granularity. 16384 -> 65536 // 16384 = 4;
        # 16385 -> A = 16640 -> 3.
        ("sm_75", 16384, 4),
        ("sm_75", 16385, 3),
    ],
)
def test_per_sm_shared_memory_limit_with_reserve_and_granularity(arch, dynamic, expected_blocks):
    spec = ARCHS[arch]
    result = occupancy(
        arch,
        threads=32,
        regs=0,
        smem_dynamic=dynamic,
        max_dynamic_smem=spec.smem_per_block_optin,
    )
    assert result.blocks_per_sm == expected_blocks
    assert result.limiters == ["shared_memory"]


def test_sm75_default_cap_without_reserve():
    # sm_75: 49152 B dynamic -> A = 49152 (multiple of 256) -> 65536 // 49152 = 1; one byte more fails.
    assert occupancy("sm_75", threads=32, regs=0, smem_dynamic=48 * KB).blocks_per_sm == 1
    assert occupancy("sm_75", threads=32, regs=0, smem_dynamic=48 * KB + 1).blocks_per_sm == 0


def test_static_shared_memory_over_48k_cannot_launch():
    result = occupancy("sm_90", threads=32, regs=0, smem_static=48 * KB + 1)
    assert result.blocks_per_sm == 0
    assert result.limiters == ["shared_memory"]


def test_carveout_preference_rounds_up_and_grows_to_fit():
    # Carveout 0 on sm_90: A = 1024 (reserve) > 0, so the driver picks the 8 KB config: 8192 // 1024 = 8.
    zero = occupancy("sm_90", threads=32, regs=0, carveout=0)
    assert zero.carveout == 8 * KB
    assert zero.blocks_per_sm == 8
    assert zero.limiters == ["shared_memory"]
    # 50000 B rounds up to the 64 KB config; A = 13312 -> 65536 // 13312 = 4.
    rounded = occupancy("sm_90", threads=32, regs=0, smem_static=12288, carveout=50000)
    assert rounded.carveout == 64 * KB
    assert rounded.blocks_per_sm == 4
    # 8 KB preferred but A = 13312 needs more: smallest config >= 13312 is 16 KB -> 1 block.
    grown = occupancy("sm_90", threads=32, regs=0, smem_static=12288, carveout=8 * KB)
    assert grown.carveout == 16 * KB
    assert grown.blocks_per_sm == 1


# --- barriers and limiter lists ------------------------------------------------------------------


def test_sm90_barriers_do_not_bind_with_one_barrier_per_block():
    # T = 32, R = 0: warps 64 // 1 = 64, registers unlimited, smem 233472 // 1024 = 228, blocks 32,
    # barriers 64 // 1 = 64 -> the 32-block hardware limit binds; 32 warps / 64 = 50 %.
    result = occupancy("sm_90", threads=32, regs=0)
    assert result.limits == {
        "warps": 64,
        "registers": None,
        "shared_memory": 228,
        "blocks": 32,
        "barriers": 64,
    }
    assert result.blocks_per_sm == 32
    assert result.limiters == ["blocks"]
    assert result.occupancy == 0.5


def test_sm90_barrier_limit_binds_with_more_barriers_per_block():
    # 2 barriers per block: 64 // 2 = 32 ties with the block limit; 4 per block: 16 binds alone.
    tie = occupancy("sm_90", threads=32, regs=0, block_barriers=2)
    assert tie.blocks_per_sm == 32
    assert tie.limiters == ["blocks", "barriers"]
    bound = occupancy("sm_90", threads=32, regs=0, block_barriers=4)
    assert bound.blocks_per_sm == 16
    assert bound.limiters == ["barriers"]


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_86", "sm_89"])
def test_barrier_limit_not_applied_before_sm90(arch):
    result = occupancy(arch, threads=32, regs=0, block_barriers=8)
    assert result.limits["barriers"] is None
    assert "barriers" not in result.limiters


def test_limiters_list_every_tie_in_order():
    # sm_90 T = 256, R = 32: W = 8; warps 64 // 8 = 8; registers Rw = 1024 -> 16 * 4 // 8 = 8.
    result = occupancy("sm_90", threads=256, regs=32)
    assert result.blocks_per_sm == 8
    assert result.limiters == ["warps", "registers"]
    assert list(result.limits) == list(LIMIT_NAMES)
    assert result.reason.startswith("Limited by warps and registers")


def test_sm80_blocks_limit():
    # sm_80 T = 64, R = 0: W = 2 -> warps 32, blocks 32, smem 167936 // 1024 = 164 -> warps and blocks tie.
    result = occupancy("sm_80", threads=64, regs=0)
    assert result.blocks_per_sm == 32
    assert result.limiters == ["warps", "blocks"]
    assert result.occupancy == 1.0


# --- validation ----------------------------------------------------------------------------------


@pytest.mark.parametrize("alias", ["sm_90", "SM_90", "90", "9.0", "sm90", " Sm90 "])
def test_arch_aliases(alias):
    assert get_arch(alias) is ARCHS["sm_90"]


def test_unknown_arch_lists_known():
    with pytest.raises(ValueError, match="sm_75, sm_80, sm_86, sm_89, sm_90"):
        occupancy("sm_70", threads=32, regs=0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"threads": 0, "regs": 0},
        {"threads": 1025, "regs": 0},
        {"threads": 32, "regs": -1},
        {"threads": 32, "regs": 256},
        {"threads": 32, "regs": 0, "smem_dynamic": -1},
        {"threads": 32, "regs": 0, "smem_static": -1},
        {"threads": 32.0, "regs": 0},
    ],
)
def test_invalid_inputs_raise_value_error(kwargs):
    with pytest.raises(ValueError):
        occupancy("sm_90", **kwargs)


def test_arch_table_matches_anchors():
    # Spot checks of anchors §5.2.
    assert ARCHS["sm_90"].smem_per_sm == 233472
    assert ARCHS["sm_80"].smem_per_block_optin == 166912
    assert ARCHS["sm_75"].smem_alloc_granularity == 256
    assert [ARCHS[name].max_blocks_per_sm for name in ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90")] == [
        16,
        32,
        16,
        24,
        32,
    ]
    assert [name for name, arch in ARCHS.items() if arch.barriers_limit_blocks] == ["sm_90"]
    for arch in ARCHS.values():
        assert arch.smem_carveout_configs[-1] == arch.smem_per_sm
        assert arch.max_threads_per_sm == arch.max_warps_per_sm * 32


# --- sweeps --------------------------------------------------------------------------------------


def test_sweep_threads_covers_warp_multiples_and_current():
    points = sweep_threads("sm_90", regs=32, smem_dynamic=0)
    assert [size for size, _ in points] == list(range(32, 1025, 32))
    with_current = sweep_threads("sm_90", regs=32, smem_dynamic=0, current=100)
    assert len(with_current) == 33
    assert 100 in [size for size, _ in with_current]
    # R = 0 and no shared memory: blocks = min(64 // W, 32) never grows with block size.
    blocks = [result.blocks_per_sm for _, result in sweep_threads("sm_90", regs=0, smem_dynamic=0)]
    assert blocks == sorted(blocks, reverse=True)
    assert blocks[0] == 32 and blocks[-1] == 2


def test_sweep_registers_covers_every_count_and_never_improves():
    points = sweep_registers("sm_90", threads=256, smem_dynamic=0)
    assert [regs for regs, _ in points] == list(range(256))
    blocks = [result.blocks_per_sm for _, result in points]
    assert blocks == sorted(blocks, reverse=True)
    # R = 0: warp-limited 8 blocks. R = 255: Rw = 8192, 2 per sub-partition -> 8 warps -> 1 block.
    assert blocks[0] == 8
    assert blocks[-1] == 1


@pytest.mark.parametrize("arch", sorted(ARCHS))
@pytest.mark.parametrize("threads", [32, 256, 1024])
def test_sweep_shared_memory_shape(arch, threads):
    spec = ARCHS[arch]
    points = sweep_shared_memory(arch, threads=threads, regs=0)
    sizes = [size for size, _ in points]
    assert len(points) <= 300
    assert sizes == sorted(set(sizes))
    assert sizes[0] == 0
    assert sizes[-1] == spec.smem_per_block_optin
    blocks = [result.blocks_per_sm for _, result in points]
    assert blocks == sorted(blocks, reverse=True)
    assert blocks[-1] == 1  # the opt-in maximum always fits exactly one block
    # Every step in the block count is shown to the byte.
    for (size_a, a), (size_b, b) in itertools.pairwise(points):
        if a.blocks_per_sm != b.blocks_per_sm:
            assert size_b == size_a + 1


def test_sweep_shared_memory_includes_exact_limit_points_and_current():
    points = dict(sweep_shared_memory("sm_90", threads=32, regs=0, current=12345))
    # Hand-derived steps (see test_per_sm_shared_memory_limit_with_reserve_and_granularity), plus the
    # 32-block edge: A <= 233472 / 32 = 7296 -> dynamic <= 6272; 6273 -> A = 7424 -> 31 blocks.
    for size, blocks in [
        (6272, 32),
        (6273, 31),
        (76800, 3),
        (76801, 2),
        (115712, 2),
        (115713, 1),
    ]:
        assert points[size].blocks_per_sm == blocks
    assert 12345 in points


# --- command line --------------------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "visualizer", "occupancy", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_cli_json():
    completed = run_cli("--arch", "sm_90", "--threads", "640", "--regs", "64", "--smem", "0", "--json")
    assert completed.returncode == 0, completed.stderr
    payload = json.loads(completed.stdout)
    # See test_sm90_register_limited_measured_1_block: 1 block of 20 warps = 20 / 64.
    assert payload["blocks_per_sm"] == 1
    assert payload["warps_per_sm"] == 20
    assert payload["occupancy"] == pytest.approx(20 / 64)
    assert payload["limiters"] == ["registers"]
    assert set(payload["limits"]) == set(LIMIT_NAMES)


def test_cli_json_static_smem_and_arch_alias():
    completed = run_cli(
        "--arch",
        "9.0",
        "--threads",
        "32",
        "--regs",
        "12",
        "--static-smem",
        "12288",
        "--json",
    )
    assert completed.returncode == 0, completed.stderr
    payload = json.loads(completed.stdout)
    assert payload["blocks_per_sm"] == 17
    assert payload["limiters"] == ["shared_memory"]


def test_cli_human_report():
    completed = run_cli("--arch", "sm_86", "--threads", "768", "--regs", "40")
    assert completed.returncode == 0, completed.stderr
    assert "100.0%" in completed.stdout
    assert "registers" in completed.stdout
    assert "Limited by warps and registers" in completed.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["--arch", "sm_70", "--threads", "256", "--regs", "32"],
        ["--threads", "0", "--regs", "32"],
        ["--threads", "1025", "--regs", "32"],
        ["--threads", "256", "--regs", "256"],
        ["--threads", "256", "--regs", "32", "--smem", "-1"],
        ["--threads", "256", "--regs", "32", "--static-smem", "-4"],
        ["--threads", "abc", "--regs", "32"],
        ["--threads", "256", "--regs", "3.5"],
        ["--regs", "32"],
        ["--threads", "256", "--regs", "32", "--bogus"],
    ],
)
def test_cli_bad_input_exits_2_with_one_line(args):
    completed = run_cli(*args, "--json")
    assert completed.returncode == 2
    assert completed.stdout == ""
    lines = completed.stderr.splitlines()
    assert len(lines) == 1, completed.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in completed.stderr


def test_main_returns_codes_without_exiting(capsys):
    assert main(["--threads", "256", "--regs", "32", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["blocks_per_sm"] == 8
    assert main(["--threads", "0", "--regs", "32"]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_import_is_light():
    code = (
        "import visualizer.analysis.occupancy, sys; "
        "assert 'numba' not in sys.modules and 'numpy' not in sys.modules, sorted(sys.modules)"
    )
    completed = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr
