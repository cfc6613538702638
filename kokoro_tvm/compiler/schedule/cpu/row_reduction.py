"""`RowReduction`: commutative reductions over the innermost axis, in vector partial sums per row."""

from __future__ import annotations

from tvm import s_tir

from kokoro_tvm.compiler.schedule.cpu.base import (
    CPURule,
    elementwise_loops,
    extent,
    inline_single_use,
)
from kokoro_tvm.compiler.sizes import at_least, divides
from kokoro_tvm.compiler.targets import CPUGeometry

FEW_RESULTS = 4  # a last spatial axis this short is computed inside the row's loop (see `_rows`)


class RowReduction(CPURule):
    """Sums (and other commutative reductions) over the innermost axis: norm statistics over a whole
    utterance, up to 128 x 57,632 values. A scalar loop is one dependent add per element (latency-bound, ~9 GB/s
    here); instead each row keeps `lanes` partial results in a vector register (rfactor), and the rows are spread
    over the cores. Producers read once are inlined, so `sum(x * mask)` reads x once and writes nothing. The sum
    is taken in a different order than a serial loop (lane by lane, then across lanes): a float32 rounding
    difference, exact in float64 within its last bits; tests compare against torch with explicit tolerances."""

    def schedule(self, sch, infos, geometry):
        reductions = [b for b in infos if b.is_reduction()]
        if not reductions or not all(b.is_reduction() or b.is_injective() for b in infos):
            return None
        if any(b.dom_kind().count("R") != 1 or not b.dom_kind().endswith("R") for b in reductions):
            return None
        remaining = inline_single_use(sch, [b for b in infos[:-1] if not b.is_reduction()])
        for info in reductions:
            self._rows(sch, info.block_rv, geometry)
        for info in remaining + ([] if infos[-1].is_reduction() else [infos[-1]]):
            elementwise_loops(sch, info.block_rv, geometry.lanes(sch.get(info.block_rv).writes[0].source.dtype.bits))
        return sch

    @staticmethod
    def _rows(sch: s_tir.Schedule, block, geometry: CPUGeometry) -> None:
        """Parallel over the rows; within a row, `lanes` partial results in one vector, then combined."""
        lanes = geometry.lanes(sch.get(block).writes[0].source.dtype.bits)
        *spatial, reduce = sch.get_loops(block)
        length = extent(sch, reduce)
        if not spatial or not divides(lanes, length) or not at_least(length, 4 * lanes):
            if spatial:  # short or ragged rows: a plain loop per row, the rows in parallel
                sch.parallel(sch.fuse(*spatial) if len(spatial) > 1 else spatial[0])
            return
        # A few results per row from the same values (a channel's -min and max, kokoro_tvm.compiler.int8): that
        # short axis goes inside the row's loop, so the row is read once for all of them, not once per result.
        together = extent(sch, spatial[-1]) if len(spatial) > 1 else None
        together = together if isinstance(together, int) and 2 <= together <= FEW_RESULTS else None
        partial = sch.rfactor(sch.split(reduce, [None, lanes])[1], factor_axis=len(spatial))
        rows = sch.get_loops(block)[: len(spatial) - (1 if together else 0)]
        row = sch.fuse(*rows) if len(rows) > 1 else rows[0]
        sch.parallel(row)
        sch.compute_at(partial, row)
        if together:
            *_, lane_axis, result, reduce_outer = sch.get_loops(partial)
            sch.reorder(reduce_outer, result, lane_axis)
            sch.unroll(result)
        else:
            *_, lane_axis, reduce_outer = sch.get_loops(partial)
            sch.reorder(reduce_outer, lane_axis)
        sch.vectorize(lane_axis)
        init = sch.decompose_reduction(partial, reduce_outer)
        sch.vectorize(sch.get_loops(init)[-1])
        sch.set_scope(partial, 0, "local")
