"""`VectorizableTranscendentals`: TVM lowers float32 `exp`, `tanh` and `sigmoid` (through `exp`) to LLVM's
`llvm.exp` intrinsic, which LLVM on x86 turns into one scalar libm `expf` call per vector lane, and `atan2` to
`atan2f` and `cosf`: ALBERT's GELU (a tanh per activation) ran at ~1 ms per layer, its softmax at half the speed its
arithmetic allows, every LSTM step called `expf` five times per hidden unit, and the phase of the decoder's
harmonic STFT took 10 ms at 416 frames. This TIR pass, run on the CPU after scheduling, writes each float32 call
out as arithmetic that vectorizes (LLVM vectorizes even a loop our rules left scalar once no call is left in it):

- exp(x): n = round(x log2 e), r = x - n ln 2 (ln 2 in two parts, so r is exact), e^r by a degree-7 polynomial
  (Cephes' `expf` coefficients), times 2^n built from its exponent bits; 0 below the smallest normal result,
  inf above the largest, NaN kept;
- tanh(x): for |x| < 0.625 an odd polynomial (Cephes' `tanhf`), else sign(x) (1 - 2 / (e^(2|x|) + 1)), so small
  arguments keep their relative accuracy;
- sigmoid(x): 1 / (1 + e^-x), the form TVM lowered it to before, with the exp above;
- cos(x) (the iSTFT's): as passes.sine's sine, reduced by pi and a Taylor series in float64, then rounded;
- atan2(y, x): t = min(|x|,|y|) / max(|x|,|y|), atan(t) by Cephes' `atanf` (a polynomial below tan(pi/8), else
  pi/4 + atan((t-1)/(t+1))), then the octant from |y| > |x| and the signs, read from the sign bits as C does
  (atan2(+-0, -0) = +-pi); infinities and NaN as C's.

Their error against the exact value (measured by the tests over their grids): exp and tanh within 1.3 ulps,
sigmoid 2.5 (its division and sum add theirs), atan2 2.7, cos 0.5 (|x| <= 110: correctly rounded but at ties),
against libm's <1 ulp and PyTorch's vectorized (SLEEF) exp's 1 ulp. float64 calls (the reference builds, >200 dB
from PyTorch) keep libm. Running after scheduling leaves the schedule rules to see the same one-call expressions
as before (an expansion reads its argument several times, which would change what they inline)."""

from __future__ import annotations

import math

import tvm
import tvm_ffi
from tvm import tirx
from tvm.ir import Call

FLOAT = "float32"
# Cephes expf: e^r = 1 + r + r^2 P(r) for |r| <= ln2 / 2, P's coefficients highest power first
EXP_COEFFICIENTS = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1,
                    5.0000001201e-1)  # fmt: skip
LN2_HIGH, LN2_LOW = 0.693359375, -2.12194440e-4  # ln 2 = high + low; n * high is exact for |n| < 2^9
EXP_MAX = 88.72283905206835  # ln(float32 max): above it, inf
EXP_MIN = -87.33654475055310  # ln(smallest normal float32): below it 0 (the subnormal range, < 1.2e-38)
# Cephes tanhf for |x| < 0.625: x + x^3 P(x^2), highest power first
TANH_COEFFICIENTS = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1, -3.33332819422e-1)
TANH_POLYNOMIAL_BELOW = 0.625
# Cephes atanf for |t| <= tan(pi/8): t + t^3 P(t^2), highest power first; above it, pi/4 + atan((t-1)/(t+1))
ATAN_COEFFICIENTS = (8.05374449538e-2, -1.38776856032e-1, 1.99777106478e-1, -3.33329491539e-1)
TAN_PI_8 = 0.4142135623730950
COSINE_TAYLOR_TERMS = 10  # 1 - r^2/2! + ... to r^18/18!: |error| <= (pi/2)^20 / 20! < 1e-14, as passes.sine


def _const(value: float):
    return tirx.const(value, FLOAT)


def _bound(value, make, name: str):
    """`make(v)` with v bound to `value` once (a Let), however often the expansion reads it."""
    var = tirx.Var(name, FLOAT)
    return tirx.Let(var, value, make(var))


def _horner(coefficients, x):
    result = _const(coefficients[0])
    for coefficient in coefficients[1:]:
        result = result * x + _const(coefficient)
    return result


def _power_of_two(n):
    """2^n for an int32 n in -126..127, from its exponent bits."""
    return tirx.reinterpret(FLOAT, tirx.shift_left(n + tirx.const(127, "int32"), tirx.const(23, "int32")))


def exp(value):
    def expand(x):
        clamped = tirx.max(tirx.min(x, _const(EXP_MAX)), _const(EXP_MIN))
        n = tirx.nearbyint(clamped * _const(1 / math.log(2)))
        r = clamped - n * _const(LN2_HIGH) - n * _const(LN2_LOW)
        series = _horner(EXP_COEFFICIENTS, r) * (r * r) + r + _const(1.0)
        whole = tirx.Cast("int32", n)  # -126..128: 2^n in two factors, as 2^128 is past float32's exponents
        half = tirx.shift_right(whole, tirx.const(1, "int32"))
        result = series * _power_of_two(half) * _power_of_two(whole - half)
        result = tirx.Select(x < _const(EXP_MIN), _const(0.0), result)
        result = tirx.Select(x > _const(EXP_MAX), _const(math.inf), result)
        return tirx.Select(tirx.isnan(x), x, result)

    return _bound(value, expand, "exp_x")


def tanh(value):
    def expand(x):
        magnitude = tirx.Select(x < _const(0.0), -x, x)
        far = _const(1.0) - _const(2.0) / (exp(magnitude * _const(2.0)) + _const(1.0))
        far = _bound(far, lambda f: tirx.Select(x < _const(0.0), -f, f), "tanh_far")  # one exp, read twice
        square = x * x
        near = _horner(TANH_COEFFICIENTS, square) * square * x + x
        return tirx.Select(magnitude < _const(TANH_POLYNOMIAL_BELOW), near, far)

    return _bound(value, expand, "tanh_x")


def sigmoid(value):
    return _const(1.0) / (_const(1.0) + exp(-value))


def _negative(x):
    """The sign bit: true for -0.0 too, as C's atan2 reads it."""
    return tirx.reinterpret("int32", x) < tirx.const(0, "int32")


def atan2(y_value, x_value):
    def expand(y, x):
        ay, ax = tirx.abs(y), tirx.abs(x)
        steep = ay > ax  # reduce to t = smaller / larger in [0, 1], atan(t) <= pi/4
        small, large = tirx.Select(steep, ax, ay), tirx.Select(steep, ay, ax)
        t = tirx.Select(large == _const(0.0), _const(0.0), tirx.Select(small == large, _const(1.0), small / large))

        def octant(t):  # atan(t) for t in [0, 1]
            upper = t > _const(TAN_PI_8)
            u = tirx.Select(upper, (t - _const(1.0)) / (t + _const(1.0)), t)
            square = u * u
            return tirx.Select(upper, _const(math.pi / 4), _const(0.0)) + (
                _horner(ATAN_COEFFICIENTS, square) * square * u + u
            )

        angle = _bound(t, octant, "atan_t")
        angle = _bound(angle, lambda a: tirx.Select(steep, _const(math.pi / 2) - a, a), "atan_a")
        angle = _bound(angle, lambda a: tirx.Select(_negative(x), _const(math.pi) - a, a), "atan_b")
        angle = _bound(angle, lambda a: tirx.Select(_negative(y), -a, a), "atan_c")
        return tirx.Select(tirx.isnan(x) | tirx.isnan(y), x + y, angle)  # NaN stays NaN

    return _bound(y_value, lambda y: _bound(x_value, lambda x: expand(y, x), "atan2_x"), "atan2_y")


def cos(value):
    """As passes.sine's float64 sine: reduced by pi and a Taylor series in float64, rounded to float32."""

    def wide(v):
        return tirx.const(v, "float64")

    def expand(x):
        turns = tirx.nearbyint(tirx.Cast("float64", x) * wide(1 / math.pi))  # k: cos(r + k pi) = (-1)^k cos(r)
        r = tirx.Cast("float64", x) - turns * wide(math.pi)
        square = r * r
        series = wide(0.0)
        for n in range(COSINE_TAYLOR_TERMS - 1, 0, -1):  # Horner in r^2 on the coefficients of r^(2n)
            series = square * (wide((-1) ** n / math.factorial(2 * n)) + series)
        odd = turns - wide(2.0) * tirx.floor(turns * wide(0.5))
        return tirx.Cast(FLOAT, (wide(1.0) + series) * (wide(1.0) - wide(2.0) * odd))

    return _bound(value, expand, "cos_x")


EXPANSIONS = {"tirx.exp": exp, "tirx.tanh": tanh, "tirx.sigmoid": sigmoid, "tirx.atan2": atan2, "tirx.cos": cos}


def _expand(call):
    expansion = EXPANSIONS.get(getattr(call.op, "name", None))
    if expansion is None or str(call.ty) != FLOAT:
        return call
    return expansion(*call.args)


def expand_transcendentals(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """`func` with every float32 exp / tanh / sigmoid call written out (module docstring)."""
    body = tvm_ffi.structural_map(func.body, [(Call, _expand)], order="post")
    return func if body.same_as(func.body) else func.with_body(body)


def VectorizableTranscendentals():  # noqa: N802 (TVM pass naming)
    """A module pass: `expand_transcendentals` on every PrimFunc."""

    @tvm.transform.module_pass(opt_level=0, name="VectorizableTranscendentals")
    def _pass(mod, _ctx):
        updates = {}
        for gv, func in mod.functions_items():
            if isinstance(func, tirx.PrimFunc):
                expanded = expand_transcendentals(func)
                if not expanded.same_as(func):
                    updates[gv] = expanded
        for gv, func in updates.items():
            mod[gv] = func
        return mod

    return _pass
