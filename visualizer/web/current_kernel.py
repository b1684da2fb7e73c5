"""The current kernel, built-in or the visitor's own: what the sidebar, the URL and every page name.

The current kernel is the session's capture (``st.session_state.capture``). When that capture is a
visitor's kernel (run on the Your kernel page) and no built-in run is pending, the sidebar names it
instead of drawing the built-in kernels' controls, and the link carries it: the launch the capture
came from (source, kernel, grid, block, argument texts, reference) as JSON, zlib-compressed and
urlsafe-base64 encoded in ``?yk=`` (Compiler Explorer keeps its state in its links the same way).

A link is hostile text: it is decoded with bounds (its length, the decompressed size, every field's
type, length and range) and only fills the Your kernel page's form. Code runs from it only for a
visitor who may run code (the operator's key, web/guard.py; engine/user_runner.user_code_allowed),
and the link never carries that key. Uploaded arrays (``file:`` arguments) never travel in a link.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import zlib
from dataclasses import dataclass

import streamlit as st
from streamlit.errors import StreamlitAPIException

from visualizer.analysis.capture import Capture
from visualizer.engine.user_runner import user_code_allowed
from visualizer.specs import source as uspec
from visualizer.web.guard import visitor_has_key
from visualizer.web.session import PAGE_QUERY_KEYS, as_text, backend_badge, dims_text, keep_page_keys
from visualizer.web.uploads import over_budget

LINK_KEY = "yk"  # the query key of a visitor's kernel (in PAGE_QUERY_KEYS: not a kernel parameter)
LINK_MAX_CHARS = 32_000  # the encoded text in a link; a kernel that needs more is not put in one
LINK_MAX_BYTES = uspec.MAX_SOURCE_BYTES + uspec.MAX_REFERENCE_BYTES + 40_000  # decompressed JSON
LINK_VERSION = 1
MAX_DIM = 2**31 - 1
BACKEND_CHOICES = ("auto", "gpu", "sim")  # the Your kernel page's backend radio
GRID_MODE = "grid"  # the Your kernel page's launch mode that takes a grid (its MODES[1])
YOUR_PAGE = "your_kernel"
YOURS_REPLACED = (
    "Loading an example runs a built-in kernel: it becomes the current kernel in place of yours, which "
    "stays on the Your kernel page (run it again there)."
)
_B64 = re.compile(r"[A-Za-z0-9_-]+")
_FIELDS = {"v", "source", "kernel", "grid", "block", "args", "reference", "backend", "accesses"}


class LinkError(ValueError):
    """A link's kernel that cannot be used; its message is one line."""


@dataclass(frozen=True)
class KernelLink:
    """A visitor's kernel as a link carries it: everything the Your kernel page's form holds."""

    source: str
    kernel: str
    grid: tuple[int, ...]
    block: tuple[int, ...]
    args: dict
    reference: tuple[str, ...] = ()
    backend: str = "auto"
    accesses: bool = False

    @property
    def uploads(self) -> list[str]:
        """Arguments that name an uploaded file: the link cannot carry the file."""
        return [name for name, text in self.args.items() if text.strip().startswith("file:")]

    def as_json(self) -> dict:
        return {
            "v": LINK_VERSION,
            "source": self.source,
            "kernel": self.kernel,
            "grid": list(self.grid),
            "block": list(self.block),
            "args": dict(self.args),
            "reference": list(self.reference),
            "backend": self.backend,
            "accesses": self.accesses,
        }


def encode_link(state: KernelLink) -> str | None:
    """The link text of a kernel, or None when it is longer than LINK_MAX_CHARS."""
    raw = json.dumps(state.as_json(), separators=(",", ":"), ensure_ascii=False).encode()
    text = base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode().rstrip("=")
    return text if len(text) <= LINK_MAX_CHARS else None


def _dims(value, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not 1 <= len(value) <= 3:
        raise LinkError(f"its {what} is not 1 to 3 numbers")
    if not all(type(v) is int and 1 <= v <= MAX_DIM for v in value):
        raise LinkError(f"its {what} has a value that is not a whole number from 1 to {MAX_DIM}")
    return tuple(value)


def _text(value, what: str, limit: int) -> str:
    if not isinstance(value, str):
        raise LinkError(f"its {what} is not text")
    if len(value) > limit:  # a character is at least a byte: refused before encoding it
        raise LinkError(f"its {what} is over {limit:,} bytes")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate (JSON's "\ud800"): no page, parser or browser takes it
        raise LinkError(f"its {what} is not valid Unicode text (a lone surrogate)") from None
    if size > limit:
        raise LinkError(f"its {what} is over {limit:,} bytes")
    return value


def _shown_name(name: str) -> str:
    """A field name from a link, quoted in a message: printable, encodable, short."""
    return as_text(name.encode("utf-8", "replace").decode("utf-8", "replace"), 40)


def decode_link(text) -> KernelLink:
    """The kernel a link's ``yk`` value carries; LinkError (one line) for anything else.

    Bounded before any work: the text's length and alphabet, the decompressed size (a small link
    cannot inflate into a large one), then every field's type, length and range.
    """
    if not isinstance(text, str) or not text:
        raise LinkError("it is empty")
    if len(text) > LINK_MAX_CHARS:
        raise LinkError(f"it is {len(text):,} characters; the limit is {LINK_MAX_CHARS:,}")
    if not _B64.fullmatch(text):
        raise LinkError("it is not a link this app made (characters outside urlsafe base64)")
    try:
        packed = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        inflater = zlib.decompressobj()
        raw = inflater.decompress(packed, LINK_MAX_BYTES)
        if inflater.unconsumed_tail:
            raise LinkError(f"it unpacks to more than {LINK_MAX_BYTES:,} bytes")
        if not inflater.eof:
            raise LinkError("it is cut short (copy the whole link)")
        data = json.loads(raw.decode("utf-8"))
    except LinkError:
        raise
    except (binascii.Error, zlib.error, UnicodeDecodeError, ValueError, RecursionError):
        raise LinkError("it is not a link this app made (it does not unpack)") from None
    if not isinstance(data, dict) or data.get("v") != LINK_VERSION:
        raise LinkError("it is not a link of this version of the app")
    unknown = set(data) - _FIELDS
    if unknown:
        raise LinkError(f"it has a field this app does not know ({_shown_name(sorted(unknown)[0])})")
    kernel = _text(data.get("kernel"), "kernel name", 100)
    if not kernel.isidentifier():
        raise LinkError("its kernel name is not a Python identifier")
    args = data.get("args")
    if not isinstance(args, dict) or len(args) > uspec.MAX_ARGS:
        raise LinkError(f"its arguments are not up to {uspec.MAX_ARGS} name: text pairs")
    for name, value in args.items():
        if len(name) > 100 or not name.isidentifier():
            raise LinkError("an argument's name is not a Python identifier")
        _text(value, f"argument {name}", uspec.MAX_FIELD_CHARS)
    reference = data.get("reference", [])
    if not isinstance(reference, list) or len(reference) > 1000:
        raise LinkError("its reference is not a list of lines")
    _text(
        "\n".join(r if isinstance(r, str) else "" for r in reference), "reference", uspec.MAX_REFERENCE_BYTES
    )
    if not all(isinstance(r, str) for r in reference):
        raise LinkError("its reference is not a list of lines")
    backend = data.get("backend", "auto")
    if backend not in BACKEND_CHOICES:
        raise LinkError(f"its backend is not one of {', '.join(BACKEND_CHOICES)}")
    accesses = data.get("accesses", False)
    if not isinstance(accesses, bool):
        raise LinkError("its accesses flag is not true or false")
    return KernelLink(
        source=_text(data.get("source"), "source", uspec.MAX_SOURCE_BYTES),
        kernel=kernel,
        grid=_dims(data.get("grid"), "grid"),
        block=_dims(data.get("block"), "block"),
        args=dict(args),
        reference=tuple(reference),
        backend=backend,
        accesses=accesses,
    )


def _trim(dims) -> tuple[int, ...]:
    dims = list(dims)
    while len(dims) > 1 and dims[-1] == 1:
        dims.pop()
    return tuple(int(d) for d in dims)


def link_of(cap: Capture) -> KernelLink:
    """The link state of a visitor's capture: the launch that made what the pages show."""
    launch = cap.launch
    backend = st.session_state.get("uk_backend")
    return KernelLink(
        source=launch["kernel_source"],
        kernel=launch["kernel_name"],
        grid=_trim(launch["grid"]),
        block=_trim(launch["block"]),
        args={k: str(v) for k, v in launch["params"].items()},
        reference=tuple(launch.get("reference") or ()),
        backend=backend if backend in BACKEND_CHOICES else launch["backend"],
        accesses=cap.accesses is not None,
    )


def fill_form(state: KernelLink) -> None:
    """Put a kernel into the Your kernel page's widgets (before they are drawn: a callback, or before
    the page runs)."""
    ss = st.session_state
    ss.uk_source = state.source
    ss.uk_kernel = state.kernel
    ss.uk_mode = GRID_MODE
    ss.uk_grid = ",".join(str(g) for g in state.grid)
    ss.uk_block = ",".join(str(b) for b in state.block)
    ss.uk_reference = "\n".join(state.reference)
    ss.uk_backend = state.backend
    ss.uk_accesses = state.accesses
    for name, text in state.args.items():
        ss[f"uk_arg_{name}"] = text


def restore_form() -> bool:
    """Back on Your kernel after other pages (Streamlit forgets the widgets of a page left): fill
    the form with the visitor's kernel that is shown, if any; whether it did."""
    cap = visitor_capture()
    if cap is None:
        return False
    fill_form(link_of(cap))
    return True


# -- the current kernel -------------------------------------------------------------------------


def visitor_capture() -> Capture | None:
    """The session's capture when it is a visitor's kernel, whatever is pending."""
    cap = st.session_state.get("capture")
    return cap if cap is not None and cap.launch.get("user_kernel") else None


def visitor_is_current() -> bool:
    """Whether the current kernel is the visitor's: their capture is shown and no built-in run is
    pending or has just failed (then the sidebar shows the built-in kernel that was asked for)."""
    return (
        visitor_capture() is not None
        and not st.session_state.get("pending_run")
        and not st.session_state.get("run_error")
    )


def settle() -> None:
    """Once per script run, before the sidebar: make the link of a new visitor capture, and after a
    run a link or the Memory access page asked for, go to the page it came from."""
    cap = visitor_capture()
    if cap is not None and st.session_state.get("_yk_cap") is not cap:
        from visualizer.web.visitor_runs import keep_version

        keep_version(cap)  # a version Compare can offer
        st.session_state._yk_cap = cap
        st.session_state._yk_text = encode_link(link_of(cap))
        st.session_state.pop("uk_link_notice", None)  # said before this run; the run is on the page now
        back = st.session_state.pop("uk_link_page", None)
        if back and back != st.session_state.get("page"):
            _go(back)
    elif st.session_state.get("uk_error"):
        st.session_state.pop("uk_link_page", None)  # the run failed: stay where its error is
    go = st.session_state.pop("_yk_go", None)
    if go and go != st.session_state.get("page"):
        _go(go)


def _go(page: str) -> None:
    """Show ``page`` now (from the script, not a callback: st.switch_page reruns on it); a page the
    app does not have (a link's ``page`` is hostile text) is ignored."""
    if page not in (st.session_state.get("_page_keys") or ()):
        return
    st.session_state.page = page
    st.switch_page(f"web/pages/{page}.py")


def _write_link(page: str | None) -> None:
    """The address bar for a visitor's kernel: the page, the page's choices, and ``yk``."""
    text = st.session_state.get("_yk_text")
    for key in [k for k in st.query_params if k not in PAGE_QUERY_KEYS]:
        try:
            del st.query_params[key]  # the built-in kernel's name, backend and parameters
        except StreamlitAPIException:  # a widget bound to the URL owns this key (as in sync_query)
            pass
    if page and st.query_params.get("page") != page:
        st.query_params["page"] = page
    keep_page_keys(page)
    if text is None:
        if LINK_KEY in st.query_params:
            del st.query_params[LINK_KEY]
    elif st.query_params.get(LINK_KEY) != text:
        st.query_params[LINK_KEY] = text


def visitor_sidebar(page: str | None, controls: bool) -> bool:
    """Inside the sidebar: when the visitor's kernel is current, name it (and keep it in the link)
    instead of the built-in kernels' controls, and return True; otherwise return False."""
    if not visitor_is_current():
        # a link's kernel filled in but not run yet keeps its link on Your kernel; else it is gone
        keep = page == YOUR_PAGE and visitor_capture() is None
        if LINK_KEY in st.query_params and not keep:
            del st.query_params[LINK_KEY]
        return False
    if page == "lessons":  # a lesson launches its own kernels: its link is the lesson's
        if LINK_KEY in st.query_params:
            del st.query_params[LINK_KEY]
        return False
    _write_link(page)
    st.session_state.unrun_config = None  # the sidebar shows no built-in choice that has not run
    cap = visitor_capture()
    launch = cap.launch
    st.markdown("**Kernel:** " + as_text(launch["kernel"], 120))
    st.caption(
        f"grid {dims_text(launch['grid'])} × block {dims_text(launch['block'])} = "
        f"{int(launch['threads']):,} threads"
    )
    if controls:
        st.page_link(
            "web/pages/your_kernel.py", label="Edit and run it on Your kernel", icon=":material/code:"
        )
        st.button(
            "Use a built-in kernel instead",
            key="sidebar_builtin",
            on_click=_back_to_builtin,
            use_container_width=True,
            help="Runs the sidebar's built-in kernel again; your kernel stays on the Your kernel page.",
        )
    st.markdown(backend_badge(cap))
    shown = ", ".join(f"{k}={v}" for k, v in launch["params"].items())
    st.caption(as_text(f"showing: {launch['kernel']} ({shown})", limit=600))
    st.caption(link_caption(cap))
    return True


def link_caption(cap: Capture) -> str:
    """What the address bar's link carries for this kernel, said truthfully."""
    if st.session_state.get("_yk_text") is None:
        return (
            f"Your kernel is too big for a link (over {LINK_MAX_CHARS:,} characters packed): share its "
            "source file instead."
        )
    uploads = link_of(cap).uploads
    note = (
        " Uploaded files cannot travel in a link: whoever opens it uploads "
        + as_text(", ".join(link_of(cap).args[n].strip()[5:] for n in uploads))
        + " again."
        if uploads
        else ""
    )
    return (
        "The address bar's link carries this kernel (source, launch, arguments): opening it fills the "
        "Your kernel page, and runs it only where running code is allowed." + note
    )


def _back_to_builtin() -> None:
    st.session_state.pending_run = True  # the sidebar runs its built-in configuration (cached if seen)
    st.session_state.run_error = None


# -- opening a link -------------------------------------------------------------------------------


def take_kernel_link() -> None:
    """Call once per script run before navigation: a first visit's ``?yk=`` link fills the Your kernel
    page; it runs there only if this visitor may run code, then the page the link named is shown."""
    if st.session_state.get("_yk_taken"):
        return
    st.session_state._yk_taken = True
    raw = st.query_params.get(LINK_KEY)
    if raw is None:
        return
    try:
        state = decode_link(raw)
    except LinkError as exc:
        del st.query_params[LINK_KEY]
        st.session_state.uk_link_notice = ("error", as_text(f"The link's kernel was not loaded: {exc}."))
        st.session_state.page = YOUR_PAGE
        return
    fill_form(state)
    asked = st.query_params.get("page")
    st.session_state.page = YOUR_PAGE
    allowed, why = user_code_allowed(visitor_has_key())
    if state.uploads:
        files = ", ".join(state.args[n].strip()[5:] for n in state.uploads)
        st.session_state.uk_link_notice = (
            "info",
            as_text(
                f"This link carries a kernel ({state.kernel}); its arguments name uploaded files, which "
                f"cannot travel in a link: upload {files} below, then press Run your kernel."
            ),
        )
    elif allowed:
        st.session_state.uk_link_run = True
        if asked and asked != YOUR_PAGE:
            st.session_state.uk_link_page = asked
        st.session_state.uk_link_notice = ("info", as_text(f"This link's kernel ({state.kernel}) was run."))
    else:
        st.session_state.uk_link_notice = (
            "info",
            as_text(f"This link carries a kernel ({state.kernel}): it is filled in below, not run, because")
            + " running your own code is off in this browser session (why: below).",
        )


def show_link_notice() -> None:
    """On the Your kernel page: what became of the link's kernel (one line)."""
    notice = st.session_state.get("uk_link_notice")
    if notice:
        kind, text = notice
        (st.error if kind == "error" else st.info)(text, icon=":material/link:")


def link_run_requested() -> bool:
    """Whether a link (or the Memory access page's offer) asked Your kernel to run its form now."""
    return bool(st.session_state.pop("uk_link_run", False))


def recorded_on(cap: Capture) -> str:
    """Where Memory access's "record" runs a visitor's kernel again: where it ran (on a GPU its
    sampled warps record their own accesses; on the simulator every thread's are recorded)."""
    return "gpu" if cap.launch.get("backend") == "gpu" else "sim"


def record_accesses(back: str = "memory_access") -> None:
    """Button callback (Memory access, Shared memory): the current visitor kernel again, recording its
    accesses on the backend it ran on (``recorded_on``): on Your kernel, run there if this visitor may
    run code, then back to page ``back``."""
    cap = visitor_capture()
    if cap is None:
        return
    state = link_of(cap)
    fill_form(KernelLink(**{**state.__dict__, "backend": recorded_on(cap), "accesses": True}))
    st.session_state._yk_go = YOUR_PAGE  # settle() goes there: a callback cannot switch pages
    st.session_state.uk_link_notice = None
    if user_code_allowed(visitor_has_key())[0]:
        st.session_state.uk_link_run = True
        st.session_state.uk_link_page = back


# -- uploads kept for the session ----------------------------------------------------------------


@dataclass(frozen=True)
class KeptUpload:
    """An uploaded .npy file kept in the session (the uploader forgets it when the page is left)."""

    name: str
    data: bytes

    def getvalue(self) -> bytes:
        return self.data


def kept_uploads(fresh) -> tuple[list[KeptUpload], str | None]:
    """The files in the uploader now, plus those kept from before in this session (a name uploaded
    again is the new file), within the session's budget (web/uploads.py: SESSION_UPLOAD_FILES files,
    SESSION_UPLOAD_BYTES in all); and one line when the files in the uploader alone are over it (they
    are then neither used nor kept). Kept files make room for new ones, the oldest first. Session
    state only: the bytes go when the session ends, never into a cache shared beyond it."""
    store: dict = st.session_state.setdefault("uk_kept_uploads", {})
    now = {f.name: f.getvalue() for f in fresh or []}
    problem = over_budget([len(d) for d in now.values()])
    if problem is not None:
        return [KeptUpload(n, d) for n, d in store.items()], as_text(
            f"Your uploads were not used: {problem}."
        )
    for name, data in now.items():
        store.pop(name, None)
        store[name] = data
    while store and over_budget([len(d) for d in store.values()]) is not None:
        store.pop(next(iter(store)))  # the oldest kept file; those in the uploader fit (checked above)
    return [KeptUpload(n, d) for n, d in store.items()], None


def show_kept_uploads(fresh) -> None:
    """Name the uploads kept from before (not in the uploader box), with a way to forget them."""
    store = st.session_state.get("uk_kept_uploads") or {}
    now = {f.name for f in fresh or []}
    older = [n for n in store if n not in now]
    if older:
        c1, c2 = st.columns([3, 1], vertical_alignment="center")
        c1.caption(
            as_text(
                "kept from before in this session: "
                + ", ".join(f"{n} ({len(store[n]) / 1024:,.1f} KiB)" for n in older)
            )
        )
        c2.button("Forget", key="uk_forget_uploads", on_click=_forget_uploads, help="drop the kept uploads")


def _forget_uploads() -> None:
    st.session_state.uk_kept_uploads = {}
