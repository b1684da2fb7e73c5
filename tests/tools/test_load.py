"""A classroom on one server (127.0.0.1 only): 30 visitors open links, leave mid-run, switch pages
and kernels mid-run and resubmit the form, all at once; each must see exactly the capture it asked
for. Before request ids, most of them were shown someone else's capture (python -m
visualizer.tools.loadtest against the old runner: 22 of 25 wrong)."""

import pytest

from visualizer.engine.run.runner import default_workers
from visualizer.tools.loadtest import Server, Visitor, classroom, query


@pytest.fixture(scope="module")
def thirty(tmp_path_factory):
    # fastsim: its runs report each block and last seconds, so visitors leave while a run is going and its worker
    # is replaced; the compiled engine may finish a heavy link before a visitor can leave it (no replacement to see)
    log = tmp_path_factory.mktemp("load") / "server.log"
    return classroom(30, log_path=log, serve_args=["--sim-engine", "fastsim"])


def test_every_visitor_sees_exactly_the_capture_it_asked_for(thirty):
    assert thirty["finished_visitors"] == 30
    wrong = [o for o in thirty["outcomes"] if not o["correct"]]
    assert not wrong, wrong
    asked = [o for o in thirty["outcomes"] if o["asked"] is not None]
    assert len(asked) == 25 and all(o["shown"] == o["asked"] for o in asked)


def test_runs_were_abandoned_mid_run_and_their_workers_replaced(thirty):
    # the path that caused the bug really ran: visitors left while their kernel was running
    assert thirty["left_mid_run"] >= 5, thirty["left_mid_run"]
    assert thirty["workers_started"] > default_workers("sim")  # killed workers were replaced


def test_workers_and_memory_stay_bounded(thirty):
    pool = default_workers("sim")
    assert thirty["max_live_workers"] <= pool and thirty["live_workers_after"] <= pool
    assert thirty["peak_server_rss_mb"] < 1024, thirty["peak_server_rss_mb"]
    assert thirty["peak_workers_rss_mb"] < 1024 * pool, thirty["peak_workers_rss_mb"]


def test_without_the_launcher_a_foreign_host_name_is_refused(tmp_path):
    """Plain `streamlit run` from elsewhere (no HostGuard in front): the app script itself refuses a
    visitor whose Host is a foreign name (DNS rebinding), and serves the local one. (127.0.0.2 is this
    machine too, so it is served: loopback is judged with ipaddress.)"""
    server = Server(tmp_path / "server.log", plain_from=tmp_path)  # plain `streamlit run` elsewhere
    try:
        remote = Visitor(server.port, host="evil.example")
        remote.rerun(query("vector_add", {"n": 50, "block": 32}))
        assert remote.wait(lambda: remote.finished is not None)
        refusals = [t for t in remote.texts("alert") if "does not answer to the host name" in t]
        assert refusals and remote.shown() is None
        remote.close()
        local = Visitor(server.port)
        local.rerun(query("vector_add", {"n": 50, "block": 32}))
        assert local.wait() and local.shown() == ("vector_add", {"n": 50, "block": 32})
        local.close()
    finally:
        server.stop()
