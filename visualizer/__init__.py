"""Interactive GPU execution visualizer. Layers, each importing only those below it:
specs -> analysis -> engine -> figures -> web / tools (see ARCHITECTURE.md).

For notebooks: ``from visualizer import capture`` (tools/notebook.py), imported on first use so that
``import visualizer`` stays light.

The device code is the package ``visualizer.kernels``. The wheel installs it as visualizer/kernels/;
a source checkout keeps it in the repository's top-level kernels/ folder, registered here under the
same name, so every import reads ``visualizer.kernels`` in both layouts and no generic top-level
``kernels`` package is ever installed.
"""

import importlib.util as _util
import sys as _sys
from pathlib import Path as _Path

__version__ = "0.1.0"  # the one place: pyproject.toml reads it (setuptools dynamic version)
__all__ = ["DATA_DIR", "KERNELS_DIR", "__version__", "capture", "kernel_source_file"]

_HERE = _Path(__file__).resolve().parent
_INSTALLED = _HERE / "kernels" / "__init__.py"
# files an installed wheel carries that a checkout keeps elsewhere (setup.py: Streamlit's settings, timings)
DATA_DIR = _HERE / "_data"
# the folder holding the kernels' sources (some pages read them as text)
KERNELS_DIR = _INSTALLED.parent if _INSTALLED.is_file() else _HERE.parent / "kernels"

if not _INSTALLED.is_file() and "visualizer.kernels" not in _sys.modules:
    _spec = _util.spec_from_file_location(
        "visualizer.kernels", KERNELS_DIR / "__init__.py", submodule_search_locations=[str(KERNELS_DIR)]
    )
    _module = _util.module_from_spec(_spec)
    _sys.modules["visualizer.kernels"] = _module
    _spec.loader.exec_module(_module)
    kernels = _module  # as the import system sets a subpackage on its parent


def kernel_source_file(module: str) -> _Path:
    """The source file of a module of the device code, e.g. ``visualizer.kernels.matmul``, in either layout."""
    return KERNELS_DIR.joinpath(*module.removeprefix("visualizer.kernels.").split(".")).with_suffix(".py")


def __getattr__(name: str):
    if name == "capture":
        from visualizer.tools.notebook import capture

        return capture
    raise AttributeError(f"module 'visualizer' has no attribute {name!r}")
