"""`PackedConvolutions`: the Relax rewrite the packed bf16 and int8 convs share. It finds the float32 conv1d calls
a kernel (kokoro_tvm.compiler.packed.PackedKernel) can take and hands each to the kernel's `emit` (its packing,
its conv, its dequantization) with the padding worked out."""

from __future__ import annotations

import tvm
from tvm.relax.expr_functor import PyExprMutator, mutator

from kokoro_tvm.compiler import amx
from kokoro_tvm.compiler.packed import LANES, PackedKernel, convertible
from kokoro_tvm.compiler.passes.base import alignment_pad, parameter_names, rewriting_pass, slice_last_axis
from kokoro_tvm.compiler.tuning import record as tuning
from kokoro_tvm.machine import amx_tiles


@mutator
class PackedConvRewriter(PyExprMutator):
    def __init__(self, mod, kernel: PackedKernel, select):
        super().__init__(mod)
        self.kernel, self.select, self.rewritten = kernel, select, 0
        self.conv1d = tvm.ir.Op.get("relax.nn.conv1d")

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not call.op.same_as(self.conv1d) or not convertible(call, self.kernel.group):
            return call
        if not self.select(parameter_names(self, call.args[1])):
            return call
        o, c, k = (int(d) for d in call.args[1].ty.shape)
        record = tuning.active()
        chosen = record.packed_kernel(self.kernel.tuning_class(o, c, k)) if record is not None else tuning.AVX512
        if chosen == tuning.FLOAT32:
            return call  # measured slower than the float32 conv on this CPU (kokoro_tvm.compiler.tuning)
        left, right = (int(v) for v in call.attrs.padding)
        (dilation,) = (int(v) for v in call.attrs.dilation)
        x, w = call.args
        length = x.ty.shape[2] + left + right - dilation * (int(w.ty.shape[2]) - 1)
        extra = alignment_pad(length)  # whole column tiles, as AlignConvLengths does for fp32 convs
        # Zero words past the last tap, so that the packed row is whole vectors of words and the packing pass
        # (which the AdaIN / Snake work before it fuses into) vectorizes: rows of t + 18 words (k7, dilation 3)
        # ran scalar, 0.53 s of the bf16 decoder's 2.1 s at 472 frames.
        tail = alignment_pad(x.ty.shape[2] + left + right + extra, LANES)
        emit = self.kernel.emit
        if chosen == tuning.AMX and self._tiles(o, c, length + extra, x.ty.shape[0]):
            emit = self.kernel.emit_amx  # measured faster on this CPU's tile engine
        out = emit(self.builder_, x, w, left, right + extra + tail, dilation, tail)
        self.rewritten += 1
        return slice_last_axis(out, 0, length) if extra else out

    def _tiles(self, out_channels: int, in_channels: int, length, batch) -> bool:
        """The AMX kernel can take this conv and this process may use the tile engine."""
        kind = amx.KINDS.get(self.kernel.amx or "")
        return kind is not None and amx.usable(kind, out_channels, in_channels, length, batch) and amx_tiles()


def PackedConvolutions(name: str, kernel: PackedKernel, select):  # noqa: N802 (TVM pass naming)
    """The module pass `name`: every convertible float32 conv1d whose weight's parameter names `select` accepts,
    through `kernel`."""
    return rewriting_pass(name, lambda mod: PackedConvRewriter(mod, kernel, select))
