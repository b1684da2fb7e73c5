"""Interactive GPU execution visualizer: host side (runner, trace tables, CLI, app)."""
