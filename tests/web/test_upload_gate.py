"""The server's upload store (Streamlit's, the one its upload route holds) with the budget put on it:
a session that may not run code uploads nothing, even by a hand-made PUT; one that may holds at most
its budget; a session's files and its permission go when it ends."""

import pytest
from starlette.exceptions import HTTPException
from streamlit.runtime.memory_uploaded_file_manager import MemoryUploadedFileManager
from streamlit.runtime.uploaded_file_manager import UploadedFileRec

from visualizer.web import upload_gate
from visualizer.web.uploads import SESSION_UPLOAD_BYTES, SESSION_UPLOAD_FILES


def _file(file_id: str, size: int) -> UploadedFileRec:
    return UploadedFileRec(
        file_id=file_id, name=f"{file_id}.npy", type="application/octet-stream", data=b"x" * size
    )


@pytest.fixture
def store():
    manager = MemoryUploadedFileManager("/_stcore/upload_file")
    assert upload_gate.install(manager) and upload_gate.install(manager)  # in place, once
    yield manager
    for session in ("keyless", "keyed"):
        upload_gate.forbid(session)


def test_a_session_that_may_not_run_code_uploads_nothing(store):
    with pytest.raises(HTTPException) as refused:
        store.add_file("keyless", _file("f", 10))
    assert refused.value.status_code == 403
    assert store.get_files("keyless", ["f"]) == []


def test_a_session_holds_at_most_its_budget_and_frees_it_when_it_ends(store):
    upload_gate.allow("keyed")
    for i in range(SESSION_UPLOAD_FILES):
        store.add_file("keyed", _file(f"f{i}", 1))
    with pytest.raises(HTTPException) as refused:
        store.add_file("keyed", _file("one-more", 1))
    assert refused.value.status_code == 413
    store.add_file("keyed", _file("f0", 2))  # the same file again replaces it
    store.remove_file("keyed", "f1")
    with pytest.raises(HTTPException):
        store.add_file("keyed", _file("big", SESSION_UPLOAD_BYTES))  # bytes: over with what is held
    store.remove_session_files("keyed")  # the session ends
    assert store.get_files("keyed", ["f0"]) == []
    with pytest.raises(HTTPException) as refused:
        store.add_file("keyed", _file("after", 1))  # its permission went with it
    assert refused.value.status_code == 403


def test_a_store_that_is_not_streamlits_in_memory_one_is_left_alone():
    assert upload_gate.install(object()) is False
