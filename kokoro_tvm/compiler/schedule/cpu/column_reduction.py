"""`ColumnReduction`: a matrix-vector product whose matrix is read along its output axis, y[j] = sum_k v[k] W[k, j]
(a Linear layer on one row: AdaIN's and AdaLayerNorm's style projections, W transposed at load)."""

from __future__ import annotations

from tvm import tirx

from kokoro_tvm.compiler.schedule.cpu.base import CPURule, elementwise_loops, extent, inline_single_use
from kokoro_tvm.compiler.sizes import divides


def _column_contiguous(stmt) -> bool:
    """Some operand is read at [.., k, j]: its last index is the output position, another one the reduction's."""
    spatial, reduce = stmt.iter_vars[0].var, stmt.iter_vars[1].var
    for region in stmt.reads:
        if region.source.name == stmt.writes[0].source.name or len(region.region) < 2:
            continue
        indices = [tirx.analysis.undefined_vars(r.min) for r in region.region]
        if [v.name for v in indices[-1]] == [spatial.name] and any(
            any(v.same_as(reduce) for v in variables) for variables in indices[:-1]
        ):
            return True
    return False


class ColumnReduction(CPURule):
    """One output axis j and one reduction k, the matrix read as W[k, j]. RowReduction would vectorize k, a
    stride of a whole row per lane (gathers): 0.46 ms for 128 x 2048 values. Here `lanes` outputs are one vector
    accumulator, each step a broadcast of v[k] times a contiguous vector of W's row k; the vectors of outputs
    go to the cores."""

    def schedule(self, sch, infos, geometry):
        reductions = [b for b in infos if b.is_reduction()]
        if len(reductions) != 1 or reductions[0].dom_kind() != "SR":
            return None
        if not all(b.is_reduction() or b.is_injective() for b in infos):
            return None
        main = reductions[0].block_rv
        if not _column_contiguous(sch.get(main)):
            return None
        lanes = geometry.lanes(sch.get(main).writes[0].source.dtype.bits)
        output, reduce = sch.get_loops(main)
        if not divides(lanes, extent(sch, output)):
            return None
        position = infos.index(reductions[0])
        remaining = inline_single_use(sch, infos[:position])
        outer, vector = sch.split(output, [None, lanes])
        sch.reorder(outer, reduce, vector)
        accumulator = sch.cache_write(main, 0, "local")
        sch.reverse_compute_at(accumulator, outer)
        sch.vectorize(sch.get_loops(accumulator)[-1])
        sch.parallel(outer)
        sch.vectorize(vector)
        init = sch.decompose_reduction(main, reduce)
        sch.vectorize(sch.get_loops(init)[-1])
        for info in remaining + infos[position + 1 :]:
            elementwise_loops(sch, info.block_rv, geometry.lanes(sch.get(info.block_rv).writes[0].source.dtype.bits))
        return sch
