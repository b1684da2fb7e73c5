"""Interactive GPU execution visualizer. Layers, each importing only those below it:
specs -> analysis -> engine -> figures -> web / tools (see ARCHITECTURE.md).

For notebooks: ``from visualizer import capture`` (tools/notebook.py), imported on first use so that
``import visualizer`` stays light."""

__all__ = ["capture"]


def __getattr__(name: str):
    if name == "capture":
        from visualizer.tools.notebook import capture

        return capture
    raise AttributeError(f"module 'visualizer' has no attribute {name!r}")
