"""`relax.take` legalized as TVM's own "fast" take, without the warning TVM prints for each one.

TOPI's take in "fast" mode (the Relax default, for the torch importer's embeddings, `index_select` and reflect
pads) reads `data[indices]` with no bounds check and logs "Fast mode segfaults when there are out-of-bounds
indices" for every take it legalizes: 10 lines for one build of the five components, 103 in notebook 07's full run.
Every take of ours is in bounds: the token ids (ALBERT's and the text encoder's embeddings) by the runtime's check
(`runtime.kokoro.token_ids`); ALBERT's positions (0..T-1, T <= 512) and token types (0), the decoder's linear
upsampler's neighbours (`export.linear_resample`) and its reflect pads' mirrored indices (TVM's importer), by
construction. `unchecked_take` is the same compute as TOPI's (tests/test_converters.py checks them structurally
equal), so no build's code changes; any other mode, or a take without an axis, is TOPI's.
"""

from __future__ import annotations

from tvm import te, topi
from tvm.relax import BlockBuilder, Call, Expr


def unchecked_take(data: te.Tensor, indices: te.Tensor, axis: int) -> te.Tensor:
    """`data` gathered along `axis` at `indices` (TOPI's fast take: the same names, tag and index expression)."""
    axis = axis + len(data.shape) if axis < 0 else axis
    rank = len(indices.shape)
    shape = [*data.shape[:axis], *indices.shape, *data.shape[axis + 1 :]]

    def gather(*index):
        return data(*index[:axis], indices(*index[axis : axis + rank]), *index[axis + rank :])

    axes = [f"ax{i}" for i in range(len(shape))]  # TOPI's names, so the PrimFunc is TOPI's to the letter
    return te.compute(shape, gather, name="T_take", tag="injective", varargs_names=axes)


def legalize_take(bb: BlockBuilder, call: Call) -> Expr:
    data, indices = call.args
    axis, mode = call.attrs.axis, call.attrs.mode
    if mode != "fast" or axis is None:
        return bb.call_te(topi.take, data, indices, axis, mode=mode)
    return bb.call_te(unchecked_take, data, indices, int(axis), primfunc_name_hint="take")


LEGALIZE = {"relax.take": legalize_take}  # LegalizeOps' customize_legalize_map (compiler.pipeline)
