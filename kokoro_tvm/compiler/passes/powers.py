"""`IntegerPowers`: `power(x, 2)` and `power(x, 3)` (ALBERT's tanh-GELU cubes every activation) become products,
which is what PyTorch computes for these exponents; TVM called `powf` per element."""

from __future__ import annotations

import tvm
from tvm import relax

from kokoro_tvm.compiler.passes.base import call_rewriting_pass


def _as_products(call):
    exponent = call.args[1]
    if not isinstance(exponent, tvm.ir.expr.Constant) or exponent.value.numpy().size != 1:
        return call
    value = float(exponent.value.numpy().reshape(()))
    x = call.args[0]
    if value == 2.0:
        return relax.op.multiply(x, x)
    if value == 3.0:  # PyTorch's order for pow(x, 3): (x * x) * x
        return relax.op.multiply(relax.op.multiply(x, x), x)
    return call


def IntegerPowers():  # noqa: N802 (TVM pass naming)
    return call_rewriting_pass("IntegerPowers", "relax.power", _as_products)
