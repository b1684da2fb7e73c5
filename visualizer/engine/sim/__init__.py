"""The simulator: one install that patches numba's classes once (fastsim.py) and its listeners (access_record.py)."""
