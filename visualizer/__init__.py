"""Interactive GPU execution visualizer. Layers, each importing only those below it:
specs -> analysis -> engine -> figures -> web / tools (see ARCHITECTURE.md)."""
