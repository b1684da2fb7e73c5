"""CUDA-event timing shared by the worker and the benchmarks (GPU only; nothing imported here)."""

from __future__ import annotations


def numba_event_ms(cuda, launch, repeats: int, warmup: int = 1) -> list[float]:
    """Milliseconds of each of ``repeats`` calls of ``launch`` between two CUDA events (after warm-up)."""
    for _ in range(warmup):
        launch()
    cuda.synchronize()
    e0, e1 = cuda.event(), cuda.event()
    times = []
    for _ in range(repeats):
        e0.record()
        launch()
        e1.record()
        e1.synchronize()
        times.append(cuda.event_elapsed_time(e0, e1))
    return times


def torch_event_ms(torch, fn, repeats: int, warmup: int = 1) -> tuple[list[float], object]:
    """The same for a torch callable; also returns its last result (to check it)."""
    out = None
    for _ in range(warmup):
        out = fn()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeats):
        e0.record()
        out = fn()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
    return times, out
