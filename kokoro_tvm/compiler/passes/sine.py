"""`VectorizableSine`: TVM lowers float32 `sin` to a scalar libm call per element (LLVM has no vector sin), and
Snake evaluates one per element of every generator activation. It is replaced by elementwise arithmetic that
vectorizes: argument reduction by pi and a Taylor polynomial, both in float64, rounded to float32 at the end
(truncation error < 1e-11 for |r| <= pi/2, far below float32's half ulp, so results are the correctly rounded
sine except at rare rounding ties). float64 graphs keep the exact `sin`. `SineRewriter` also takes a float32
arithmetic and a selection (kokoro_tvm.compiler.bf16's Snake before a bf16 conv)."""

from __future__ import annotations

import math

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from kokoro_tvm.compiler.passes.base import rewriting_pass

# Taylor terms r - r^3/3! + ...: in float64, 9 (to r^17/17!: |error| <= (pi/2)^19 / 19! < 1e-11); in float32,
# for a sine whose result is rounded to bf16 next (kokoro_tvm.compiler.bf16), 6 (to r^11/11!: (pi/2)^13 / 13!
# < 6e-8, float32's half ulp at 1; bf16 keeps 8 bits)
SINE_TAYLOR_TERMS = {"float64": 9, "float32": 6}


@mutator
class SineRewriter(PyExprMutator):
    def __init__(self, mod, arithmetic: str = "float64", select=None):
        super().__init__(mod)
        self.sin = tvm.ir.Op.get("relax.sin")
        self.arithmetic, self.select = arithmetic, select

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not call.op.same_as(self.sin) or str(call.args[0].ty.dtype) != "float32":
            return call
        if self.select is not None and not self.select(self, call.args[0]):
            return call
        op, emit = relax.op, self.builder_.emit
        arithmetic = self.arithmetic

        def const(v):
            return relax.const(v, arithmetic)

        x = emit(op.astype(call.args[0], arithmetic)) if arithmetic != "float32" else call.args[0]
        turns = emit(op.round(op.multiply(x, const(1 / math.pi))))  # k: nearest multiple of pi
        r = emit(op.subtract(x, op.multiply(turns, const(math.pi))))  # |r| <= pi/2
        r2 = emit(op.multiply(r, r))
        poly = const(0.0)
        for n in range(SINE_TAYLOR_TERMS[arithmetic] - 1, 0, -1):  # Horner in r^2 on the coefficients of r^(2n+1)
            poly = op.multiply(r2, op.add(const((-1) ** n / math.factorial(2 * n + 1)), poly))
        sine = op.add(r, op.multiply(r, poly))
        parity = op.subtract(turns, op.multiply(const(2.0), op.floor(op.multiply(turns, const(0.5)))))
        sign = op.subtract(const(1.0), op.multiply(const(2.0), parity))  # sin(r + k pi) = (-1)^k sin(r)
        result = emit(op.multiply(sign, sine))
        return op.astype(result, "float32") if arithmetic != "float32" else result


def VectorizableSine():  # noqa: N802 (TVM pass naming)
    return rewriting_pass("VectorizableSine", SineRewriter)
