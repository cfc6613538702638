"""`FoldConstantCalls`: Relax's FoldConstant, each PrimFunc compiled once. A call of a PrimFunc whose arguments
are all constants (in a static decoder, 51 calls of one `add` of two constants among them) is computed here and
replaced by its value, as FoldConstant does, with the same PrimFunc on the same "llvm" target; a call whose
result is larger than its largest argument (a `full`, a broadcast) stays a call, fused later into its consumer,
which is where FoldConstant leaves it too. FoldConstant compiles the PrimFunc again for every call: the legalize
phase of a static decoder took 12.2 s, 8.5 of them in FoldConstant, on a Zen 2.

FoldConstant still runs after this pass and finds what is left. With it, every component (static and symbolic,
float32 and float64) lowered to the same module, constants included, as with FoldConstant alone;
tests/test_compile.py checks that on F0/N's legalize phase."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, tirx
from tvm.relax.expr_functor import PyExprMutator, mutator

from kokoro_tvm.compiler.passes.base import ints, rewriting_pass

EVALUATION_TARGET = "llvm"  # the target Relax's FoldConstant evaluates on


def shape_of_type(tensor_type) -> list[int] | None:
    try:
        return ints(tensor_type.shape.values)
    except (AttributeError, TypeError, ValueError):  # no shape, or a symbolic size
        return None


@mutator
class _ConstantCallFolder(PyExprMutator):
    def __init__(self, mod):
        super().__init__(mod)
        self.module = mod
        self.call_tir = tvm.ir.Op.get("relax.call_tir")
        self.compiled = {}  # PrimFunc name -> its compiled function, shared by every call of it

    def _constant(self, expr):
        if isinstance(expr, relax.Var):
            expr = self.lookup_binding(expr)
        return expr if isinstance(expr, tvm.ir.expr.Constant) else None

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not call.op.same_as(self.call_tir) or len(call.args) != 2:  # no packed integer arguments
            return call
        args = call.args[1].fields if isinstance(call.args[1], relax.Tuple) else [call.args[1]]
        values = [self._constant(a) for a in args]
        out = call.ty_args[0] if len(call.ty_args) == 1 else None  # one tensor out (not a tuple)
        shape = shape_of_type(out) if isinstance(out, relax.TensorType) else None
        if shape is None or any(v is None for v in values):
            return call
        if int(np.prod(shape)) > max((int(np.prod(v.value.shape)) for v in values), default=0):
            return call  # a `full` or broadcast: kept as a call, fused into its consumer as FoldConstant leaves it
        name = call.args[0].name_hint
        if name not in self.compiled:
            function = self.module[call.args[0]].with_attr("global_symbol", "main")
            self.compiled[name] = tirx.build(tvm.IRModule({"main": function}), EVALUATION_TARGET)["main"]
        dtype = str(out.dtype)
        result = tvm.runtime.tensor(np.empty(shape, dtype=dtype))
        self.compiled[name](*[v.value for v in values], result)
        return relax.const(result.numpy(), dtype)


def FoldConstantCalls():  # noqa: N802 (TVM pass naming)
    return rewriting_pass("FoldConstantCalls", _ConstantCallFolder)
