"""The compiled simulator engine (visualizer/engine/compiled) against fastsim and numpy: every built-in
kernel, the kernel cases of the fastsim and warp suites, the race cases and the visitors' examples give
the same arrays, or fall back (NotCompiled, the arrays untouched) - never a different answer. Seeded
schedules show the reverse race; (seed, run) replays bit for bit. No timing is asserted."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from numba import cuda
from tiers import every_builtin

sys.path.insert(0, str(Path(__file__).parents[1]))  # tests/

from compiled_diff import both, fastsim_launch, same, spec_launch  # noqa: E402

from visualizer.engine.compiled import NotCompiled, launch  # noqa: E402
from visualizer.engine.compiled import simulator as router  # noqa: E402
from visualizer.specs.catalog import KERNELS  # noqa: E402

# what falls back today, and why (a kernel leaving this list is progress; one joining it, a regression)
BUILTIN_FALLBACKS = {
    "flash_attention_fast": "a barrier inside device function",
}
# the built-in kernels with warp-level operations: each runs compiled (a lesson's warp shuffle included)
BUILTIN_WARP_KERNELS = {"reduce_shuffle"}


@pytest.mark.parametrize("name", every_builtin(sorted(KERNELS)))
def test_builtin_kernel_matches_fastsim(name):
    fn, grid, block, args, spec, values, dyn = spec_launch(name)
    if spec.fault_demo:  # both engines refuse the out-of-bounds write
        with pytest.raises(IndexError):
            fastsim_launch(fn, grid, block, [a.copy() if isinstance(a, np.ndarray) else a for a in args])
        with pytest.raises(NotCompiled, match="raised IndexError"):
            launch(fn, grid, block, [a.copy() if isinstance(a, np.ndarray) else a for a in args])
        return
    fast, comp, report = both(fn, grid, block, args, dynamic_smem=dyn)
    if name in BUILTIN_FALLBACKS:
        assert comp is None and BUILTIN_FALLBACKS[name] in report
        return
    assert comp is not None, report
    assert report.engine == "compiled"
    if name in BUILTIN_WARP_KERNELS:
        assert report.regions > 1, "its warp-level operations split it"
    for role, f, c in zip(spec.args, fast, comp, strict=True):
        assert same(f, c, rtol=1e-4, atol=1e-4), f"{name}: {role} differs from fastsim"
    if not spec.deliberately_wrong:
        named = dict(zip(spec.args, comp, strict=True))
        atol = spec.atol(values) if callable(spec.atol) else spec.atol
        for out, ref in spec.reference(named, values).items():
            np.testing.assert_allclose(named[out], ref, rtol=max(spec.rtol, 1e-4), atol=max(atol, 1e-4))


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run_cases(module, names, runner):
    """Each case on fastsim, then through the router (compiled, fastsim where it falls back): results and
    what the router did."""
    router.install()
    out = {}
    for name in names:
        with router.engine("fastsim"):
            fast = runner(module, name)
        start = len(router.LAUNCHES)
        router.LAUNCHES.clear()
        with router.engine("compiled"):
            comp = runner(module, name)
        del start
        out[name] = (fast, comp, list(router.LAUNCHES))
    return out


def _compare(results: dict):
    compiled, fell_back = [], {}
    for name, (fast, comp, launches) in results.items():
        if isinstance(fast, dict) and "raised" in fast:
            assert isinstance(comp, dict) and comp.get("raised") == fast["raised"], (name, fast, comp)
        elif isinstance(fast, dict):
            for k, v in fast.items():
                assert same(v, comp[k], rtol=1e-5, atol=1e-6), f"{name}: {k} differs"
        for entry in launches:
            if entry["engine"] == "compiled":
                compiled.append(name)
            else:
                fell_back[name] = entry["fallback"]
    return compiled, fell_back


def test_fastsim_suite_cases():
    cases = _load(Path(__file__).parents[1] / "fastsim_cases.py", "fastsim_cases_for_compiled")
    skip = {"current_thread_api", "threading_current_thread", "spin_lock_hang"}

    def run(mod, name):
        try:
            return mod.CASES[name]()
        except BaseException as e:  # noqa: BLE001
            return {"raised": type(e).__name__}

    results = _run_cases(cases, [n for n in cases.CASES if n not in skip], run)
    compiled, fell_back = _compare(results)
    print(f"fastsim cases: {len(set(compiled))} compiled, {len(fell_back)} fell back: {fell_back}")
    assert {"vector_add", "block_reduce", "tiled_matmul", "histogram", "atomics", "local_array"} <= set(
        compiled
    )
    assert "dynamic_shared" in fell_back and "grid_sync_one_block" in fell_back


WARP_CASES_COMPILED = {
    "shfl",
    "half_masks",
    "votes_full",
    "match",
    "partial_warp",
    "syncwarp",
    "votes_after_exit",
}
WARP_CASES_FALL_BACK = {
    "divergent": "a warp-level operation under a condition that differs between a warp's lanes (line",
    "grid_block_sums": "grid",
    "laplace": "grid",
    "sequential_rows": "grid",
}


def test_warp_cases_compile_with_fastsims_and_the_h200s_results():
    """Every warp case gives fastsim's arrays; the warp intrinsics' cases run compiled and give what the
    hardware defines (warp_cases.MODELS, which tests/engine/test_warp_sim.py checks on the H200); divergent
    warps and grid sync fall back with their one-line reason."""
    cases = _load(Path(__file__).parents[1] / "warp_cases.py", "warp_cases_for_compiled")

    def run(mod, name):
        try:
            return mod.CASES[name]()
        except BaseException as e:  # noqa: BLE001
            return {"raised": type(e).__name__}

    results = _run_cases(cases, list(cases.CASES), run)
    compiled, fell_back = _compare(results)
    print(f"warp cases: {len(set(compiled))} compiled, {len(fell_back)} fell back: {fell_back}")
    assert set(compiled) == WARP_CASES_COMPILED
    assert set(fell_back) == set(WARP_CASES_FALL_BACK)
    for name, why in WARP_CASES_FALL_BACK.items():
        assert why in fell_back[name] and "\n" not in fell_back[name], (name, fell_back[name])
    for name in WARP_CASES_COMPILED:
        comp = results[name][1]
        for key, want in cases.MODELS[name]().items():
            np.testing.assert_array_equal(
                np.asarray(comp[key]).astype(np.float64), np.asarray(want).astype(np.float64), err_msg=name
            )


def test_warp_refusals_fall_back_to_fastsims_error():
    """Where a GPU leaves a warp-level operation's result undefined (a mask without the caller's lane,
    a vote naming exited lanes, a shuffle from a lane not taking part) the compiled engine refuses in one
    line, the arrays untouched, and fastsim raises its error."""
    cases = _load(Path(__file__).parents[1] / "warp_cases.py", "warp_cases_for_compiled")
    router.install()
    want = {
        "own_lane_missing": "cuda.ballot_sync: a lane's mask leaves out the lane itself",
        "vote_names_exited": "cuda.ballot_sync: the mask names lanes that have exited",
        "vote_names_missing": "cuda.ballot_sync: the mask names lanes that have exited or that the block lacks",
        "shfl_from_outside": "cuda.shfl_down_sync: a lane reads a lane that is not taking part",
        "warp_deadlock": "a barrier under a condition that differs",
    }
    for name, why in want.items():
        with router.engine("fastsim"):
            fast = cases._refusal(cases.REFUSALS[name])
        router.LAUNCHES.clear()
        with router.engine("compiled"):
            comp = cases._refusal(cases.REFUSALS[name])
        assert fast is not None and fast.startswith("WarpError") or name == "warp_deadlock", (name, fast)
        assert comp == fast, name
        [entry] = router.LAUNCHES
        assert entry["engine"] == "fastsim" and why in entry["fallback"], (name, entry)
        assert "\n" not in entry["fallback"]


def _source_kernel(src: str, name: str):
    import hashlib
    import linecache

    ns: dict = {}
    filename = f"<race case {name} {hashlib.sha256(src.encode()).hexdigest()[:12]}>"  # one per source
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    exec(compile(src, filename, "exec"), ns)  # noqa: S102 - the test's own source
    return ns[name]


def _reverse(racy: bool):
    from race_cases import source

    return _source_kernel(source("reverse", racy), "reverse")


def test_reverse_race_shows_on_seeded_schedules():
    """The acceptance: without its barrier the reverse is wrong and varies across seeds; with it, right."""
    a = np.arange(256, dtype=np.float32)
    want = a.reshape(2, 128)[:, ::-1].reshape(-1)
    racy, safe = _reverse(True), _reverse(False)
    outs = set()
    for seed in range(1, 9):
        out = np.zeros(256, np.float32)
        launch(racy, 2, 128, [a, out], schedule=(seed, 0))
        assert not np.array_equal(out, want)
        outs.add(out.tobytes())
        ok = np.zeros(256, np.float32)
        launch(safe, 2, 128, [a, ok], schedule=(seed, 0))
        np.testing.assert_array_equal(ok, want)
    assert len(outs) >= 4, f"only {len(outs)} distinct outputs in 8 seeds"
    # the default order is wrong too (warps past the first read slots nobody wrote yet)
    out = np.zeros(256, np.float32)
    launch(racy, 2, 128, [a, out])
    assert not np.array_equal(out, want)


def test_seeded_schedule_replays_bit_for_bit():
    a = np.arange(256, dtype=np.float32)
    racy = _reverse(True)
    runs = []
    for _ in range(2):
        out = np.zeros(256, np.float32)
        launch(racy, 2, 128, [a, out], schedule=(3, 5))
        runs.append(out)
    assert runs[0].tobytes() == runs[1].tobytes()
    other = np.zeros(256, np.float32)
    launch(racy, 2, 128, [a, other], schedule=(3, 6))
    assert other.tobytes() != runs[0].tobytes()


@pytest.mark.parametrize("name", ["reverse", "histogram", "matmul"])
def test_race_cases_race_free_versions_match_numpy(name):
    from race_cases import CASES, source

    src, kernel, grid, block, arrays, reference, *_ = CASES[name]
    fn = _source_kernel(source(name, racy=False), kernel)
    rng = np.random.default_rng(0)
    made = {}
    for arg, spec in arrays.items():
        kind, dtype, shape = spec.split(":")
        shape = tuple(int(x) for x in shape.split("x"))
        if kind == "arange":
            made[arg] = np.arange(np.prod(shape)).reshape(shape).astype(dtype)
        elif kind == "zeros":
            made[arg] = np.zeros(shape, dtype)
        else:
            made[arg] = rng.random(shape).astype(dtype)
    g = tuple(int(x) for x in grid.split(","))
    b = tuple(int(x) for x in block.split(","))
    args = list(made.values())
    fast, comp, report = both(fn, g, b, args)
    assert comp is not None, report
    for f, c in zip(fast, comp, strict=True):
        assert same(f, c)
    env = {"np": np, **{k: v for k, v in zip(made, comp, strict=True)}}
    expected = {k: v.copy() for k, v in env.items() if k != "np"}
    exec(reference, {"np": np}, expected)  # noqa: S102 - the case's own numpy reference
    for k in made:
        np.testing.assert_allclose(env[k], expected[k], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("example", ["vector_add", "reduction", "matmul_tiled"])
def test_visitor_examples_compile(example):
    root = Path(__file__).resolve().parents[2]
    mod = _load(root / "kernels" / "examples" / f"{example}.py", f"example_{example}")
    kernels = [v for v in vars(mod).values() if hasattr(v, "py_func") or hasattr(v, "fn")]
    kernels = [k for k in kernels if not getattr(k, "_device", False)]
    assert kernels
    k = kernels[0]
    import inspect

    params = list(inspect.signature(k.py_func).parameters)
    rng = np.random.default_rng(1)
    if example == "vector_add":
        n = 1000
        args = [rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32), np.zeros(n, np.float32)]
        args += [n] if len(params) == 4 else []
        grid, block = (n + 127) // 128, 128
    elif example == "reduction":
        n = 1000
        args, grid, block = [rng.random(n, dtype=np.float32), np.zeros(4, np.float32)], 4, 256
    else:
        n = 32
        args = [
            rng.random((n, n), dtype=np.float32),
            rng.random((n, n), dtype=np.float32),
            np.zeros((n, n), np.float32),
        ]
        tile = getattr(mod, "TILE", 16)
        grid, block = ((n + tile - 1) // tile, (n + tile - 1) // tile), (tile, tile)
    fast, comp, report = both(k, grid, block, args[: len(params)])
    assert comp is not None, report
    for f, c in zip(fast, comp, strict=True):
        assert same(f, c, rtol=1e-4, atol=1e-4)


def test_refusals_are_one_line_and_leave_arrays_alone():
    from numba import cuda

    @cuda.jit
    def divergent(out):
        t = cuda.threadIdx.x
        if t < 16:
            cuda.syncthreads()  # a barrier only half the block reaches: undefined on a GPU
        out[t] = 1

    out = np.zeros(32, np.int32)
    with pytest.raises(NotCompiled) as e:
        launch(divergent, 1, 32, [out])
    assert "differs between the block's threads" in str(e.value) and "\n" not in str(e.value)
    assert not out.any()

    @cuda.jit
    def half_warp_shuffles(out):
        t = cuda.threadIdx.x
        if t % 32 < 16:  # lanes of one warp in different branches: fastsim's rendezvous, not lockstep
            out[t] = cuda.shfl_down_sync(0x0000FFFF, t, 1)

    out[:] = 0
    with pytest.raises(NotCompiled) as e:
        launch(half_warp_shuffles, 1, 32, [out])
    assert "a warp-level operation under a condition that differs between a warp's lanes" in str(e.value)
    assert "\n" not in str(e.value) and not out.any()

    @cuda.jit
    def in_a_device_function(out):
        out[cuda.threadIdx.x] = shuffled(cuda.threadIdx.x)

    with pytest.raises(NotCompiled, match="warp-level cuda.shfl_xor_sync inside a device function"):
        launch(in_a_device_function, 1, 32, [out])

    @cuda.jit
    def seeded(out):
        out[cuda.threadIdx.x] = cuda.shfl_xor_sync(0xFFFFFFFF, cuda.threadIdx.x, 1)

    launch(seeded, 1, 32, [out])  # compiled
    np.testing.assert_array_equal(out, np.arange(32) ^ 1)
    with pytest.raises(NotCompiled, match="a seeded schedule of a kernel with warp-level operations"):
        launch(seeded, 1, 32, [out], schedule=(1, 0))


@cuda.jit(device=True)
def shuffled(v):
    return cuda.shfl_xor_sync(0xFFFFFFFF, v, 1)


@cuda.jit
def per_warp(x, out, trips):  # module level: fastsim swaps this module's `cuda`
    t = cuda.threadIdx.x
    lane = t % 32
    w = t // 32
    v = x[t]
    if w == 1:
        off = 16
        while off > 0:
            v += cuda.shfl_down_sync(0xFFFFFFFF, v, off)
            off //= 2
    n = 0
    for k in range(w + 1):  # warp w: w + 1 trips
        n += cuda.ballot_sync(cuda.activemask(), lane < 8 + k) & 1
    if t == 70:
        return
    if w == 2:
        trips[t] = cuda.activemask()
    out[t] = v + n


def test_warp_level_ifs_and_loops_agree_per_warp_only():
    """An if or loop with warp-level operations and no barrier inside needs its condition the same for a
    warp's lanes, not for the block's: warp 0 alone reduces (reduce_shuffle's second stage), a loop runs
    a different number of times in each warp, a lane's return in the loop leaves the others going."""
    x = np.arange(96, dtype=np.int32)
    fast, comp, report = both(per_warp, 1, 96, [x, np.zeros(96, np.int32), np.zeros(96, np.uint32)])
    assert comp is not None, report
    for f, c in zip(fast, comp, strict=True):
        np.testing.assert_array_equal(f, c)
    assert comp[2][64] == 0xFFFFFFFF & ~(1 << 6)  # lane 6 of warp 2 returned
    assert comp[1][32] == sum(range(32, 64)) + 2


def test_uniform_barrier_loop_and_votes():
    from numba import cuda, int32

    @cuda.jit
    def scan(x, out, counts):
        s = cuda.shared.array(64, int32)
        t = cuda.threadIdx.x
        s[t] = x[cuda.grid(1)]
        cuda.syncthreads()
        step = 1
        while step < cuda.blockDim.x:  # the same for every thread: a block-wide loop
            v = s[t - step] if t >= step else 0
            cuda.syncthreads()
            s[t] += v
            cuda.syncthreads()
            step *= 2
        out[cuda.grid(1)] = s[t]
        c = cuda.syncthreads_count(s[t] > 100)
        if t == 0:
            counts[cuda.blockIdx.x] = c

    x = np.arange(128, dtype=np.int32) % 7
    out, counts = np.zeros(128, np.int32), np.zeros(2, np.int32)
    report = launch(scan, 2, 64, [x, out, counts])
    want = np.concatenate([np.cumsum(x[:64]), np.cumsum(x[64:])])
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(counts, [(want[:64] > 100).sum(), (want[64:] > 100).sum()])
    assert report.syncs >= 3


def test_parallel_blocks_only_where_order_cannot_matter():
    from visualizer.kernels.histogram import histogram_global
    from visualizer.kernels.vector_add import vector_add

    n = 4096
    a, b, c = np.ones(n, np.float32), np.arange(n, dtype=np.float32), np.zeros(n, np.float32)
    r = launch(vector_add, n // 256, 256, [a, b, c, n], parallel=True)
    assert r.blocks == "parallel" and np.array_equal(c, a + b)
    x, bins = (np.arange(n) % 8).astype(np.int32), np.zeros(8, np.int32)
    r = launch(histogram_global, n // 256, 256, [x, bins, n], parallel=True)
    assert r.blocks == "serial" and "atomics on global memory" in r.serial_reason
    np.testing.assert_array_equal(bins, np.bincount(x, minlength=8))


@cuda.jit
def fill(out):  # module level: the simulator swaps this module's `cuda` while it runs
    out[cuda.grid(1)] = 7


def test_router_leaves_launches_to_fastsim_unless_asked():
    router.install()
    out = np.zeros(64, np.int32)
    before = len(router.LAUNCHES)
    fill[2, 32](out)  # outside engine(...): fastsim, as before the router was installed
    assert len(router.LAUNCHES) == before and (out == 7).all()
    with router.engine("compiled"):
        fill[2, 32](out)
    assert router.last_launch()["engine"] == "compiled"
    with pytest.raises(ValueError, match="unknown simulator engine"):
        with router.engine("gpu"):
            pass


def test_a_kernel_called_without_its_launch_configuration_gets_numbas_error():
    """numba-cuda's own test (test_errors.TestJitErrors.test_unconfigured_*) on the compiled engine: the
    error fastsim and the stock simulator give, not a TypeError from the engine's grid arithmetic."""
    router.install()
    out = np.zeros(4, np.int32)
    # fresh kernels: the simulator's kernel[grid, block] configures the kernel object itself, for good
    for kernel in (cuda.jit(fill.fn), cuda.jit("void(int32[:])")(fill.fn)):
        with (
            router.engine("compiled"),
            pytest.raises(ValueError, match="launch configuration was not specified"),
        ):
            kernel(out)
    assert (out == 0).all()


def test_a_launch_of_no_threads_does_nothing_as_on_fastsim():
    """numba-cuda's test_forall.test_forall_no_work: ``kernel.forall(0)`` launches a grid of 0 blocks,
    which fastsim runs as nothing; the compiled engine's launch refused it with a ValueError."""
    router.install()
    out = np.zeros(4, np.int32)
    with router.engine("compiled"):
        cuda.jit(fill.fn)[0, 32](out)
        assert router.last_launch()["fallback"].startswith("a launch of no threads")
        cuda.jit(fill.fn).forall(0)(out)
    assert (out == 0).all()


@cuda.jit
def round_to(out, x, ndigits):
    out[0] = round(x, ndigits)


def test_numbas_own_round_and_cuda_in_cases_match_fastsim():
    """Two of numba-cuda's own tests the compiled engine failed: test_round_to_f4_halfway (numba's CPU
    round(0.3425, 3) gives 0.342 where Python's and fastsim's give 0.343: now refused, fastsim runs it) and
    test_retrieve_autoconverted_arrays.test_array_in (a kernel's write to a cuda.In array came back to
    the host: now it writes a copy) and its prepare_args form (falls back)."""
    from numba.cuda.args import wrap_arg

    router.install()
    results = {}
    for name in ("fastsim", "compiled"):
        out = np.zeros(1, np.float32)
        with router.engine(name):
            round_to[1, 1](out, 0.3425, 3)  # a Python float, as numba's test passes it
        results[name] = out[0]
    assert results["compiled"] == results["fastsim"]
    assert "round(x, ndigits)" in router.last_launch()["fallback"]

    host = np.zeros(1, np.int64)
    with router.engine("compiled"):
        cuda.jit(fill.fn)[1, 1](cuda.In(host))
    assert router.last_launch()["engine"] == "compiled" and host[0] == 0

    class DefaultIn:
        def prepare_args(self, ty, val, **kwargs):
            return ty, wrap_arg(val, default=cuda.In)

    kernel = cuda.jit(fill.fn)
    kernel.extensions.append(DefaultIn())
    with router.engine("compiled"):
        kernel[1, 1](host)
    assert host[0] == 0 and "extensions" in router.last_launch()["fallback"]


def test_a_rewritten_copy_is_not_compiled_from_the_file():
    """The instrumented build is exec'd from a rewritten tree with the kernel's file and lines: reading
    the file would compile the original. Given as a function it falls back; as tree + namespace it runs."""
    import ast

    from visualizer.engine.instrument.instrumenter import instrument_function
    from visualizer.kernels.vector_add import vector_add

    traced, tree = instrument_function(vector_add, did_work="i < n")
    n = 300
    a, b, c = np.arange(n, dtype=np.float32), np.ones(n, np.float32), np.zeros(n, np.float32)
    trace, active = np.zeros((3, 512), np.int64), np.zeros(512, np.uint8)
    with pytest.raises(NotCompiled, match="rewritten copy"):
        launch(traced, 4, 128, [a, b, c, n, trace, active])
    fd = next(f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == traced.__name__)
    launch(None, 4, 128, [a, b, c, n, trace, active], tree=fd, namespace=traced.__globals__)
    np.testing.assert_array_equal(c, a + b)
    assert active.sum() == n  # the ids lens recorded who did work
    np.testing.assert_array_equal(trace[0, ::128], [0, 1, 2, 3])  # SM modelled: blocks round-robin
    assert (trace[2] >= trace[1]).all() and trace[1].min() > 0


# index checks hoisted out of loops (codegen.HoistChecks): caught exactly where an unhoisted check is
@cuda.jit
def _hoist_bad(a, out, m):
    t = cuda.threadIdx.x
    acc = 0.0
    for k in range(4):  # runs: the invariant row t + m is checked once before the loop
        acc += a[t + m, k]
    out[t] = acc


@cuda.jit
def _hoist_zero_trips(a, out, m):
    t = cuda.threadIdx.x
    acc = 0.0
    for k in range(m - 7):  # m = 7: never runs, so its bad row is never read
        acc += a[t + 100, k]
    out[t] = acc


@cuda.jit
def _hoist_guarded(a, out, m):
    t = cuda.threadIdx.x
    acc = 0.0
    for k in range(4):
        if k > m:  # never true: the bad row under it is never read
            acc += a[t + 100, k]
        if k == m:
            break
        acc += a[t - 1, k]  # t - 1 = -1 for thread 0: wraps, as numpy (and fastsim) read it
    out[t] = acc


@cuda.jit
def _hoist_written(a, out, m):
    t = cuda.threadIdx.x
    acc = 0.0
    j = t
    for k in range(4):
        acc += a[j, k]
        j += m  # j changes every iteration: checked every time (the 2nd step is out of range)
    out[t] = acc


def test_hoisted_index_checks_catch_what_they_did_and_nothing_else():
    from visualizer.engine.compiled.engine import _argtypes, compile_kernel

    a = np.arange(32 * 4, dtype=np.float64).reshape(32, 4)
    out = np.zeros(8)
    ck = compile_kernel(_hoist_bad, _argtypes([a, out, 5]))
    assert "__cc_h1 = __cc_ix(" in ck.source  # hoisted: before the loop, not in it
    # a hoisted check out of range: the launch is undone and handed to fastsim, which raises
    with pytest.raises(NotCompiled, match="raised IndexError"):
        launch(_hoist_bad, 1, 8, [a, out, 30])
    assert not out.any()
    with pytest.raises(IndexError):
        fastsim_launch(_hoist_bad, 1, 8, [a, out.copy(), 30])
    fast, comp, report = both(_hoist_bad, 1, 8, [a, out, 5])
    assert comp is not None, report
    assert same(fast[1], comp[1])
    # never reached, so never an error (a hoisted check that ran anyway would hand these to fastsim)
    for kernel, m in ((_hoist_zero_trips, 7), (_hoist_guarded, 2)):
        fast, comp, report = both(kernel, 1, 8, [a, out, m])
        assert comp is not None, (kernel, report)
        assert same(fast[1], comp[1]), kernel
    fast, comp, report = both(_hoist_written, 1, 8, [a, out, 1])
    assert comp is not None and same(fast[1], comp[1]), report
    with pytest.raises(NotCompiled, match="raised IndexError"):
        launch(_hoist_written, 1, 8, [a, out, 30])


_CACHE_CHILD = """
import json, sys
import numpy as np
from visualizer.engine.compiled import launch
from visualizer.kernels.vector_add import vector_add
n = 1000
a, b, c = np.arange(n, dtype=np.float32), np.ones(n, np.float32), np.zeros(n, np.float32)
r = launch(vector_add, 8, 128, [a, b, c, n])
print(json.dumps({"from": r.compiled_from, "compile_s": r.compile_s, "ok": bool((c == a + b).all())}))
"""


def _cache_child(cache: Path, **env) -> dict:
    import json
    import os
    import subprocess

    root = Path(__file__).resolve().parents[2]
    full = {k: v for k, v in os.environ.items() if k != "VISUALIZER_SANDBOX_MODE"}
    full.update(PYTHONPATH=str(root), NUMBA_ENABLE_CUDASIM="1", VISUALIZER_COMPILED_CACHE=str(cache), **env)
    p = subprocess.run([sys.executable, "-c", _CACHE_CHILD], capture_output=True, text=True, env=full,
                       timeout=600, cwd=root)  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_compiled_kernels_are_kept_on_disk_across_processes(tmp_path):
    """A second process loads the kernel the first compiled (numba's cache, keyed by the generated
    source, the argument types and the engine's own code), and gets the same answer."""
    cache = tmp_path / "cache"
    first = _cache_child(cache)
    assert first == {**first, "from": "compiled", "ok": True}
    assert list(cache.glob("k*.py")) and list(cache.glob("__pycache__/k*.nbi"))
    second = _cache_child(cache)
    assert second["from"] == "disk" and second["ok"]
    # a sandboxed worker (visitor code) never reads or writes it; nor does anyone in a shared directory
    assert _cache_child(cache, VISUALIZER_SANDBOX_MODE="bubblewrap")["from"] == "compiled"
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    assert _cache_child(shared)["from"] == "compiled"
    assert _cache_child(shared)["from"] == "compiled" and not list(shared.iterdir())


_PROBED_MODULE = """
from numba import cuda
from visualizer.kernels import probes

@cuda.jit
def placed(out, when):
    i = cuda.grid(1)
    out[i] = probes.smid()
    when[i] = probes.globaltimer()
"""

_PROBED_CHILD = """
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from probed_kernel import placed
from visualizer.engine.compiled import launch
out, when = np.zeros(512, np.int64), np.zeros(512, np.int64)
r = launch(placed, 4, 128, [out, when])
print(json.dumps({"from": r.compiled_from, "sms": out[::128].tolist(), "timed": bool((when > 0).all())}))
"""


def test_a_kernel_calling_the_modelled_probes_is_kept_on_disk_too(tmp_path):
    """An instrumented build calls the modelled smid/globaltimer (another module's njit functions,
    keyed by the package file defining them): a second process loads it rather than compiling it again."""
    import json
    import os
    import subprocess

    (tmp_path / "probed_kernel.py").write_text(_PROBED_MODULE)
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "VISUALIZER_SANDBOX_MODE"}
    env.update(PYTHONPATH=str(root), NUMBA_ENABLE_CUDASIM="1", VISUALIZER_COMPILED_CACHE=str(tmp_path / "c"))
    runs = []
    for _ in range(2):
        p = subprocess.run([sys.executable, "-c", _PROBED_CHILD, str(tmp_path)], capture_output=True, text=True,
                           env=env, timeout=600, cwd=root)  # fmt: skip
        assert p.returncode == 0, p.stderr[-2000:]
        runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    assert [r["from"] for r in runs] == ["compiled", "disk"], runs
    assert runs[0]["sms"] == runs[1]["sms"] == [0, 1, 2, 3] and runs[1]["timed"]


def test_substitutes_are_keyed_by_the_package_file_that_defines_them():
    """A lens's probe substitute is keyed by its file's bytes and name; a function from outside the
    package (a visitor's) is known only by identity, so no kernel calling it goes to disk."""
    from numba import njit

    from visualizer.engine.compiled import runtime
    from visualizer.engine.compiled.engine import _callee_stamps, _substitute_stamp
    from visualizer.engine.compiled.translate import SUBSTITUTES
    from visualizer.engine.lenses.accesses import compiled_probes

    compiled_probes()
    stamps = {name: _substitute_stamp(fn) for name, fn in SUBSTITUTES.values()}
    assert len(stamps) >= 2 and all(s and s.startswith("accesses.py ") for s in stamps.values()), stamps
    assert _substitute_stamp(runtime.model_smid).startswith("runtime.py ")
    outside = njit(lambda ids: 0)
    assert _substitute_stamp(outside) is None
    assert _callee_stamps({"__cc_dev_sub_x": outside}) is None


def test_disk_cache_keys_name_what_globals_are():
    """Module, dtype and constant-array globals are keyed by what they are (the same in every process);
    an array's key changes with its contents."""
    import math

    from visualizer.engine.compiled.engine import _object_key

    a = np.arange(4.0)
    k1 = _object_key({"math": math, "f4": np.float32, "tbl": a})
    assert all(not v.startswith("id ") for _, v in k1)
    assert _object_key({"tbl": a + 1}) != _object_key({"tbl": a})
    assert _object_key({"obj": object()})[0][1].startswith("id ")


# the index check (runtime.check_index, an LLVM intrinsic): every integer kind an index may have
@cuda.jit
def _index_kinds(a, out, iu32, i8, iu64, i64):
    t = cuda.threadIdx.x
    out[t] = a[iu32[t]] + 10 * a[i8[t]] + 100 * a[iu64[t]] + 1000 * a[i64[t]]


def test_index_check_takes_every_integer_kind_as_fastsim_does():
    a = np.arange(16, dtype=np.float64)
    n = 8
    iu32 = np.arange(n, dtype=np.uint32) * 2
    i8 = -np.arange(1, n + 1, dtype=np.int8)  # negative: wraps, as numpy reads it
    iu64 = np.arange(n, dtype=np.uint64) + 8
    i64 = np.arange(n, dtype=np.int64) - 16  # -16: the first element, wrapped
    args = [a, np.zeros(n), iu32, i8, iu64, i64]
    fast, comp, report = both(_index_kinds, 1, n, args)
    assert comp is not None, report
    assert same(fast[1], comp[1])
    expected = a[iu32] + 10 * a[i8] + 100 * a[iu64] + 1000 * a[i64]
    assert same(comp[1], expected)
    # out of range in each kind: noted, the launch undone and handed to fastsim, which raises
    for i, bad in ((2, np.uint32(16)), (3, np.int8(-17)), (4, np.uint64(2**63 + 1)), (5, np.int64(-17))):
        wrong = [x.copy() if isinstance(x, np.ndarray) else x for x in args]
        wrong[i][3] = bad
        with pytest.raises(NotCompiled, match="raised IndexError"):
            launch(_index_kinds, 1, n, wrong)
        assert not wrong[1].any()


def test_instrumented_and_clean_builds_agree_on_a_tiled_matmul():
    """The capture's two builds of the tiled matmul (its trace_tile probes real in the instrumented one,
    inlined into the regions: engine.PROBE_DEVICE) give the same C, and the instrumented one records every
    block's tiles and every warp's ids."""
    from visualizer.engine.compiled import bench
    from visualizer.kernels.matmul import matmul_tiled_kernel
    from visualizer.kernels.probes import without_probes

    n, tile = 72, 16  # 5 x 5 blocks, the last row and column of blocks partly outside C
    g = (n + tile - 1) // tile
    rng = np.random.default_rng(3)
    A, B = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
    tiles = np.full((g * g, g, 2, 5), -1, np.int64)
    fn = matmul_tiled_kernel(tile)
    clean = [A, B, np.zeros((n, n), np.float32), n, tiles.copy()]
    launch(without_probes(fn), (g, g), (tile, tile), clean)
    traced, fd, args = bench._traced(fn, (g, g), (tile, tile), [A, B, np.zeros((n, n), np.float32), n, tiles])
    report = launch(None, (g, g), (tile, tile), args, tree=fd, namespace=traced.__globals__)
    assert report.engine == "compiled"
    assert np.array_equal(clean[2], args[2])  # bit for bit
    assert np.allclose(args[2], A.astype(np.float64) @ B.astype(np.float64), rtol=1e-5)
    assert (clean[4] == -1).all()  # the clean build's probes are no-ops
    rec = args[4]
    for b in range(g * g):
        by, bx = divmod(b, g)  # blockIdx.x is the fastest in the linear block number
        for step in range(g):
            assert list(rec[b, step, 0, :4]) == [
                by * tile,
                step * tile,
                min(tile, n - by * tile),
                min(tile, n - step * tile),
            ]
            assert list(rec[b, step, 1, :4]) == [
                step * tile,
                bx * tile,
                min(tile, n - step * tile),
                min(tile, n - bx * tile),
            ]
    trace, active = args[5], args[6]
    assert (trace[2] >= trace[1]).all() and (trace[1] > 0).all()
    blocks = np.repeat(np.arange(g * g), tile * tile)
    assert np.array_equal(trace[0], blocks % 132)  # modelled SMs, one record per thread here
    assert (active == 1).all()  # no active_when given to the instrumenter here: every thread did work


@cuda.jit(device=True)
def trace_tile(tiles, step, operand, row0, col0, rows, cols):  # a kernel's own, named as the probe
    tiles[0, step, operand, 0] = row0


def test_only_the_trace_probes_are_inlined_and_their_region_keeps_no_reference_counts(monkeypatch):
    """kernels/probes.py's trace probes are inlined in numba's IR (engine.PROBE_DEVICE), a kernel's own
    device functions (and a lens's) are called: inlining those made access-pass builds' compiles explode.
    Called, trace_tile kept the tiled matmul's tile-loop region's NRT incref/decref of all its arrays
    per thread per step (its 1M-thread instrumented launch 18x the clean one: docs/benchmarks.md)."""
    import re

    from visualizer.engine.compiled import bench, engine
    from visualizer.kernels import access_probes, probes
    from visualizer.kernels.matmul import matmul_tiled_kernel
    from visualizer.kernels.merge import co_rank

    def py(f):
        return getattr(f, "py_func", None) or getattr(f, "fn", None) or f

    for name in ("trace_begin", "trace_end", "trace_tile", "trace_row_state", "linear_ids", "record_slot"):
        assert engine.inlined(py(getattr(probes, name))), name
    for f in (trace_tile, co_rank, access_probes.note, probes.race_delay):
        assert not engine.inlined(py(f)), f
    assert engine.compile_device(py(probes.trace_tile)).dispatcher.targetoptions.get("inline") == "always"
    assert engine.compile_device(py(trace_tile)).dispatcher.targetoptions.get("inline", "never") == "never"

    monkeypatch.setenv(engine.CACHE_ENV, "off")  # compiled here, not loaded: its regions' LLVM is there
    n, tile = 36, 12  # a tile size no other test compiles (this process's cache keeps compiled kernels)
    g = n // tile
    A = np.ones((n, n), np.float32)
    tiles = np.full((g * g, g, 2, 5), -1, np.int64)
    traced, fd, args = bench._traced(matmul_tiled_kernel(tile), (g, g), (tile, tile), [A, A, A * 0, n, tiles])
    ck = engine.compile_kernel(None, engine._argtypes(args), tree=fd, namespace=traced.__globals__)
    defs = ck.source.split("\ndef ")
    looped = [d.split("(")[0] for d in defs if d.startswith(engine.P + "region_") and "dev_trace_tile" in d]
    assert looped, "no region calls trace_tile"
    for region in looped:
        (llvm,) = ck.ns[region].inspect_llvm().values()
        calls = set(re.findall(r"call [^@]*@([\w.$]+)", llvm))
        assert not calls & {"NRT_incref", "NRT_decref"}, (region, sorted(calls))


@cuda.jit
def _carried(a, out):
    t = cuda.threadIdx.x
    sh = cuda.shared.array(8, np.float64)
    x = 0.0
    for i in range(3):
        x += a[t, i]
    j = t
    for j in range(t % 3):  # noqa: B007 - read after the barrier: kept
        pass
    sh[t] = x
    cuda.syncthreads()
    for i in range(2):  # i and x assigned again before any read: nothing of them crosses the barrier
        out[t] += i
    x = sh[(t + 1) % 8]
    out[t] += x + t + j


def test_only_values_crossing_a_barrier_are_kept_per_thread():
    """A variable is expanded (an array of one value per thread) only where some unit may read it before
    assigning it; loop counters and temporaries reassigned in every region stay plain locals."""
    from visualizer.engine.compiled.engine import _argtypes, compile_kernel

    a = np.arange(8 * 3, dtype=np.float64).reshape(8, 3)
    out = np.zeros(8)
    ck = compile_kernel(_carried, _argtypes([a, out]))
    assert {"t", "j"} <= set(ck.plan.expanded), ck.plan.expanded
    assert not {"i", "x"} & set(ck.plan.expanded), ck.plan.expanded
    fast, comp, report = both(_carried, 1, 8, [a, out])
    assert comp is not None, report
    assert same(fast[1], comp[1])


def test_units_take_few_parameters_so_calls_are_plain():
    """Every region and condition takes the thread, the block's ids and one tuple: Python compiles a call
    of more than 30 arguments as f(*args), whose tuple numba built and unpacked at every call (flash
    attention's regions took 69 parameters; its compile and launch were slower for it)."""
    import ast

    from visualizer.engine.compiled.engine import P, _argtypes, compile_kernel

    fn, grid, block, args, *_ = spec_launch("flash_attention", {"seq_len": 32})
    ck = compile_kernel(fn, _argtypes(args))
    units = [d for d in ast.parse(ck.source).body
             if isinstance(d, ast.FunctionDef) and d.name.startswith((P + "region_", P + "cond_"))]  # fmt: skip
    assert len(units) > 5
    for d in units:
        assert len(d.args.args) <= 30, (d.name, len(d.args.args))
    calls = [c for c in ast.walk(ast.parse(ck.source)) if isinstance(c, ast.Call)
             and isinstance(c.func, ast.Name) and c.func.id.startswith((P + "region_", P + "cond_"))]  # fmt: skip
    assert calls and all(
        len(c.args) <= 30 and not any(isinstance(x, ast.Starred) for x in c.args) for c in calls
    )
