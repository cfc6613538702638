"""`PackMatmulWeights`: a matmul by a weight matrix reads the weight in column panels, each the width of the CPU
kernel's register tile (kokoro_tvm.compiler.schedule.cpu.contraction).

`x @ W` with W [K, N] row-major walks one tile's N-columns down K rows N x 4 bytes apart: 3072 bytes for
ALBERT's 768 columns, 8192 for its feed-forward's 2048, strides that map every row of a panel into one or a few
L1 and L2 cache sets, so the panel is fetched again for every row tile. W is rewritten once, at load, as
[N / C, K, C] (panel, row, column within the panel) and the product reads W[n // C, k, n % C]: one panel is one
contiguous block. The products and their order over k are the same, so the values are bit for bit the same. It
runs before the weight-only work is lifted (kokoro_tvm.compiler.pipeline.lift_weight_transforms): the panels are
made once, at load.
"""

from __future__ import annotations

import math

from tvm import relax, te

from kokoro_tvm.compiler.passes.base import call_rewriting_pass, from_weights_alone, static_shape

# Fewer rows than this, all static (the style projections' one row), are a column reduction, not a tiled
# contraction (kokoro_tvm.compiler.schedule.cpu.column_reduction): their layout stays.
MIN_ROWS = 8


def panel_matmul(x: te.Tensor, panels: te.Tensor) -> te.Tensor:
    """x [..., K] times the weight W [K, N] given as panels [N / C, K, C]: out[..., n] = sum_k x[..., k] *
    panels[n // C, k, n % C]."""
    groups, depth, columns = panels.shape
    k = te.reduce_axis((0, depth), name="k")
    return te.compute(
        (*x.shape[:-1], groups * columns),
        lambda *i: te.sum(x[(*i[:-1], k)] * panels[i[-1] // columns, k, i[-1] % columns], axis=k),
        name="panel_matmul",
    )


def _panels(call, mutator, columns: int):
    """The matmul `call` reading its weight as panels `columns` wide, or the call itself."""
    x, w = call.args
    if not _packable(mutator, x, w, columns):
        return call
    depth, width = static_shape(w)
    panels = mutator.builder_.emit(relax.op.reshape(w, (depth, width // columns, columns)))
    panels = mutator.builder_.emit(relax.op.permute_dims(panels, [1, 0, 2]))
    return mutator.builder_.emit_te(panel_matmul, x, panels, primfunc_name_hint="panel_matmul")


def _packable(mutator, x, w, columns: int) -> bool:
    shape = static_shape(w)
    if shape is None or len(shape) != 2 or shape[1] % columns or shape[1] == columns:
        return False
    if str(x.ty.dtype) != "float32" or str(w.ty.dtype) != "float32" or x.ty.ndim < 2:
        return False
    if not from_weights_alone(mutator, w):
        return False
    rows = static_shape(x)
    return rows is None or math.prod(rows[:-1]) >= MIN_ROWS


def PackMatmulWeights(columns: int):  # noqa: N802 (TVM pass naming)
    """Every float32 matmul of activations (8 rows or more, or a symbolic count) by a matrix computed from the
    function's weights alone, whose N columns are a multiple of `columns`, reads that matrix as column panels
    `columns` wide."""
    return call_rewriting_pass(
        "PackMatmulWeights", "relax.matmul", lambda call, m: _panels(call, m, columns), with_mutator=True
    )
