"""AMX tile kernels (kokoro_tvm.compiler.amx): on every x86 machine their code is read (the tile instructions
are there, LLVM configured the tiles); where this process may use the tile engine, every kernel against numpy on
random operands, at several lengths of one build, and the packed rewrite's AMX path against its AVX-512 path."""

import numpy as np
import pytest
import tvm
from tvm import relax

from kokoro_tvm.compiled import compile_and_load
from kokoro_tvm.compiler import amx
from kokoro_tvm.compiler.passes.bf16_convolutions import Bf16Convolutions
from kokoro_tvm.compiler.passes.int8_convolutions import Int8Convolutions
from kokoro_tvm.compiler.targets import host_target
from kokoro_tvm.compiler.tuning import record as tuning
from kokoro_tvm.machine import amx_tiles, cpu_identity

SAPPHIRE_RAPIDS = {"kind": "llvm", "mcpu": "sapphirerapids", "mtriple": "x86_64-linux-gnu"}
needs_tiles = pytest.mark.skipif(not amx_tiles(), reason="this CPU has no AMX, or the kernel refused the tile state")


def _compiled(kind, out_channels, in_channels, taps, dilation, target):
    func = amx.conv_function(kind, out_channels, in_channels, taps, dilation, amx.COL_TILES)
    return tvm.compile(tvm.IRModule({"amx_conv1d": func.with_attr("global_symbol", "amx_conv1d")}), target=target)


@pytest.mark.parametrize("name", ["bf16", "int8"])
def test_the_kernel_is_tile_instructions_on_any_x86_machine(name):
    """Compiled for Sapphire Rapids wherever the tests run: the assembly has the tile multiply of its kind, one
    per (tap, channel block, row tile) in the block kernel and as many in the tail kernel (8-column C and B tiles:
    32-byte rows), the tile loads and stores, and LLVM's own tile configuration."""
    kind, taps, channels = amx.KINDS[name], 3, 128
    multiplies = 0
    for columns in (amx.TILE_ROWS, amx.TAIL_COLUMNS):
        ir = amx.kernel_ir(kind, 64, channels, taps, 2, amx.COL_TILES, columns)
        calls = [line for line in ir.splitlines() if f"@llvm.x86.{kind.instruction}.internal(" in line]
        assert len(calls) == taps * (channels // kind.block_channels) * 2 * amx.COL_TILES
        assert all(f"(i16 16, i16 {columns * 4}, i16 64," in line for line in calls)  # M rows, N bytes, K bytes
        multiplies += len(calls)
    library = _compiled(kind, 64, channels, taps, 2, tvm.target.Target(SAPPHIRE_RAPIDS))
    assembly = library.mod.inspect_source("asm")
    assert assembly.count(kind.instruction) == multiplies
    assert "tileloadd" in assembly and "tilestored" in assembly and "ldtilecfg" in assembly


def _packed(kind, x, w):
    """Activations [C, T] and weights [O, C, K] (the kernel's dtypes) in the kernel's layouts."""
    c, t = x.shape
    o, _, k = w.shape
    g, block = kind.group, kind.block_channels
    xq = x.reshape(c // g, g, t).transpose(0, 2, 1).copy()[None]
    wq = w.transpose(2, 1, 0).reshape(k, c // block, block, o).transpose(0, 1, 3, 2).copy()
    return xq, wq


@needs_tiles
@pytest.mark.parametrize("name", ["bf16", "int8"])
@pytest.mark.parametrize(("out_channels", "in_channels", "taps", "dilation"), [(32, 64, 1, 1), (64, 128, 7, 3)])
def test_every_kernel_computes_the_conv(name, out_channels, in_channels, taps, dilation):
    kind = amx.KINDS[name]
    library = _compiled(kind, out_channels, in_channels, taps, dilation, tvm.target.Target(host_target()))
    rng = np.random.default_rng(0)
    for length in (8, 16, 40, 48, 168):  # one build, any whole number of 8-column tails (the last 8: tail kernel)
        padded = length + (taps - 1) * dilation + 5  # more columns than the taps read: they must not matter
        if name == "bf16":
            x = (rng.standard_normal((in_channels, padded)).astype(np.float32).view(np.uint32) >> 16).astype("uint16")
            w = rng.standard_normal((out_channels, in_channels, taps)).astype(np.float32).view(np.uint32) >> 16
            w = w.astype("uint16")
            values = [(v.astype(np.uint32) << 16).view(np.float32).astype(np.float64) for v in (x, w)]
        else:
            x = rng.integers(0, 256, (in_channels, padded), dtype=np.uint8)
            w = rng.integers(-127, 128, (out_channels, in_channels, taps), dtype=np.int8)
            values = [x.astype(np.int64), w.astype(np.int64)]
        xq, wq = _packed(kind, x, w)
        out = tvm.runtime.tensor(np.zeros((1, out_channels, length), kind.accumulator))
        library["amx_conv1d"](tvm.runtime.tensor(xq), tvm.runtime.tensor(wq), out)
        xv, wv = values
        expected = sum(wv[:, :, k] @ xv[:, k * dilation : k * dilation + length] for k in range(taps))
        if name == "int8":
            np.testing.assert_array_equal(out.numpy()[0], expected)  # integer sums: exact
        else:
            # products of bf16 values are exact in float32; only the float32 sums round (<= 896 terms)
            np.testing.assert_allclose(out.numpy()[0], expected, rtol=1e-5, atol=1e-4 * np.abs(expected).max())


def _conv(out_channels=64, in_channels=64, taps=3, length=64):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, in_channels, length), "float32"))
    w = relax.Var("decoder_conv_weight", relax.TensorType((out_channels, in_channels, taps), "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.nn.conv1d(x, w, padding=taps // 2)))
        bb.emit_func_output(out)
    return bb.get()


@needs_tiles
@pytest.mark.parametrize(
    ("rewrite", "key", "in_channels"),
    [
        (Bf16Convolutions, "uint16xuint16:64:32x3x2", 64),
        (Bf16Convolutions, "uint16xuint16:64:21x3x2", 42),  # bf16 pads to whole 32-channel blocks: 42 -> 64
        (Int8Convolutions, "int8xuint8:64:16x3x4", 64),
    ],
)
def test_the_rewrite_takes_the_tiles_where_the_record_says_and_computes_the_same(rewrite, key, in_channels):
    mod = _conv(in_channels=in_channels)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, in_channels, 64)).astype(np.float32)
    w = (rng.standard_normal((64, in_channels, 3)) * 0.1).astype(np.float32)
    outputs = {}
    for kernel in (tuning.AMX, tuning.AVX512):
        with tuning.using(tuning.TuningRecord(cpu_identity(), packed={key: kernel})):
            rewritten = rewrite()(mod)
        assert ("amx_conv1d" in rewritten.script()) == (kernel == tuning.AMX)
        (outputs[kernel],) = compile_and_load(rewritten)(x, w)
    # the same packed operands, the same products: only the float32 summation order differs (int8: exact)
    np.testing.assert_allclose(outputs[tuning.AMX], outputs[tuning.AVX512], rtol=1e-5, atol=1e-5)
