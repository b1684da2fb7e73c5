"""Device code only: textbook CUDA kernels written with Numba, plus the probes they call."""
