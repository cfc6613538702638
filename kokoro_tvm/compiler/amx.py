"""AMX convolutions on Intel's tile engine (Sapphire / Emerald / Granite Rapids): bf16 (`tdpbf16ps`) and int8
(`tdpbsud`), for the same packed activations as kokoro_tvm.compiler.bf16 and compiler.int8.

One tile instruction multiplies a 16 x 64-byte A tile by a 16-row x 64-byte B tile into a 16 x 16 float32 /
int32 C tile: 16 x 16 x 32 bf16 multiply-adds (8,192) or 16 x 16 x 64 int8 ones (16,384), where a zmm
`vdpbf16ps` does 32 and `vpdpbusd` 64. A conv1d out[o, t] = sum_{c, k} w[o, c, k] x[c, t + k d] maps onto it as
A = the weights of one tap over a block of input channels (rows: output channels; 32 bf16 or 64 int8 channels in
channel order), B = the packed activations themselves (rows: channel pairs or quads, kokoro's xq[c / g, t, g]
layout is AMX's B layout), C = a 16 x 16 block of the output. A kernel computes a 32 x (16 or 32) output block
in four (or two) C tiles with two A and two (one) B tiles: the eight tile registers.

The kernels are LLVM IR (TVM 0.27 cannot emit a tile instruction), one function per conv shape, every loop
unrolled (the taps and channel blocks are static): straight-line code whose tiles LLVM allocates and configures
itself (the `.internal` intrinsics; LLVM writes the `ldtilecfg`). The function carries the AMX target features,
so the rest of the module is compiled for the target as before. A TIR function per conv calls it once per
output block, in parallel (`conv_function`).

Linux gives a process the tile state only on request (kokoro_tvm.machine.amx_tiles, `arch_prctl`); without it
the first tile instruction is SIGILL. Builds use AMX only on a CPU that reports it and grants the request, and
the runtime asks before it loads a library that uses it.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import relax, tirx
from tvm.script import from_source
from tvm.script import tirx as T

from kokoro_tvm.compiler.sizes import divides

TILE_ROWS = 16
TILE_BYTES = 64  # a tile row: 16 float32 / int32 outputs, 32 bf16 or 64 int8 operands
BLOCK_ROWS = 32  # output channels per kernel call: two A tiles
# Columns of the tail kernel's C and B tiles (a tile may be narrower than 64 bytes): the last 8 columns of a length
# that is whole 8-step tiles (kokoro_tvm.components.LENGTH_TILE) but not whole 16-column blocks
TAIL_COLUMNS = 8
FEATURES = '"target-features"="+amx-tile,+amx-bf16,+amx-int8,+avx512f"'


@dataclass(frozen=True)
class AmxKind:
    name: str  # the --precision whose convs it takes
    group: int  # channels per packed activation element (bf16: pairs, int8: quads)
    activation: str  # dtype of the packed activations
    weight: str  # dtype of the weights
    accumulator: str
    instruction: str  # LLVM's intrinsic, without the prefix
    flag: str  # /proc/cpuinfo's
    pads_channels: bool  # its emitter zero-pads the input channels to whole channel blocks (`channels_for`)

    @property
    def block_channels(self) -> int:
        """Input channels per A tile row (one channel block): 64 bytes of operands (32 bf16, 64 int8)."""
        return TILE_BYTES // self.element_bytes

    @property
    def element_bytes(self) -> int:
        return 4 // self.group


KINDS = {
    "bf16": AmxKind("bf16", 2, "uint16", "uint16", "float32", "tdpbf16ps", "amx_bf16", True),
    # signed A (weights) x unsigned B; int8's per-call weights and zero-point sums are not padded
    "int8": AmxKind("int8", 4, "uint8", "int8", "int32", "tdpbsud", "amx_int8", False),
}


def channels_for(kind: AmxKind, in_channels: int) -> int:
    """The input channels the tile kernel runs for a conv of `in_channels`: whole channel blocks, the last one
    zero-padded where the kind's emitter pads (bf16: the decoder's 1090 -> 1120, 514 -> 544), else as they are."""
    if not kind.pads_channels:
        return in_channels
    return -(-in_channels // kind.block_channels) * kind.block_channels


def shape_fits(kind: AmxKind, out_channels: int, in_channels: int) -> bool:
    return out_channels % BLOCK_ROWS == 0 and channels_for(kind, in_channels) % kind.block_channels == 0


def kernel_name(
    kind: AmxKind, out_channels: int, in_channels: int, taps: int, dilation: int, col_tiles: int, columns: int
) -> str:
    return f"kokoro_amx_{kind.name}_o{out_channels}_c{in_channels}_k{taps}_d{dilation}_j{col_tiles}_n{columns}"


def kernel_ir(
    kind: AmxKind,
    out_channels: int,
    in_channels: int,
    taps: int,
    dilation: int,
    col_tiles: int,
    columns: int = TILE_ROWS,
) -> str:
    """The LLVM IR of one output block's kernel: `name(out, out_stride, x, x_stride, w)` (byte strides), out at
    the block's first output, x at its first column (channel 0), w at the block's first output channel of the
    weights laid out [tap, channel block, out channel, block channels]. `columns` per C and B tile: 16, or
    TAIL_COLUMNS for the last columns of a length that is not whole 16-column tiles."""
    name = kernel_name(kind, out_channels, in_channels, taps, dilation, col_tiles, columns)
    width = columns * 4  # bytes of a C tile row (float32 / int32 outputs) and of a B tile row
    blocks = in_channels // kind.block_channels
    tile = "x86_amx"
    lines = [f"define i32 @{name}(ptr %out, i64 %os, ptr %x, i64 %xs, ptr %w) #0 {{"]
    count = iter(range(1 << 30))

    def value() -> str:
        return f"%v{next(count)}"

    c = {}
    for h in range(2):
        for j in range(col_tiles):
            c[h, j] = value()
            lines.append(f"  {c[h, j]} = call {tile} @llvm.x86.tilezero.internal(i16 16, i16 {width})")
    for cb in range(blocks):
        row = value()
        lines.append(f"  {row} = mul i64 %xs, {cb * TILE_ROWS}")
        for k in range(taps):
            a, b = [], []
            for h in range(2):
                pointer = value()
                offset = ((k * blocks + cb) * out_channels + TILE_ROWS * h) * TILE_BYTES
                lines.append(f"  {pointer} = getelementptr i8, ptr %w, i64 {offset}")
                a.append(value())
                lines.append(
                    f"  {a[h]} = call {tile} @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr {pointer}, i64 64)"
                )
            for j in range(col_tiles):
                offset, pointer = value(), value()
                lines.append(f"  {offset} = add i64 {row}, {(columns * j + k * dilation) * 4}")
                lines.append(f"  {pointer} = getelementptr i8, ptr %x, i64 {offset}")
                b.append(value())
                lines.append(
                    f"  {b[j]} = call {tile} @llvm.x86.tileloadd64.internal(i16 16, i16 {width}, ptr {pointer}, "
                    "i64 %xs)"
                )
            for h in range(2):
                for j in range(col_tiles):
                    updated = value()
                    lines.append(
                        f"  {updated} = call {tile} @llvm.x86.{kind.instruction}.internal(i16 16, i16 {width}, i16 64, "
                        f"{tile} {c[h, j]}, {tile} {a[h]}, {tile} {b[j]})"
                    )
                    c[h, j] = updated
    lines += _tile_stores(value, c, col_tiles, columns) + ["  ret i32 0", "}"]
    return "\n".join(lines) + "\n"


def _tile_stores(value, c: dict, col_tiles: int, columns: int) -> list[str]:
    """The IR that stores a kernel's C tiles `c` ({(row tile, column tile): value}) at %out, rows %os bytes apart."""
    lines = []
    for h in range(2):
        row = value()
        lines.append(f"  {row} = mul i64 %os, {TILE_ROWS * h}")
        for j in range(col_tiles):
            offset, pointer = value(), value()
            lines.append(f"  {offset} = add i64 {row}, {columns * j * 4}")
            lines.append(f"  {pointer} = getelementptr i8, ptr %out, i64 {offset}")
            lines.append(
                f"  call void @llvm.x86.tilestored64.internal(i16 16, i16 {columns * 4}, ptr {pointer}, i64 %os, "
                f"x86_amx {c[h, j]})"
            )
    return lines


DECLARATIONS = f"""
declare x86_amx @llvm.x86.tilezero.internal(i16, i16)
declare x86_amx @llvm.x86.tileloadd64.internal(i16, i16, ptr, i64)
declare x86_amx @llvm.x86.tdpbf16ps.internal(i16, i16, i16, x86_amx, x86_amx, x86_amx)
declare x86_amx @llvm.x86.tdpbsud.internal(i16, i16, i16, x86_amx, x86_amx, x86_amx)
declare void @llvm.x86.tilestored64.internal(i16, i16, ptr, i64, x86_amx)
attributes #0 = {{ {FEATURES} }}
"""

_SOURCE = """
@T.prim_func(private=True)
def main(xq: T.handle, wq: T.handle, out: T.handle):
    # op_pattern 8: opaque (relax.transform.FuseOps fuses nothing into an extern call)
    T.func_attr({{"tirx.noalias": True, "tirx.is_scheduled": True, "op_pattern": 8}})
    padded = T.int64()
    length = T.int64()
    X = T.match_buffer(xq, (T.int64(1), T.int64({groups}), padded, T.int64({group})), "{activation}")
    W = T.match_buffer(wq, (T.int64({taps}), T.int64({blocks}), T.int64({out_channels}),
                            T.int64({block_channels})), "{weight}")
    Y = T.match_buffer(out, (T.int64(1), T.int64({out_channels}), length), "{accumulator}")
    for block in T.parallel(T.int64({row_blocks}) * (length // T.int64({cols}))):
        T.evaluate(T.call_extern("int32", "{name}",
            T.address_of(Y[0, block % T.int64({row_blocks}) * T.int64(32),
                           block // T.int64({row_blocks}) * T.int64({cols})]),
            length * T.int64(4),
            T.address_of(X[0, 0, block // T.int64({row_blocks}) * T.int64({cols}), 0]),
            padded * T.int64(4),
            T.address_of(W[0, 0, block % T.int64({row_blocks}) * T.int64(32), 0])))
    if length % T.int64({cols}) != T.int64(0):  # the last {tail} columns: length is whole {tail}-column tiles
        for block in T.parallel(T.int64({row_blocks})):
            T.evaluate(T.call_extern("int32", "{tail_name}",
                T.address_of(Y[0, block * T.int64(32), length - T.int64({tail})]),
                length * T.int64(4),
                T.address_of(X[0, 0, length - T.int64({tail}), 0]),
                padded * T.int64(4),
                T.address_of(W[0, 0, block * T.int64(32), 0])))
"""


def conv_function(kind: AmxKind, out_channels: int, in_channels: int, taps: int, dilation: int, col_tiles: int):
    """The TIR function `(xq [1, C / g, padded, g], wq [taps, C / B, O, B], out [1, O, length])` that runs the
    block kernel over every 32 x (16 col_tiles) block of `out` in parallel, then the tail kernel over the last
    TAIL_COLUMNS columns where `length` is not whole blocks (it must be whole tails: `usable`), the kernels' IR
    imported; xq at least length + (taps - 1) dilation columns long."""
    if col_tiles != 1:
        raise ValueError("the tail kernel follows single-column-tile blocks only")
    name = kernel_name(kind, out_channels, in_channels, taps, dilation, col_tiles, TILE_ROWS)
    tail_name = kernel_name(kind, out_channels, in_channels, taps, dilation, 1, TAIL_COLUMNS)
    source = _SOURCE.format(
        groups=in_channels // kind.group,
        group=kind.group,
        activation=kind.activation,
        weight=kind.weight,
        accumulator=kind.accumulator,
        taps=taps,
        blocks=in_channels // kind.block_channels,
        out_channels=out_channels,
        block_channels=kind.block_channels,
        row_blocks=out_channels // BLOCK_ROWS,
        cols=TILE_ROWS * col_tiles,
        name=name,
        tail=TAIL_COLUMNS,
        tail_name=tail_name,
    )
    func = from_source(source, extra_vars={"T": T})
    ir = (
        kernel_ir(kind, out_channels, in_channels, taps, dilation, col_tiles)
        + kernel_ir(kind, out_channels, in_channels, taps, dilation, 1, TAIL_COLUMNS)
        + DECLARATIONS
    )
    return func.with_body(tirx.AttrStmt(0, "pragma_import_llvm", tvm.ir.StringImm(ir), func.body))


# Bump when an AMX kernel changes what it computes or how (part of the keys of builds that use one).
# 2: lengths of whole 8-column tails (a symbolic length's tile), not only whole 16-column tiles.
KERNEL_VERSION = 2
# One column tile per call (32 x 16 outputs, five tile registers): two column tiles (32 x 32, all eight) ran at
# half the rate (9.9 against 4.6 ms for int8 128 x 128 channels, k11, 30,752 steps; 2 threads, Emerald Rapids):
# with every register taken, LLVM spills tiles to the stack.
COL_TILES = 1
MARK = "amx_conv1d"  # in every AMX conv function's name


def usable(kind: AmxKind, out_channels: int, in_channels: int, length, batch) -> bool:
    """Whether a conv of this shape can run on the tile kernel: whole 32-row output blocks, whole channel
    blocks (after `channels_for`'s padding), a length of whole tails (so a symbolic length's 8-step tiles too),
    batch 1 (the symbolic builds')."""
    return (
        shape_fits(kind, out_channels, in_channels)
        and divides(TAIL_COLUMNS, length)
        and isinstance(batch, int | tirx.IntImm)
        and int(batch) == 1
    )


def emit_conv(builder, kind: AmxKind, xq, wq, out_channels: int, in_channels: int, taps: int, dilation: int, length):
    """Add this shape's tile conv function to the module and call it on packed activations `xq` [1, C / g,
    padded, g] and weights `wq` [k, C / B, O, B]: out [1, O, length] in the kernel's accumulator type."""
    func = conv_function(kind, out_channels, in_channels, taps, dilation, COL_TILES)
    name = f"{MARK}_{kind.name}_o{out_channels}_c{in_channels}_k{taps}_d{dilation}"
    gvar = builder.add_func(func, name)
    shape = relax.ShapeExpr([1, out_channels, length])
    return builder.emit(relax.call_tir(gvar, [xq, wq], relax.TensorType(shape, kind.accumulator)))


# --- the tile engine's peak ------------------------------------------------------------------------------------

PEAK_STEPS = 128  # tile multiplies per kernel call: its loads, stores and tile configuration are then noise


def peak_ir(kind: AmxKind) -> str:
    """`kokoro_amx_{kind}_peak(out, a, b)`: two A and two B tiles loaded once, PEAK_STEPS multiplies into four
    C tiles (four independent chains), the C tiles stored: the rate no conv of this kind can pass."""
    tile = "x86_amx"
    lines = [f"define i32 @kokoro_amx_{kind.name}_peak(ptr %out, ptr %a, ptr %b) #0 {{"]
    for i in range(2):
        lines.append(f"  %a{i} = call {tile} @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %a, i64 64)")
        lines.append(f"  %b{i} = call {tile} @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %b, i64 64)")
    for c in range(4):
        lines.append(f"  %c{c}_0 = call {tile} @llvm.x86.tilezero.internal(i16 16, i16 64)")
    for step in range(PEAK_STEPS):
        c, n = step % 4, step // 4
        lines.append(
            f"  %c{c}_{n + 1} = call {tile} @llvm.x86.{kind.instruction}.internal(i16 16, i16 64, i16 64, "
            f"{tile} %c{c}_{n}, {tile} %a{c // 2}, {tile} %b{c % 2})"
        )
    for c in range(4):
        last = PEAK_STEPS // 4
        lines.append(
            f"  call void @llvm.x86.tilestored64.internal(i16 16, i16 64, ptr %out, i64 64, {tile} %c{c}_{last})"
        )
    lines += ["  ret i32 0", "}"]
    return "\n".join(lines) + "\n" + DECLARATIONS


_PEAK_SOURCE = """
@T.prim_func(private=True)
def main(out: T.Buffer((T.int64({threads}), T.int64(256)), "{accumulator}"),
         a: T.Buffer((T.int64(1024),), "uint8"), b: T.Buffer((T.int64(1024),), "uint8"), calls: T.int64):
    T.func_attr({{"tirx.noalias": True, "tirx.is_scheduled": True}})
    for thread in T.parallel(T.int64({threads})):
        for _ in range(calls):
            T.evaluate(T.call_extern("int32", "kokoro_amx_{name}_peak", T.address_of(out[thread, 0]),
                                     T.address_of(a[0]), T.address_of(b[0])))
"""


def peak_function(kind: AmxKind, threads: int):
    """TIR `(out [threads, 256], a [1024 bytes], b [1024 bytes], calls)`: each thread calls the peak kernel
    `calls` times; `calls` x PEAK_STEPS x the tile's multiply-adds per thread."""
    source = _PEAK_SOURCE.format(threads=threads, accumulator=kind.accumulator, name=kind.name)
    func = from_source(source, extra_vars={"T": T})
    return func.with_body(tirx.AttrStmt(0, "pragma_import_llvm", tvm.ir.StringImm(peak_ir(kind)), func.body))


def tile_multiply_adds(kind: AmxKind) -> int:
    """Multiply-adds of one tile instruction: 16 x 16 outputs x a 64-byte row of operands."""
    return TILE_ROWS * TILE_ROWS * kind.block_channels


def rate_library(kind: AmxKind, channels: int, taps: int, dilation: int, threads: int, target):
    """One library with this kind's conv of a channels x channels x taps shape (`amx_conv1d`) and its peak loop
    (`amx_peak`): what `kokoro-tvm bench --conv-peak` times on an AMX machine."""
    conv = conv_function(kind, channels, channels, taps, dilation, COL_TILES).with_attr("global_symbol", "amx_conv1d")
    peak = peak_function(kind, threads).with_attr("global_symbol", "amx_peak")
    return tvm.compile(tvm.IRModule({"amx_conv1d": conv, "amx_peak": peak}), target=tvm.target.Target(target))
