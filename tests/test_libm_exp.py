"""passes.LibmExactExp: float32 exp, tanh and sigmoid written out as vector arithmetic give the same bits as TVM's
own lowering of each (libm's expf per lane), and the CPU pipeline leaves no such call in a float32 function."""

import os

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import tirx as T

from kokoro_tvm.compiler.passes.libm_exp import expand_exp
from kokoro_tvm.compiler.targets import host_target

LANES = 16


def _kernel(op, n: int):
    @T.prim_func(s_tir=True)
    def kernel(a: T.Buffer((n,), "float32"), o: T.Buffer((n,), "float32")):
        T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True})
        for i0 in T.parallel(n // LANES):
            for i1 in T.vectorized(LANES):
                with T.sblock("x"):
                    vi = T.axis.spatial(n, i0 * LANES + i1)
                    o[vi] = op(a[vi])

    return kernel


def _every_exponent(per_exponent: int) -> np.ndarray:
    """float32 bit patterns: for each of the 512 signs and exponents (zeros, subnormals, infinities and NaNs
    included), the smallest, largest and a few mantissas around the middle, plus random ones."""
    rng = np.random.default_rng(7)
    tops = np.arange(512, dtype=np.uint32) << np.uint32(23)
    fixed = np.array([0, 1, 2, (1 << 22) - 1, 1 << 22, (1 << 22) + 1, (1 << 23) - 2, (1 << 23) - 1], np.uint32)
    random = rng.integers(0, 1 << 23, size=(512, per_exponent - len(fixed)), dtype=np.uint32)
    return (tops[:, None] | np.concatenate([np.broadcast_to(fixed, (512, len(fixed))), random], axis=1)).ravel()


def _differences(op, pieces, chunk: int = 1 << 22) -> int:
    """How many of the float32 bit patterns in `pieces` (arrays of at most `chunk`) give other bits."""
    target = tvm.target.Target(host_target())
    libm = tvm.compile(tvm.IRModule({"main": _kernel(op, chunk)}), target)["main"]
    ours = tvm.compile(tvm.IRModule({"main": expand_exp(_kernel(op, chunk))}), target)["main"]
    x = tvm.runtime.tensor(np.zeros(chunk, np.float32))
    want, got = (tvm.runtime.tensor(np.zeros(chunk, np.float32)) for _ in range(2))
    differing = 0
    for bits in pieces:
        piece = np.zeros(chunk, np.uint32)
        piece[: len(bits)] = bits
        x.copyfrom(piece.view(np.float32))
        libm(x, want)
        ours(x, got)
        differing += int(np.count_nonzero(want.numpy().view(np.uint32) != got.numpy().view(np.uint32)))
    return differing


@pytest.mark.parametrize("op", [T.exp, T.tanh, T.sigmoid], ids=["exp", "tanh", "sigmoid"])
def test_the_written_out_call_has_libms_bits(op):
    """Bit for bit, not within a tolerance: the builds' outputs must not move. EXHAUSTIVE=1 runs all 2^32 inputs
    (about a minute per function on 2 cores); by default 2^21 of them, 4,096 per sign and exponent."""
    chunk = 1 << 22
    if os.environ.get("EXHAUSTIVE"):
        starts = range(0, 1 << 32, chunk)
        pieces = (np.arange(start, start + chunk, dtype=np.uint64).astype(np.uint32) for start in starts)
    else:
        bits = _every_exponent(4096)
        pieces = (bits[start : start + chunk] for start in range(0, len(bits), chunk))
    assert _differences(op, pieces, chunk) == 0


def test_no_call_is_left():
    expanded = expand_exp(_kernel(T.tanh, 64))
    assert "T.exp(" not in expanded.script() and "T.tanh(" not in expanded.script()


def test_float64_calls_keep_libm():
    @T.prim_func(s_tir=True)
    def wide(a: T.Buffer((16,), "float64"), o: T.Buffer((16,), "float64")):
        for i in range(16):
            with T.sblock("x"):
                vi = T.axis.spatial(16, i)
                o[vi] = T.exp(a[vi])

    assert expand_exp(wide).same_as(wide)


def test_the_cpu_pipeline_writes_out_gelu_softmax_and_sigmoid():
    from kernel_asm import executable_asm

    from kokoro_tvm.compiler.pipeline import compile_relax, lower

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((8, 64), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            gelu = bb.emit(relax.op.nn.gelu_tanh(x))
            out = bb.emit_output(relax.op.add(relax.op.nn.softmax(gelu), relax.op.sigmoid(x)))
        bb.emit_func_output(out)
    lowered = lower(bb.get(), host_target())
    scripts = [f.script() for _, f in lowered.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert scripts and not any(call in s for s in scripts for call in ("T.exp(", "T.tanh(", "T.sigmoid("))
    assembly = executable_asm(compile_relax(bb.get(), host_target()))
    assert "vfmadd" in assembly and "expf" not in assembly  # exp's multiply-adds, and no libm call per lane
