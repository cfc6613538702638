"""int8 convolutions on x86 with AVX512_VNNI: uint8 activations, int8 weights, int32 accumulation, `vpdpbusd`.

`vpdpbusd acc, a, b` adds, to each of 16 int32 lanes, the four products of the lane's uint8 quad in `a` with the
int8 quad in `b`: four multiply-adds per lane and instruction, twice bf16's `vdpbf16ps`. The sum of four
products is at most 4 x 255 x 127 and the instruction does not saturate, so an int32 conv built from it is exact.

The layout mirrors kokoro_tvm.compiler.bf16 with the input channels taken in fours:

- activations xq[n, c/4, t, 4] uint8 (the four channels of a quad side by side: 16 time steps of one quad are
  64 contiguous bytes, one vector operand);
- weights wq[o, c/4, k, 4] int8 (one quad is 32 bits: broadcast to every lane);
- out[n, o, t] = sum_{c4, k, p} i32(xq[n, c4, t + k d, p]) * i32(wq[o, c4, k, p]) in int32.

`passes.int8_convolutions.Int8Convolutions(select)` rewrites the float32 conv1d calls `select` accepts into the
`int8_channel` plan that kokoro_tvm.studies.precision measures, per call:

- each input channel's range over the call, widened to hold 0: lo[c] <= 0 <= hi[c]; scale s[c] = (hi - lo) / 255
  and zero point z[c] = round(-lo / s), so q = round(x / s) + z is uint8 and the conv's zero padding is z exactly;
- the scales folded into the weights, w'[o, c, k] = w[o, c, k] s[c], rounded to int8 per output channel:
  wq = round(w' / r[o]), r[o] = max |w'[o]| / 127;
- acc[o, t] = sum wq[o, c, k] q[c, t + k d] (this kernel), and out[o, t] = r[o] (acc[o, t] - sum_{c, k} wq[o, c, k]
  z[c]): one int32 reduction and a per-output-channel correction, the bf16 kernel's shape.

The per-call work besides the conv is two passes over the input (range, packing) and one contiguous O x C x K pass
on the weights (their kernel layout and per-row peaks are computed once, at load).
Which convs is the registry's `INT8_CONVOLUTIONS` (the generator's resblocks, 91% of the conv multiply-adds).
`kokoro-tvm bench --conv-peak` times the kernel alone against PyTorch's int8 conv
(FBGEMM).

As with bf16, TVM 0.27 cannot emit the instruction: a few lines of LLVM IR define `kokoro_dpbusd{16,8}`, taking
the operands as int32 vectors by value, and every PrimFunc named after `int8_conv1d` imports them
(kokoro_tvm.compiler.passes.llvm_kernels); the CPU Contraction rule tensorizes the innermost (16 columns x
one quad) step with `kokoro_dpbusd_16x4`.
"""

from __future__ import annotations

from tvm import relax, te, tirx
from tvm.script import tirx as T

from kokoro_tvm.compiler import amx, packed

# Bump when the int8 rewrite or kernel changes what an int8 build computes or how (part of int8 artifacts' keys).
KERNEL_VERSION = 4

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


class Int8Unsupported(packed.PackedUnsupported):
    """An int8 build for a target (or a run on a CPU) without AVX512_VNNI."""


FEATURE = packed.PackedFeature(
    "int8", "avx512vnni", "avx512_vnni", "AVX512_VNNI", "vpdpbusd", "bf16 or fp32", Int8Unsupported
)


def host_supports_int8() -> bool:
    """This machine can build and run the int8 kernel for itself (AVX512_VNNI in its LLVM CPU model and flags)."""
    return packed.host_supports(FEATURE.llvm, FEATURE.flag)


def require_int8(target) -> None:
    """Refuse (Int8Unsupported, one line) a target without AVX512_VNNI, and a host target on a CPU whose flags
    lack it. An int8 build also has bf16 layers: callers check those with bf16.require_bf16."""
    packed.require(target, FEATURE)


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


def conv(xq: te.Tensor, wq: te.Tensor, dilation: int, tail: int = 0) -> te.Tensor:
    """out[n, o, t] = sum i32(xq[n, c4, t + k d, p]) * i32(wq[o, c4, k, p]), int32 (see the module); the last
    `tail` columns of xq are vector padding."""
    return packed.packed_conv(xq, wq, dilation, lambda x, w: x.astype("int32") * w.astype("int32"), "int8_conv1d", tail)


# --- the Relax rewrite -----------------------------------------------------------------------------------------

UINT8_MAX = 255.0
INT8_MAX = 127.0
TINY = 1e-12  # a channel (or weight row) that is zero throughout: any positive scale represents it exactly


def _pack_activation(x: te.Tensor, inverse: te.Tensor, zero: te.Tensor, left: int, right: int) -> te.Tensor:
    """x [n, c, t] float32 -> [n, c/4, left + t + right] uint32 words, byte p of word (c4, s) the uint8
    round(x[4 c4 + p] / scale) + zero (clamped to 0..255), the zero point itself in the padding; viewed as
    uint8 [.., 4] this is the kernel's quad layout (written as words, the loop runs along time and vectorizes,
    as bf16's packing)."""
    n, c, t = x.shape

    def byte(b, channel, s):
        # Only the load of x is conditional: a padding column reads 0.0, which quantizes to the zero point
        # exactly (round(0) + z, and 0 <= z <= 255). With the whole expression inside the condition, LLVM masked
        # the per-channel scale and zero point too, as two gathers per vector: the pass ran at 2.7 ms for 128 x
        # 49,920 values, 0.45 ms this way (2 threads, Zen 4), the same bytes.
        inside = tirx.all(s >= left, s < t + left)
        value = tirx.if_then_else(inside, x[b, channel, s - left], tirx.const(0.0, "float32"))
        q = tirx.round(value * inverse[channel]) + zero[channel]
        q = tirx.min(tirx.max(q, tirx.const(0.0, "float32")), UINT8_MAX)
        return q.astype("int32").astype("uint32")

    def pack(b, c4, s):
        word = byte(b, c4 * 4, s)
        for p in range(1, 4):
            word = tirx.bitwise_or(word, tirx.shift_left(byte(b, c4 * 4 + p, s), tirx.const(8 * p, "uint32")))
        return word

    return te.compute((n, c // 4, t + left + right), pack, name="int8_pack_x")


def _channel_range(x: te.Tensor) -> te.Tensor:
    """x [n, c, t] -> [c, 2]: -min and max of each channel over the call, as one reduction of max(-x) and max(x)
    (negation is exact, so -max(-x) is min(x) bit for bit): the activations are read once, not once for the
    minimum and again for the maximum. A batch (n > 1) takes each row's pair first, then the largest over the rows:
    every reduction then has one axis, the CPU RowReduction rule's shape (one reduction over the batch and the
    length at once fell to a plain loop, about 10x slower per value on a Zen 5: NOTES/performance.md "Batching")."""
    n, c, t = x.shape
    s = te.reduce_axis((0, t), "s")
    if isinstance(n, tirx.IntImm) and int(n) == 1:
        return te.compute((c, 2), lambda channel, j: _extreme(x, 0, channel, j, s), name="int8_range")
    rows = te.compute((n, c, 2), lambda row, channel, j: _extreme(x, row, channel, j, s), name="int8_range_rows")
    b = te.reduce_axis((0, n), "b")
    return te.compute((c, 2), lambda channel, j: te.max(rows[b, channel, j], axis=[b]), name="int8_range")


def _extreme(x: te.Tensor, row, channel, j, s):
    """-min (j = 0) or max (j = 1) of x[row, channel, :] over the reduce axis s, as a max of the value or its
    negation."""
    value = x[row, channel, s]
    return te.max(tirx.Select(j == 0, -value, value), axis=[s])


def _pack_weights(rows: te.Tensor, scales: te.Tensor, row_scale: te.Tensor, zeros: te.Tensor) -> list[te.Tensor]:
    """w [o, J] float32 (the weights in the kernel's layout, J = c/4 x k x 4 flattened) with each column's scale
    and zero point (`scales`, `zeros` [J]: its input channel's) -> ([o, J] int8 round(w s / r[o]), corr [o] int32
    = sum_j wq[o, j] z[j], what the zero points add to every output of channel o). One function with two
    outputs: a reduction of its own would fuse with the dequantization that reads it, and the dequantization then
    left the conv's epilogue (the conv wrote int32 and a second pass read it). Rows of contiguous columns: the
    quantization vectorizes and the correction is a row sum."""
    o, columns = rows.shape

    def quantize(a, j):
        q = tirx.round(rows[a, j] * scales[j] / row_scale[a])
        return tirx.min(tirx.max(q, -INT8_MAX), INT8_MAX).astype("int32").astype("int8")

    wq = te.compute((o, columns), quantize, name="int8_pack_w")
    j = te.reduce_axis((0, columns), "j")
    correction = te.compute(
        (o,),
        lambda a: te.sum(wq[a, j].astype("int32") * zeros[j].astype("int32"), axis=[j]),
        name="int8_zero_correction",
    )
    return [wq, correction]


def _per_column(values: te.Tensor, groups: int, taps: int) -> te.Tensor:
    """A per-input-channel vector [c] as one value per weight column j = (c4, k, p) of the packed layout."""
    return te.compute((groups * taps * 4,), lambda j: values[j // (taps * 4) * 4 + j % 4], name="int8_columns")


def _dequantize(acc: te.Tensor, correction: te.Tensor, row_scale: te.Tensor) -> te.Tensor:
    """out[n, o, t] = r[o] (acc[n, o, t] - corr[o]) in float32 (the conv kernel's per-tile epilogue)."""
    return te.compute(
        acc.shape,
        lambda b, a, t: (acc[b, a, t] - correction[a]).astype("float32") * row_scale[a],
        name="int8_dequantize",
    )


def _emit(builder, x, w, left: int, right: int, dilation: int, tail: int, tiles: bool = False):
    """This call's channel ranges, the weights folded and packed, x packed as uint8 quads, the conv and its
    dequantization (packed.PackedKernel's `emit`); with `tiles`, the conv on AMX (kokoro_tvm.compiler.amx)."""
    op, f32 = relax.op, lambda v: relax.const(v, "float32")
    # the channel ranges of this call, widened to hold 0 (the padding)
    ranges = builder.emit_te(_channel_range, x, primfunc_name_hint="int8_range")
    lowest = op.negative(op.squeeze(op.strided_slice(ranges, axes=[1], begin=[0], end=[1]), axis=[1]))
    highest = op.squeeze(op.strided_slice(ranges, axes=[1], begin=[1], end=[2]), axis=[1])
    low = builder.emit(op.minimum(lowest, f32(0.0)))
    high = builder.emit(op.maximum(highest, f32(0.0)))
    scale = builder.emit(op.divide(op.maximum(op.subtract(high, low), f32(TINY)), f32(UINT8_MAX)))
    inverse = builder.emit(op.divide(f32(1.0), scale))
    zero = builder.emit(op.round(op.multiply(op.negative(low), inverse)))
    # The scales folded into the weights, rounded per output channel. From the weights alone (lifted out of
    # `main`, computed once at load): w in the kernel's layout and max_k |w[o, c, k]|. Per call then the row
    # scale max_c s[c] max_k |w[o, c, k]|, the same float as max_{c, k} |w[o, c, k] s[c]| (rounding is monotone
    # and s > 0) from O x C values instead of O x C x K, and one pass over contiguous rows that folds, packs and
    # sums the zero-point correction (vectorized). As multiply, abs-max and a strided scalar pack the weight side
    # took ~14 ms of every decoder call whatever its length (2 threads, Zen 4); now ~3 ms.
    o, c, k = (int(d) for d in w.ty.shape)
    rows = builder.emit(op.reshape(op.permute_dims(op.reshape(w, [o, c // 4, 4, k]), [0, 1, 3, 2]), [o, c * k]))
    peaks = builder.emit(op.max(op.abs(w), axis=[2]))
    row_max = op.max(op.multiply(peaks, op.reshape(scale, [1, -1])), axis=[1])
    row_scale = builder.emit(op.divide(op.maximum(row_max, f32(TINY)), f32(INT8_MAX)))
    scales = builder.emit_te(_per_column, scale, c // 4, k, primfunc_name_hint="int8_columns")
    zeros = builder.emit_te(_per_column, zero, c // 4, k, primfunc_name_hint="int8_columns")
    packed_weights = builder.emit_te(_pack_weights, rows, scales, row_scale, zeros, primfunc_name_hint="int8_pack_w")
    wq = builder.emit(op.reshape(relax.TupleGetItem(packed_weights, 0), [o, c // 4, k, 4]))
    correction = builder.emit(relax.TupleGetItem(packed_weights, 1))
    words = builder.emit_te(_pack_activation, x, inverse, zero, left, right, primfunc_name_hint="int8_pack_x")
    n, quads, padded = words.ty.shape
    xq = builder.emit(relax.op.memory.view(words, relax.ShapeExpr([n, quads, padded, 4]), "uint8"))
    if tiles:
        weights = builder.emit_te(_amx_weights, wq, primfunc_name_hint="amx_int8_w")
        length = padded - dilation * (k - 1) - tail
        acc = amx.emit_conv(builder, amx.KINDS["int8"], xq, weights, o, c, k, dilation, length)
    else:
        acc = builder.emit_te(conv, xq, wq, dilation, tail, primfunc_name_hint="int8_conv1d")
    return builder.emit_te(_dequantize, acc, correction, row_scale, primfunc_name_hint="int8_dequantize")


def _amx_weights(wq: te.Tensor) -> te.Tensor:
    """The call's int8 weights [o, c / 4, k, 4] -> [k, c / 64, o, 64]: the AMX kernel's A tiles."""
    o, quads, k, _ = wq.shape
    block = amx.KINDS["int8"].block_channels
    return te.compute(
        (k, quads * 4 // block, o, block),
        lambda j, cb, a, i: wq[a, (cb * block + i) // 4, j, (cb * block + i) % 4],
        name="amx_int8_w",
    )


def _emit_amx(builder, x, w, left: int, right: int, dilation: int, tail: int):
    return _emit(builder, x, w, left, right, dilation, tail, tiles=True)


KERNEL = packed.PackedKernel(group=4, emit=_emit, operands="int8xuint8", amx="int8", emit_amx=_emit_amx)
