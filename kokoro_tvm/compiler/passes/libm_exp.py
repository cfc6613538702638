"""`LibmExactExp`: float32 exp, and the tanh and sigmoid TVM lowers through it, as vector arithmetic that gives
glibc's `expf` bit for bit.

TVM lowers a float32 `exp` to LLVM's `llvm.exp`, which LLVM on x86 turns into one scalar libm `expf` call per
vector lane; `tanh` to (1 - e^-2x) / (1 + e^-2x) for x >= 0 and (e^2x - 1) / (e^2x + 1) below (two exps, two
divisions, both computed for every element), `sigmoid` to 1 / (1 + e^(0 - x)). ALBERT's GELU (a tanh per
activation), its softmax and every LSTM gate ran at the speed of those calls.

This TIR pass, run on the CPU after scheduling, writes each float32 call out with no call left, so the loop
vectorizes, and with the same bits as before. exp follows glibc's `expf` (2.27 and later; the FMA build its ifunc
picks on an FMA CPU) step by step, in float64: k = round(x 32 / ln 2) by adding 1.5 * 2^52, r the remainder, 2^(k/32)
from a 32-entry table (here a tree of selects: no table buffer in a fused function) plus k's integer part in the
exponent bits, a degree-3 polynomial in r with fused multiply-adds where glibc fuses, one rounding to float32;
glibc's results below -103.97 (0), from there to -103.28 (the smallest subnormal) and above 88.72 (inf), NaN as
x + x. tanh reads e^(-2|x|) once: both of TVM's branches read exactly that value (2x for x < 0, -2x for x >= 0),
and (e - 1) / (e + 1) is exactly 0 - (1 - e) / (1 + e). `tests/test_libm_exp.py` checks all three bit for bit
against TVM's own lowering (libm) on a sample of every exponent; every one of the 2^32 float32 inputs was checked
once, by the same comparison (`EXHAUSTIVE=1`). float64 calls (the reference builds) keep libm.
"""

from __future__ import annotations

import math

import numpy as np
import tvm_ffi
from tvm import tirx
from tvm.ir import Call

from kokoro_tvm.compiler.passes.base import primfunc_pass

FLOAT, WIDE = "float32", "float64"
# glibc's __exp2f_data (N = 32): 32 / ln 2, the rounding shift 1.5 * 2^52, the polynomial C0 r^3 + C1 r^2 + C2 r + 1
INV_LN2_N = float.fromhex("0x1.71547652b82fep+5")
SHIFT = float.fromhex("0x1.8p+52")
POLYNOMIAL = tuple(float.fromhex(h) for h in ("0x1.c6af84b912394p-20", "0x1.ebfce50fac4f3p-13", "0x1.62e42ff0c52d6p-6"))
# 2^(i/32) as float64 bits, less i << 47 (the part of k's bits that lands in the exponent field is added back)
TABLE = tuple(int(np.float64(2 ** (i / 32)).view(np.uint64)) - (i << 47) for i in range(32))
OVERFLOW_ABOVE = float.fromhex("0x1.62e42ep6")  # log(2^128): inf above
ZERO_BELOW = -float.fromhex("0x1.9fe368p6")  # log(2^-150): 0 below
SMALLEST_BELOW = -float.fromhex("0x1.9d1d9ep6")  # log(2^-149): glibc's may-underflow path, 2^-149, below


def _wide(value: float):
    return tirx.const(value, WIDE)


def _float(value: float):
    return tirx.const(value, FLOAT)


def _bits(value: int):
    return tirx.const(value, "uint64")


def _bound(value, make, name: str, dtype: str = FLOAT):
    """`make(v)` with v bound to `value` once (a Let), however often the expansion reads it."""
    var = tirx.Var(name, dtype)
    return tirx.Let(var, value, make(var))


def _table(index):
    """TABLE[index] for a uint64 index in 0..31, a tree of selects on its five bits."""
    values = [_bits(entry) for entry in TABLE]
    for bit in range(5):
        set_ = (index & _bits(1 << bit)) != _bits(0)
        values = [tirx.Select(set_, values[k + 1], values[k]) for k in range(0, len(values), 2)]
    return values[0]


def exp(value):
    def expand(x):
        wide = tirx.Cast(WIDE, x)

        def reduced(shifted):  # shifted = x 32/ln2 + 1.5 * 2^52: its low bits are k
            k = tirx.reinterpret("uint64", shifted)
            remainder = tirx.op.fma(_wide(INV_LN2_N), wide, -(shifted - _wide(SHIFT)))

            def power(r):
                scale = tirx.reinterpret(WIDE, _table(k & _bits(31)) + tirx.shift_left(k, _bits(47)))
                c0, c1, c2 = (_wide(c) for c in POLYNOMIAL)
                series = tirx.op.fma(tirx.op.fma(r, c0, c1), r * r, tirx.op.fma(r, c2, _wide(1.0)))
                return tirx.Cast(FLOAT, series * scale)

            return _bound(remainder, power, "exp_r", WIDE)

        result = _bound(tirx.op.fma(_wide(INV_LN2_N), wide, _wide(SHIFT)), reduced, "exp_shifted", WIDE)
        result = tirx.Select(x < _float(SMALLEST_BELOW), _float(2.0**-149), result)
        result = tirx.Select(x < _float(ZERO_BELOW), _float(0.0), result)
        result = tirx.Select(x > _float(OVERFLOW_ABOVE), _float(math.inf), result)
        return tirx.Select(tirx.isnan(x), x + x, result)

    return _bound(value, expand, "exp_x")


def tanh(value):
    def expand(x):
        def ratio(e):
            r = (_float(1.0) - e) / (_float(1.0) + e)
            return tirx.Select(x >= _float(0.0), r, _float(0.0) - r)

        signed = _bound(exp(_float(-2.0) * tirx.abs(x)), ratio, "tanh_e")
        return tirx.Select(tirx.isnan(x), x + x, signed)

    return _bound(value, expand, "tanh_x")


def sigmoid(value):
    return _float(1.0) / (_float(1.0) + exp(_float(0.0) - value))


EXPANSIONS = {"tirx.exp": exp, "tirx.tanh": tanh, "tirx.sigmoid": sigmoid}


def _expand(call):
    expansion = EXPANSIONS.get(getattr(call.op, "name", None))
    if expansion is None or str(call.ty) != FLOAT:
        return call
    return expansion(*call.args)


def expand_exp(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """`func` with every float32 exp / tanh / sigmoid call written out (module docstring)."""
    body = tvm_ffi.structural_map(func.body, [(Call, _expand)], order="post")
    return func if body.same_as(func.body) else func.with_body(body)


def LibmExactExp():  # noqa: N802 (TVM pass naming)
    """A module pass: `expand_exp` on every PrimFunc."""
    return primfunc_pass("LibmExactExp", expand_exp)
