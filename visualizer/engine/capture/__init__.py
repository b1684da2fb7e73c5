"""One capture: the typed request, the backend, the two front ends (a built-in kernel, a visitor's
source), the capture sequence they share, its timing and the builds."""
