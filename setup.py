"""The wheel's layout; everything else is in pyproject.toml.

The repository keeps its device code in the top-level ``kernels/`` folder; the wheel installs it inside
the project's namespace, as ``visualizer.kernels`` (the name every import uses, visualizer/__init__.py),
so no generic top-level ``kernels`` package lands in site-packages. Two files the app reads from the
checkout ship under ``visualizer/_data/``: Streamlit's settings (``serve`` passes them as flags) and the
FlashAttention page's H200 timings. The measured set the app shows beside a simulated run ships from
``visualizer/data/h200/`` as package data.
"""

from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
SHIPPED = {  # file in the checkout -> its name under visualizer/_data/ in the wheel
    ".streamlit/config.toml": "streamlit_config.toml",
    "docs/attention_timings_h200.json": "attention_timings_h200.json",
}


class BuildWithData(build_py):
    def run(self):
        super().run()
        out = Path(self.build_lib) / "visualizer" / "_data"
        out.mkdir(parents=True, exist_ok=True)
        for source, name in SHIPPED.items():
            self.copy_file(str(HERE / source), str(out / name))


packages = find_packages(include=["visualizer", "visualizer.*"])
packages += ["visualizer." + p for p in find_packages(include=["kernels", "kernels.*"])]
packages += ["visualizer.kernels.examples"]  # sources the Your kernel page reads (no __init__.py)

setup(
    packages=packages,
    package_dir={"visualizer.kernels": "kernels"},
    # the examples the Your kernel page reads (and their .toml); the lessons' words (web/lessons*.toml); the
    # measured set (devtools/ship_h200.py, a maintainers' tool the wheel leaves out): index.json and one compact bundle per recorded launch
    package_data={
        "visualizer.kernels.examples": ["*.py", "*.toml"],
        "visualizer.web": ["*.toml"],
        "visualizer": ["data/h200/*.json", "data/h200/*/*.json", "data/h200/*/*.parquet"],
    },
    cmdclass={"build_py": BuildWithData},
)
