"""A GPU schedule rule for element-wise work on batched symbolic-length tensors: the batch (and any other leading
axes of fixed size) on the grid's y axis, the symbolic length on x.

dlight's Fallback fuses every spatial loop of a block into one and splits it over blocks and threads. For a
batch of B > 1 utterances that fuses the batch with the symbolic length, and each index becomes a floor
division and remainder by a symbolic extent; where the block already divides the length (the polyphase
interleave of the x300 upsampling reads `x[b, i % 5, i // 5]`), TVM's lowering cannot prove the padded
division exact and stops the build ("The padding factor (s * 4800 + 175) * 5 is not divisible by s * 4800 +
175"): the batch-4 decoder for CUDA did. Kept apart, the length's index is the batch-1 kernel's, which builds.

The rule comes after Fallback and sees only what Fallback's schedule could not be lowered for (gpu.py,
LowersOrDeclines): batch-1 kernels stay Fallback's. It takes a function where every block left after inlining
is spatial, its outermost loop has a fixed extent above 1 (the batch) and a later loop has a symbolic extent.
"""

from __future__ import annotations

from tvm import s_tir, tirx
from tvm.s_tir.dlight import base
from tvm.s_tir.dlight.analysis import normalize_prim_func
from tvm.s_tir.dlight.base import try_inline
from tvm.s_tir.dlight.gpu.base import GPUScheduleRule

# CUDA's limit on gridDim.y (and z); gridDim.x goes to 2**31 - 1
GRID_Y_LIMIT = 65535


def _split_point(extents: list) -> int | None:
    """How many leading loops have fixed extents, where the first has an extent above 1 and a later one is
    symbolic; None where the block is not of that form."""
    fixed = next((i for i, extent in enumerate(extents) if not isinstance(extent, tirx.IntImm)), None)
    if not fixed or int(extents[0]) <= 1:
        return None
    rows = 1
    for extent in extents[:fixed]:
        rows *= int(extent)
    return fixed if rows <= GRID_Y_LIMIT else None


class BatchRowsOnGridY(GPUScheduleRule):
    """The module docstring's rule."""

    def apply(self, func: tirx.PrimFunc, target, _tunable: bool) -> s_tir.Schedule | None:
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
        sch = s_tir.Schedule(func)
        infos = normalize_prim_func(sch)
        if infos is None:
            return None
        infos = try_inline(sch, infos)
        plans = []
        for info in infos:
            loops = sch.get_loops(info.block_rv)
            split = _split_point([sch.get(loop).extent for loop in loops])
            if info.dom_kind() != "S" * len(loops) or split is None:
                return None
            plans.append((loops, split))
        threads = base.max_threads_per_block(target)
        for loops, split in plans:
            sch.bind(sch.fuse(*loops[:split]) if split > 1 else loops[0], "blockIdx.y")
            length = sch.fuse(*loops[split:]) if len(loops) - split > 1 else loops[split]
            blocks, per_block = sch.split(length, factors=[None, threads])
            sch.bind(blocks, "blockIdx.x")
            sch.bind(per_block, "threadIdx.x")
        return sch
