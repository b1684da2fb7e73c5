"""Users' kernels on a real GPU: the three textbook kernels, clean timed beside instrumented, registers, faults."""

import pytest

from visualizer.engine.run.runner import KernelError
from visualizer.engine.run.user_runner import UserRunner, arrays_after
from visualizer.specs.source import plan_source_launch
from visualizer.web.examples import EXAMPLES

pytestmark = pytest.mark.gpu

# GPU-sized launches of the examples: (grid or None, threads_for, args)
SIZES = {
    "vector_add": (
        None,
        1 << 22,
        {k: v.replace(":1000", f":{1 << 22}") for k, v in EXAMPLES["vector_add"].args.items()},
    ),
    "matmul_tiled": (
        "32,32",
        None,
        {k: v.replace("48x48", "512x512") for k, v in EXAMPLES["matmul_tiled"].args.items()},
    ),
    "reduction": (None, 1 << 20, {"x": f"rand:float32:{1 << 20}", "partial": "zeros:float32:4096"}),
}


@pytest.fixture(scope="module")
def gpu_user_runner():
    with UserRunner("gpu") as runner:
        yield runner


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_textbook_kernels_on_the_gpu(gpu_user_runner, name):
    ex = EXAMPLES[name]
    grid, threads_for, args = SIZES[name]
    sl = plan_source_launch(
        ex.source,
        ex.kernel,
        grid=grid,
        block=ex.block,
        args=args,
        threads_for_n=threads_for,
        reference=[ex.reference.replace(" = ", "=", 1)],
        backend="gpu",
        filename=ex.file,
    )
    cap = gpu_user_runner.capture_source(sl, repeats=10)
    assert cap.measured and cap.check["correct"] is True, cap.check
    timing, launch = cap.timing, cap.launch
    assert timing["clean_ms"] > 0 and timing["instrumented_ms"] > 0 and len(timing["clean_ms_all"]) >= 1
    for build in ("clean", "instrumented"):
        res = launch[build]
        assert res["registers_per_thread"] > 0 and res["driver_blocks_per_sm"] >= 1, (build, res)
    if name == "matmul_tiled":
        assert launch["clean"]["static_smem_bytes"] == 2 * 16 * 16 * 4
    assert cap.threads["sm"].nunique() > 1, "a big grid spreads over many SMs"
    assert (cap.threads["t_end_ns"] >= cap.threads["t_start_ns"]).all()
    after = arrays_after(cap)
    assert set(after) == set(args)
    print(
        f"{name}: clean {timing['clean_ms']:.4f} ms, instrumented {timing['instrumented_ms']:.4f} ms, "
        f"regs clean/instr {launch['clean']['registers_per_thread']}/{launch['instrumented']['registers_per_thread']}, "
        f"SMs {cap.threads['sm'].nunique()}"
    )


@pytest.mark.parametrize("bad", ["a.foo = 1", "a[i] = undefined_name"])
def test_typing_error_is_one_line_with_the_users_line(gpu_user_runner, bad):
    src = f"from numba import cuda\n\n@cuda.jit\ndef k(a):\n    i = cuda.grid(1)\n    {bad}\n"
    sl = plan_source_launch(
        src, "k", grid="1", block="32", args={"a": "zeros:float32:32"}, backend="gpu", filename="k.py"
    )
    with pytest.raises(KernelError) as err:
        gpu_user_runner.capture_source(sl)
    msg = str(err.value)
    assert "\n" not in msg and f"typing error at k.py line 6: {bad}" in msg, msg


def test_illegal_address_is_reported_and_the_worker_restarts(gpu_user_runner):
    src = "from numba import cuda\n\n@cuda.jit\ndef k(a, far):\n    i = cuda.grid(1)\n    a[i + far] = 1\n"
    sl = plan_source_launch(
        src, "k", grid="1", block="32", args={"a": "zeros:float32:32", "far": str(1 << 36)}, backend="gpu"
    )
    restarts = gpu_user_runner.restarts
    with pytest.raises(KernelError, match="restarted"):
        gpu_user_runner.capture_source(sl)
    assert gpu_user_runner.restarts == restarts + 1
    ex = EXAMPLES["vector_add"]
    ok = plan_source_launch(
        ex.source,
        ex.kernel,
        grid=None,
        block="128",
        threads_for_n=1000,
        args=ex.args,
        reference="c=a+b",
        backend="gpu",
    )
    assert gpu_user_runner.capture_source(ok).check["correct"]


def test_the_gpu_sandbox_runs_under_the_seccomp_filter(gpu_user_runner):
    """The GPU path (bubblewrap with /dev/nvidia* bound) loads the filter, the CUDA driver works under it
    (the textbook kernels above ran with it), and the visitor's code gets EPERM for what it denies."""
    import ast
    import errno

    from visualizer.engine.run import sandbox

    if sandbox.isolation_mode("gpu") != "bwrap":
        pytest.skip(f"no bubblewrap on this GPU machine: {sandbox.isolation('gpu')}")
    assert "seccomp filter: sockets only AF_UNIX" in sandbox.isolation("gpu"), sandbox.isolation("gpu")
    probe = (
        "import socket\nfrom numba import cuda\nseen = {}\n"
        "for name, family in (('AF_VSOCK', 40), ('AF_INET', 2), ('AF_NETLINK', 16)):\n"
        "    try:\n        socket.socket(family, socket.SOCK_DGRAM).close()\n        seen[name] = 'allowed'\n"
        "    except OSError as exc:\n        seen[name] = exc.errno\n"
        "seen['devices'] = len(cuda.gpus)\n"
        "raise RuntimeError(repr(seen))\n\n@cuda.jit\ndef k(a):\n    a[0] = 1\n"
    )
    sl = plan_source_launch(probe, "k", grid="1", block="1", args={"a": "zeros:float32:1"}, backend="gpu")
    with pytest.raises(KernelError) as err:
        gpu_user_runner.capture_source(sl, repeats=1)
    seen = ast.literal_eval(str(err.value).rsplit("RuntimeError: ", 1)[1])
    assert seen.pop("devices") >= 1  # the driver answered under the filter
    assert seen == {"AF_VSOCK": errno.EPERM, "AF_INET": errno.EPERM, "AF_NETLINK": errno.EPERM}, seen
