"""int8 convolutions on x86 with AVX512_VNNI: uint8 activations, int8 weights, int32 accumulation, `vpdpbusd`.

`vpdpbusd acc, a, b` adds, to each of 16 int32 lanes, the four products of the lane's uint8 quad in `a` with the
int8 quad in `b`: four multiply-adds per lane and instruction, twice bf16's `vdpbf16ps`. The sum of four
products is at most 4 x 255 x 127 and the instruction does not saturate, so an int32 conv built from it is exact.

The layout mirrors kokoro_tvm.compiler.bf16 with the input channels taken in fours:

- activations xq[n, c/4, t, 4] uint8 (the four channels of a quad side by side: 16 time steps of one quad are
  64 contiguous bytes, one vector operand);
- weights wq[o, c/4, k, 4] int8 (one quad is 32 bits: broadcast to every lane);
- out[n, o, t] = sum_{c4, k, p} i32(xq[n, c4, t + k d, p]) * i32(wq[o, c4, k, p]) in int32.

This is the kernel of the `int8_channel` plan that kokoro_tvm.studies.precision measures (activation scales per
input channel folded into the weights, so one integer reduction suffices); no build uses it yet: the
per-call range and folding passes are not written (NOTES/performance.md). `python -m
kokoro_tvm.studies.benchmark --conv-peak` times it against PyTorch's int8 conv (FBGEMM).

As with bf16, TVM 0.27 cannot emit the instruction: a few lines of LLVM IR define `kokoro_dpbusd{16,8}`, taking
the operands as int32 vectors by value, and every PrimFunc named after `int8_conv1d` imports them
(kokoro_tvm.compiler.packed.ImportLLVMKernels); the CPU Contraction rule tensorizes the innermost (16 columns x
one quad) step with `kokoro_dpbusd_16x4`.
"""

from __future__ import annotations

from tvm import te
from tvm.script import tirx as T

from kokoro_tvm.compiler import packed

INTRIN = "kokoro_dpbusd_{lanes}x4"
LANES = 16  # int32 lanes of one zmm register
EXTERN = "kokoro_dpbusd{lanes}"


def _llvm_kernel(lanes: int) -> str:
    """`kokoro_dpbusd{lanes}`: acc += uint8 quad . int8 quad, per lane (vpdpbusd on a zmm or ymm register)."""
    v, intrinsic = f"<{lanes} x i32>", f"@llvm.x86.avx512.vpdpbusd.{32 * lanes}"
    return f"""
define internal {v} @{EXTERN.format(lanes=lanes)}({v} %acc, {v} %a, {v} %b) alwaysinline {{
  %r = call {v} {intrinsic}({v} %acc, {v} %a, {v} %b)
  ret {v} %r
}}
declare {v} {intrinsic}({v}, {v}, {v})
"""


LLVM_KERNEL = _llvm_kernel(LANES) + _llvm_kernel(LANES // 2)


def host_supports_int8() -> bool:
    """This machine can build and run the int8 kernel for itself (AVX512_VNNI in its LLVM CPU model and flags)."""
    return packed.host_supports("avx512vnni", "avx512_vnni")


def _dot(lanes: int):
    """The (`lanes` columns x 1 channel quad) step: its description and its vpdpbusd implementation."""
    quads, words, extern = f"uint8x{4 * lanes}", f"int32x{lanes}", EXTERN.format(lanes=lanes)

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (lanes, 4), "uint8", offset_factor=1)
        B = T.match_buffer(b, (4,), "int8", offset_factor=1)
        C = T.match_buffer(c, (lanes,), "int32", offset_factor=1, scope="local")
        with T.sblock("root"):
            T.reads(C[0:lanes], A[0:lanes, 0:4], B[0:4])
            T.writes(C[0:lanes])
            for i, k in T.grid(lanes, 4):
                with T.sblock("update"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    C[vi] = C[vi] + T.Cast("int32", A[vi, vk]) * T.Cast("int32", B[vk])

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (lanes, 4), "uint8", offset_factor=1)
        B = T.match_buffer(b, (4,), "int8", offset_factor=1)
        C = T.match_buffer(c, (lanes,), "int32", offset_factor=1, scope="local")
        with T.sblock("root"):
            T.reads(C[0:lanes], A[0:lanes, 0:4], B[0:4])
            T.writes(C[0:lanes])
            # the operands as expressions, not named values: a name is a local buffer, which LowerTVMBuiltin
            # allocates from the workspace pool per tile
            C[T.ramp(0, 1, lanes)] = T.call_pure_extern(
                words,
                extern,
                C.vload([0], words),
                T.reinterpret(words, A.vload([0, 0], quads)),  # lanes x (channels c .. c + 3)
                T.broadcast(T.reinterpret("int32", B.vload([0], "int8x4")), lanes),  # one quad, every lane
            )

    return desc, impl


def register_intrinsic(lanes: int = LANES) -> str:
    """Register the (`lanes` x 4) vpdpbusd step (16: zmm, 8: ymm) with TVM once per process; returns its name."""
    return packed.register_step(INTRIN.format(lanes=lanes), lambda: _dot(lanes))


def conv(xq: te.Tensor, wq: te.Tensor, dilation: int) -> te.Tensor:
    """out[n, o, t] = sum i32(xq[n, c4, t + k d, p]) * i32(wq[o, c4, k, p]), int32 (see the module)."""
    return packed.packed_conv(xq, wq, dilation, lambda x, w: x.astype("int32") * w.astype("int32"), "int8_conv1d")
