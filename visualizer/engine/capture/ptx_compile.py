"""The compile step of "under the hood", run as its own process: ``python -m visualizer.engine.capture.ptx_compile``.

Reads one JSON request on stdin, writes one JSON reply on stdout (``{"ok": ...}`` or ``{"error": one
line}``). The parent (engine/capture/ptx.py) starts it with ``NUMBA_ENABLE_CUDASIM=0`` and a time limit:
the simulator compiles nothing, and numba reads that variable once, at import.

Requests (``op``):

* ``ptx_builtin``: ``kernel``, ``params`` -- a built-in kernel's clean build (every probe a no-op),
  typed with the arguments its spec makes.
* ``ptx_source``: a visitor's kernel, the same fields as ``SourceLaunch.request`` (specs/source.py).
  This executes the visitor's module (numba compiles Python by running it), so it belongs where
  visitor code runs: the sandboxed worker of engine/run/user_runner.py handles this op by calling
  ``compile_request``; the app never runs it in its own process (engine/capture/ptx.py refuses).

Both compile with ``numba.cuda.compile_ptx(..., lineinfo=True, cc=ARCH)`` for a chosen arch; no GPU
is needed. Two lookups numba-cuda 0.30 makes that need a GPU or NVRTC are answered here for the
chosen arch (``_compile_for``): the current device's compute capability, asked when a device
function is compiled, and NVRTC's list of supported archs, used only to round the arch.
"""

from __future__ import annotations

import json
import sys


class CompileError(Exception):
    """One line for the person who asked."""


class KernelRefused(CompileError):
    """The kernel's own code is what a GPU compile refuses (a typing or lowering error, NVVM's or
    ptxas's rejection): not a missing tool. One line naming the kernel's line where numba says it."""


# what a shape numba cannot fold into constants looks like, and how to give it one
_SHAPE_HINT = (
    " (a GPU needs the shape of a shared or local array as constant integers: numba folds a number or a "
    "global, not an expression such as TILE_DIM + 1; name it once at the top of the module, e.g. "
    "PADDED = TILE_DIM + 1)"
)


def refusal_line(exc: BaseException, filename: str, kernel: str) -> str:
    """One line for a compile error of the visitor's kernel, naming its line (engine/capture/source.py
    ``describe_failure``, which the simulator's own errors use too)."""
    from visualizer.engine.capture.source import describe_failure

    described = describe_failure(exc, filename, simulator=False)
    text = str(described) if described is not None else f"{type(exc).__name__}: {exc}"
    text = " ".join(text.split())[:400]
    if (".shared.array" in text or ".local.array" in text) and "No implementation" in text:
        text += _SHAPE_HINT
    return f"a GPU cannot compile {kernel}: {text}"


def _refused(exc: BaseException) -> bool:
    """Whether a compile error is the kernel's (numba's typing/lowering, NVVM rejecting it), not a
    toolchain that is missing here (NvvmSupportError: no libNVVM)."""
    from numba.core.errors import NumbaError
    from numba.cuda.cudadrv.error import NvvmError

    return isinstance(exc, (NumbaError, NvvmError))


def _compile_for(cc: tuple[int, int]) -> None:
    """Make numba-cuda compile for ``cc`` with no GPU and no NVRTC on the machine."""
    import numba.cuda.cuda_paths as cuda_paths
    import numba.cuda.cudadrv.nvrtc as nvrtc
    import numba.cuda.dispatcher as dispatcher

    class _Device:
        compute_capability = cc

    dispatcher.get_current_device = lambda: _Device()  # device functions ask the current device
    try:
        nvrtc.get_supported_ccs()
    except Exception:  # no NVRTC: the arch is the one asked for, no rounding to a supported one
        nvrtc.find_closest_arch = lambda want: want
        original = cuda_paths._get_nvrtc_path

        def _nvrtc_path():
            try:
                return original()
            except Exception:
                return cuda_paths._env_path_tuple("<not installed>", None)

        cuda_paths._get_nvrtc_path = _nvrtc_path


def _types(values: list) -> tuple:
    import numba

    return tuple(numba.typeof(v) for v in values)


def _builtin(kernel):
    import numpy as np

    from visualizer.engine.capture.builtin import build_kernels, launch_args, probe_buffers
    from visualizer.specs import catalog

    spec, values, launch = catalog.plan_launch(
        kernel.kernel, kernel.params, "gpu", catalog.limits_from_info(None)
    )
    inputs = spec.make_inputs(values, np.random.default_rng(0))
    args = launch_args(spec, launch, {**inputs, **probe_buffers(spec, launch)})[1]
    clean = build_kernels(spec, values).clean
    filename = clean.py_func.__code__.co_filename
    with open(filename) as f:
        text = f.read()
    return clean, _types(args), filename, text, {"kernel": spec.name, "params": values}


def _source(kernel):
    import numpy as np
    from numba import cuda

    from visualizer.engine.capture.source import UserCodeError, argument_values, kernel_pair, load_module

    src = kernel.source
    values = argument_values(src, np.random.default_rng(0))
    try:
        module = load_module(src.text, src.filename, kernel.kernel)
    except UserCodeError as exc:  # the module itself fails (the simulator's run says so too): no GPU verdict
        raise CompileError(str(exc)) from None
    _, clean = kernel_pair(cuda, module, kernel.kernel)
    py = getattr(clean, "py_func", clean)
    return py, _types(list(values.values())), src.filename, src.text, {"kernel": kernel.kernel}


def compile_request(wire: dict) -> dict:
    """PTX with line info for one request (see the module docstring); raises CompileError."""
    from visualizer.engine.capture.request import AsmRequest

    op = wire.get("op")
    asked = AsmRequest.from_wire(wire)
    arch = asked.arch
    digits = arch.removeprefix("sm_")
    if not (digits.isdigit() and len(digits) in (2, 3)):
        raise CompileError(f"arch must look like sm_90, got {arch[:20]!r}")
    cc = (int(digits[:-1]), int(digits[-1]))
    _compile_for(cc)
    import numba
    from numba import cuda

    if op == "ptx_builtin":
        fn, types, filename, text, what = _builtin(asked.kernel)
    elif op == "ptx_source":
        fn, types, filename, text, what = _source(asked.kernel)
    else:
        raise CompileError(f"unknown request op {str(op)[:40]!r}")
    py = getattr(fn, "py_func", fn)
    options = getattr(fn, "targetoptions", {}) or {}
    try:
        ptx, _ = cuda.compile_ptx(py, types, cc=cc, lineinfo=True, fastmath=bool(options.get("fastmath")))
    except Exception as exc:
        if op == "ptx_source" and _refused(exc):
            raise KernelRefused(refusal_line(exc, filename, what["kernel"])) from None
        raise CompileError(f"numba could not compile {what['kernel']}: {type(exc).__name__}: "
                           f"{' '.join(str(exc).split())[:300]}") from None  # fmt: skip
    from numba.cuda.cudadrv import nvvm

    try:
        nvvm_version = "NVVM " + ".".join(map(str, nvvm.NVVM().get_version()))
    except Exception:
        nvvm_version = "unknown"
    from importlib import metadata

    for package in ("nvidia-nvvm", "cuda-toolkit"):
        try:
            nvvm_version += f" ({package} {metadata.version(package)})"
            break
        except metadata.PackageNotFoundError:
            continue
    import numba_cuda

    return {
        **what,
        "arch": arch,
        "ptx": ptx,
        "filename": filename,
        "source": text,
        "signature": [str(t) for t in types],
        "versions": {
            "numba": numba.__version__,
            "numba_cuda": getattr(numba_cuda, "__version__", "unknown"),
            "nvvm": nvvm_version,
        },
    }


def main() -> int:
    try:
        request = json.loads(sys.stdin.read())
        reply = {"ok": compile_request(request)}
    except KernelRefused as exc:  # the kernel's fault: the simulator path refuses it too (ptx.gpu_check)
        reply = {"error": str(exc), "refused": True}
    except CompileError as exc:
        reply = {"error": str(exc)}
    except Exception as exc:  # a visitor's module can raise anything: one line, no traceback
        reply = {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"}
    sys.stdout.write("\n" + json.dumps(reply))
    return 0


if __name__ == "__main__":
    sys.exit(main())
