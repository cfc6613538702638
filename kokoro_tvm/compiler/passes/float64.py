"""`DemoteFloat64`, for targets without float64 (Metal): every float32 -> float64 cast is dropped, so the float64
islands a float32 graph holds to round as PyTorch does (`kokoro_tvm.compiler.export.mix_neighbours`, SineGen's
phase interpolation) run in float32, rounded as the plain expression. Metal builds are generated and checked
for completeness here, never run (NOTES/metal.md)."""

from __future__ import annotations

import tvm
from tvm.relax.expr_functor import PyExprMutator, mutator

from kokoro_tvm.compiler.passes.base import rewriting_pass


@mutator
class _DemoteRewriter(PyExprMutator):
    def __init__(self, mod):
        super().__init__(mod)
        self.astype = tvm.ir.Op.get("relax.astype")

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if call.op.same_as(self.astype) and str(call.attrs.dtype) == "float64":
            source = call.args[0]
            if str(getattr(source.ty, "dtype", "")) == "float32":
                return source
        return call


def DemoteFloat64():  # noqa: N802 (TVM pass naming)
    return rewriting_pass("DemoteFloat64", _DemoteRewriter)
