"""`VectorizableSine`: TVM lowers float32 `sin` to a scalar libm call per element (LLVM has no vector sin), and
Snake evaluates one per element of every generator activation. It is replaced by elementwise arithmetic that
vectorizes: argument reduction by pi and a Taylor polynomial, both in float64, rounded to float32 at the end
(truncation error < 1e-11 for |r| <= pi/2, far below float32's half ulp, so results are the correctly rounded
sine except at rare rounding ties). float64 graphs keep the exact `sin`.
(kokoro_tvm.compiler.passes.snake_sine rewrites Snake's sines in float32 with the same rewriter.)"""

from __future__ import annotations

import math

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from kokoro_tvm.compiler.passes.base import rewriting_pass

# Taylor terms r - r^3/3! + ...: in float64, 9 (to r^17/17!: |error| <= (pi/2)^19 / 19! < 1e-11); in float32, 7
# (to r^13/13!: (pi/2)^15 / 15! < 1e-9, below the float32 rounding of the polynomial's own steps)
SINE_TAYLOR_TERMS = {"float64": 9, "float32": 7}
# pi = 3.140625 + 9.67502593994140625e-4 + the rest: the first two have 8 and 12 significant bits
PI_PARTS = (3.140625, 9.67502593994140625e-4, math.pi - 3.140625 - 9.67502593994140625e-4)


@mutator
class SineRewriter(PyExprMutator):
    def __init__(self, mod, arithmetic: str = "float64", select=None, terms: int | None = None):
        super().__init__(mod)
        self.sin = tvm.ir.Op.get("relax.sin")
        self.arithmetic, self.select = arithmetic, select
        self.terms = terms or SINE_TAYLOR_TERMS[arithmetic]

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
        parts = PI_PARTS if arithmetic == "float32" else (math.pi,)
        r = x
        for part in parts:
            r = op.subtract(r, op.multiply(turns, const(part)))
        r = emit(r)  # |r| <= pi/2
        r2 = emit(op.multiply(r, r))
        poly = const(0.0)
        for n in range(self.terms - 1, 0, -1):  # Horner in r^2 on the coefficients of r^(2n+1)
            poly = op.multiply(r2, op.add(const((-1) ** n / math.factorial(2 * n + 1)), poly))
        sine = op.add(r, op.multiply(r, poly))
        parity = op.subtract(turns, op.multiply(const(2.0), op.floor(op.multiply(turns, const(0.5)))))
        sign = op.subtract(const(1.0), op.multiply(const(2.0), parity))  # sin(r + k pi) = (-1)^k sin(r)
        result = op.multiply(sign, sine)
        # returned as a call, not a bound variable: a binding `sin_value = other_var` left in the graph stopped
        # FuseOps from fusing the sine with its consumer (Snake's square), a pass over memory more per Snake
        return op.astype(emit(result), "float32") if arithmetic != "float32" else result


def VectorizableSine():  # noqa: N802 (TVM pass naming)
    return rewriting_pass("VectorizableSine", SineRewriter)
