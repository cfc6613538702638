"""Shape-generic CPU schedules for the PrimFuncs Kokoro's Relax graphs legalize to (TVM 0.27 schedules none), one
rule per file in dlight's layout. Rules are tried in order on every fused PrimFunc (dlight's
`ApplyDefaultSchedule` drives them); a rule returns None where it does not apply and the next one is tried:

- contraction.py `Contraction`: one multiply-accumulate reduction (conv1d, conv-transpose, matmul) plus injective
  producers and an epilogue, as a register-blocked direct kernel (tile choice, loop order, epilogue, and the
  packed bf16 / int8 steps tensorized);
- elementwise.py `Elementwise`: injective functions inlined into one loop nest, parallel outside and vectorized
  inside;
- column_reduction.py `ColumnReduction`: a matrix-vector product read along the output axis (a Linear layer on
  one row), vectors of outputs accumulated over the rows;
- row_reduction.py `RowReduction`: sums over the innermost axis (norm statistics), vector partial sums per row;
  then dlight's CPU `Reduction`, and a last resort, parallel_outer.py `ParallelOuter`;
- base.py: what the rules share (the rule base, extents, vectorized loops, inlining, per-tile placement).

No tuning: the same decisions for every shape, so every bucket builds in seconds. Symbolic extents (a length of
k tiles) are answered by proof (kokoro_tvm.compiler.sizes).
"""

from tvm.s_tir.dlight.base import ScheduleRule
from tvm.s_tir.dlight.cpu import Reduction

from kokoro_tvm.compiler.schedule.cpu.column_reduction import ColumnReduction
from kokoro_tvm.compiler.schedule.cpu.contraction import Contraction
from kokoro_tvm.compiler.schedule.cpu.elementwise import Elementwise
from kokoro_tvm.compiler.schedule.cpu.parallel_outer import ParallelOuter
from kokoro_tvm.compiler.schedule.cpu.row_reduction import RowReduction

__all__ = ["ColumnReduction", "Contraction", "Elementwise", "ParallelOuter", "RowReduction", "rules"]


def rules() -> list[ScheduleRule]:
    return [Contraction(), Elementwise(), ColumnReduction(), RowReduction(), Reduction(), ParallelOuter()]
