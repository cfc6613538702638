"""bfloat16 convolutions on x86 with AVX512_BF16: bf16 operands, float32 accumulation, `vdpbf16ps`.

`vdpbf16ps acc, a, b` adds, to each of 16 float32 lanes, the products of the lane's two bf16 pairs: twice the
multiply-adds of an fp32 FMA per instruction. A conv1d out[o, t] = sum_{c, k} w[o, c, k] x[c, t + k d] maps
onto it with the input channels taken in pairs:

- activations packed as xq[n, c/2, t, 2] (the two channels of a pair side by side: 16 time steps of one pair
  are 32 contiguous bf16, one vector operand), zero padding included;
- weights packed as wq[o, c/2, k, 2] (one pair is 32 bits: broadcast to every lane);
- out[n, o, t] = sum_{c2, k, p} f32(xq[n, c2, t + k d, p]) * f32(wq[o, c2, k, p]) in float32.

bf16 is the upper half of a float32: packing rounds to nearest even, unpacking is a shift, so products are
exact in float32 and only the operand rounding (8 significant bits) differs from an fp32 conv.

TVM 0.27 cannot carry a `bfloat16` value to LLVM (its code generation crashes on a bf16 vector once the bf16
legalization passes ran), so the packed buffers are uint16 bit patterns and the instruction lives in a few lines
of LLVM IR that the kernel imports (`pragma_import_llvm`): `kokoro_dpbf16ps16(acc, a, b)` takes the operands as
int32 vectors (bf16 pairs), bitcasts them to bf16 and returns `vdpbf16ps(acc, a, b)`; LLVM inlines it. Values,
not pointers: an earlier version passed the operands' addresses, and the accumulator tile then stayed in memory
(a store after every vdpbf16ps, the input reloaded: 78 GFLOP/s where the fp32 kernel runs at 200). The tensor intrinsic
`kokoro_dpbf16ps_16x2` (16 lanes x one channel pair) is what the CPU Contraction rule tensorizes the kernel's
innermost loops with (kokoro_tvm.compiler.schedule.cpu); `kokoro_dpbf16ps_8x2` (`kokoro_dpbf16ps8`, a ymm
register) where a symbolic length is 8k steps and 16 columns do not divide it.

`passes.bf16_convolutions.Bf16Convolutions(select)` rewrites the float32 conv1d calls whose weight parameters
`select` accepts; which ones is the registry's `BF16_CONVOLUTIONS` (kokoro_tvm.components), set by a measured
error budget (kokoro_tvm.studies.precision). It runs before the weight-only work is lifted out of `main`, so the
weights are packed once at load, not per call; the conv-transpose upsamplers are made ordinary convs first
(PolyphaseConvTranspose) so that they can take part. A target without avx512bf16 is refused
before any rewrite (`require_bf16`): never an illegal instruction at run time.
"""

from __future__ import annotations

from tvm import relax, te, tirx
from tvm.script import tirx as T

from kokoro_tvm.compiler import amx, packed

# Bump when the bf16 rewrite or kernel changes what a bf16 build computes or how (part of bf16 artifacts' keys
# only: float32 and float64 artifacts stay valid). 2: operands passed by value (the tile stays in registers);
# 3: activations packed as uint32 words (vectorized), Snake in float32; 4: an 8-lane (ymm) step for convs over a
# symbolic length of 8k steps; 5: packed rows padded to whole vectors (the packing vectorizes).
KERNEL_VERSION = 5
INTRIN = "kokoro_dpbf16ps_{lanes}x2"
LANES = 16  # float32 lanes of one zmm register
HALF_LANES = 8  # one ymm register (AVX512_BF16 with AVX512VL): the column tile of a length that is 8k, not 16k
EXTERN = "kokoro_dpbf16ps{lanes}"


def _llvm_kernel(lanes: int) -> str:
    """`kokoro_dpbf16ps{lanes}`: acc += pairs . weight pair, per lane (vdpbf16ps on a zmm or ymm register)."""
    f, p, intrinsic = f"<{lanes} x float>", f"<{2 * lanes} x bfloat>", f"@llvm.x86.avx512bf16.dpbf16ps.{32 * lanes}"
    return f"""
define internal {f} @{EXTERN.format(lanes=lanes)}({f} %acc, <{lanes} x i32> %av, <{lanes} x i32> %bv) alwaysinline {{
  %ab = bitcast <{lanes} x i32> %av to {p}
  %bb = bitcast <{lanes} x i32> %bv to {p}
  %r = call {f} {intrinsic}({f} %acc, {p} %ab, {p} %bb)
  ret {f} %r
}}
declare {f} {intrinsic}({f}, {p}, {p})
"""


LLVM_KERNEL = _llvm_kernel(LANES) + _llvm_kernel(HALF_LANES)


class Bf16Unsupported(packed.PackedUnsupported):
    """A bf16 build for a target (or a run on a CPU) without AVX512_BF16."""


FEATURE = packed.PackedFeature("bf16", "avx512bf16", "avx512_bf16", "AVX512_BF16", "vdpbf16ps", "fp32", Bf16Unsupported)


def target_has_bf16(target) -> bool:
    """True if the LLVM target's CPU has AVX512_BF16 (vdpbf16ps)."""
    return packed.target_has_feature(target, FEATURE.llvm)


def host_supports_bf16() -> bool:
    """This machine can build and run bf16 kernels for itself (its LLVM CPU model and its flags agree)."""
    return packed.host_supports(FEATURE.llvm, FEATURE.flag)


def require_bf16(target) -> None:
    """Refuse (Bf16Unsupported, one line) a target without AVX512_BF16, and a host target on a CPU whose flags
    lack it (a virtual machine can hide a feature its CPU model has)."""
    packed.require(target, FEATURE)


def to_float(bits):
    """A bf16 bit pattern (uint16) as the float32 it stands for."""
    return tirx.reinterpret("float32", tirx.shift_left(bits.astype("uint32"), tirx.const(16, "uint32")))


def to_bf16_bits(value):
    """float32 -> the bf16 bit pattern nearest to it (ties to even), as uint16."""
    bits = tirx.reinterpret("uint32", value)
    lsb = tirx.bitwise_and(tirx.shift_right(bits, tirx.const(16, "uint32")), tirx.const(1, "uint32"))
    rounded = bits + tirx.const(0x7FFF, "uint32") + lsb
    return tirx.shift_right(rounded, tirx.const(16, "uint32")).astype("uint16")


def _dot(lanes: int):
    """The (`lanes` columns x 1 channel pair) step: its description and its vdpbf16ps implementation."""
    pair_lanes, vector, words, extern = (
        f"uint16x{2 * lanes}",
        f"float32x{lanes}",
        f"int32x{lanes}",
        EXTERN.format(lanes=lanes),
    )

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (lanes, 2), "uint16", offset_factor=1)
        B = T.match_buffer(b, (2,), "uint16", offset_factor=1)
        C = T.match_buffer(c, (lanes,), "float32", offset_factor=1, scope="local")
        with T.sblock("root"):
            T.reads(C[0:lanes], A[0:lanes, 0:2], B[0:2])
            T.writes(C[0:lanes])
            for i, k in T.grid(lanes, 2):
                with T.sblock("update"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    C[vi] = C[vi] + T.reinterpret(
                        "float32", T.shift_left(T.Cast("uint32", A[vi, vk]), T.uint32(16))
                    ) * T.reinterpret("float32", T.shift_left(T.Cast("uint32", B[vk]), T.uint32(16)))

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (lanes, 2), "uint16", offset_factor=1)
        B = T.match_buffer(b, (2,), "uint16", offset_factor=1)
        C = T.match_buffer(c, (lanes,), "float32", offset_factor=1, scope="local")
        with T.sblock("root"):
            T.reads(C[0:lanes], A[0:lanes, 0:2], B[0:2])
            T.writes(C[0:lanes])
            # the operands as expressions, not named values: a name is a local buffer, which LowerTVMBuiltin
            # allocates from the workspace pool per tile
            C[T.ramp(0, 1, lanes)] = T.call_pure_extern(
                vector,
                extern,
                C.vload([0], vector),
                T.reinterpret(words, A.vload([0, 0], pair_lanes)),  # lanes x (channel c, c + 1)
                T.broadcast(T.reinterpret("int32", B.vload([0], "uint16x2")), lanes),  # one pair, every lane
            )

    return desc, impl


def register_intrinsic(lanes: int = LANES) -> str:
    """Register the (`lanes` x 2) vdpbf16ps step (16: zmm, 8: ymm) with TVM once per process; returns its name."""
    return packed.register_step(INTRIN.format(lanes=lanes), lambda: _dot(lanes))


# --- the Relax rewrite -----------------------------------------------------------------------------------------


def _pack_activation(x: te.Tensor, left: int, right: int, channels: int | None = None) -> te.Tensor:
    """x [n, c, t] float32 -> [n, channels/2, left + t + right] uint32 words, each the bf16 bits of channel 2 c2
    (low half: first in memory) and 2 c2 + 1 (high half), zeros in the padding (and in the channels past c, where
    `channels` asks for more: the AMX kernel's whole channel blocks). Viewed as uint16 [.., 2] this is the
    kernel's pair-interleaved layout; written as words, both reads and the write run along time, so the loop
    vectorizes (an innermost pair axis of extent 2 did not: the packing cost the decoder 0.2 s at 160 frames)."""
    n, c, t = x.shape
    channels = int(c) if channels is None else channels

    def bits(b, channel, s):
        inside = tirx.all(s >= left, s < t + left)
        if channels != int(c):  # channels past c read as zeros (the read itself kept in bounds)
            inside, channel = tirx.all(inside, channel < c), tirx.min(channel, c - 1)
        value = tirx.if_then_else(inside, x[b, channel, s - left], tirx.const(0.0, "float32"))
        return to_bf16_bits(value).astype("uint32")

    def pack(b, c2, s):
        return tirx.bitwise_or(bits(b, c2 * 2, s), tirx.shift_left(bits(b, c2 * 2 + 1, s), tirx.const(16, "uint32")))

    return te.compute((n, channels // 2, t + left + right), pack, name="bf16_pack_x")


def _pack_weights(w: te.Tensor) -> te.Tensor:
    """w [o, c, k] float32 -> [o, c/2, k, 2] bf16 bits."""
    o, c, k = w.shape
    return te.compute((o, c // 2, k, 2), lambda a, c2, j, p: to_bf16_bits(w[a, c2 * 2 + p, j]), name="bf16_pack_w")


def _conv(xq: te.Tensor, wq: te.Tensor, dilation: int, tail: int = 0) -> te.Tensor:
    """The conv over xq's columns in float32; the last `tail` columns are the packing's vector padding."""
    return packed.packed_conv(xq, wq, dilation, lambda x, w: to_float(x) * to_float(w), "bf16_conv1d", tail)


def selected_by_name(prefixes) -> callable:
    """A `select` for Bf16Convolutions: the conv whose weight comes from a parameter of a torch module named with
    one of `prefixes` (imported parameters are named after the module path, dots as underscores)."""
    marks = tuple(p.replace(".", "_") for p in prefixes)
    return lambda parameters: any(mark in name for name in parameters for mark in marks)


def _emit(builder, x, w, left: int, right: int, dilation: int, tail: int):
    """x and w packed as bf16 channel pairs, then the conv (packed.PackedKernel's `emit`)."""
    words = builder.emit_te(_pack_activation, x, left, right, primfunc_name_hint="bf16_pack_x")
    n, half, padded = words.ty.shape
    xq = builder.emit(relax.op.memory.view(words, relax.ShapeExpr([n, half, padded, 2]), "uint16"))
    wq = builder.emit_te(_pack_weights, w, primfunc_name_hint="bf16_pack_w")
    return builder.emit_te(_conv, xq, wq, dilation, tail, primfunc_name_hint="bf16_conv1d")


def _amx_weights(w: te.Tensor, channels: int) -> te.Tensor:
    """w [o, c, k] float32 -> [k, channels / 32, o, 32] bf16 bits: the AMX kernel's A tiles (kokoro_tvm.compiler
    .amx), zeros for the channels past c."""
    o, c, k = w.shape
    block = amx.KINDS["bf16"].block_channels

    def bits(j, cb, a, i):
        channel = cb * block + i
        value = w[a, tirx.min(channel, c - 1), j]
        return to_bf16_bits(tirx.if_then_else(channel < c, value, tirx.const(0.0, "float32")))

    return te.compute((k, channels // block, o, block), bits, name="amx_bf16_w")


def _emit_amx(builder, x, w, left: int, right: int, dilation: int, tail: int):
    """x packed as bf16 channel pairs (as `_emit`), w as AMX A tiles, the tile conv (kokoro_tvm.compiler.amx);
    both zero-padded to whole channel blocks (`amx.channels_for`)."""
    o, c, k = (int(d) for d in w.ty.shape)
    channels = amx.channels_for(amx.KINDS["bf16"], c)
    words = builder.emit_te(_pack_activation, x, left, right, channels, primfunc_name_hint="bf16_pack_x")
    n, half, padded = words.ty.shape
    xq = builder.emit(relax.op.memory.view(words, relax.ShapeExpr([n, half, padded, 2]), "uint16"))
    wq = builder.emit_te(_amx_weights, w, channels, primfunc_name_hint="amx_bf16_w")
    length = padded - dilation * (k - 1) - tail
    return amx.emit_conv(builder, amx.KINDS["bf16"], xq, wq, o, channels, k, dilation, length)


KERNEL = packed.PackedKernel(group=2, emit=_emit, operands="uint16xuint16", amx="bf16", emit_amx=_emit_amx)


# Snake's sine before a bf16 conv (passes.SnakeSine): 6 Taylor terms, error below float32's half ulp at 1; its
# result is rounded to bf16 by the next conv's packing, so float64 bought nothing there and cost the bf16 decoder
# a quarter of its time
SNAKE_SINE_TERMS = 6
