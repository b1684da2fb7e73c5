"""``load(arr, i)`` / ``store(arr, i, x)``: element i of a C-contiguous array, counted flat.

Why: Numba indexes ``arr[r, c]`` with signed integers, so for a run-time r it emits "if r < 0:
r += shape" first. In an unrolled tile loop such as ``sK[8 * j + g, 8 * kk + t]`` (g, t from the
lane) every one of those selects is a separate address the compiler keeps in a register; a
FlashAttention tile loop then needs 250+ registers and spills. Written as ``load(sK, base + C)``
with ``base = g * row_width + t`` computed once and C a constant of the unrolled loop, each
access compiles to one instruction with C folded in as its immediate offset.

No bounds or sign checks: the caller guarantees 0 <= i < arr.size. On the simulator these are
plain element accesses at the equivalent multi-dimensional index.
"""

from visualizer.kernels.probes import SIMULATOR

if SIMULATOR:
    import numpy as np
    from numba import cuda

    @cuda.jit(device=True)
    def load(arr, i):
        return arr[np.unravel_index(i, arr.shape)]  # an element index, so the access recorder sees it

    @cuda.jit(device=True)
    def store(arr, i, x):
        arr[np.unravel_index(i, arr.shape)] = x

else:
    from numba.cuda import types as nbtypes
    from numba.cuda.extending import intrinsic

    @intrinsic
    def load(typingctx, arr, i):
        if not isinstance(arr, nbtypes.Array) or not isinstance(i, nbtypes.Integer):
            return None
        sig = arr.dtype(arr, i)

        def codegen(context, builder, sig, args):
            data = context.make_array(sig.args[0])(context, builder, args[0]).data
            return builder.load(builder.gep(data, [args[1]], inbounds=True))

        return sig, codegen

    @intrinsic
    def store(typingctx, arr, i, x):
        if not isinstance(arr, nbtypes.Array) or not isinstance(i, nbtypes.Integer):
            return None
        sig = nbtypes.void(arr, i, arr.dtype)

        def codegen(context, builder, sig, args):
            data = context.make_array(sig.args[0])(context, builder, args[0]).data
            value = context.cast(builder, args[2], sig.args[2], sig.args[0].dtype)
            builder.store(value, builder.gep(data, [args[1]], inbounds=True))
            return context.get_dummy_value()

        return sig, codegen
