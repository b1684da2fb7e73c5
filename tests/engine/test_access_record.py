"""The recorder itself, in-process on the simulator: names, spaces, atomics, UNINIT, the limit."""

import inspect

import numpy as np
import pytest
from numba import cuda, float32

from visualizer.analysis import memory as tables
from visualizer.engine.sim import access_record as record


def probe_kernel(x, out, counter):
    s = cuda.shared.array(64, float32)
    loc = cuda.local.array(2, float32)
    t = cuda.threadIdx.x
    if t > 0:
        s[t] = x[t]  # nobody writes s[0]
    loc[0] = s[t]  # thread 0 reads s[0]: uninitialised
    cuda.syncthreads()
    out[t] = loc[0] + s[(t + 1) % 64]  # thread 63 reads s[0] after the barrier: still uninitialised
    cuda.atomic.add(counter, 0, 1)


def line_of(text: str) -> int:
    src, start = inspect.getsourcelines(probe_kernel)
    return start + next(i for i, line in enumerate(src) if text in line)


def run(limit=record.RECORD_LIMIT):
    x = cuda.to_device(np.arange(64, dtype=np.float32))
    out = cuda.to_device(np.zeros(64, np.float32))
    counter = cuda.to_device(np.zeros(1, np.int64))
    kernel = cuda.jit(probe_kernel)
    rec = record.start({"x": x, "out": out, "counter": counter}, set(), (1, 1, 1), (64, 1, 1), limit=limit)
    try:
        kernel[1, 64](x, out, counter)
    finally:
        record.stop()
    return rec, counter.copy_to_host()


def test_recorded_names_spaces_atomics_and_uninit():
    rec, counter = run()
    assert counter[0] == 64  # atomics still work while recorded
    acc, req, haz, summ = tables.build(rec.buffers())
    assert set(acc["array"].astype(str)) == {"x", "out", "counter", "s", "loc"}
    spaces = acc.groupby(acc["array"].astype(str))["space"].first().astype(str).to_dict()
    assert spaces == {"x": "global", "out": "global", "counter": "global", "s": "shared", "loc": "local"}
    atom = acc[acc["array"].astype(str) == "counter"]
    assert len(atom) == 64 and set(atom["op"].astype(str)) == {"atomic"}  # not a load + a store
    assert set(acc[acc["array"].astype(str) == "s"]["epoch"]) == {0, 1}
    uninit = haz[haz["kind"] == "UNINIT"]
    assert uninit[["thread_a", "line_a", "epoch"]].values.tolist() == [
        [0, line_of("loc[0] = s[t]"), 0],
        [63, line_of("out[t] = loc[0]"), 1],
    ]
    assert (haz["kind"] == "UNINIT").all()  # the atomics on counter[0] are not races
    assert summ["uninit_reads"] == 2 and summ["global_atomic_requests"] == 2
    # the shared store line executes for 63 lanes only: lane 0 skipped it
    st = req[(req["array"].astype(str) == "s") & (req["op"].astype(str) == "store")]
    assert st["lanes"].tolist() == [31, 32]


def test_recording_stops_at_the_limit():
    with pytest.raises(Exception, match="recording limit"):
        run(limit=50)


def test_instruction_offsets_ignore_inline_caches():
    info = record.CodeInfo(0, probe_kernel.__code__)
    starts = info.starts
    assert info.instruction(starts[3]) == starts[3]
    assert info.instruction(starts[3] + 1) == starts[3]  # inside an instruction (or its caches)
