"""The host side of "your own kernel": a fresh sandboxed worker per run, the request, the Capture.

Nothing here executes the user's code: the source is parsed with ``ast`` for a syntax check and
the kernel's parameter names, then sent to a worker process, which is the only place it runs.
Every run of user code gets a fresh process of its own (never one the built-in kernels or another
run used), started in the sandbox of visualizer/engine/run/sandbox.py (bubblewrap where it works,
hard rlimits always), with a wall-clock limit here; it is killed, with its whole process group and
PID namespace, as soon as its run is over. Visitors wait for a free sandbox in a queue (UserRunQueue).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import signal
import threading
from collections import OrderedDict

import numpy as np

from visualizer.analysis.capture import Capture, Expected, ReplyError, build_capture
from visualizer.engine.capture.request import CaptureRequest
from visualizer.engine.lenses import reply_bytes as lens_reply_bytes
from visualizer.engine.lenses import reply_parts as lens_reply_parts
from visualizer.engine.run import sandbox, wire
from visualizer.engine.run.runner import (
    KernelError,
    Runner,
    RunQueue,
    RunTimeout,
    default_sim_engine,
    shared_queue,
)
from visualizer.specs.catalog import MAX_RUNS, LaunchError
from visualizer.specs.source import SourceLaunch

RUN_TIMEOUT_S = float(os.environ.get("VISUALIZER_USER_TIMEOUT_S", "120"))
ALLOW_ENV = "VISUALIZER_ALLOW_USER_CODE"
TOKEN_ENV = "VISUALIZER_TOKEN"  # the operator's key: `serve` makes one and prints a link with it
TOKEN_MIN_CHARS = 16
_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off")


def configured_token(env=None) -> str | None:
    """The operator's key for visitor code, or None when there is none (or it is too short to be one)."""
    env = os.environ if env is None else env
    token = str(env.get(TOKEN_ENV, "")).strip()
    return token if len(token) >= TOKEN_MIN_CHARS else None


def token_matches(presented, env=None) -> bool:
    """Whether a visitor presented the operator's key (compared in constant time)."""
    token = configured_token(env)
    if token is None or not isinstance(presented, str):
        return False
    return hmac.compare_digest(presented.encode("utf-8", "replace"), token.encode())


def user_code_allowed(has_key: bool, env: dict | None = None) -> tuple[bool, str]:
    """May this visitor run code they typed? (allowed, one-line reason).

    Only an operator decides: VISUALIZER_ALLOW_USER_CODE=1 opens it to every visitor, =0 closes it;
    otherwise only a browser session that presented the operator's key (the ``?token=`` link that
    ``python -m visualizer serve`` prints) may. Where the server listens decides nothing: a page
    that points its own name at 127.0.0.1, or a TCP forward, looks local too.
    """
    env = os.environ if env is None else env
    flag = str(env.get(ALLOW_ENV, "")).strip().lower()
    if flag in _ON:
        return True, f"on for every visitor: the operator opened it to all ({ALLOW_ENV}=1)"
    if flag in _OFF:
        return False, f"off: the operator turned it off ({ALLOW_ENV}={env.get(ALLOW_ENV)})"
    if configured_token(env) is None:
        return False, (
            "off: this server was started without a key for visitor code. To turn it on, start it with "
            "`python -m visualizer serve` and open the link with `?token=` it prints (or set "
            f"{TOKEN_ENV} to a secret of {TOKEN_MIN_CHARS}+ characters and open `/?token=SECRET`; "
            f"{ALLOW_ENV}=1 opens it to every visitor)"
        )
    if has_key:
        return True, "on for this browser session: it opened the operator's link with the key (`?token=`)"
    return False, (
        "off for this browser session: code runs only in a browser that opened the operator's link with "
        "its key (`?token=...`, printed in the terminal where `python -m visualizer serve` started); "
        "ask the operator for that link"
    )


class UserRunner(Runner):
    """A Runner for users' kernels from source (request op "source"): one sandboxed process per run."""

    def __init__(self, backend: str = "auto", run_timeout: float = RUN_TIMEOUT_S):
        super().__init__(backend, run_timeout)
        self.one_run_per_worker = True
        self._mode = "rlimits"
        self._wire: wire.ServerChannel | None = None
        self._reply_limit: int | None = None  # bytes the next run's reply may take (reply_bytes)

    @property
    def isolation(self) -> str:
        """Which isolation the runs get here, in words."""
        return sandbox.isolation(self.backend)

    def _popen_args(self, fd: int) -> dict:
        args = sandbox.popen_args(fd, self.backend)
        self._mode = args["env"][sandbox.SANDBOX_ENV + "_MODE"]
        return args

    def _exit_status(self, code: int | None) -> int | None:
        return sandbox.exit_status(code, self._mode)

    def _channel(self, conn):
        # never unpickle what a sandbox sends: that would run its code here (visualizer/engine/run/wire.py);
        # and never take more bytes than the run it answers can produce
        self._wire = wire.ServerChannel(conn, max_bytes=self._reply_limit or ((_memory_mb() + 64) << 20))
        return self._wire

    def _stop(self, kill: bool = False) -> None:
        """Kill the worker's whole process group (its session: bubblewrap, or the worker itself), then
        reap it; under bubblewrap the PID namespace dies with it, children that left the group too."""
        proc = self._proc
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        super()._stop(kill=True)

    def ptx_source(self, launch: SourceLaunch, arch: str = "sm_90", timeout: float | None = None) -> dict:
        """The kernel's clean build as PTX and SASS, compiled in this runner's sandbox; KernelError."""
        return _ptx_source(self, launch, arch, timeout)

    def capture_source(
        self,
        launch: SourceLaunch,
        *,
        seed: int = 0,
        repeats: int = 20,
        time_clean: bool = True,
        progress=None,
        timeout: float | None = None,
        runs: int = 1,
        schedule_seed: int | None = None,
        sim_engine: str | None = None,
        **lenses,
    ) -> Capture:
        """Launch the user's kernel once instrumented (and timed clean); LaunchError or KernelError.
        ``runs``/``schedule_seed``: the launch run N times from the same inputs (engine/capture/pipeline.py);
        ``lenses``: the lenses asked for and their options (engine/lenses/: accesses=True,
        branches=True, delays=True with a schedule seed, ...)."""
        if not 1 <= int(runs) <= MAX_RUNS:
            raise LaunchError(f"runs must be a whole number from 1 to {MAX_RUNS}, not {runs}")
        base = {**launch.request(self.backend, seed, repeats), "time_clean": time_clean}
        fields = {**base, "runs": int(runs), "schedule_seed": schedule_seed}
        # the simulator's engine (engine/capture/request.py SIM_ENGINES): serve's, where none is named
        fields["sim_engine"] = sim_engine or default_sim_engine()
        typed = CaptureRequest.of(fields, lenses)  # a RequestError is a LaunchError
        known = gpu_checked(launch) if self.backend == "sim" else None
        # compiled for a GPU first, in the sandbox (once a source)
        check_gpu = self.backend == "sim" and known is None
        request = {**base, **typed.to_wire(), **({"gpu_check": True} if check_gpu else {})}
        limit = timeout or self.run_timeout
        what = f"running your kernel {launch.kernel}"
        # the simulator runs the kernel twice when timing it clean
        launches = (2 if self.backend == "sim" and time_clean else 1) + int(runs) - 1
        self.last_exit_code = None
        shape = launch.launch
        self._reply_limit = reply_bytes(launch) + lens_reply_bytes(
            typed, self.backend == "sim", shape.blocks, shape.threads_per_block
        )
        try:
            reply = self._exchange(request, limit, progress, what, launches)
        except (KernelError, RunTimeout) as exc:
            refused = self._wire.error if self._wire is not None else None
            if refused:
                raise KernelError(
                    f"your code sent the server a message it does not accept ({refused}); its sandbox was killed"
                ) from None
            raise KernelError(_explain(str(exc), limit, self.last_exit_code)) from None
        if reply.kind == "invalid":
            raise LaunchError(reply.payload)
        if reply.kind == "fatal":  # the worker was reaped by _exchange
            raise KernelError(
                f"{launch.kernel} faulted on the GPU: {reply.payload} (the worker was restarted)"
            )
        if reply.kind == "error":
            raise KernelError(reply.payload.removeprefix("UserCodeError: "))
        # the reply carries the parts the lenses asked for add (the access records, the SIMT lens's logs)
        expected = expected_reply(launch, runs=int(runs), parts=lens_reply_parts(typed.lenses))
        payload = reply.payload
        checked = payload.pop("gpu_check", None) if isinstance(payload, dict) else None
        if check_gpu:
            known = remember_gpu_check(launch, checked)
        try:  # held against the request before anything is made from it (analysis/capture.check_reply)
            cap = build_capture(payload, expected)
            if known is not None:
                cap.launch["gpu_compile"] = known
            return cap
        except ReplyError as exc:
            raise KernelError(
                f"the sandbox's reply does not answer its request ({exc}); nothing was made from it"[:300]
            ) from None
        except Exception as exc:  # a reply shaped by the sandbox's code, not by ours: one line, never a crash
            raise KernelError(
                f"the sandbox's reply could not be read ({type(exc).__name__}: {exc})"[:300]
            ) from None


def expected_reply(launch: SourceLaunch, *, runs: int = 1, parts: frozenset[str] = frozenset()):
    """What a run of ``launch`` must answer (analysis/capture.Expected): its grid and block, every array
    argument's dtype and shape, user_kernel, the runs and lenses asked for."""
    arrays: dict = {}
    for name, spec in launch.args.items():
        if spec.array is not None:
            arrays[name] = (spec.array.dtype.str, tuple(spec.array.shape))
        elif spec.kind == "rng":
            arrays[name] = (None, tuple(spec.shape))
        elif spec.is_array:
            arrays[name] = (np.dtype(spec.dtype).str, tuple(spec.shape))
    return Expected(
        grid=tuple(launch.launch.grid),
        block=tuple(launch.launch.block),
        arrays=arrays,
        runs=runs,
        parts=frozenset(parts),
    )


GPU_CHECKS_KEPT = 256  # sources whose GPU compile is remembered (a few hundred bytes each)
_gpu_checks: OrderedDict[str, dict] = OrderedDict()
_gpu_checks_lock = threading.Lock()


def _gpu_check_key(launch: SourceLaunch) -> str:
    """What a GPU compile of the kernel depends on: its module's text, its name and its arguments'
    types (kind, dtype, dimensions; a scalar's Python type), not their values or sizes."""
    types_ = [
        (name, s.kind, str(s.dtype), len(s.shape) if s.is_array else type(s.value).__name__)
        for name, s in sorted(launch.args.items())
    ]
    text = json.dumps([launch.source, launch.kernel, types_], default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def gpu_checked(launch: SourceLaunch) -> dict | None:
    """The remembered GPU compile of this kernel (``remember_gpu_check``'s), or None: not compiled yet."""
    with _gpu_checks_lock:
        return _gpu_checks.get(_gpu_check_key(launch))


def remember_gpu_check(launch: SourceLaunch, checked) -> dict:
    """The sandbox's ``gpu_check`` answer (engine/capture/ptx.gpu_check), held to its form: what the
    pages read as ``launch["gpu_compile"]``. ptxas's counts are parsed here, from its log cut to
    64 KiB; a kernel that compiled is remembered, so later runs of the same source skip the compile."""
    from visualizer.analysis.asm import ptxas_resources, sass_count_of

    if not isinstance(checked, dict) or checked.get("checked") is not True:
        why = checked.get("why") if isinstance(checked, dict) else None
        why = " ".join(str(why).split())[:300] if isinstance(why, str) else "the sandbox did not say why"
        return {"checked": False, "why": why}
    log = checked.get("ptxas_log")
    arch = checked.get("arch")
    arch = arch if isinstance(arch, str) and arch.startswith("sm_") and arch[3:].isdigit() else "sm_90"
    resources = ptxas_resources(log[: 64 << 10]) if isinstance(log, str) else None
    if resources is not None and resources.get("registers") is None:
        resources = None  # a log with no kernel in it counts nothing
    known = {"checked": True, "arch": arch, "build": "clean", "resources": resources}
    count = sass_count_of(checked.get("sass_instructions"))
    if count is not None:  # nvdisasm's listing, counted in the sandbox: held to an int in range
        known["sass_instructions"] = count
    if resources is None:
        known["why"] = "ptxas is not installed here (pip install nvidia-cuda-nvcc), so no register count"
    with _gpu_checks_lock:
        _gpu_checks[_gpu_check_key(launch)] = known
        while len(_gpu_checks) > GPU_CHECKS_KEPT:
            _gpu_checks.popitem(last=False)
    return known


PTX_REPLY_BYTES = 64 * 2**20  # PTX, SASS and ptxas's log of one kernel, as text


def _ptx_source(runner: UserRunner, launch: SourceLaunch, arch: str, timeout: float | None) -> dict:
    """The visitor's kernel compiled to PTX (and SASS) inside its sandbox (engine/run/worker.py op
    "ptx_source": numba runs the visitor's module to compile it, so it runs where visitor code runs)."""
    request = {**launch.request(runner.backend), "op": "ptx_source", "arch": arch, "sass": True}
    limit = timeout or runner.run_timeout
    runner._reply_limit = PTX_REPLY_BYTES
    try:
        answer = runner._exchange(request, limit, None, f"compiling your kernel {launch.kernel}", 1)
    except (KernelError, RunTimeout) as exc:
        raise KernelError(_explain(str(exc), limit, runner.last_exit_code)) from None
    if answer.failed:
        raise KernelError(str(answer.payload)[:300])
    reply = answer.payload
    if not isinstance(reply, dict) or not isinstance(reply.get("ptx"), str):
        raise KernelError("the sandbox's reply could not be read (no PTX in it)")
    why = ptx_reply_problem(reply)
    if why:
        raise KernelError(f"the sandbox's reply could not be read ({why})")
    return reply


def ptx_reply_problem(reply: dict) -> str | None:
    """What is wrong with a compile reply's fields the pages read (text, or None where a tool is
    missing; the missing tools' names; the tools' versions), or None."""
    for key in ("ptx", "sass", "ptxas_log"):
        if reply.get(key) is not None and not isinstance(reply[key], str):
            return f"its {key} is not text"
    missing, versions = reply.get("missing", []), reply.get("versions", {})
    if not isinstance(missing, list) or not all(isinstance(m, str) for m in missing):
        return "its missing tools are not names"
    if not isinstance(versions, dict) or not all(
        isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in versions.items()
    ):
        return "its tool versions are not text"
    return None


def reply_bytes(launch: SourceLaunch) -> int:
    """The most bytes a run's reply can legitimately take before the lenses' (engine/lenses/
    ``reply_bytes``): every array argument once, the trace buffers, and 16 MiB of the rest."""
    threads = launch.launch.threads
    return sum(spec.nbytes for spec in launch.args.values()) + 3 * 8 * threads + threads + (16 << 20)


def _explain(message: str, limit: float, exit_code: int | None = None) -> str:
    """The runner's messages about a lost worker, said in terms of the user-code limits."""
    cpu_limit = int(os.environ.get("VISUALIZER_USER_CPU_S", "120"))  # as the worker read it at its start
    if "half-way through a message" in message:
        return (
            f"your code stopped half-way through a message to the server and did not finish it within "
            f"{limit:.0f} s, the time limit for user code; its sandbox was killed"
        )
    if "timed out" in message or "over the" in message:
        return (
            f"your kernel did not finish within {limit:.0f} s, the time limit for user code (an endless "
            "loop?); its sandbox was killed"
        )
    if exit_code == -signal.SIGXCPU or f"exit code {-signal.SIGXCPU}" in message or "of CPU time" in message:
        return (
            f"your kernel used more than {cpu_limit} s of CPU time, the limit for user code (an endless "
            "loop?); its sandbox was killed"
        )
    if exit_code in (-signal.SIGKILL, -signal.SIGSEGV):
        return f"{message} (out of memory? user code may use {_memory_mb()} MiB beyond Python and numba)"
    return message


def _memory_mb() -> int:
    return int(os.environ.get("VISUALIZER_USER_MEMORY_MB", str(sandbox.MEMORY_LIMIT_MB)))


class UserRunQueue(RunQueue):
    """Visitors' runs of their own code, first come first served, each told its place in line as the
    built-in kernels' visitors are (``waiting(ahead, running)``); as many sandboxes at a time as the
    built-in kernels have workers (two on the simulator on a machine of two cores, one GPU worker)."""

    runner_class = UserRunner
    respawn = False  # no process waits with nothing to do: each run starts its own

    def __init__(self, backend: str = "auto", workers: int | None = None, run_timeout: float = RUN_TIMEOUT_S):
        super().__init__(backend, workers, run_timeout)

    @property
    def isolation(self) -> str:
        return sandbox.isolation(self.backend)

    def capture_source(self, launch: SourceLaunch, *, waiting=None, **kwargs) -> Capture:
        """UserRunner.capture_source in the next free sandbox slot, after waiting in line."""
        runner = self._acquire(waiting)
        try:
            return runner.capture_source(launch, **kwargs)
        finally:
            self._release(runner)

    def ptx_source(self, launch: SourceLaunch, arch: str = "sm_90", *, waiting=None, timeout=None) -> dict:
        """The visitor's kernel as PTX and SASS with line info (engine/ptx.source_asm's reply),
        compiled in the next free sandbox slot; KernelError in one line."""
        runner = self._acquire(waiting)
        try:
            return _ptx_source(runner, launch, arch, timeout)
        finally:
            self._release(runner)


def get_user_runner(backend: str = "auto") -> UserRunQueue:
    """The process-wide queue for user code on a backend, created on first use."""
    return shared_queue(UserRunQueue, backend)


def arrays_after(cap: Capture) -> dict[str, np.ndarray]:
    """Every array argument after the launch, in the kernel's parameter order."""
    both = {**cap.inputs, **cap.outputs}
    return {k: both[k] for k in cap.launch.get("arg_order", both) if k in both}
