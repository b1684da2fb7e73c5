"""Visitor code in its sandbox: hard limits before the first line, a fresh process per run, nothing
survives the time limit, no view of the server's files or the network, the reference runs inside."""

import ast
import json
import os
import re
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import open_app
from visualizer.engine.run import sandbox
from visualizer.engine.run.runner import KernelError, Runner
from visualizer.engine.run.user_runner import UserRunner, UserRunQueue
from visualizer.specs.source import plan_source_launch

pytestmark = pytest.mark.usefixtures("visitor_runs_on_fastsim")  # tests/conftest.py: why

ROOT = Path(__file__).resolve().parents[2]
BWRAP = sandbox.isolation_mode("sim") == "bwrap"
needs_bwrap = pytest.mark.skipif(not BWRAP, reason=f"isolation here: {sandbox.isolation('sim')}")
KERNEL = "\n\n@cuda.jit\ndef k(a, out):\n    i = cuda.grid(1)\n    if i < a.size:\n        out[i] = a[i] * 2{bug}\n"


def source(module_code: str = "", bug: str = "") -> str:
    return "from numba import cuda\n" + module_code + KERNEL.format(bug=bug)


def plan(src: str, reference="out=a * 2"):
    return plan_source_launch(
        src,
        "k",
        grid="1",
        block="32",
        args={"a": "arange:float32:32", "out": "zeros:float32:32"},
        reference=reference,
        filename="k.py",
    )


def one_line_error(runner, src: str, reference="out=a * 2", **kwargs) -> str:
    with pytest.raises(KernelError) as err:
        runner.capture_source(plan(src, reference), **kwargs)
    msg = str(err.value)
    assert "\n" not in msg and "Traceback" not in msg, msg
    return msg


@pytest.fixture(params=["bwrap", "rlimits"])
def mode(request, monkeypatch):
    if request.param == "bwrap" and not BWRAP:
        pytest.skip(f"isolation here: {sandbox.isolation('sim')}")
    if request.param == "rlimits":
        monkeypatch.setenv(sandbox.SANDBOX_ENV, "rlimits")
    return request.param


@pytest.fixture
def runner(mode):
    with UserRunner("sim") as r:
        yield r


def test_the_page_words_say_which_isolation_is_in_force(monkeypatch):
    words = sandbox.isolation("sim")
    if BWRAP:
        assert words.startswith(
            "bubblewrap: no network, read-only filesystem, private /tmp, own PID namespace"
        )
    monkeypatch.setenv(sandbox.SANDBOX_ENV, "rlimits")
    assert sandbox.isolation("sim").startswith(
        "rlimits only (bubblewrap is turned off by VISUALIZER_SANDBOX)"
    )


def test_a_bubblewrap_that_cannot_start_falls_back_and_says_why(tmp_path, monkeypatch):
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv(sandbox.BWRAP_ENV, str(fake))
    words = sandbox.isolation("sim")
    assert words.startswith("rlimits only (bubblewrap cannot start here: bwrap: No permissions"), words
    with UserRunner("sim") as runner:
        assert runner.capture_source(plan(source())).check["correct"] is True
        assert runner._mode == "rlimits"


def test_five_gib_at_module_level_fails_with_one_line(runner):
    big = "import numpy as np\nBIG = np.ones(5 << 30, np.uint8)\n"
    msg = one_line_error(runner, source(big))
    assert re.search(r"running the module failed at k\.py line 3: BIG = np\.ones.*MemoryError", msg), msg
    assert not runner.warm  # the process is gone: nothing of the run stays resident


LIMITS = {"RLIMIT_AS": 1, "RLIMIT_CPU": 1, "RLIMIT_NPROC": 1, "RLIMIT_NOFILE": 1, "RLIMIT_FSIZE": 1}


def test_limits_are_hard_and_set_before_the_first_line(runner):
    probe = (
        "import resource\n"
        f"raise RuntimeError(repr({{n: resource.getrlimit(getattr(resource, n)) for n in {sorted(LIMITS)!r}}}))\n"
    )
    msg = one_line_error(runner, source(probe))
    seen = ast.literal_eval(msg.rsplit("RuntimeError: ", 1)[1])
    for name, (soft, hard) in seen.items():
        assert hard != -1 and soft != -1, (name, soft, hard)  # -1 is RLIM_INFINITY
        assert soft == hard or (name == "RLIMIT_CPU" and hard == soft + 1), (name, soft, hard)
    assert seen["RLIMIT_NPROC"][1] == sandbox.MAX_PROCESSES
    assert seen["RLIMIT_NOFILE"][1] == sandbox.MAX_OPEN_FILES
    assert seen["RLIMIT_FSIZE"][1] == sandbox.MAX_FILE_BYTES
    # Python and numba take some hundreds of MiB of address space; the visitor adds at most the limit
    assert seen["RLIMIT_AS"][1] < (sandbox.MEMORY_LIMIT_MB << 20) + (4 << 30), seen["RLIMIT_AS"]


@pytest.mark.parametrize("which", ["RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_NPROC", "RLIMIT_NOFILE"])
def test_code_cannot_raise_its_limits(runner, which):
    raise_it = f"import resource\nresource.setrlimit(resource.{which}, (resource.RLIM_INFINITY,) * 2)\n"
    msg = one_line_error(runner, source(raise_it))
    assert re.search(r"line 3: resource\.setrlimit.*ValueError: not allowed to raise maximum limit", msg), msg


def _processes_with(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


@pytest.mark.parametrize("setsid", [True, False])
def test_no_child_survives_the_time_limit(runner, mode, setsid):
    if setsid and mode != "bwrap":
        pytest.skip("a child that calls setsid leaves the process group: only a PID namespace catches it")
    marker = f"sandbox-survivor-{uuid.uuid4().hex}"
    escape = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        f"    {'os.setsid()' if setsid else 'pass'}\n"
        "    if os.fork() == 0:\n"
        f"        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(300)', {marker!r}])\n"
        "    os._exit(0)\n"
        "while True:\n"
        "    time.sleep(0.1)\n"
    )
    outcome = {}

    def run():
        try:
            runner.capture_source(plan(source(escape)), timeout=8)
        except KernelError as exc:
            outcome["error"] = str(exc)

    t = threading.Thread(target=run)
    t.start()
    deadline = time.monotonic() + 8
    while not _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_with(marker), "the visitor's grandchild started (else this test proves nothing)"
    t.join(60)
    assert "did not finish within 8 s" in outcome.get("error", ""), outcome
    deadline = time.monotonic() + 5
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _processes_with(marker), "a child of the visitor's code outlived its run"


def test_one_visitors_monkeypatching_never_reaches_the_next(mode):
    # a name of this run's own: pytest -n runs the two modes at once, and the rlimits mode writes the
    # machine's /tmp
    planted = f"/tmp/planted-by-a-{uuid.uuid4().hex}"
    tamper = (
        "import numpy\n"
        "numpy.isclose = lambda a, b, **k: numpy.ones(numpy.shape(a), bool)\n"
        f"open({planted!r}, 'w').write('a was here')\n"
    )
    look = f"import os\nif os.path.exists({planted!r}):\n    raise RuntimeError('sees the file of A')\n"
    with UserRunQueue("sim", workers=1) as queue:  # one slot: B runs exactly where A ran
        a = queue.capture_source(plan(source(tamper)))
        assert a.check["correct"] is True
        b = queue.capture_source(plan(source(bug=" + (1 if i == 3 else 0)")))  # B's kernel is wrong
        assert b.check["correct"] is False and b.check["outputs"]["out"]["mismatches"] == 1
        if mode == "bwrap":  # each run has its own /tmp
            assert queue.capture_source(plan(source(look))).check["correct"] is True
        assert queue.status() == {"workers": 1, "running": 0, "queued": 0}
        assert not any(r.warm for r in queue.runners)  # no process waits with a visitor's state in it
    if os.path.exists(planted):  # rlimits only: /tmp is the machine's
        os.remove(planted)


@needs_bwrap
def test_the_sandbox_sees_no_file_of_the_server(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("the server's")
    with UserRunner("sim") as runner:
        for path in (secret, ROOT / "tests" / "conftest.py", Path.home() / ".bashrc"):
            msg = one_line_error(runner, source(f"TEXT = open({str(path)!r}).read()\n"))
            assert re.search(r"line 2: TEXT = open.*(FileNotFoundError|PermissionError)", msg), msg
        # the project's code is there, read-only
        write = f"open({str(ROOT / 'visualizer' / 'planted.py')!r}, 'w').write('x')\n"
        msg = one_line_error(runner, source(write))
        assert re.search(r"(Read-only file system|PermissionError)", msg), msg
    assert not (ROOT / "visualizer" / "planted.py").exists()


def test_only_pythons_folders_are_bound_not_the_servers_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", ["", str(tmp_path), str(ROOT / "tests"), *__import__("sys").path])
    args = sandbox.bwrap_args("sim")
    bound = {args[i + 1] for i, a in enumerate(args) if a in ("--ro-bind", "--bind", "--dev-bind")}
    assert str(tmp_path) not in bound and str(ROOT) not in bound and str(ROOT / "tests") not in bound
    assert {str(ROOT / "visualizer"), str(ROOT / "kernels")} <= bound
    assert not any(a in ("--bind", "--bind-try") for a in args), "nothing is bound writable"


@needs_bwrap
def test_the_sandbox_has_no_network():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.settimeout(0.5)
        port = server.getsockname()[1]
        call = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=5)\n"
        with UserRunner("sim") as runner:
            msg = one_line_error(runner, source(call))
        assert re.search(
            r"line 3: socket\.create_connection.*(OSError|ConnectionRefusedError|PermissionError)", msg
        ), msg
        with pytest.raises(TimeoutError):
            server.accept()  # nobody ever knocked


@needs_bwrap
def test_the_reference_expression_runs_in_the_sandbox(tmp_path):
    target = tmp_path / "written-by-the-reference"
    # builtins are hidden from the expression, but a module's are one attribute away: it is code
    expr = f"out=np.__builtins__['__import__']('os').open({str(target)!r}, 65) + a * 2"
    with UserRunner("sim") as runner:
        msg = one_line_error(runner, source(), reference=expr)
    assert re.search(r"reference out=.* failed: (FileNotFoundError|PermissionError)", msg), msg
    assert not target.exists()


def test_a_built_in_worker_refuses_visitor_source():
    request = {**plan(source()).request("sim"), "time_clean": False}
    with Runner("sim") as runner:
        reply = runner._exchange(request, 60, None, "a source request")
    assert reply.kind == "error" and "does not run that kind of request" in reply.payload


def test_the_second_visitor_is_told_its_place_in_line():
    slow = "import time\ntime.sleep(4)\n"
    told = []
    with UserRunQueue("sim", workers=1) as queue:
        first = threading.Thread(target=lambda: queue.capture_source(plan(source(slow))))
        first.start()
        while queue.status()["running"] == 0:
            time.sleep(0.05)
        cap = queue.capture_source(
            plan(source()), waiting=lambda ahead, running: told.append((ahead, running))
        )
        first.join(60)
    assert cap.check["correct"] and told and told[0] == (1, 1), told


KEY = "sandbox-test-key-" + "k" * 32  # the operator's key (serve makes a random one)


def _page() -> AppTest:
    """The Your kernel page in a session that opened the operator's link (``?token=``)."""
    return open_app("your_kernel", backend="sim", token=KEY)


def _run(at, src: str, reference: str = "c = a + b") -> None:
    at.text_area(key="uk_source").set_value(src)
    at.text_area(key="uk_reference").set_value(reference)
    at.radio(key="uk_backend").set_value("sim")
    next(b for b in at.button if b.label == "Run your kernel").click().run()
    assert not at.exception, [e.value for e in at.exception]


def test_two_sessions_of_one_server_cannot_touch_each_other(monkeypatch):
    monkeypatch.setenv("VISUALIZER_TOKEN", KEY)  # both sessions opened the operator's link
    a, b = _page(), _page()
    assert any(sandbox.isolation("sim") in c.value for c in a.caption), [c.value for c in a.caption]
    example = a.text_area(key="uk_source").value
    tampered = example.replace(
        "from numba import cuda\n",
        "from numba import cuda\nimport numpy\nnumpy.isclose = lambda x, y, **k: numpy.ones(numpy.shape(x), bool)\n",
    )
    _run(a, tampered)
    assert any("`c` matches the numpy reference" in s.value for s in a.success)
    _run(b, example.replace("c[i] = a[i] + b[i]", "c[i] = a[i] - b[i]"))  # B's kernel is wrong
    assert any("`c`:" in e.value and "differ from the numpy reference" in e.value for e in b.error), [
        e.value for e in b.error
    ]


def test_a_pickle_written_to_the_servers_socket_runs_nothing_there(runner, tmp_path):
    # the visitor's code holds the worker's end of the socket: what it writes there is never unpickled
    target = tmp_path / "planted-through-the-socket"
    attack = (
        "import sys\n"
        "from multiprocessing.connection import Connection\n"
        "class Plant:\n"
        "    def __reduce__(self):\n"
        f"        return (open, ({str(target)!r}, 'w'))\n"
        "Connection(int(sys.argv[1])).send(('ok', 1, Plant()))\n"
        "import time\n"
        "time.sleep(30)\n"
    )
    msg = one_line_error(runner, source(attack), timeout=20)
    assert "sent the server a message it does not accept" in msg, msg
    assert not target.exists()


def test_a_reply_bigger_than_its_run_can_make_is_refused(runner):
    flood = (
        "import json, sys, time\n"
        "from multiprocessing.connection import Connection\n"
        "Connection(int(sys.argv[1])).send_bytes(json.dumps([{'t': ['ok', 1, {'d': []}]}, [1 << 30]]).encode())\n"
        "time.sleep(30)\n"
    )
    msg = one_line_error(runner, source(flood), timeout=20)
    assert re.search(r"does not accept \(a message over 16 MiB\)", msg), msg


def _kill_sandboxes(queue) -> None:
    """A run stuck in a read (the old runner's recv_bytes): kill its sandbox so the test can end."""
    for r in queue.runners:
        if r._proc is not None:
            try:
                os.killpg(r._proc.pid, 9)
            except (ProcessLookupError, PermissionError):
                pass


@pytest.mark.parametrize("where", ["header", "part", "header, in the SIMT lens's rerun"])
def test_a_half_sent_message_ends_at_the_limit_and_the_slot_serves_the_next_run(mode, where):
    """The visitor's code writes a length promising 1,000 bytes, one byte of them, and sleeps: the run
    ends at its time limit with one line, its sandbox is killed, and the one slot serves the next run."""
    lens = {"branches": True} if "SIMT" in where else {}
    if where.startswith("header"):
        stall = "os.write(fd, struct.pack('!i', 1000) + b'[')\n"
    else:  # a whole header that announces a part of 1,000 bytes; then one byte of that part
        header = json.dumps([{"t": ["ok", 1, {"b": 0}]}, [1000]]).encode()
        stall = (
            f"h = {header!r}\nos.write(fd, struct.pack('!i', len(h)) + h + struct.pack('!i', 1000) + b'x')\n"
        )
    code = "import os, struct, sys, time\nfd = int(sys.argv[1])\n" + stall + "time.sleep(300)\n"
    outcome: dict = {}
    queue = UserRunQueue("sim", workers=1)

    def run():
        try:
            queue.capture_source(plan(source(code)), timeout=15, **lens)
        except KernelError as exc:
            outcome["error"] = str(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(180)  # a hang guard only: the limit is 15 s
    if t.is_alive():
        _kill_sandboxes(queue)
        pytest.fail("a half-sent message held its sandbox slot past the run's time limit")
    try:
        msg = outcome.get("error", "")
        assert "stopped half-way through a message to the server" in msg, outcome
        assert "\n" not in msg and "its sandbox was killed" in msg
        assert not any(r.warm for r in queue.runners)  # the process group is gone
        assert queue.capture_source(plan(source())).check["correct"] is True  # the slot serves the next
    finally:
        queue.close()


FORGED_LAUNCH = {
    "grid": [1, 1, 1],
    "block": [32, 1, 1],
    "threads": 32,
    "blocks": 1,
    "threads_per_block": 32,
    "recorded_per": "thread",
    "source": "simulated",
    "backend": "sim",
    "user_kernel": True,
    "kernel": "k (yours)",
    "kernel_name": "k",
    "filename": "k.py",
    "kernel_source": "",
    "params": {},
    "written": ["out"],
    "tile_operands": [],
    "row_table": None,
}


@pytest.mark.parametrize(
    "lie, said",
    [
        ({"threads": 50_000_000}, "its launch does not add up: 50000000 threads claimed"),
        ({"grid": [2, 1, 1], "blocks": 2, "threads": 64, "_trace": 64}, "the run asked for grid [1, 1, 1]"),
        ({"user_kernel": None}, "it does not say it ran a visitor's kernel"),
        ({"_out": 4}, "out has shape (4,), not (32,)"),
        ({"threads": float("inf")}, "threads is not a count (inf)"),
    ],
)
def test_a_forged_reply_is_refused_in_one_line_before_anything_is_made_from_it(runner, lie, said):
    """The visitor's code sends its own ~1 KB "ok" reply through the sandbox's socket (request 1 of a
    fresh runner): the server holds it against the request and refuses it, allocating nothing from it."""
    import tracemalloc

    launch = {**FORGED_LAUNCH, **{k: v for k, v in lie.items() if not k.startswith("_")}}
    forge = (
        "import sys, time\n"
        "import numpy as np\n"
        "from multiprocessing.connection import Connection\n"
        "from visualizer.engine.run.wire import Channel\n"
        f"launch = {launch!r}\n".replace("inf", "float('inf')")
        + f"records = {lie.get('_trace', 32)}\n"
        + "reply = {'launch': launch, 'timing': {}, 'check': {'correct': True}, 'inputs': {'a': np.zeros(32, np.float32)},\n"
        + "    'buffers': {'trace': np.zeros((3, records), np.int64), 'active': np.zeros(launch['blocks'] * 32, np.uint8)},\n"
        + f"    'outputs': {{'out': np.zeros({lie.get('_out', 32)}, np.float32)}}}}\n"
        + "Channel(Connection(int(sys.argv[1])), 1 << 20).send(('ok', 1, reply))\n"
        + "time.sleep(60)\n"
    )
    tracemalloc.start()
    try:
        msg = one_line_error(runner, source(forge), timeout=60)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, f"{peak / 2**20:.0f} MiB allocated while reading a forged 1 KB reply"
    assert "the sandbox's reply does not answer its request" in msg and said in msg, msg
    assert not runner.warm


FORGED_FRAMES = {
    "an unhashable kind": '[{"t": [["ok"], 1, {"d": []}]}, []]',
    "an id of Infinity": '[{"t": ["ok", Infinity, {"d": []}]}, []]',
    "blocks of 1e400": '[{"t": ["blocks", 1, 1e400]}, []]',
    "progress of NaN": '[{"t": ["progress", 1, NaN]}, []]',
    "a huge number": '[{"t": ["blocks", 1, 1' + "0" * 5000 + "]}, []]",
    "deep nesting": "[" * 50_000 + "]" * 50_000,
    "an unhashable dict key": '[{"t": ["ok", 1, {"d": [[["x"], 1]]}]}, []]',
    "a shape of floats": '[{"t": ["ok", 1, {"d": [["a", {"a": ["<f8", [1e400], 0]}]]}]}, [8]]',
    "part sizes of Infinity": '[{"t": ["ok", 1, {"d": []}]}, [Infinity]]',
    "a tag holding a number": '[{"t": 7}, []]',
    "threads of Infinity in a reply": '[{"t": ["ok", 1, {"d": [["launch", {"d": [["threads", Infinity]]}]]}]}, []]',
}


def _forge(header: str, parts: int = 0) -> str:
    """Visitor code that writes one raw frame (and ``parts`` zero bytes as its parts) to the server."""
    return (
        "import os, struct, sys, time\n"
        "fd = int(sys.argv[1])\n"
        f"h = {header.encode()!r}\n"
        "os.write(fd, struct.pack('!i', len(h)) + h)\n"
        f"for n in [8] * {parts}:\n"
        "    os.write(fd, struct.pack('!i', n) + bytes(n))\n"
        "time.sleep(60)\n"
    )


@pytest.mark.parametrize("what", list(FORGED_FRAMES))
def test_a_forged_message_is_one_line_in_the_server(what):
    header = FORGED_FRAMES[what]
    with UserRunner("sim") as runner:
        msg = one_line_error(runner, source(_forge(header, parts=header.count("[8]"))), timeout=60)
        assert not runner.warm
    assert "does not accept" in msg or "does not answer its request" in msg, msg
    assert len(msg) < 400, msg


def test_a_forged_message_is_one_line_in_the_cli(tmp_path):
    from tests.engine.test_user_runner import run_cli

    path = tmp_path / "forged.py"
    path.write_text(source(_forge(FORGED_FRAMES["an unhashable kind"])))
    res = run_cli(
        "--source", str(path), "--kernel", "k", "--grid", "1", "--block", "32",
        "--arg", "a=arange:float32:32", "--arg", "out=zeros:float32:32", "--backend", "sim",
        "--out", str(tmp_path / "bundle"),
    )  # fmt: skip
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.count("\n") == 1 and "does not accept" in res.stderr, res.stderr
