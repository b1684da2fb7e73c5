"""Under the hood: PTX and SASS with source lines for a built-in and a visitor's kernel, compiled
for sm_90 on a machine without a GPU (engine/capture/ptx.py), and the tables read from them (analysis/asm.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from visualizer.analysis import asm
from visualizer.engine.capture import ptx
from visualizer.specs.source import plan_source_launch

ROOT = Path(__file__).resolve().parents[2]


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


@pytest.fixture(scope="module")
def tiled():
    try:
        return ptx.builtin_asm("transpose_tiled", {"rows": 64, "cols": 64, "tile": 32})
    except ptx.AsmError as exc:
        if "nvvm" in str(exc).lower():
            pytest.skip(f"no libNVVM here (pip install nvidia-nvvm): {exc}")
        raise


def test_builtin_ptx_maps_instructions_to_source_lines(tiled):
    src = (ROOT / "kernels" / "transpose.py").read_text()
    assert Path(tiled["filename"]).name == "transpose.py" and tiled["source"] == src
    table = asm.ptx_table(tiled["ptx"])
    load_line = _line_of(src, "tile[ty, tx] = inp[y, x]")
    store_line = _line_of(src, "out[oy, ox] = tile[tx, ty]")
    sync_line = _line_of(src, "cuda.syncthreads()  # the whole tile")
    ops = lambda line: set(table.loc[table["line"] == line, "opcode"])  # noqa: E731
    assert {"ld.global.f32", "st.shared.f32"} <= ops(load_line)
    assert {"ld.shared.f32", "st.global.f32"} <= ops(store_line)
    assert "bar.sync" in ops(sync_line)
    assert tiled["versions"]["numba_cuda"] and tiled["versions"]["nvvm"].startswith("NVVM")


@pytest.mark.skipif(ptx.tool("ptxas") is None, reason="no ptxas here (pip install nvidia-cuda-nvcc)")
def test_builtin_sass_and_resources(tiled):
    res = asm.ptxas_resources(tiled["ptxas_log"])
    assert res["smem_bytes"] == 32 * 32 * 4 and res["barriers"] == 1 and res["registers"] > 0
    assert res["spill_stores_bytes"] == 0
    if tiled["sass"] is None:
        pytest.skip("no nvdisasm here (pip install nvidia-cuda-nvdisasm)")
    sass = asm.sass_table(tiled["sass"])
    src = tiled["source"]
    ops = lambda needle: set(sass.loc[sass["line"] == _line_of(src, needle), "opcode"])  # noqa: E731
    assert {"LDG.E", "STS"} <= ops("tile[ty, tx] = inp[y, x]")
    assert {"LDS", "STG.E"} <= ops("out[oy, ox] = tile[tx, ty]")
    assert "BAR.SYNC.DEFER_BLOCKING" in ops("cuda.syncthreads()  # the whole tile")
    lines = asm.source_lines(src, tiled["filename"], asm.ptx_table(tiled["ptx"]), sass)
    assert lines["sass"].sum() == (sass["file"] == tiled["filename"]).sum()
    assert lines.loc[lines["line"] == 1, "ptx"].item() == 0  # the module docstring compiles to nothing


def test_per_line_counts_beside_source_lines(tiled, sim_runner):
    cap = sim_runner.capture("transpose_tiled", {"rows": 64, "cols": 64, "tile": 32}, accesses=True)
    lines = asm.source_lines(
        tiled["source"],
        tiled["filename"],
        asm.ptx_table(tiled["ptx"]),
        None,
        cap.launch["accesses"]["per_line"],
    )
    store = lines[lines["line"] == _line_of(tiled["source"], "out[oy, ox] = tile[tx, ty]")].iloc[0]
    assert store["sectors_per_request"] == 4.0 and store["max_bank_ways"] == 32 and store["ptx"] > 0
    assert "tile shared load" in store["accesses"] and "32-way" in store["accesses"]


def test_visitor_kernel_ptx_and_sass_lines():
    src = (ROOT / "kernels" / "examples" / "matmul_tiled.py").read_text()
    launch = plan_source_launch(
        src, "matmul_tiled", grid="3,3", block="16,16", filename="matmul_tiled.py",
        args={"A": "rand:float32:48x48", "B": "rand:float32:48x48", "C": "zeros:float32:48x48"},
    )  # fmt: skip
    try:
        got = ptx.source_asm(launch.request("sim"))
    except ptx.AsmError as exc:
        if "nvvm" in str(exc).lower():
            pytest.skip(f"no libNVVM here: {exc}")
        raise
    table = asm.ptx_table(got["ptx"])
    mine = table[asm.same_file(table["file"], "matmul_tiled.py")]
    fma = _line_of(src, "acc += a_tile[ty, k] * b_tile[k, tx]")
    assert "fma.rn.f32" in set(mine.loc[mine["line"] == fma, "opcode"])
    assert "bar.sync" in set(mine.loc[mine["line"] == _line_of(src, "...and waits"), "opcode"])
    assert got["signature"] == ["array(float32, 2d, C)"] * 3
    if got["sass"] is not None:
        sass = asm.sass_table(got["sass"])
        assert any(op.startswith("FFMA") for op in sass.loc[sass["line"] == fma, "opcode"])


def test_visitor_source_errors_are_one_line():
    launch = plan_source_launch(
        "from numba import cuda\n\n@cuda.jit\ndef k(a):\n    a[0] = undefined_name\n", "k",
        grid="1", block="1", args={"a": "zeros:float32:4"}, filename="bad.py",
    )  # fmt: skip
    with pytest.raises(ptx.AsmError) as err:
        ptx.source_asm(launch.request("sim"))
    assert "\n" not in str(err.value) and "undefined_name" in str(err.value)


def test_server_refuses_visitor_source_without_a_sandbox():
    with pytest.raises(ptx.AsmError, match="only inside the sandbox"):
        ptx.visitor_ptx({"op": "ptx_source", "source": "import os"})


def test_cli_asm(tiled, capsys):
    from visualizer.tools.cli import main

    assert main(["asm", "transpose_tiled", "--json", "--param", "tile=32"]) == 0
    import json

    got = json.loads(capsys.readouterr().out)
    assert got["arch"] == "sm_90" and got["resources"].get("smem_bytes") in (None, 4096)
    line = _line_of(tiled["source"], "out[oy, ox] = tile[tx, ty]")
    assert next(r for r in got["lines"] if r["line"] == line)["ptx"] > 0
    assert main(["asm", "transpose_tiled", "--param", "tile=7"]) == 2
    assert main(["asm", "--source", "/nonexistent.py", "--kernel", "k"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(e.startswith("error: ") for e in err)


@pytest.mark.gpu
def test_sass_with_lines_on_the_gpu_machine():
    got = ptx.builtin_asm("matmul_tiled", {"n": 64, "tile": 16}, arch="sm_90")
    assert got["sass"], got["missing"]
    sass = asm.sass_table(got["sass"])
    fma = _line_of(got["source"], "acc += sA[ty, k] * sB[k, tx]")
    assert any(op.startswith("FFMA") for op in sass.loc[sass["line"] == fma, "opcode"])


def test_a_visitors_kernel_is_compiled_inside_its_sandbox(tmp_path):
    """The Under the hood page's path for a visitor: the module runs (numba compiles it) only in a fresh
    sandboxed worker, which sends back the PTX with its lines; module-level code that writes a file of
    the server's finds it out of reach."""
    from visualizer.engine.run.user_runner import UserRunQueue

    marker = tmp_path / "written-by-the-visitor"
    src = (ROOT / "kernels" / "examples" / "matmul_tiled.py").read_text()
    plant = f"try:\n    open({str(marker)!r}, 'w').close()\nexcept OSError:\n    pass\n"
    assert src.startswith("from numba import cuda, float32\n")
    src = src.replace("from numba import cuda, float32\n", "from numba import cuda, float32\n" + plant, 1)
    launch = plan_source_launch(
        src, "matmul_tiled", grid="3,3", block="16,16", filename="matmul_tiled.py",
        args={"A": "rand:float32:48x48", "B": "rand:float32:48x48", "C": "zeros:float32:48x48"},
    )  # fmt: skip
    got = UserRunQueue("sim", workers=1).ptx_source(launch, "sm_90")
    table = asm.ptx_table(got["ptx"])
    mine = table[asm.same_file(table["file"], "matmul_tiled.py")]
    fma = _line_of(src, "acc += a_tile[ty, k] * b_tile[k, tx]")
    assert "fma.rn.f32" in set(mine.loc[mine["line"] == fma, "opcode"])
    assert not marker.exists()  # the server's tmp is not the sandbox's


NPY_KERNEL = """
from numba import cuda


@cuda.jit
def scale(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = 2 * x[i]
"""


def test_cli_asm_of_a_kernel_fed_from_a_npy_file(tmp_path, capsys):
    """A .npy argument is typed by its dtype and shape (issue 39: the request once went to the
    compiler as JSON with the array in it, and asm ended in a traceback)."""
    import json

    import numpy as np

    from visualizer.tools.cli import main

    (tmp_path / "k.py").write_text(NPY_KERNEL)
    np.save(tmp_path / "x.npy", np.arange(256, dtype=np.float64))
    argv = ["asm", "--source", str(tmp_path / "k.py"), "--kernel", "scale", "--grid", "2", "--block", "128",
            "--arg", f"x=file:{tmp_path / 'x.npy'}", "--arg", "out=zeros:float32:256"]  # fmt: skip
    assert main([*argv, "--json"]) == 0, capsys.readouterr().err
    got = json.loads(capsys.readouterr().out)
    line = _line_of(NPY_KERNEL, "out[i] = 2 * x[i]")
    assert next(r for r in got["lines"] if r["line"] == line)["ptx"] > 0
    assert main([*argv, "--show", "ptx"]) == 0
    shown = capsys.readouterr().out
    assert "ld.global.f64" in shown and "st.global.f32" in shown  # x typed as the file's float64


def test_typed_only_keeps_dtype_and_shape_and_drops_the_values():
    import json

    import numpy as np

    request = {"op": "ptx_source", "args": {"x": {"kind": "file", "text": "file:x.npy", "dtype": "",
               "shape": [], "value": None, "array": np.ones((3, 4), ">i2")}, "n": {"kind": "scalar",
               "value": 5}}}  # fmt: skip
    typed = ptx.typed_only(request)
    json.dumps(typed)
    assert typed["args"]["x"]["kind"] == "zeros" and typed["args"]["x"]["shape"] == [3, 4]
    assert (
        np.dtype(typed["args"]["x"]["dtype"]) == np.dtype(">i2")
        and typed["args"]["n"] == request["args"]["n"]
    )
    assert isinstance(request["args"]["x"]["array"], np.ndarray)  # the caller's request is left alone


def test_a_builtin_launch_is_compiled_once_per_process(tiled, monkeypatch):
    """The CLI's compare of many bundles of one launch compiles it once; another launch compiles again,
    and what a caller changes in its copy is not what the next caller gets."""
    calls = []
    real = ptx.compile_ptx
    monkeypatch.setattr(
        ptx, "compile_ptx", lambda request, *a, **k: calls.append(request) or real(request, *a, **k)
    )
    again = ptx.builtin_asm("transpose_tiled", {"rows": 64, "cols": 64, "tile": 32})
    assert calls == [] and again["ptx"] == tiled["ptx"] and again["sass"] == tiled["sass"]
    again["ptx"] = "changed"
    again["missing"].append("changed")
    third = ptx.builtin_asm("transpose_tiled", {"rows": 64, "cols": 64, "tile": 32})
    assert third["ptx"] == tiled["ptx"] and "changed" not in third["missing"]
    other = ptx.builtin_asm("transpose_tiled", {"rows": 64, "cols": 64, "tile": 16})
    assert len(calls) == 1 and other["ptx"] != tiled["ptx"]
