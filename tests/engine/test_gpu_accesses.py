"""Accesses recorded by the kernel itself (the access pass, kernels/access_probes.py), decoded into the
simulator recorder's tables: the pass's rewrite, the decoder, and the strong check without a GPU:
the GPU-recording build run on the simulator gives, for its sampled warps, the very tables the
simulator's recorder gives for the same launch. Marked gpu: the same build on the H200."""

import ast
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from visualizer.analysis import gpu_accesses, memory
from visualizer.analysis.provenance import MEASURED_GPU_SAMPLED, SIMULATED_SAMPLED
from visualizer.engine.instrument import accesses as ia
from visualizer.engine.sim import access_record

HERE = Path(__file__).resolve().parents[1]  # tests/
CASES_PY = HERE / "gpu_access_cases.py"
sys.path.insert(0, str(HERE))
from case_scripts import run_case_script  # noqa: E402


def rewrite(src: str, kernel: str = "k"):
    tree, info = ia.standalone(ast.parse(src), kernel)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == kernel + "__traced")
    return ast.unparse(fn), info


def test_columns_agree_with_the_simulator_recorder():
    assert gpu_accesses.COLUMNS == access_record.COLUMNS


def test_pass_rewrites_loads_stores_atomics_and_keeps_order():
    src = """
from numba import cuda, float32
@cuda.jit
def k(a, h, out, n):
    '''doc'''
    s = cuda.shared.array((4, 8), float32)
    t = cuda.threadIdx.x
    s[t // 8, t % 8] = a[t] if t < n else a[0]
    cuda.syncthreads()
    s[0, t] += s[1, t + 1]
    cuda.atomic.add(h, t % 4, 1)
    out[t] = s[0, :].sum() + n
"""
    code, info = rewrite(src)
    lines = [ln.strip() for ln in code.splitlines()]
    assert lines[2] == '"""doc"""'  # the docstring stays first, then the slot and the epoch
    assert lines[3] == "_vz_slot = _vz_slot_of(_vz_acc_sel)" and lines[7] == "_vz_ep = 0"
    assert lines[4] == "_vz_st = _vz_cuda.local.array(3, _vz_u32)"  # the lane's own state
    assert lines[6] == "_vz_acc_start(_vz_acc, _vz_acc_cnt, _vz_st, _vz_n, _vz_slot)"
    assert code.count("shared.array") == 1  # the kernel's own: the pass takes no shared memory
    assert (
        lines[-1] == "_vz_acc_end(_vz_acc_cnt, _vz_st, _vz_n, _vz_slot, _vz_acc)"
    )  # each thread's last word
    sites = sorted((s["line"], s["array"], s["space"], s["op"]) for s in info["sites"])
    assert sites == [
        (8, "a", "global", "load"),
        (8, "a", "global", "load"),
        (8, "s", "shared", "store"),
        (10, "s", "shared", "load"),
        (10, "s", "shared", "load"),
        (10, "s", "shared", "store"),
        (11, "h", "global", "atomic"),
        (12, "out", "global", "store"),
    ]  # fmt: skip  (s[0, :] is a view, not an access)
    assert info["skipped"] == [{"line": 12, "array": "s", "why": "a slice or view"}]
    # the conditional expression keeps its shape: each branch records only when it runs
    assert "if t < n else a[_vz_at1(" in code
    # s[0, t] += ...: recorded as a load in the target, the store as the next statement (after the add)
    aug = lines.index(next(ln for ln in lines if "+= s[_vz_at2(" in ln))
    assert lines[aug + 1].startswith("_vz_at2(") and ", s, 0, t, " in lines[aug + 1]
    assert lines[lines.index("cuda.syncthreads()") + 1] == "_vz_ep += 1"
    assert "n" not in {a["name"] for a in info["arrays"]}  # a scalar is never subscripted
    shared = next(a for a in info["arrays"] if a["name"] == "s")
    assert (shared["shape_src"], shared["dtype_src"]) == ("(4, 8)", "float32")


def test_resolve_arrays_reads_shapes_without_running_code():
    info = {"arrays": [
        {"name": "s", "space": "shared", "shape_src": "(TILE, TILE + 1)", "dtype_src": "numba.float64"},
        {"name": "bad", "space": "shared", "shape_src": "__import__('os').getpid()", "dtype_src": "float32"},
        {"name": "x", "space": "global", "shape_src": "", "dtype_src": ""},
    ]}  # fmt: skip
    import numba

    got = ia.resolve_arrays(info, {"x": np.zeros((3, 5), np.int16)}, {"TILE": 16, "numba": numba})
    assert (got[0]["shape"], got[0]["itemsize"]) == ([16, 17], 8)
    assert got[1]["shape"] == []  # a call is not evaluated: the array is indexed by element offset
    assert (got[2]["shape"], got[2]["dtype"], got[2]["itemsize"]) == ([3, 5], "int16", 2)


def stream(bufs, slot, lane, records, total=None):
    """Lane ``lane`` of ``slot`` recorded ``records`` [(byte offset, site, epoch, mask)] in its order
    (kernels/access_probes.py's words, element size 4) and made ``total`` accesses in all."""
    rec = bufs["_vz_acc"].reshape(len(bufs["_vz_acc_cnt"]), -1, 64)
    for k, (offset, site, epoch, mask) in enumerate(records):
        rec[slot, k, lane] = (offset + 1) | (4 << 40) | (site << 48)
        rec[slot, k, 32 + lane] = (epoch << 32) | mask
    bufs["_vz_acc_cnt"][slot, lane] = len(records) if total is None else total


FULL = 0xFFFFFFFF


def hand_recording(cap=4, made=(2, 6)):
    """Two slots (block 0 warps 0 and 1) of a 64-thread block: request r of slot s reads g[32*r + lane];
    past ``cap`` accesses each lane counts instead."""
    p = gpu_accesses.plan((2, 1, 1), (64, 1, 1), [0], records=32 * 2 * cap)
    bufs = gpu_accesses.host_buffers(p)
    for s, n in enumerate(made):
        for lane in range(32):
            stream(bufs, s, lane, [(lane * 4 + 128 * r, 0, 0, FULL) for r in range(min(n, cap))], total=n)
    return decode_hand(bufs, p)


def decode_hand(bufs, p, nsites=1):
    sites = [{"line": 7 + i, "array": "g", "space": "global", "op": "load"} for i in range(nsites)]
    arrays = [{"name": "g", "space": "global", "dtype": "float32", "itemsize": 4, "shape": [1024]}]
    return gpu_accesses.decode(bufs, p, sites, arrays, (2, 1, 1), (64, 1, 1))


def test_decode_gives_the_recorder_tables_and_says_what_overflowed():
    rec = hand_recording()
    acc, req, haz, summ = memory.build(rec)
    assert acc.attrs["source"] == req.attrs["source"] == MEASURED_GPU_SAMPLED
    assert summ["source"] == MEASURED_GPU_SAMPLED
    assert len(req) == 2 + 4 and (req["sectors"] == 4).all() and (req["lanes"] == 32).all()
    assert req[req["warp"] == 1]["occurrence"].tolist() == [0, 1, 2, 3]
    assert acc[(acc["thread"] == 33) & (acc["occurrence"] == 3)]["index"].tolist() == [3 * 32 + 1]
    sample = summ["sample"]
    got = (sample["overflowed_warps"], sample["unrecorded_accesses"], sample["accesses_per_lane"])
    assert got == (1, 2 * 32, 4)
    text = gpu_accesses.describe_sample(sample)
    assert "64 lane accesses are not in these tables" in text and "block 0" in text


def test_plan_samples_first_middle_last_and_parses_blocks():
    p = gpu_accesses.plan((4, 2, 1), (256, 1, 1))
    assert p["blocks"] == [0, 4, 7] and len(p["slots"]) == 3 * 8
    assert p["sel"].tolist() == [0, -1, -1, -1, 8, -1, -1, 16]
    assert gpu_accesses.parse_blocks("7, 0,0", (4, 2, 1)) == [0, 7]
    # each lane's share: the buffer's lane accesses over the lanes, and LANE_RECORDS at most (what the
    # sampled warps' run costs is per lane: flash_attention's three warps would get 20,833 each)
    assert p["cap"] == min(gpu_accesses.DEFAULT_RECORDS // (32 * 24), gpu_accesses.LANE_RECORDS) == 2048
    assert gpu_accesses.plan((64, 1, 1), (1024, 1, 1))["cap"] == gpu_accesses.DEFAULT_RECORDS // (32 * 96)
    few = gpu_accesses.plan((512, 1, 1), (16, 1, 1))
    assert len(few["slots"]) == 3 and few["cap"] == gpu_accesses.LANE_RECORDS
    assert gpu_accesses.plan((512, 1, 1), (16, 1, 1), lane_records=10**9)["cap"] == 2_000_000 // 96
    for bad in ("8", "x", "-1", ""):
        with pytest.raises(ValueError, match="blocks to sample"):
            gpu_accesses.parse_blocks(bad, (4, 2, 1))


def run_cases(tmp_path, engine: str) -> dict:
    return run_case_script(CASES_PY, tmp_path, engine)


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    return run_cases(tmp_path_factory.mktemp("gpu_acc_sim"), "sim")


ACC = ["block", "thread", "tseq", "array", "space", "op", "offset_bytes", "bytes", "epoch", "line", "index"]
REQ = ["block", "warp", "line", "array", "space", "op", "epoch", "lanes", "bytes", "addresses", "sectors",
       "ideal_sectors", "bank_ways", "wavefronts", "ideal_wavefronts", "extra_wavefronts"]  # fmt: skip
HAZ = ["kind", "space", "array", "index", "block", "epoch", "thread_a", "thread_b", "line_a", "line_b"]


def norm(df: pd.DataFrame, cols: list[str], blocks=None) -> pd.DataFrame:
    if blocks is not None:
        df = df[df["block"].isin(blocks)]
    d = df[cols].copy()
    for c in ("array", "space", "op", "kind"):
        if c in d:
            d[c] = d[c].astype(str)
    return d.sort_values(cols).reset_index(drop=True)


def same_tables(recorded: dict, simulator: dict, blocks) -> None:
    g_acc, g_req, g_haz, _ = memory.build(recorded)
    s_acc, s_req, s_haz, _ = memory.build(simulator)
    assert len(g_acc) > 0
    pd.testing.assert_frame_equal(norm(g_acc, ACC), norm(s_acc, ACC, blocks))
    pd.testing.assert_frame_equal(norm(g_req, REQ), norm(s_req, REQ, blocks))
    # global hazards between a sampled block and one not sampled cannot be seen from the sample
    s_haz = s_haz[(s_haz["space"] == "shared") | s_haz["block_b"].isin(blocks) & s_haz["block"].isin(blocks)]
    g_haz = g_haz[(g_haz["space"] == "shared") | g_haz["block_b"].isin(blocks)]
    pd.testing.assert_frame_equal(norm(g_haz, HAZ), norm(s_haz, HAZ, blocks))


CASE_NAMES = ["f64_rows", "f64_stride2", "f64_uneven", "c128_rows", "c128_add", "f32_column", "tree_sum", "tree_sum_race",
              "histogram", "view_rows", "matmul_tiled"]  # fmt: skip


@pytest.mark.parametrize("kernel", CASE_NAMES)
def test_gpu_recording_on_the_simulator_equals_the_simulator_recorder(sim, kernel):
    res = sim[kernel]
    assert res["correct"]
    same_tables(res["recorded"], res["simulator"], res["blocks"])
    assert res["recorded"]["sample"]["unrecorded_accesses"] == 0


def test_recorded_wavefronts_of_the_fresh_cases(sim):
    """The cases' own point, from the GPU-recording build: per-phase wavefronts and conflicts."""

    def shared_loads(kernel):
        req = memory.build(sim[kernel]["recorded"])[1]
        return req[(req["space"].astype(str) == "shared") & (req["op"].astype(str) == "load")]

    f64 = shared_loads("f64_rows")
    assert (f64["wavefronts"] == 2).all() and (f64["extra_wavefronts"] == 0).all()
    assert (shared_loads("f64_stride2")["wavefronts"] == 4).all()
    assert (shared_loads("f64_uneven")["wavefronts"] == 17).all()
    assert (shared_loads("c128_rows")["wavefronts"] == 4).all()
    assert (shared_loads("f32_column")["extra_wavefronts"] == 31).all()
    sampled = sim["matmul_tiled"]["recorded"]["sample"]
    assert sampled["blocks"] == [0, 5, 15] and sampled["warps"] == 3 * 8
    req = memory.build(sim["view_rows"]["recorded"])[1]  # the view's row[j], in the device function
    rows = req[(req["array"].astype(str) == "x") & (req["op"].astype(str) == "load")]
    assert len(rows) > 0 and (rows["sectors"] == 32).all()
    assert (req[req["array"].astype(str) == "w"]["sectors"] == 1).all()


def test_16_byte_global_accesses_count_the_two_requests_ptxas_makes_of_each(sim):
    """c128_add on 2 blocks of 128 threads (8 warps): each lane loads a[i] and b[i] and stores out[i], 16
    bytes each, lanes 16 bytes apart. ptxas moves an 8-byte-aligned complex128 as two 8-byte halves (two
    LDG.E.64 / STG.E.64), so each warp-wide source access is two requests, and each half spans
    32 lanes x 16 bytes = 512 bytes = 16 sectors. Both the simulator's recorder and the GPU recording
    (the access pass, run on the simulator) count so; Nsight Compute's numbers on the H200 are the same
    (tests/engine/test_truth_hw_gpu.py)."""
    warps = 2 * 128 // 32
    halves = 16 // 8
    per_request = 32 * 16 // memory.SECTOR_BYTES
    for which in ("simulator", "recorded"):
        summ = memory.build(sim["c128_add"][which])[3]
        got = {k: summ[f"global_{k}"] for k in ("ld_requests", "ld_sectors", "st_requests", "st_sectors")}
        assert got == {
            "ld_requests": warps * 2 * halves,
            "ld_sectors": warps * 2 * halves * per_request,
            "st_requests": warps * halves,
            "st_sectors": warps * halves * per_request,
        }, which
        assert got["ld_requests"] == 32 and got["ld_sectors"] == 512  # the ncu numbers
        assert summ["global_ld_ideal_sectors"] == warps * 2 * halves * (32 * 8 // memory.SECTOR_BYTES)


def test_a_visitors_complex128_kernel_counts_the_same_requests_on_the_simulator():
    """The same launch as a visitor's kernel, through the sandboxed worker: 2 requests per warp-wide
    complex128 access, 16 sectors each (see the test above)."""
    from visualizer.engine.run.user_runner import UserRunner
    from visualizer.specs.source import plan_source_launch

    src = "from numba import cuda\n\n\n@cuda.jit\ndef add(a, b, out):\n    i = cuda.grid(1)\n    out[i] = a[i] + b[i]\n"
    args = {"a": "rand:complex128:256", "b": "rand:complex128:256", "out": "zeros:complex128:256"}
    launch = plan_source_launch(src, "add", grid="2", block="128", args=args, filename="add.py")
    with UserRunner("sim") as runner:
        cap = runner.capture_source(launch, seed=1, accesses=True)
    s = cap.launch["accesses"]
    warps, halves, per_request = 8, 2, 16
    assert (s["global_ld_requests"], s["global_ld_sectors"]) == (
        warps * 2 * halves,
        warps * 2 * halves * per_request,
    )
    assert (s["global_st_requests"], s["global_st_sectors"]) == (warps * halves, warps * halves * per_request)


@pytest.mark.gpu
def test_gpu_recording_on_the_gpu_equals_the_simulator_recorder(sim, tmp_path):
    gpu = run_cases(tmp_path, "gpu")
    for kernel in CASE_NAMES:
        assert gpu[kernel]["correct"], kernel
        same_tables(gpu[kernel]["recorded"], sim[kernel]["simulator"], gpu[kernel]["blocks"])


# --- through the capture path: the same Job a GPU capture runs, on the simulator -----------------


@pytest.fixture(scope="module")
def sim_runner_local():
    from visualizer.engine.run.runner import Runner

    with Runner("sim") as runner:
        yield runner


def capture_both(runner, kernel, params, **kw):
    plain = runner.capture(kernel, params, accesses=True, time_clean=False)
    passed = runner.capture(kernel, params, accesses=True, time_clean=False, access_engine="pass", **kw)
    return plain, passed


def same_capture_tables(plain, passed):
    blocks = passed.launch["accesses"]["sample"]["blocks"]
    pd.testing.assert_frame_equal(norm(passed.accesses, ACC), norm(plain.accesses, ACC, blocks))
    pd.testing.assert_frame_equal(norm(passed.requests, REQ), norm(plain.requests, REQ, blocks))
    shared = plain.hazards[plain.hazards["space"] == "shared"]
    pd.testing.assert_frame_equal(
        norm(passed.hazards[passed.hazards["space"] == "shared"], HAZ), norm(shared, HAZ, blocks)
    )


@pytest.mark.parametrize(
    "kernel,params,blocks",
    [
        ("matmul_tiled", {"n": 48, "tile": 16}, None),
        ("transpose_tiled", {"rows": 64, "cols": 96, "tile": 32}, [1, 4]),
        ("reduction_race", {"n": 1024, "block": 128}, None),
        ("strided_copy", {"n": 1024, "stride": 8, "block": 128}, [0]),
    ],
)
def test_builtin_capture_recorded_by_the_pass_equals_the_recorder(sim_runner_local, kernel, params, blocks):
    plain, passed = capture_both(sim_runner_local, kernel, params, sample_blocks=blocks)
    assert passed.check["correct"] or kernel == "reduction_race"
    summ = passed.launch["accesses"]
    assert summ["source"] == SIMULATED_SAMPLED and passed.accesses.attrs["source"] == SIMULATED_SAMPLED
    grid = plain.launch["grid"]
    assert summ["sample"]["blocks"] == (blocks or gpu_accesses.default_blocks(grid))
    same_capture_tables(plain, passed)


def test_a_bad_sample_is_one_line(sim_runner_local):
    from visualizer.specs.catalog import LaunchError

    with pytest.raises(LaunchError, match="outside the grid"):
        sim_runner_local.capture("matmul_tiled", {"n": 32, "tile": 16}, accesses=True, access_engine="pass",
                                 sample_blocks="0,99", time_clean=False)  # fmt: skip


def test_a_visitors_kernel_recorded_by_the_pass_equals_the_recorder():
    from visualizer.engine.run.user_runner import UserRunner
    from visualizer.specs.source import plan_source_launch
    from visualizer.web.examples import EXAMPLES

    ex = EXAMPLES["matmul_tiled"]
    launch = plan_source_launch(ex.source, ex.kernel, grid=ex.grid, block=ex.block, args=ex.args,
                                threads_for_n=ex.threads_for, filename=ex.file)  # fmt: skip
    with UserRunner("sim") as runner:
        plain = runner.capture_source(launch, accesses=True, time_clean=False)
        passed = runner.capture_source(launch, accesses=True, time_clean=False, access_engine="pass")
    assert passed.launch["accesses"]["source"] == SIMULATED_SAMPLED
    same_capture_tables(plain, passed)


PRIVATE_HISTOGRAM_SRC = """
from numba import cuda, int32


@cuda.jit
def hist(x, bins):
    local = cuda.shared.array(8, int32)
    t = cuda.threadIdx.x
    if t < 8:
        local[t] = 0
    cuda.syncthreads()
    cuda.atomic.add(local, x[cuda.grid(1)] % 8, 1)
    cuda.syncthreads()
    if t < 8:
        cuda.atomic.add(bins, t, local[t])  # the value is a shared load: it runs before the atomic
"""


def test_an_atomic_whose_value_loads_memory_is_recorded_after_that_load():
    from visualizer.engine.run.user_runner import UserRunner
    from visualizer.specs.source import plan_source_launch

    code, _ = rewrite(PRIVATE_HISTOGRAM_SRC, "hist")
    assert "cuda.atomic.add(bins, t, _vz_then(local[_vz_at1(" in code  # the index stays the kernel's own
    launch = plan_source_launch(PRIVATE_HISTOGRAM_SRC, "hist", grid="2", block="64", filename="hist.py", reference="bins = np.bincount(x % 8, minlength=8)",
                                args=["x=arange:int32:128", "bins=zeros:int32:8"])  # fmt: skip
    with UserRunner("sim") as runner:
        plain = runner.capture_source(launch, accesses=True, time_clean=False, sim_engine="fastsim")
        passed = runner.capture_source(
            launch, accesses=True, time_clean=False, access_engine="pass", sim_engine="fastsim"
        )
        compiled = runner.capture_source(launch, accesses=True, time_clean=False)
    assert plain.check["correct"] and compiled.launch["sim_engine"] == "compiled"
    first = plain.accesses[(plain.accesses["block"] == 0) & (plain.accesses["thread"] == 0)]
    last = first.sort_values("tseq").tail(2)
    assert list(last["op"]) == ["load", "atomic"] and list(last["array"]) == ["local", "bins"]
    same_capture_tables(plain, passed)
    for table, cols in (("accesses", ACC), ("requests", REQ)):
        pd.testing.assert_frame_equal(norm(getattr(compiled, table), cols), norm(getattr(plain, table), cols))


@pytest.mark.gpu
def test_an_atomic_whose_value_loads_memory_is_recorded_after_that_load_on_the_gpu():
    from visualizer.engine.run.user_runner import UserRunner
    from visualizer.specs.source import plan_source_launch

    launch = plan_source_launch(PRIVATE_HISTOGRAM_SRC, "hist", grid="2", block="64", filename="hist.py",
                                reference="bins = np.bincount(x % 8, minlength=8)", backend="gpu",
                                args=["x=arange:int32:128", "bins=zeros:int32:8"])  # fmt: skip
    with UserRunner("gpu") as runner:
        gpu = runner.capture_source(launch, accesses=True, time_clean=False)
    with UserRunner("sim") as runner:
        plain = runner.capture_source(launch, accesses=True, time_clean=False, sim_engine="fastsim")
    assert gpu.check["correct"]
    same_capture_tables(plain, gpu)


DEVICE_FN_SRC = """
from numba import cuda, float32

TILE = 32
STEPS = 4


@cuda.jit(device=True)
def stage(src, tile, i, t):
    for u in range(STEPS):
        tile[u, t] = src[(i * STEPS + u) % src.shape[0]]


@cuda.jit(device=True)
def scale_into(dst, tile, t, f):
    acc = 0.0
    for u in range(STEPS):
        acc += tile[u, (t + u) % TILE]
    dst[cuda.grid(1)] = acc * f


@cuda.jit
def kern(x, y):
    tile = cuda.shared.array((STEPS, TILE), float32)
    t = cuda.threadIdx.x
    stage(x, tile, cuda.grid(1), t)
    cuda.syncthreads()
    scale_into(y, tile, t, 0.5)
"""


def test_a_visitors_device_functions_are_recorded_and_equal_the_recorder():
    """Accesses in a visitor's device functions (a global load and shared stores in one, shared loads
    and a global store in another) are recorded through the functions' recording copies, at the
    functions' own lines, and equal the simulator recorder's."""
    from visualizer.engine.run.user_runner import UserRunner
    from visualizer.specs.source import plan_source_launch

    launch = plan_source_launch(DEVICE_FN_SRC, "kern", grid="4", block="32",
                                args={"x": "rand:float32:512", "y": "zeros:float32:128"}, filename="dev.py")  # fmt: skip
    with UserRunner("sim") as runner:
        plain = runner.capture_source(launch, accesses=True, time_clean=False)
        passed = runner.capture_source(launch, accesses=True, time_clean=False, access_engine="pass")
    assert passed.launch["accesses"]["source"] == SIMULATED_SAMPLED
    got = passed.accesses.groupby(["line", "array", "op"]).size().to_dict()
    assert {(k[0], k[1], str(k[2])) for k in got} == {(11, "x", "load"), (11, "tile", "store"),
                                                     (18, "tile", "load"), (19, "y", "store")}  # fmt: skip
    same_capture_tables(plain, passed)


VIEW_SRC = """
from numba import cuda


@cuda.jit(device=True)
def total(row, n):
    acc = 0.0
    for j in range(n):
        acc += row[j]
    return acc


@cuda.jit
def kern(a, out):
    i = cuda.grid(1)
    plane = a[i % 2]
    row = plane[i // 2]
    out[i] = total(row, a.shape[2]) + row[0]
"""


def test_views_made_in_the_kernel_are_recorded_as_the_arrays_own_elements_on_both_backends():
    """``plane = a[i % 2]``, ``row = plane[i // 2]``: each ``row[j]`` is element (i % 2, i // 2, j) of
    ``a``, on the simulator recorder and in the kernel's own recording, through a device function too."""
    from visualizer.engine.run.user_runner import UserRunner
    from visualizer.specs.source import plan_source_launch

    launch = plan_source_launch(VIEW_SRC, "kern", grid="2", block="32",
                                args={"a": "rand:float32:2x32x8", "out": "zeros:float32:64"}, filename="views.py")  # fmt: skip
    with UserRunner("sim") as runner:
        plain = runner.capture_source(launch, accesses=True, time_clean=False)
        passed = runner.capture_source(launch, accesses=True, time_clean=False, access_engine="pass")
    for cap in (plain, passed):
        acc = cap.accesses
        loads = acc[(acc["array"].astype(str) == "a") & (acc["op"].astype(str) == "load")]
        assert len(loads) == 64 * 9  # 8 in total() and row[0], per thread
        t = loads["block"] * 32 + loads["thread"]
        want = ((t % 2) * 32 + t // 2) * 8 * 4  # the row's first byte in a
        assert ((loads["offset_bytes"] - want) // 4).between(0, 7).all()
        assert set(loads["line"]) == {9, 18}
    same_capture_tables(plain, passed)


def test_a_device_functions_recording_copy_drops_its_explicit_signature():
    """``@cuda.jit("float32(float32[:], int32)", device=True)``: the copy takes four more parameters."""
    src = """
from numba import cuda, float32
@cuda.jit("float32(float32[:], int32)", device=True)
def get(a, i):
    return a[i]
@cuda.jit
def k(a, out):
    t = cuda.threadIdx.x
    out[t] = get(a, t)
"""
    tree, info = ia.standalone(ast.parse(src), "k")
    copy = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get__vz_rec0")
    assert ast.unparse(copy.decorator_list[0]) == "cuda.jit(device=True)"
    assert [a.arg for a in copy.args.args] == ["a", "i", "_vz_acc", "_vz_st", "_vz_n", "_vz_slot", "_vz_ep"]
    assert {(x["line"], x["array"], x["op"]) for x in info["sites"]} == {
        (5, "a", "load"),
        (9, "out", "store"),
    }


def test_a_device_function_with_a_barrier_or_no_array_is_left_alone_and_said():
    src = """
from numba import cuda, float32
@cuda.jit(device=True)
def synced(s, t):
    s[t] = 1.0
    cuda.syncthreads()
@cuda.jit(device=True)
def twice(v):
    return v * 2
@cuda.jit
def k(a, n):
    s = cuda.shared.array(32, float32)
    t = cuda.threadIdx.x
    for r in range(n):
        synced(s, t)
        a[t] = twice(s[t])
"""
    code, info = rewrite(src)
    assert "synced(s, t)" in code and "__vz_rec" not in code
    # said once (not again for the loop's counted copy)
    assert sum("synced, a device function that calls a barrier" in x["why"] for x in info["skipped"]) == 1
    assert sorted((x["array"], x["op"]) for x in info["sites"]) == [("a", "store"), ("s", "load")]
    # its barrier is the loop's: the block leaves the recorded loop for the counted one together
    assert "if not _vz_cuda.syncthreads_or(_vz_room(_vz_acc, _vz_st, _vz_n)):" in [
        ln.strip() for ln in code.splitlines()
    ]


CAPTURE_SMALL_MATMUL = [sys.executable, "-m", "visualizer", "capture", "matmul_tiled", "--param", "n=32",
                        "--backend", "sim"]  # fmt: skip


def test_cli_sample_blocks_needs_accesses_and_a_bad_one_exits_2(tmp_path):
    base = CAPTURE_SMALL_MATMUL
    res = subprocess.run(
        [*base, "--sample-blocks", "0", "--out", str(tmp_path)], capture_output=True, text=True
    )
    assert res.returncode == 2 and "add --accesses" in res.stderr and res.stderr.count("\n") == 1


def test_side_by_side_of_the_simulator_and_the_kernels_own_recording(sim_runner_local):
    from visualizer.figures.memory import bank_figure, side_by_side_figure

    plain, passed = capture_both(sim_runner_local, "transpose_tiled", {"rows": 64, "cols": 64, "tile": 32})
    blocks = passed.launch["accesses"]["sample"]["blocks"]
    table = gpu_accesses.side_by_side(plain.requests, passed.requests, blocks)
    assert table["agree"].all() and set(table["unit"]) == {"sectors", "wavefronts"}
    shared_load = table[(table["space"] == "shared") & (table["op"] == "load")].iloc[0]
    assert shared_load["per_request_sim"] == shared_load["per_request_gpu"] == 32  # down a column
    fig = side_by_side_figure(table)
    assert "agree on every line" in fig.layout.title.text and MEASURED_GPU_SAMPLED in fig.layout.title.text
    # a GPU recording's figures say so, not "simulator"
    req = passed.requests[passed.requests["space"].astype(str) == "shared"].iloc[0]
    lanes = memory.request_accesses(passed.accesses, req)
    assert SIMULATED_SAMPLED in bank_figure(lanes, req).layout.title.text


@pytest.mark.gpu
def test_a_visitors_kernel_at_real_size_on_the_gpu_matches_its_small_launch_on_the_simulator():
    """The textbook tiled matmul, unmodified: 512x512 on the GPU (sampled warps) and 48x48 on the
    simulator give the same sectors and wavefronts per request on every line (its pattern does not
    depend on the size)."""
    from visualizer.engine.run.user_runner import UserRunner
    from visualizer.specs.source import plan_source_launch
    from visualizer.web.examples import EXAMPLES

    ex = EXAMPLES["matmul_tiled"]
    reference = [ex.reference.replace(" = ", "=", 1)]
    big = plan_source_launch(
        ex.source, ex.kernel, grid="32,32", block=ex.block,
        args={k: v.replace("48x48", "512x512") for k, v in ex.args.items()}, filename=ex.file,
        reference=reference,
    )  # fmt: skip
    small = plan_source_launch(ex.source, ex.kernel, grid=ex.grid, block=ex.block, args=ex.args,
                               threads_for_n=ex.threads_for, filename=ex.file, reference=reference)  # fmt: skip
    with UserRunner("gpu") as runner:
        gpu = runner.capture_source(big, accesses=True, repeats=3)
    with UserRunner("sim") as runner:
        sim = runner.capture_source(small, accesses=True, time_clean=False)
    assert gpu.check["correct"] and gpu.launch["accesses"]["source"] == MEASURED_GPU_SAMPLED
    assert gpu.launch["accesses"]["sample"]["blocks"] == [0, 512, 1023]

    def per_line(req):
        t = gpu_accesses.side_by_side(req, req, sorted(set(req["block"])))
        return t.set_index(["line", "array", "space", "op"])["per_request_sim"]

    pd.testing.assert_series_equal(per_line(gpu.requests), per_line(sim.requests))


@pytest.mark.gpu
def test_memory_access_page_draws_a_gpu_recording_at_real_size():
    import json

    from tests.conftest import open_app

    at = open_app("memory_access", timeout=300, kernel="matmul_tiled", n="4096", tile="16", backend="gpu")
    captions = " ".join(c.value for c in at.caption)
    assert "measured (GPU, sampled warps)" in captions and "sampled warps" in captions
    titles = [json.dumps(json.loads(c.proto.spec)["layout"]["title"]) for c in at.get("plotly_chart")]
    assert titles and all("measured (GPU, sampled warps)" in t for t in titles), titles


def test_a_full_buffer_is_counted_and_said_never_a_wrong_picture(tmp_path):
    small = run_cases(tmp_path, "sim-small")
    for kernel, res in small.items():
        rec, sim = res["recorded"], res["simulator"]
        sample = rec["sample"]
        cap = sample["accesses_per_lane"]
        g_acc, g_req, _, summ = memory.build(rec)
        s_acc, s_req = memory.build(sim)[:2]
        sampled = s_acc[s_acc["block"].isin(res["blocks"])]
        s_req = s_req[s_req["block"].isin(res["blocks"])]
        # each thread kept a first part of its own accesses, at most `cap` of them, exactly as the
        # simulator recorded them (its n-th access is the simulator's n-th): no access is made up
        kept = g_acc.groupby(["block", "thread"])["tseq"].agg(["size", "max"])
        assert (kept["size"] == kept["max"] + 1).all() and (kept["size"] <= cap).all(), kernel
        first = sampled.merge(kept["size"].rename("kept").reset_index(), on=["block", "thread"])
        first = first[first["tseq"] < first["kept"]]
        pd.testing.assert_frame_equal(norm(g_acc, ACC), norm(first, ACC))
        # every kept request is one the simulator saw, with all its lanes (none is cut short)
        keys = ["block", "warp", "line", "array", "space", "op", "epoch", "lanes", "addresses", "sectors",
                "wavefronts"]  # fmt: skip
        merged = norm(g_req, keys).merge(norm(s_req, keys).drop_duplicates(), how="left", indicator=True)
        assert (merged["_merge"] == "both").all(), kernel
        # what did not fit is counted by the lanes themselves and said
        per_thread = sampled.groupby(["block", "thread"]).size()
        assert sample["unrecorded_accesses"] == len(sampled) - len(g_acc) > 0
        over = per_thread[per_thread > cap].reset_index()
        assert sample["overflowed_warps"] == len(set(zip(over["block"], over["thread"] // 32, strict=True)))
        assert "not in these tables" in " ".join(memory.describe(summ))
        if kernel == "matmul_tiled":  # converged warps: the first `cap` requests of each, all lanes
            made = s_req.groupby(["block", "warp"]).size()
            assert (g_req.groupby(["block", "warp"]).size() == made.clip(upper=cap)).all()


def test_a_recording_loop_keeps_its_original_for_the_warps_that_record_nothing():
    src = """
from numba import cuda, float32
@cuda.jit
def k(a, out, n):
    s = cuda.shared.array(64, float32)
    t = cuda.threadIdx.x
    acc = 0.0
    for i in range(n):
        s[t] = a[i * 64 + t]
        cuda.syncthreads()
        acc += s[63 - t]
        cuda.syncthreads()
    for j in range(3):
        acc *= 2.0
    out[t] = acc
"""
    code, info = rewrite(src)
    lines = [ln.strip() for ln in code.splitlines()]
    i = lines.index("if _vz_slot < 0:")
    assert lines[i + 1] == "for i in range(n):" and lines[i + 2] == "s[t] = a[i * 64 + t]"  # as written
    assert lines.count("for i in range(n):") == 1 and "else:" in lines[i:]
    # the recorded copy: the recorded steps, left together for the rest counted
    assert lines.count("for i in range(_vz_r0_lo, _vz_r0_hi, _vz_r0_st):") == 1
    assert lines.count("for i in range(_vz_r0_nx, _vz_r0_hi, _vz_r0_st):") == 1
    assert lines.count("for j in range(3):") == 1  # a loop that records nothing is left alone
    assert len(info["sites"]) == 4


UNROLL_SRC = """
from numba import cuda, float32
N = 4
HALF = N // 2
@cuda.jit
def k(a, out, n):
    buf = cuda.local.array(N, float32)
    t = cuda.threadIdx.x
    for u in range(N):
        buf[u] = a[t * N + u]
    for u in range(HALF, N):
        buf[u] += a[u]
    acc = 0.0
    for u in range(N):
        acc += a[u]
    for u in range(N):
        if a[u] > 0:
            break
        buf[u] = a[u]
    for u in range(n):
        buf[u % N] = a[u]
    out[t] = acc + buf[0]
"""


def test_recorded_loops_over_a_constant_range_that_index_a_local_array_are_unrolled():
    """Their recorded copy is unrolled (the compiler would have unrolled the loop as written, keeping
    ``buf`` in registers; with a record call per access it does not, and ``buf`` goes to local memory
    for every warp); a loop that indexes no local array, one with a ``break`` and one of a run-time
    trip count stay loops; the copies share their sites."""
    code, info = rewrite(UNROLL_SRC)
    lines = [ln.strip() for ln in code.splitlines()]
    # the first loop's original copy, the third's (its recorded copy split in two, below), the break loop's
    # two (a break: it asks for room at each iteration instead)
    assert lines.count("for u in range(N):") == 1 + 1 + 2
    assert lines.count("for u in range(HALF, N):") == 1 and lines.count("for u in range(n):") == 1
    assert lines.count("for u in range(_vz_r0_nx, _vz_r0_hi, _vz_r0_st):") == 1  # range(N), counted
    assert lines.count("for u in range(_vz_r1_nx, _vz_r1_hi, _vz_r1_st):") == 1  # range(n), counted
    for k in range(4):
        assert f"u = {k}" in lines
    assert lines.count("u = 2") == 2 and lines.count("u = 0") == 1  # range(HALF, N) runs 2 and 3
    assert len(info["sites"]) == 7  # a, a (the +=), a, a and a (the break loop), a, out: once each
    consts = ia.module_constants(
        ast.parse("A = 4\nB = A * 2 - 1\nC = 1\nC = 2\nD = 'x'\nE = f(3)\nF = True\n")
    )
    assert consts == {"A": 4, "B": 7}  # bound twice, not an int, or a call: not a constant


def p_info(tree) -> dict:
    return tree.vz_info["accesses"]


def test_flash_attentions_unrolled_recording_equals_the_recorder_on_its_own_accesses(sim_runner_local):
    """flash_attention's staging loop (``for u in range(NU)`` over the local ``buf``) is unrolled in its
    recording build, its device function ``store_tile`` (shared stores) is recorded through a copy per
    array, and what that build records on the simulator is the recorder's table for the same accesses
    (the recorder also counts local arrays)."""
    from visualizer.engine.capture import builtin
    from visualizer.engine.instrument.instrumenter import instrument_function
    from visualizer.engine.lenses.accesses import access_pass
    from visualizer.specs import catalog

    spec, values, _ = catalog.plan_launch("flash_attention", {"seq_len": 40}, "sim")
    fn = builtin.kernel_function(spec, values)
    p = access_pass(builtin.builtin_view(spec, fn, {}, {}))
    _, tree = instrument_function(fn, passes=(p,))
    lines = [ln.strip() for ln in ast.unparse(tree).splitlines()]
    nu, nw = p.constants["NU"], p.constants["NW"]
    staged = [
        ln for ln in lines if ln.startswith("sV[_vz_at4(") and ln.endswith("= buf[(u * NW + w) * 4 + e]")
    ]
    assert len(staged) == nu * nw * 4  # one per (u, w, e)
    # the kernel's loop (in its recorded copy and in its counted copy, for a warp with no room left),
    # store_tile's in its two recording copies (sQ; sKP) and load_tile's in its three (the views of q,
    # k, v), and each one's counting copy: unrolled all nine
    assert lines.count(f"u = {nu - 1}") == 9
    assert sum(ln == "if not _vz_cuda.syncthreads_or(_vz_room(_vz_acc, _vz_st, _vz_n)):" for ln in lines) == 1
    # the K/V loop split in two: recorded steps, then the rest counted, through counting copies of the
    # device functions (one per function: a count is a count, whichever array it is of)
    assert "for step in range(_vz_r0_lo, _vz_r0_hi, _vz_r0_st):" in lines
    assert "for step in range(_vz_r0_nx, _vz_r0_hi, _vz_r0_st):" in lines
    assert {ln.split("(")[0] for ln in lines if "__vz_cnt" in ln and not ln.startswith("def ")} == {
        "load_tile__vz_cnt5", "store_tile__vz_cnt6"}  # fmt: skip
    assert any(
        ln.startswith("store_tile__vz_rec") and "(buf, sQ, rb, cg, scale, _vz_acc, _vz_st" in ln
        for ln in lines
    )
    tile_lines = {
        s["line"] for s in p_info(tree)["sites"] if s["array"] in ("sQ", "sKP") and s["op"] == "store"
    }
    assert any(
        line < fn.__code__.co_firstlineno for line in tile_lines
    )  # store_tile's own line, above the kernel
    plain, passed = capture_both(sim_runner_local, "flash_attention", {"seq_len": 40})
    assert passed.check["correct"] and passed.launch["accesses"]["sample"]["unrecorded_accesses"] == 0
    blocks = passed.launch["accesses"]["sample"]["blocks"]
    lines = set(passed.accesses["line"])

    def own(df):
        d = df[
            df["block"].isin(blocks)
            & df["space"].astype(str).isin(["global", "shared"])
            & df["line"].isin(lines)
        ]
        d = d.sort_values(["block", "thread", "tseq"]).copy()
        d["tseq"] = d.groupby(["block", "thread"]).cumcount()  # each thread's order among these accesses
        return norm(d, ACC)

    assert len(passed.accesses) > 10_000
    loads = passed.accesses[passed.accesses["space"].astype(str) == "global"]
    # q, k and v through the views qh = q[b, h] ... in load_tile: both record them, as q's own elements
    assert set(loads["array"].astype(str)) == {"q", "k", "v", "o"}
    pd.testing.assert_frame_equal(own(passed.accesses), own(plain.accesses))


def test_sampling_on_the_simulator_and_too_many_blocks_are_refused_in_one_line(tmp_path):
    base = CAPTURE_SMALL_MATMUL
    res = subprocess.run([*base, "--accesses", "--sample-blocks", "0", "--out", str(tmp_path)],
                         capture_output=True, text=True)  # fmt: skip
    assert res.returncode == 2 and "records every thread" in res.stderr and res.stderr.count("\n") == 1
    with pytest.raises(ValueError, match="at most 64"):
        gpu_accesses.parse_blocks(",".join(str(b) for b in range(65)), (100, 1, 1))


def test_small_vs_real_size_per_line(sim_runner_local):
    from visualizer.figures.memory import SMALL_VS_BIG, side_by_side_figure

    def rec(rows):
        params = {"rows": rows, "cols": rows, "tile": 32}
        return sim_runner_local.capture("transpose_tiled", params, accesses=True, time_clean=False,
                                        access_engine="pass")  # fmt: skip

    table = gpu_accesses.sizes_side_by_side(rec(32).requests, rec(96).requests)
    assert table["agree"].all() and (table["requests_big"] > table["requests_small"]).all()
    fig = side_by_side_figure(table, sides=SMALL_VS_BIG)
    assert "small vs this size, on the GPU: the same per request on every line" in fig.layout.title.text
    assert MEASURED_GPU_SAMPLED in fig.layout.title.text


def test_a_gpu_recording_saves_and_loads_as_a_bundle(sim_runner_local, tmp_path):
    from visualizer.tools.bundle import load, save

    _, passed = capture_both(sim_runner_local, "transpose_tiled", {"rows": 64, "cols": 64, "tile": 32})
    save(passed, tmp_path)
    back = load(tmp_path)
    assert back.launch["accesses"]["sample"] == passed.launch["accesses"]["sample"]
    assert back.launch["accesses"]["source"] == SIMULATED_SAMPLED
    assert back.requests.attrs["source"] == back.accesses.attrs["source"] == SIMULATED_SAMPLED
    pd.testing.assert_frame_equal(norm(back.requests, REQ), norm(passed.requests, REQ))


def test_crosscheck_names_every_fresh_kernel_and_marks_a_difference_of_any_of_three():
    from devtools import crosscheck, crosscheck_fresh

    assert crosscheck.FRESH == [c[0] for c in crosscheck_fresh.cases()]
    rows = [
        {"case": "k", "metric": m, "ncu": 4, "engine": 4, "pass_gpu": 4 if i else 5, "equal": True,
         "pass_equal": bool(i), "hazards": {}}
        for i, (m, _) in enumerate(crosscheck.METRICS)
    ]  # fmt: skip
    table = crosscheck.markdown(rows, [])
    assert "ncu / simulator / GPU recording" in table.splitlines()[0]
    cells = table.splitlines()[2].split(" | ")
    assert cells[1] == "4 / 4 / 5 **≠**" and cells[2] == "4 / 4 / 4"


def test_crosscheck_record_on_the_simulator_writes_both_recordings(tmp_path):
    res = subprocess.run(
        [sys.executable, "-m", "devtools.crosscheck", "record", "--out", str(tmp_path), "--engine", "sim"],
        capture_output=True, text=True, timeout=600, cwd=HERE.parent,  # devtools/ runs from a checkout
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    import json

    passed = json.loads((tmp_path / "recorded_sim.json").read_text())
    recorder = json.loads((tmp_path / "simulator.json").read_text())
    assert set(passed) == set(recorder) and passed["f64_uneven"]["shared_ld_wavefronts"] == 136
    for kernel in passed:
        for key in (
            "global_ld_sectors",
            "shared_ld_wavefronts",
            "shared_ld_bank_conflicts",
            "shared_st_wavefronts",
        ):
            assert passed[kernel][key] == recorder[kernel][key], (kernel, key)


ROOM_PY = HERE / "access_room_cases.py"


def check_room_case(res: dict) -> None:
    """Every sampled warp's lanes said they were done (the done word of each slot's spare row has all
    64 bits set: the lanes a short warp lacks count as done), so its loops ran their counted copies;
    each lane's count is still exact, the records are each lane's first ``cap`` accesses, and the
    kernel's output is right."""
    cap, slots = res["cap"], res["slots"]
    assert cap == 4 and slots == 4
    code, _ = rewrite(ROOM_PY.read_text())
    assert code.count("_vz_room(") == 3  # each loop: the one with barriers, the while loop, the one down
    # the two range loops split: recorded steps, then a loop of their own for the rest
    assert "for i in range(_vz_r0_nx, _vz_r0_hi, _vz_r0_st):" in code
    assert "for m in range(_vz_r1_nx, _vz_r1_hi, _vz_r1_st):" in code
    rec = res["buffers"]["_vz_acc"].reshape(slots, cap + 1, 64)
    assert (rec[:, cap, 0] == -1).all()  # every warp done
    assert (rec[:, cap, 1:] == 0).all()  # the rest of the spare row untouched
    counts = res["buffers"]["_vz_acc_cnt"].astype(np.int64)
    made = np.asarray(res["made"], np.int64)
    for s in range(slots):
        lanes = 32 if s % 2 == 0 else 16
        assert counts[s, :lanes].tolist() == made[(s % 2) * 32 :][:lanes].tolist()
        assert (counts[s, lanes:] == 0).all()
        assert (rec[s, :cap, :lanes] > 0).all() and (rec[s, :cap, lanes:32] == 0).all()
    np.testing.assert_allclose(res["out"], res["want"], rtol=1e-5)
    if res["counted"] is not None:  # the simulator: accesses made through the counted copies
        trips = int((np.arange(48) % 3 + 5).sum()) * 2
        # the barrier loop's steps 3-9 at least (each lane is past cap after step 1), the whole while loop
        assert res["counted"] >= 7 * 3 * 96 + trips


def test_a_warp_with_a_full_buffer_runs_its_loops_counted_and_counts_exactly(tmp_path):
    check_room_case(run_case_script(ROOM_PY, tmp_path, "sim"))


@pytest.mark.gpu
def test_a_warp_with_a_full_buffer_runs_its_loops_counted_on_the_gpu(tmp_path):
    check_room_case(run_case_script(ROOM_PY, tmp_path, "gpu"))
