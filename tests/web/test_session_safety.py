"""Visitor text is shown as text; the capture cache is bounded in bytes and runs each key once."""

import re
import threading
from pathlib import Path

import pytest

from tests.conftest import open_app
from visualizer.web.session import CaptureCache, as_text, capture_nbytes, queue_text

ENTRY = str(Path(__file__).resolve().parents[2] / "visualizer" / "app.py")
INJECTIONS = [
    "![x](http://example.invalid/a.png)",
    "[link](http://x)",
    "**bold**",
    "<b>bold</b>",
    ":red[red] :material/home: $x^2$",
    "`code`",
    "www.evil.example",  # GFM autolinks these bare addresses
    "someone@evil.example",
    "x" * 10_000,
]
UNESCAPED = re.compile(r"(?<!\\)[\[\]()<>*`!:$]")


def rendered_markup(text: str) -> list[str]:
    return UNESCAPED.findall(text)


def plain(text: str) -> str:
    """What a reader sees: escapes resolved, zero-width spaces gone."""
    return re.sub(r"\\(.)", r"\1", text).replace("\u200b", "")


@pytest.mark.parametrize("value", INJECTIONS)
def test_as_text_escapes_every_markup_character_and_truncates(value):
    shown = as_text(f"Bad link: got {value!r}")
    assert rendered_markup(shown) == []
    assert len(shown) <= 3 * 300 and "\n" not in shown
    assert plain(shown).startswith("Bad link: got ") and len(plain(shown)) <= 300
    assert "://" not in shown and "www." not in shown  # bare addresses are not auto-linked


def _sidebar_errors(**query):
    at = open_app(**query)
    return [e.value for e in at.sidebar.error]


@pytest.mark.parametrize("value", INJECTIONS)
def test_bad_links_echo_visitor_text_escaped_and_short(value):
    for query in (
        {"kernel": value},
        {"kernel": "vector_add", "backend": "sim", "n": value},
        {"backend": value},
    ):
        errors = _sidebar_errors(**query)
        assert len(errors) == 1 and errors[0].startswith("Bad link"), errors
        assert rendered_markup(errors[0]) == [], errors[0]
        assert len(plain(errors[0])) <= 300


def test_an_unknown_parameter_name_is_escaped_too():
    (error,) = _sidebar_errors(kernel="vector_add", backend="sim", **{"[link](http://x)": "1"})
    assert "has no parameter" in error and rendered_markup(error) == []


def test_queue_text_names_the_runs_ahead():
    assert queue_text(2, 2, "sim").startswith("in line: 2 runs ahead of yours (2 running)")
    assert "1 run ahead" in queue_text(1, 1, "gpu") and "free GPU" in queue_text(1, 1, "gpu")
    assert "another visitor" in queue_text(None, None, "sim")


# --- the capture cache ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_capture(sim_runner):
    return sim_runner.capture("vector_add", {"n": 500, "block": 64})


def test_capture_size_counts_tables_and_arrays(small_capture):
    size = capture_nbytes(small_capture)
    threads = small_capture.threads.memory_usage(deep=True).sum()
    arrays = sum(a.nbytes for a in (*small_capture.inputs.values(), *small_capture.outputs.values()))
    assert size == threads + arrays and size > 512 * 16  # 512 threads x 16 columns at least


def test_cache_is_bounded_in_bytes_and_drops_the_oldest(small_capture):
    size = capture_nbytes(small_capture)
    cache = CaptureCache(max_bytes=3 * size + size // 2)
    for i in range(10):
        cache.put(("k", i), small_capture)
        assert cache.nbytes <= cache.max_bytes
    assert len(cache) == 3 and cache.get(("k", 9)) is small_capture and cache.get(("k", 0)) is None
    tiny = CaptureCache(max_bytes=size - 1)
    tiny.put("big", small_capture)  # larger than the whole cache: not kept
    assert len(tiny) == 0 and tiny.nbytes == 0


def test_one_run_per_key_and_waiters_get_it(small_capture):
    cache = CaptureCache()
    calls, started, release = [], threading.Event(), threading.Event()

    def run():
        calls.append(1)
        started.set()
        release.wait(30)
        return small_capture

    results = []
    leader = threading.Thread(target=lambda: results.append(cache.get_or_run("k", run)))
    leader.start()
    assert started.wait(30)
    waiter = threading.Thread(target=lambda: results.append(cache.get_or_run("k", run)))
    waiter.start()
    release.set()
    leader.join(30)
    waiter.join(30)
    assert len(calls) == 1 and results == [small_capture, small_capture]


class Left(BaseException):
    """Streamlit's StopException is a BaseException too."""


def test_a_waiter_runs_it_again_when_the_first_visitor_leaves(small_capture):
    cache = CaptureCache()
    started, leave = threading.Event(), threading.Event()

    def run_and_leave():
        started.set()
        leave.wait(30)
        raise Left()

    def leader():
        with pytest.raises(Left):
            cache.get_or_run("k", run_and_leave)

    t = threading.Thread(target=leader)
    t.start()
    assert started.wait(30)
    waits = []
    waiter_result = []
    w = threading.Thread(
        target=lambda: waiter_result.append(
            cache.get_or_run("k", lambda: small_capture, wait=lambda: (waits.append(1), leave.set()))
        )
    )
    w.start()
    t.join(30)
    w.join(30)
    assert waiter_result == [small_capture] and waits  # it waited, then ran it itself
    assert cache.get("k") is small_capture
