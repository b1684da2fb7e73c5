"""The server's side of the upload budget: Streamlit's upload endpoint takes a file for any live
session (``PUT /_stcore/upload_file/SESSION/FILE``), whether or not its page shows an uploader, and
keeps it until the session ends. So hiding the uploader is not enough: the session's upload store
itself refuses a file from a session that may not run visitor code (403) and one past the session's
budget (413, web/uploads.py), and the store is freed when the session ends, as Streamlit frees it.

Installed by the app script on the running server's upload store (one object for the process, the
same the upload route holds), by giving it a subclass that checks first: a no-op where there is no
server (AppTest) or the store is not Streamlit's in-memory one.
"""

from __future__ import annotations

import threading

from streamlit.runtime.memory_uploaded_file_manager import MemoryUploadedFileManager

from visualizer.web.uploads import SESSION_UPLOAD_BYTES, SESSION_UPLOAD_FILES

_allowed: set[str] = set()  # sessions that may upload; each leaves when its session ends
_lock = threading.Lock()


class UploadRefused(Exception):
    """Raised into Streamlit's upload route, which answers it with its status (a Starlette
    HTTPException where Starlette is there)."""


def _refusal(status: int, detail: str) -> Exception:
    try:
        from starlette.exceptions import HTTPException
    except ImportError:  # pragma: no cover (Streamlit 1.67 serves through Starlette)
        return UploadRefused(detail)
    return HTTPException(status_code=status, detail=detail)


class BudgetedUploads(MemoryUploadedFileManager):
    """Streamlit's in-memory upload store, refusing what a session may not hold."""

    def add_file(self, session_id, file) -> None:
        with _lock:
            allowed = session_id in _allowed
        if not allowed:
            raise _refusal(403, "uploads are taken only from a session that may run its own code")
        with self._lock:
            held = {k: len(f.data) for k, f in self.file_storage.get(session_id, {}).items()}
        held.pop(file.file_id, None)  # the same file again replaces it
        if len(held) + 1 > SESSION_UPLOAD_FILES or sum(held.values()) + len(file.data) > SESSION_UPLOAD_BYTES:
            raise _refusal(413, "over this session's upload budget")
        super().add_file(session_id, file)

    def remove_session_files(self, session_id: str) -> None:
        super().remove_session_files(session_id)
        with _lock:
            _allowed.discard(session_id)


def install(manager=None) -> bool:
    """Put the budget on the server's upload store (``manager``, default the running server's);
    whether it is on."""
    if manager is None:
        try:
            from streamlit.runtime import Runtime

            if not Runtime.exists():
                return False
            manager = Runtime.instance().uploaded_file_mgr
        except Exception:  # noqa: BLE001 (no server: nothing to guard)
            return False
    if isinstance(manager, BudgetedUploads):
        return True
    if type(manager) is not MemoryUploadedFileManager:
        return False
    manager.__class__ = BudgetedUploads  # the route holds this object: it must change in place
    return True


def allow(session_id: str | None) -> None:
    """This session may upload (it may run code); until it ends."""
    if session_id:
        with _lock:
            _allowed.add(session_id)


def forbid(session_id: str | None) -> None:
    with _lock:
        _allowed.discard(session_id)


def current_session_id() -> str | None:
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    return ctx.session_id if ctx is not None else None
