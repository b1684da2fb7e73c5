"""Under the hood: the PTX numba generates for a kernel and, where the CUDA tools are installed, the
SASS ptxas makes of it, each instruction with the source line it came from; registers, spills and
shared memory from ``ptxas -v``.

Every step runs in a child process with a time limit: numba's compile in
``python -m visualizer.engine.capture.ptx_compile`` with ``NUMBA_ENABLE_CUDASIM=0`` (the simulator compiles
nothing), then ``ptxas -v -lineinfo`` and ``nvdisasm -g -c``. No GPU is needed: NVVM compiles for
the chosen arch. The tools are found by cuda-pathfinder (the pip wheels nvidia-nvvm,
nvidia-cuda-nvcc, nvidia-cuda-nvdisasm, or a CUDA toolkit), then on PATH.

A visitor's source is compiled only where visitor code runs: the sandboxed worker's request op
"ptx_source" (UserRunQueue.ptx_source, engine/run/user_runner.py) calls ``source_asm`` there;
``visitor_ptx`` is the server's refusal.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from visualizer.analysis.asm import ptxas_resources, sass_count
from visualizer.specs.catalog import LaunchError

COMPILE_TIMEOUT_S = float(os.environ.get("VISUALIZER_PTX_TIMEOUT_S", "120"))
TOOL_TIMEOUT_S = 60.0
ROOT = Path(__file__).resolve().parents[3]
VISITOR_REFUSAL = (
    "PTX of a visitor's kernel is compiled only inside the sandbox that runs visitor code "
    "(engine/run/user_runner.py's ptx_source), never in the server's processes"
)


class AsmError(LaunchError):
    """A compile that failed or timed out, in one line."""


class GpuRefused(AsmError):
    """What a GPU's compile refuses of the kernel itself (numba's typing or lowering, NVVM, ptxas), as
    against a tool missing here or a time limit: one line naming the kernel's line where known."""


@functools.cache
def tool(name: str) -> str | None:
    """The path of a CUDA binary utility (ptxas, nvdisasm, cuobjdump), or None."""
    try:
        from cuda.pathfinder import find_nvidia_binary_utility

        found = find_nvidia_binary_utility(name)
        if found:
            return str(found)
    except Exception:  # an older cuda-pathfinder without it, or nothing found
        pass
    for entry in sys.path:  # the pip wheels' layout (nvidia-cuda-nvcc, nvidia-cuda-nvdisasm), e.g. --target
        for major in ("cu13", "cu12"):
            path = Path(entry or ".") / "nvidia" / major / "bin" / name
            if path.is_file() and os.access(path, os.X_OK):
                return str(path)
    return shutil.which(name)


@functools.cache
def tool_version(name: str) -> str | None:
    path = tool(name)
    if not path:
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [x.strip() for x in out.stdout.splitlines() if x.strip()]
    release = next((x for x in lines if x.startswith("Cuda compilation tools")), lines[-1] if lines else "")
    return release.removeprefix("Cuda compilation tools, ")


def _child_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_ENABLE_CUDASIM")}
    env["NUMBA_ENABLE_CUDASIM"] = "0"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def typed_only(wire: dict) -> dict:
    """The request on the wire with each loaded array (a .npy's contents) replaced by its dtype and
    shape, as zeros of them: compiling types the arguments and reads none of their values, and the
    request goes to the compiler as JSON, which carries no arrays."""
    args = wire.get("args")
    if not isinstance(args, dict):
        return wire
    typed = {}
    for name, arg in args.items():
        array = arg.get("array") if isinstance(arg, dict) else None
        if hasattr(array, "dtype") and hasattr(array, "shape"):
            arg = {
                **arg,
                "kind": "zeros",
                "dtype": array.dtype.str,
                "shape": list(array.shape),
                "array": None,
            }
        typed[name] = arg
    return {**wire, "args": typed}


def compile_ptx(request: dict, timeout: float = COMPILE_TIMEOUT_S) -> dict:
    """Run one ``ptx_compile`` request in a child process; its reply, or AsmError (one line)."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "visualizer.engine.capture.ptx_compile"],
            input=json.dumps(typed_only(request)), capture_output=True, text=True, timeout=timeout,
            env=_child_env(), cwd=str(ROOT),
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise AsmError(f"compiling to PTX took longer than {timeout:.0f} s and was stopped") from None
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    try:
        reply = json.loads(last)
    except json.JSONDecodeError:
        err = " ".join(done.stderr.split())[-300:]
        raise AsmError(f"the PTX compiler process failed (exit {done.returncode}): {err}") from None
    if "error" in reply:
        raise (GpuRefused if reply.get("refused") is True else AsmError)(str(reply["error"])[:600])
    return reply["ok"]


def assemble(ptx: str, arch: str, disassemble: bool = True) -> dict:
    """ptxas -v (resources) and nvdisasm -g (SASS with line info, unless not ``disassemble``) of
    ``ptx``; the parts whose tool is missing say so under ``missing``. ptxas rejecting the PTX (too
    much shared memory, say) raises GpuRefused."""
    out: dict = {"ptxas_log": None, "sass": None, "missing": [], "versions": {}}
    ptxas = tool("ptxas")
    if not ptxas:
        out["missing"] += ["ptxas", "nvdisasm"]
        return out
    out["versions"]["ptxas"] = tool_version("ptxas")
    with tempfile.TemporaryDirectory(prefix="visualizer-asm-") as tmp:
        src, cubin = Path(tmp) / "kernel.ptx", Path(tmp) / "kernel.cubin"
        src.write_text(ptx)
        try:
            done = subprocess.run(
                [ptxas, f"-arch={arch}", "-v", "-lineinfo", str(src), "-o", str(cubin)],
                capture_output=True, text=True, timeout=TOOL_TIMEOUT_S,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise AsmError(f"ptxas took longer than {TOOL_TIMEOUT_S:.0f} s and was stopped") from None
        if done.returncode != 0:
            raise GpuRefused(f"ptxas failed: {' '.join(done.stderr.split())[:300]}")
        out["ptxas_log"] = done.stderr + done.stdout
        if not disassemble:
            return out
        nvdisasm = tool("nvdisasm")
        if not nvdisasm:
            out["missing"].append("nvdisasm")
            return out
        out["versions"]["nvdisasm"] = tool_version("nvdisasm")
        try:
            dis = subprocess.run(
                [nvdisasm, "-g", "-c", str(cubin)], capture_output=True, text=True, timeout=TOOL_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            raise AsmError(f"nvdisasm took longer than {TOOL_TIMEOUT_S:.0f} s and was stopped") from None
        if dis.returncode != 0:
            raise AsmError(f"nvdisasm failed: {' '.join(dis.stderr.split())[:300]}")
        out["sass"] = dis.stdout
    return out


_BUILTIN_ASM: dict = {}  # (kernel, params, arch, sass, the tools) -> a compile that succeeded
_BUILTIN_ASM_MAX = 64
_BUILTIN_ASM_LOCK = threading.Lock()  # Compare compiles its two sides on two threads (sass_pair)


def builtin_asm(kernel: str, params: dict | None = None, arch: str = "sm_90", sass: bool = True) -> dict:
    """PTX (and SASS) of a built-in kernel's clean build for ``arch``: the compile reply plus
    ``assemble``'s parts. Raises LaunchError for a bad kernel or parameters, AsmError on failure.
    A compile that succeeded is kept in this process (a built-in kernel's source does not change
    while it runs): the CLI's ``compare`` of many bundles of one launch compiles it once."""
    from visualizer.specs import catalog

    spec = catalog.get(kernel)
    values = spec.resolve({k: str(v) for k, v in (params or {}).items()})
    key = (kernel, repr(sorted(values.items())), arch, sass, tool("ptxas"), tool("nvdisasm"))
    with _BUILTIN_ASM_LOCK:
        got = _BUILTIN_ASM.get(key)
    if got is None:
        reply = compile_ptx({"op": "ptx_builtin", "kernel": kernel, "params": values, "arch": arch})
        got = _with_sass(reply, arch, sass)
        with _BUILTIN_ASM_LOCK:
            if len(_BUILTIN_ASM) >= _BUILTIN_ASM_MAX:
                _BUILTIN_ASM.pop(next(iter(_BUILTIN_ASM)))
            _BUILTIN_ASM[key] = got
    return {
        k: (dict(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v) for k, v in got.items()
    }


def source_asm(request: dict, arch: str = "sm_90", sass: bool = True) -> dict:
    """PTX (and SASS) of a kernel from source, compiled in a child process of this one: for the
    operator's own file on the command line (``capture --source`` runs it here too). The web app
    uses ``visitor_ptx``, which never compiles a visitor's code in the server's processes."""
    reply = compile_ptx({**request, "op": "ptx_source", "arch": arch})
    return _with_sass(reply, arch, sass)


GPU_CHECK_ARCH = "sm_90"  # the H200's: the GPU the simulator's pages model


def gpu_check(request: dict, arch: str = GPU_CHECK_ARCH) -> dict:
    """Compile a kernel from source for a GPU (numba -> NVVM -> PTX, then ptxas -v) before the
    simulator runs it: the simulator types nothing and would run what no GPU compiles.

    Runs where the kernel's code may run (the visitor's sandbox, or the operator's own process for
    ``capture --source``). Raises GpuRefused (one line naming the kernel's line) for what a GPU
    refuses; returns ``{"checked": True, "arch", "ptxas_log", "sass_instructions", "missing", "versions"}``
    (the SASS count None where nvdisasm is not here), or
    ``{"checked": False, "why": ...}`` where the toolchain is not here (no libNVVM) or timed out,
    which refuses nothing."""
    try:
        reply = compile_ptx({**request, "op": "ptx_source", "arch": arch, "sass": False})
        parts = assemble(reply["ptx"], arch)
    except GpuRefused:
        raise
    except AsmError as exc:
        return {"checked": False, "why": " ".join(str(exc).split())[:300]}
    return {
        "checked": True,
        "arch": arch,
        "ptxas_log": parts["ptxas_log"],
        "sass_instructions": sass_count(parts["sass"]) if parts["sass"] else None,
        "missing": parts["missing"],
        "versions": {**reply["versions"], **parts["versions"]},
    }


NO_SASS_TOOLS = "not counted: ptxas and nvdisasm are not installed here (pip install nvidia-cuda-nvcc nvidia-cuda-nvdisasm)"


def sass_instructions(kernel: str, params: dict, arch: str = "sm_90") -> dict | str:
    """A built-in kernel's clean build's SASS instruction count for ``arch`` (``{"instructions", "arch",
    "resources" (ptxas -v's), "versions"}``), or one line why there is none (a tool missing here, a compile
    that failed)."""
    try:
        got = builtin_asm(kernel, params, arch=arch)
    except LaunchError as exc:  # AsmError too
        return f"not counted: {' '.join(str(exc).split())[:200]}"
    if not got.get("sass"):
        return NO_SASS_TOOLS
    return {
        "instructions": sass_count(got["sass"]),
        "arch": arch,
        "resources": ptxas_resources(got.get("ptxas_log") or ""),
        "versions": got.get("versions") or {},
    }


def sass_pair(sides, arch: str = "sm_90") -> tuple:
    """``sass_instructions`` of each (kernel, params) of ``sides``, compiled side by side (each compile is
    its own child process)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(len(sides), 1)) as pool:
        return tuple(pool.map(lambda side: sass_instructions(side[0], dict(side[1]), arch), sides))


def visitor_ptx(request: dict, arch: str = "sm_90") -> dict:
    """A visitor's kernel asked of the server: refused; the sandbox compiles it (UserRunQueue.ptx_source)."""
    raise AsmError(VISITOR_REFUSAL)


def _with_sass(reply: dict, arch: str, sass: bool) -> dict:
    parts = (
        assemble(reply["ptx"], arch)
        if sass
        else {"ptxas_log": None, "sass": None, "missing": [], "versions": {}}
    )
    versions = {**reply["versions"], **parts.pop("versions")}
    return {**reply, **parts, "versions": versions}
