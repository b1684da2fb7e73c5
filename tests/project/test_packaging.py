"""What the wheel needs from the source tree, checked in the checkout (.ci/wheel builds and runs the wheel):
the device code under the project's own name, the Streamlit settings passed from any directory, one version."""

import importlib.util
import sys
import tomllib
from pathlib import Path

import visualizer
from visualizer.tools import serve

ROOT = Path(__file__).resolve().parents[2]


def test_device_code_is_visualizer_kernels_in_the_checkout():
    import visualizer.kernels.probes as probes

    assert Path(probes.__file__).resolve() == ROOT / "kernels" / "probes.py"
    assert visualizer.KERNELS_DIR == ROOT / "kernels"
    assert "kernels" not in sys.modules and "kernels.probes" not in sys.modules  # loaded once, one name
    assert visualizer.kernel_source_file("visualizer.kernels.matmul") == ROOT / "kernels" / "matmul.py"
    spec = importlib.util.find_spec("visualizer.kernels.examples.vector_add")  # the page's examples
    assert spec is not None and Path(spec.origin).resolve() == ROOT / "kernels" / "examples" / "vector_add.py"


def test_every_builtin_kernel_module_is_found_by_its_build_name():
    from visualizer.specs.catalog import KERNELS

    for spec in KERNELS.values():
        assert spec.build[0].startswith("visualizer.kernels."), spec.name
        assert visualizer.kernel_source_file(spec.build[0]).is_file(), spec.build


def test_serve_passes_the_apps_streamlit_settings_as_flags():
    """From any directory (an installed wheel has no .streamlit/ beside it) the projector theme holds."""
    settings = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    cmd = serve.streamlit_command("127.0.0.1", 8501)
    for name, value in settings["theme"].items():
        i = cmd.index(f"--theme.{name}")
        assert cmd[i + 1] == str(value)
    # the safety flags still win over the file (it says address = "localhost"; the command says the operator's)
    assert cmd[cmd.index("--server.address") + 1] == "127.0.0.1"
    assert cmd.count("--server.address") == 1


def test_the_version_has_one_place():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"] and pyproject["project"]["dynamic"] == ["version"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "visualizer.__version__"}
    assert visualizer.__version__.count(".") == 2


def _setup_kwargs(monkeypatch) -> dict:
    """What setup.py hands to setuptools.setup (its package list, found the way a build finds it), without
    building: setup() itself is replaced."""
    import runpy

    import setuptools

    got = {}
    monkeypatch.setattr(setuptools, "setup", lambda **kw: got.update(kw))
    monkeypatch.chdir(ROOT)  # find_packages looks in the working directory, as a build does
    runpy.run_path(str(ROOT / "setup.py"), run_name="__main__")
    return got


def test_the_wheel_leaves_the_maintainers_tools_out(monkeypatch):
    """devtools/ (ncu cross-checks, access-cost probes, the measured set's recorder...) runs from a checkout;
    neither the folder nor a module of the same name inside visualizer/ is in the wheel's packages."""
    kw = _setup_kwargs(monkeypatch)
    packages, where = kw["packages"], kw["package_dir"]
    assert "visualizer" in packages and "visualizer.tools" in packages and "visualizer.kernels" in packages
    assert all(p == "visualizer" or p.startswith("visualizer.") for p in packages), packages
    tools = {p.stem for p in (ROOT / "devtools").glob("*.py")} - {"__init__"}
    assert {"crosscheck", "access_cost", "ship_h200", "stock_suite"} <= tools
    shipped = set()
    for package in packages:
        top = next((k for k in sorted(where, key=len, reverse=True) if package.startswith(k)), None)
        folder = ROOT / (where[top] + package[len(top) :] if top else package).replace(".", "/")
        shipped |= {p.stem for p in folder.glob("*.py")}
    assert "cli" in shipped and "probes" in shipped  # visualizer/tools/ and kernels/ were read
    assert shipped & tools == set()
