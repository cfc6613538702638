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
(kokoro_tvm.compiler.passes.ImportLLVMKernels); the CPU Contraction rule tensorizes the innermost (16 columns x
one quad) step with `kokoro_dpbusd_16x4`.
"""

from __future__ import annotations

import tvm
from tvm import te
from tvm.script import tirx as T

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


def target_has_vnni(target) -> bool:
    """True if the LLVM target's CPU has AVX512_VNNI (vpdpbusd on zmm registers)."""
    target = target if isinstance(target, tvm.target.Target) else tvm.target.Target(target)
    if target.kind.name != "llvm":
        return False
    from tvm.target import codegen

    return bool(codegen.target_has_features("avx512vnni", target))


def host_supports_int8() -> bool:
    """This machine can build and run the int8 kernel for itself (its LLVM CPU model and its flags agree)."""
    from pathlib import Path

    from kokoro_tvm.compiler.targets import host_target

    cpuinfo = Path("/proc/cpuinfo")
    flags = cpuinfo.read_text().split() if cpuinfo.exists() else None
    return target_has_vnni(host_target()) and (flags is None or "avx512_vnni" in flags)


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
            activations = T.reinterpret(words, A.vload([0, 0], quads))  # lanes x (channels c .. c + 3)
            weight = T.broadcast(T.reinterpret("int32", B.vload([0], "int8x4")), lanes)  # one quad, every lane
            C[T.ramp(0, 1, lanes)] = T.call_pure_extern(words, extern, C.vload([0], words), activations, weight)

    return desc, impl


def register_intrinsic(lanes: int = LANES) -> str:
    """Register the (`lanes` x 4) vpdpbusd step (16: zmm, 8: ymm) with TVM once per process; returns its name."""
    from tvm import s_tir

    name = INTRIN.format(lanes=lanes)
    if s_tir.TensorIntrin.get(name, allow_missing=True) is None:
        s_tir.TensorIntrin.register(name, *_dot(lanes))
    return name


def conv(xq: te.Tensor, wq: te.Tensor, dilation: int) -> te.Tensor:
    """out[n, o, t] = sum i32(xq[n, c4, t + k d, p]) * i32(wq[o, c4, k, p]), int32 (see the module)."""
    n, c4_extent, padded, _ = xq.shape
    o, _, k_extent, _ = wq.shape
    length = padded - dilation * (k_extent - 1)
    c4 = te.reduce_axis((0, c4_extent), "c4")
    k = te.reduce_axis((0, k_extent), "k")
    p = te.reduce_axis((0, 4), "p")
    return te.compute(
        (n, o, length),
        lambda b, a, t: te.sum(
            xq[b, c4, t + k * dilation, p].astype("int32") * wq[a, c4, k, p].astype("int32"), axis=[c4, k, p]
        ),
        name="int8_conv1d",
    )
