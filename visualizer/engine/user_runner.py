"""The host side of "your own kernel": a dedicated worker per backend, the request, the Capture.

Nothing here executes the user's code: the source is parsed with ``ast`` for a syntax check and
the kernel's parameter names, then sent to a worker process, which is the only place it runs.
User code gets its own workers (not the ones the built-in kernels share), with a wall-clock limit
here and CPU-time/memory limits inside the worker (visualizer/engine/source_capture.py).
"""

from __future__ import annotations

import hmac
import os
import signal
import threading

import numpy as np

from visualizer.analysis.capture import Capture, threads_table
from visualizer.engine.runner import KernelError, Runner, RunTimeout, resolve_backend
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


def build_user_capture(reply: dict) -> Capture:
    """A Capture from a source run's reply: the same tables as a built-in kernel's."""
    launch, timing, recorded = reply["launch"], reply["timing"], reply["arrays"]
    records = recorded["trace"].T
    threads = threads_table(launch, records, recorded["active"])
    if len(records):
        timing["kernel_span_ns"] = int(records[:, 2].max() - records[:, 1].min())
    cap = Capture(
        launch=launch,
        timing=timing,
        inputs=dict(reply["inputs"]),
        outputs=dict(reply["outputs"]),
        threads=threads,
        check=reply["check"],
    )
    if (
        "accesses" in reply
    ):  # recorded by the memory engine (visualizer/engine/access_record.py), as for built-in kernels
        from visualizer.analysis import memory as memory_tables

        cap.accesses, cap.requests, cap.hazards, launch["accesses"] = memory_tables.build(reply["accesses"])
    if "runs" in reply:  # the launch run N times (analysis/races.py)
        from visualizer.analysis import races

        races.attach(cap, reply["runs"], reply.get("runs_correct") or [None] * launch["runs"]["count"])
    return cap


class UserRunner(Runner):
    """A Runner whose worker runs users' kernels from source (request op "source")."""

    def __init__(self, backend: str = "auto", run_timeout: float = RUN_TIMEOUT_S):
        super().__init__(backend, run_timeout)

    def capture_source(
        self,
        launch: SourceLaunch,
        *,
        seed: int = 0,
        repeats: int = 20,
        accesses: bool = False,
        time_clean: bool = True,
        progress=None,
        timeout: float | None = None,
        runs: int = 1,
        schedule_seed: int | None = None,
        delays: bool = False,
    ) -> Capture:
        """Launch the user's kernel once instrumented (and timed clean); LaunchError or KernelError.
        ``runs``/``schedule_seed``: the launch run N times from the same inputs (engine/pipeline.py);
        ``delays``: with a seed, the instrumented build waits seeded delays before shared-memory
        accesses and barriers (engine/instrument.py; run i's table is pipeline.delay_table(seed, i))."""
        if not 1 <= int(runs) <= MAX_RUNS:
            raise LaunchError(f"runs must be a whole number from 1 to {MAX_RUNS}, not {runs}")
        request = {**launch.request(self.backend, seed, repeats, accesses), "time_clean": time_clean}
        if runs > 1 or schedule_seed is not None:
            request.update(runs=int(runs), schedule_seed=schedule_seed, delays=bool(delays))
        limit = timeout or self.run_timeout
        what = f"running your kernel {launch.kernel}"
        # the simulator runs the kernel twice when timing it clean
        launches = (2 if self.backend == "sim" and time_clean else 1) + int(runs) - 1
        self.last_exit_code = None
        try:
            kind, _, *payload = self._exchange(request, limit, progress, what, launches)
        except (KernelError, RunTimeout) as exc:
            raise KernelError(_explain(str(exc), limit, self.last_exit_code)) from None
        if kind == "invalid":
            raise LaunchError(payload[0])
        if kind == "fatal":  # the worker was reaped by _exchange
            raise KernelError(f"{launch.kernel} faulted on the GPU: {payload[0]} (the worker was restarted)")
        if kind == "error":
            raise KernelError(payload[0].removeprefix("UserCodeError: "))
        return build_user_capture(payload[0])


def _explain(message: str, limit: float, exit_code: int | None = None) -> str:
    """The runner's messages about a lost worker, said in terms of the user-code limits."""
    cpu_limit = int(os.environ.get("VISUALIZER_USER_CPU_S", "120"))  # as the worker read it at its start
    if "timed out" in message or "over the" in message:
        return (
            f"your kernel did not finish within {limit:.0f} s, the time limit for user code (an endless "
            "loop?); the worker was stopped and restarted"
        )
    if exit_code == -signal.SIGXCPU or f"exit code {-signal.SIGXCPU}" in message or "of CPU time" in message:
        return (
            f"your kernel used more than {cpu_limit} s of CPU time, the limit for user code (an endless "
            "loop?); the worker was stopped and restarted"
        )
    if exit_code in (-signal.SIGKILL, -signal.SIGSEGV):
        return f"{message} (out of memory? user code may add {_memory_mb()} MiB on the simulator)"
    return message


def _memory_mb() -> int:
    from visualizer.engine.source_capture import MEMORY_LIMIT_BYTES

    return MEMORY_LIMIT_BYTES >> 20


_RUNNERS: dict[str, UserRunner] = {}
_LOCK = threading.Lock()


def get_user_runner(backend: str = "auto") -> UserRunner:
    """The process-wide runner for user code on a backend (its own worker), created on first use."""
    name = resolve_backend(backend)
    with _LOCK:
        if name not in _RUNNERS:
            _RUNNERS[name] = UserRunner(name)
        return _RUNNERS[name]


def arrays_after(cap: Capture) -> dict[str, np.ndarray]:
    """Every array argument after the launch, in the kernel's parameter order."""
    both = {**cap.inputs, **cap.outputs}
    return {k: both[k] for k in cap.launch.get("arg_order", both) if k in both}
