"""The upload budget of a browser session: how many ``.npy`` files and bytes a session may hold on the
server, and which sessions may upload at all (those that may run visitor code: nothing else reads an
upload). No Streamlit here: ``serve`` reads the size for its flags, and the Streamlit side
(web/current_kernel.py, web/upload_gate.py) applies it.
"""

from __future__ import annotations

from visualizer.specs import source as uspec

# One file's limit, in Streamlit's unit (server.maxUploadSize, MB = MiB there): a file may take a
# session's whole budget, never more. A launch's arrays may be up to MAX_ARRAY_BYTES (1 GiB) when
# made on the worker (rand/zeros...); the ones held in server memory for a visitor are bounded here.
UPLOAD_MAX_MB = 256
SESSION_UPLOAD_BYTES = UPLOAD_MAX_MB << 20  # every file a session holds, in all
SESSION_UPLOAD_FILES = uspec.MAX_ARGS  # no launch takes more arguments


def over_budget(sizes: list[int]) -> str | None:
    """Why files of these sizes are over a session's budget (one line), or None."""
    total = sum(sizes)
    if len(sizes) > SESSION_UPLOAD_FILES:
        return (
            f"{len(sizes)} uploaded files; a session holds at most {SESSION_UPLOAD_FILES} "
            "(remove some with the uploader's x, or Forget the kept ones)"
        )
    if total > SESSION_UPLOAD_BYTES:
        return (
            f"the uploaded files take {total / 2**20:,.1f} MiB; a session holds at most "
            f"{SESSION_UPLOAD_BYTES >> 20} MiB (remove some with the uploader's x, or Forget the kept ones)"
        )
    return None
