"""Built-in kernels get their probes from the AST instrumenter, as a visitor's kernel does."""

import ast
import inspect
from pathlib import Path

import numpy as np
import pytest

from visualizer.engine.capture.builds import builds
from visualizer.engine.capture.builtin import kernel_function
from visualizer.engine.instrument.instrumenter import ACTIVE, TRACE, instrument_function
from visualizer.kernels.matmul import matmul_tiled_kernel
from visualizer.specs import catalog

ROOT = Path(__file__).resolve().parents[2]
PUT_IN_BY_THE_INSTRUMENTER = {"trace_begin", "trace_end"}


def test_no_kernel_source_calls_the_trace_probes_itself():
    for path in sorted((ROOT / "kernels").glob("*.py")):
        if path.name == "probes.py":
            continue
        tree = ast.parse(path.read_text())
        calls = {
            n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
        }
        assert not calls & PUT_IN_BY_THE_INSTRUMENTER, path.name


@pytest.mark.parametrize("name", sorted(catalog.KERNELS))
def test_every_built_in_kernel_has_only_its_own_parameters(name):
    spec = catalog.KERNELS[name]
    values = spec.defaults()
    fn = kernel_function(spec, values)
    names = tuple(inspect.signature(fn).parameters)
    assert len(names) == len(spec.args)  # spec.args are roles: the reduction's "rows" buffer is its "tree"
    assert not {"trace", "active"} & (set(names) | set(spec.args))


def test_the_traced_build_keeps_the_kernel_files_lines_and_closure_constants():
    fn = matmul_tiled_kernel(8)
    traced, tree = instrument_function(fn, did_work="row < n and col < n")
    assert traced.__code__.co_filename == fn.__code__.co_filename
    assert traced.__code__.co_firstlineno == fn.__code__.co_firstlineno
    assert list(inspect.signature(traced).parameters)[-2:] == [TRACE, ACTIVE]
    assert tree.vz_params == [TRACE, ACTIVE]
    # every line of the traced copy is one of the kernel's own lines in its file
    lines, first = inspect.getsourcelines(fn)
    own = set(range(first, first + len(lines)))
    got = {ln for _, _, ln in traced.__code__.co_lines() if ln is not None}
    assert got <= own


def test_tiled_matmul_through_the_instrumenter_matches_numpy_and_marks_who_worked():
    """n = 20 with 8 x 8 tiles: the last row and column of blocks are partly outside C; the spec's
    active_when says which threads did work, and the instrumented build records exactly those."""
    spec, values, launch = catalog.plan_launch("matmul_tiled", {"n": 20, "tile": 8}, "sim")
    b = builds(kernel_function(spec, values), spec.active_when)
    rng = np.random.default_rng(0)
    x = spec.make_inputs(values, rng)
    from visualizer.engine.capture.builtin import launch_args, probe_buffers

    bufs = probe_buffers(spec, launch)
    traced_args, clean_args = launch_args(spec, launch, {**x, **bufs})
    b.traced[launch.grid, launch.block](*traced_args)
    np.testing.assert_allclose(x["C"], x["A"] @ x["B"], rtol=1e-4, atol=1e-4)
    gx, gy = launch.grid[0], launch.grid[1]
    want = np.zeros((gy, gx, 8, 8), np.uint8)  # (block y, block x, ty, tx), x fastest
    for by in range(gy):
        for bx in range(gx):
            for ty in range(8):
                for tx in range(8):
                    want[by, bx, ty, tx] = by * 8 + ty < 20 and bx * 8 + tx < 20
    assert np.array_equal(bufs["active"], want.reshape(-1))
    assert int(bufs["active"].sum()) == 400
    # the clean build: the kernel's own parameters, the same answer
    x["C"][:] = 0
    b.clean[launch.grid, launch.block](*clean_args)
    np.testing.assert_allclose(x["C"], x["A"] @ x["B"], rtol=1e-4, atol=1e-4)
