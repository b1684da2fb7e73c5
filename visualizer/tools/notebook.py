"""A small API for notebooks: ``from visualizer import capture``.

    cap = capture("matmul_tiled", n=64, backend="sim")
    cap.figure("grid")                       # a plotly Figure, drawn inline by Jupyter
    cap.threads                              # the per-thread table (pandas)
    cap.save_trace("matmul.trace.json")      # blocks/warps per SM for ui.perfetto.dev
    cap.compare(capture("matmul_naive", n=64, backend="sim"))   # the Compare table
    cap.asm()                                # PTX/SASS per source line (needs NVVM, no GPU)

Every capture runs in the runner's worker process for its backend, as in the app and the CLI.
"""

from __future__ import annotations

import atexit
from pathlib import Path

FIGURES = ("grid", "sm_timeline", "warp_timeline", "requests")
_RUNNERS: dict = {}


def _runner(backend: str):
    from visualizer.engine.run.runner import Runner

    if backend not in _RUNNERS:
        _RUNNERS[backend] = Runner(backend)
        atexit.register(_RUNNERS[backend].close)
    return _RUNNERS[backend]


class NotebookCapture:
    """One capture with the tables, figures and exports a notebook asks for."""

    def __init__(self, cap):
        self.capture = cap

    def __repr__(self) -> str:
        launch = self.capture.launch
        return (f"<capture {launch['kernel']} {launch.get('params', {})} on {launch['device_name']}: "
                f"grid {tuple(launch['grid'])} x block {tuple(launch['block'])}; {self.capture.source}>")  # fmt: skip

    @property
    def threads(self):
        return self.capture.threads

    @property
    def launch(self) -> dict:
        return self.capture.launch

    @property
    def timing(self) -> dict:
        return self.capture.timing

    @property
    def requests(self):
        return self.capture.requests

    def tables(self) -> dict:
        return self.capture.tables()

    def figure(self, name: str = "grid", **options):
        """A figure of this capture: one of FIGURES (``grid`` takes color_by=..., animate=...;
        ``warp_timeline`` takes sm=...)."""
        cap = self.capture
        if name == "grid":
            from visualizer.figures.grid import grid_figure

            return grid_figure(
                cap.threads, cap.launch, options.get("color_by", "block"), options.get("animate", False)
            )
        if name == "sm_timeline":
            from visualizer.analysis import schedule
            from visualizer.figures.scheduling import sm_timeline_figure

            return sm_timeline_figure(
                schedule.assign_waves(schedule.block_intervals(cap.threads)), cap.source
            )
        if name == "warp_timeline":
            from visualizer.analysis import schedule
            from visualizer.figures.scheduling import warp_timeline_figure

            warps = schedule.warp_intervals(cap.threads)
            return warp_timeline_figure(warps, int(options.get("sm", warps["sm"].min())), cap.source)
        if name == "requests":
            if cap.requests is None:
                raise ValueError("no accesses recorded: capture(..., accesses=True) on the simulator")
            from visualizer.figures.memory import requests_heatmap

            return requests_heatmap(cap.requests, options.get("space", "global"))
        raise ValueError(f"unknown figure {name!r}; choose one of {', '.join(FIGURES)}")

    def trace(self) -> dict:
        """The hardware timeline as a Chrome-trace dict (analysis/chrome_trace.py)."""
        from visualizer.analysis.chrome_trace import chrome_trace

        return chrome_trace(self.capture)

    def save_trace(self, path: str | Path) -> Path:
        """Write the Chrome-trace JSON (atomically); open it in ui.perfetto.dev."""
        from visualizer.analysis.chrome_trace import chrome_trace_json
        from visualizer.tools.atomic import write_text

        write_text(Path(path), chrome_trace_json(self.capture))
        return Path(path)

    def compare(self, other: NotebookCapture):
        """This capture (A) beside ``other`` (B): the Compare page's table; its one-line differences are
        in ``visualizer.analysis.compare.differences(table)``."""
        from visualizer.analysis.compare import compare

        return compare(self.capture, other.capture)

    def asm(self, arch: str = "sm_90"):
        """Per source line: PTX and SASS instruction counts and the accesses recorded (analysis/asm.py)."""
        from visualizer.analysis import asm
        from visualizer.engine.capture.ptx import builtin_asm

        launch = self.capture.launch
        if launch.get("user_kernel"):
            raise ValueError("asm() is for built-in kernels here; use python -m visualizer asm --source")
        got = builtin_asm(launch["kernel"], launch["params"], arch=arch)
        sass = asm.sass_table(got["sass"]) if got.get("sass") else None
        per_line = (launch.get("accesses") or {}).get("per_line")
        return asm.source_lines(got["source"], got["filename"], asm.ptx_table(got["ptx"]), sass, per_line)


def capture(
    kernel: str,
    backend: str = "sim",
    seed: int = 0,
    repeats: int = 20,
    sim_engine: str = "compiled",
    **params,
) -> NotebookCapture:
    """Run ``kernel`` with ``params`` on ``backend`` ("sim", "gpu" or "auto") and return its capture.
    A keyword that names a lens or a lens option (engine/lenses/: ``accesses=True``, ``branches=True``,
    ``sample_blocks="0,5"``...) asks for that lens; the others are the kernel's parameters.
    ``sim_engine``: the simulator's engine, "compiled" or "fastsim" (docs/simulator.md)."""
    from visualizer.engine.lenses import all_options

    keys = {option.key for _, option in all_options()}
    opts = {k: params.pop(k) for k in list(params) if k in keys}
    opts = {k: v for k, v in opts.items() if v not in (None, False)}
    runner = _runner(backend)
    return NotebookCapture(
        runner.capture(kernel, params, seed=seed, repeats=repeats, sim_engine=sim_engine, **opts)
    )
