"""Warp-level fp32 matrix multiply on tensor cores (3xTF32) and the quad reductions around it.

``mma_fp32(acc, n, a_hi, a_lo, b0, b1, scratch, warp, lane)`` adds A (16 x 8) times B (8 x 8) to
the 16 x 8 accumulator tile ``acc[n, 0..3]`` that the 32 lanes of a warp hold together, in the
register layout of PTX ``mma.sync.aligned.m16n8k8`` (g = lane // 4, t = lane % 4):

* A, 4 values a lane:  a[0] = A[g][t], a[1] = A[g+8][t], a[2] = A[g][t+4], a[3] = A[g+8][t+4]
* B, 2 values a lane:  b0 = B[t][g], b1 = B[t+4][g]
* C, 4 values a lane:  c[0] = C[g][2t], c[1] = C[g][2t+1], c[2] = C[g+8][2t], c[3] = C[g+8][2t+1]

On the GPU this is three ``mma.sync ... .tf32`` instructions ("3xTF32", as CUTLASS's fast fp32 and
torch's memory-efficient attention do): TF32 keeps 10 of fp32's 23 mantissa bits, so each operand x
is split into x_hi = x with its low 13 mantissa bits cleared and x_lo = x - x_hi (exact), and
A B ~ A_lo B_hi + A_hi B_lo + A_hi B_hi (the dropped A_lo B_lo is ~2^-22 of the product): fp32-like
accuracy at tensor-core speed. A is passed already split (a_hi, a_lo: one split serves a whole row
of B tiles); B is split here.

The simulator has no warps and no tensor cores: there the lanes of a warp put their fragments in
``scratch`` (shared memory, ``cuda.shared.array(scratch_shape(warps), float32)``), lane 0 multiplies
the warp's tiles in plain fp32 and each lane reads its four results back, between two block
barriers. Every thread of the block must therefore call these helpers together (uniform control
flow), which the kernels do anyway.
On the GPU ``scratch`` is unused (declare it with ``scratch_shape``: one float there).

``quad_max(x, ...)`` / ``quad_sum(x, ...)``: x combined over the 4 lanes of a quad (the lanes that
share rows g and g+8 of a C tile): warp shuffles on the GPU, the scratch on the simulator.
"""

from numba import cuda

from visualizer.kernels.probes import SIMULATOR


def scratch_shape(warps: int) -> tuple[int, ...]:
    """Shape of the shared scratch a block declares for these helpers (only the simulator uses it)."""
    return (warps, 32, 10) if SIMULATOR else (1,)


if SIMULATOR:
    import numpy as np

    @cuda.jit(device=True)
    def split_tf32(x):
        """(x_hi, x_lo): x_hi keeps TF32's 10 mantissa bits, x_lo = x - x_hi."""
        hi = (np.array([x], dtype=np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)[0]
        return hi, np.float32(x) - hi

    # where A[row][k], B[k][col] and D's four values of each lane sit in a warp's (lane, slot) scratch
    _ROW, _K = np.meshgrid(np.arange(16), np.arange(8), indexing="ij")
    _A_AT = ((_ROW % 8) * 4 + _K % 4, _ROW // 8 + 2 * (_K // 4))
    _K8, _COL = np.meshgrid(np.arange(8), np.arange(8), indexing="ij")
    _B_AT = (_COL * 4 + _K8 % 4, 4 + _K8 // 4)
    _LANE, _E = np.meshgrid(np.arange(32), np.arange(4), indexing="ij")
    _D_AT = (_LANE // 4 + 8 * (_E // 2), 2 * (_LANE % 4) + _E % 2)

    @cuda.jit(device=True)
    def mma_fp32(acc, n, a_hi, a_lo, b0, b1, scratch, warp, lane):
        """acc[n] += A B for this warp, no tensor cores: the lanes write their fragments to shared
        memory, lane 0 multiplies the whole 16 x 8 x 8 tile in fp32 (one numpy product instead of
        32 lanes x 32 Python multiply-adds), every lane reads its four results back."""
        for e in range(4):
            scratch[warp, lane, e] = a_hi[e] + a_lo[e]
        scratch[warp, lane, 4] = b0
        scratch[warp, lane, 5] = b1
        cuda.syncthreads()
        if lane == 0:
            frags = np.asarray(scratch[warp, :, 0:6])
            product = frags[_A_AT] @ frags[_B_AT]  # (16 x 8) @ (8 x 8), float32
            scratch[warp, :, 6:10] = product[_D_AT]  # (the access recorder leaves this array out)
        cuda.syncthreads()
        for e in range(4):
            acc[n, e] += scratch[warp, lane, 6 + e]

    @cuda.jit(device=True)
    def _quad(x, scratch, warp, lane, take_max):
        scratch[warp, lane, 0] = x
        cuda.syncthreads()
        first = lane - lane % 4
        y = scratch[warp, first, 0]
        for i in range(1, 4):
            z = scratch[warp, first + i, 0]
            y = max(y, z) if take_max else y + z
        cuda.syncthreads()
        return y

    @cuda.jit(device=True)
    def quad_max(x, scratch, warp, lane):
        return _quad(x, scratch, warp, lane, True)

    @cuda.jit(device=True)
    def quad_sum(x, scratch, warp, lane):
        return _quad(x, scratch, warp, lane, False)

else:
    from llvmlite import ir
    from numba.cuda import types as nbtypes
    from numba.cuda.extending import intrinsic

    _F32 = ir.FloatType()
    _I32 = ir.IntType(32)

    @intrinsic
    def _split_tf32(typingctx, x):
        """(x_hi, x_lo) in plain LLVM: clear the low 13 mantissa bits, subtract."""
        sig = nbtypes.UniTuple(nbtypes.float32, 2)(nbtypes.float32)

        def codegen(context, builder, sig, args):
            bits = builder.and_(builder.bitcast(args[0], _I32), ir.Constant(_I32, 0xFFFFE000))
            hi = builder.bitcast(bits, _F32)
            lo = builder.fsub(args[0], hi)
            return context.make_tuple(builder, sig.return_type, [hi, lo])

        return sig, codegen

    @intrinsic
    def _mma_tf32(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        """One mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32: (d0, d1, d2, d3)."""
        f = nbtypes.float32
        sig = nbtypes.UniTuple(f, 4)(f, f, f, f, f, f, f, f, f, f)

        def codegen(context, builder, sig, args):
            ab = [builder.bitcast(x, _I32) for x in args[:6]]  # TF32 operands travel as .b32
            fty = ir.FunctionType(ir.LiteralStructType([_F32] * 4), [_I32] * 6 + [_F32] * 4)
            asm = ir.InlineAsm(
                fty,
                "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                "{$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};",
                "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f,~{memory}",
                side_effect=True,
            )
            d = builder.call(asm, ab + list(args[6:]))
            return context.make_tuple(
                builder, sig.return_type, [builder.extract_value(d, i) for i in range(4)]
            )

        return sig, codegen

    @cuda.jit(device=True, inline="always")
    def split_tf32(x):
        return _split_tf32(x)

    @cuda.jit(device=True, inline="always")
    def mma_fp32(acc, n, a_hi, a_lo, b0, b1, scratch, warp, lane):
        """acc[n] += A B: small products first, then the big one (3xTF32)."""
        bh0, bl0 = _split_tf32(b0)
        bh1, bl1 = _split_tf32(b1)
        d = _mma_tf32(
            a_lo[0], a_lo[1], a_lo[2], a_lo[3], bh0, bh1, acc[n, 0], acc[n, 1], acc[n, 2], acc[n, 3]
        )
        d = _mma_tf32(a_hi[0], a_hi[1], a_hi[2], a_hi[3], bl0, bl1, d[0], d[1], d[2], d[3])
        d = _mma_tf32(a_hi[0], a_hi[1], a_hi[2], a_hi[3], bh0, bh1, d[0], d[1], d[2], d[3])
        acc[n, 0] = d[0]
        acc[n, 1] = d[1]
        acc[n, 2] = d[2]
        acc[n, 3] = d[3]

    @cuda.jit(device=True, inline="always")
    def quad_max(x, scratch, warp, lane):
        x = max(x, cuda.shfl_xor_sync(0xFFFFFFFF, x, 1))
        return max(x, cuda.shfl_xor_sync(0xFFFFFFFF, x, 2))

    @cuda.jit(device=True, inline="always")
    def quad_sum(x, scratch, warp, lane):
        x += cuda.shfl_xor_sync(0xFFFFFFFF, x, 1)
        return x + cuda.shfl_xor_sync(0xFFFFFFFF, x, 2)
