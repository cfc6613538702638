"""`Elementwise`: injective functions inlined into one loop nest, parallel outside and vectorized inside, with the
producers a tile reads at its own positions computed per tile."""

from __future__ import annotations

import re

from tvm import s_tir

from kokoro_tvm.compiler.schedule.cpu.base import (
    CPURule,
    elementwise_loops,
    extent,
    inline_single_use,
    outputs,
    same_positions,
    vectorize_inner,
)
from kokoro_tvm.compiler.sizes import divides, fewer

# A loop whose body calls one of these runs one libm call per element: neither TVM's nor LLVM's vectorizer can help
# it, only threads. Row-parallel over a few rows, each thread gets whole rows, and the rows of a concatenation differ
# in cost: the decoder's STFT writes 11 magnitude rows (a square root) and 11 phase rows (an atan2f call), so with
# 2 threads one thread made every atan2 (10.6 ms at 416 frames, 1.02x over one thread). Such a loop is cut along
# its long axis instead, in CHUNK steps, chunks outermost. (Without a call, a plain loop stays row-parallel: LLVM
# vectorizes it, and a chunk's bound check would stop that: a concatenation in the decoder went 1.0 -> 3.1 ms.)
# float32 exp, tanh and sigmoid are not here: passes.LibmExactExp writes them out after scheduling, so their loops
# are plain loops by the time LLVM sees them.
SCALAR_MATH = re.compile(r"\bT\.(atan2|atan|sin|cos|log|pow|erf)\(")
FEW_ROWS = 64
CHUNK = 1024


def _compute_at_tile(sch: s_tir.Schedule, blocks: list, loop, size: int, lanes: int) -> list:
    """Compute each block (output-sized, read several times) per tile under `loop`, last producer first; smaller
    ones (per-channel scales, masks) stay at the root, computed once. Returns the blocks left at the root."""
    at_root = []
    for info in reversed(blocks):
        consumers = sch.get_consumers(info.block_rv)
        if fewer(outputs(sch, info.block_rv), size) or not all(
            same_positions(sch, c, info.block_rv) for c in consumers
        ):
            at_root.append(info)  # per-channel values, or read at other positions (a shift, a transpose): a
            continue  # per-tile copy would have to recompute a whole row or the whole buffer for every tile
        try:
            sch.compute_at(info.block_rv, loop, preserve_unit_loops=True)
        except s_tir.ScheduleError:
            at_root.append(info)  # e.g. a transpose: its loops do not follow the output's
            continue
        vectorize_inner(sch, info.block_rv, lanes)
    return at_root


def _chunks_along_a_long_axis(sch: s_tir.Schedule, block, loops: list) -> bool:
    """Few rows (static, under FEW_ROWS) over a long or symbolic axis that is not whole vectors, in a body that
    calls libm: parallel over (chunk of the long axis, row), chunks outermost, so each thread takes a stretch of
    every row. The loop body is unchanged (the same values); the last chunk of a row is cut short by a check."""
    if len(loops) < 2 or not SCALAR_MATH.search(str(sch.get(block).body)):
        return False
    rows = 1
    for loop in loops[:-1]:
        rows = rows * extent(sch, loop)
    inner = extent(sch, loops[-1])
    if not isinstance(rows, int) or rows >= FEW_ROWS or (isinstance(inner, int) and inner < 4 * CHUNK):
        return False
    chunk, _ = sch.split(loops[-1], [None, CHUNK])
    sch.reorder(chunk, *loops[:-1])
    sch.parallel(sch.fuse(chunk, *loops[:-1]))
    return True


class Elementwise(CPURule):
    def schedule(self, sch, infos, geometry):
        if not all(b.is_injective() for b in infos):
            return None
        remaining = inline_single_use(sch, infos[:-1])
        anchor = infos[-1]
        while anchor is not None:
            remaining, anchor = self._tile(sch, remaining, anchor, geometry)
        return sch

    @staticmethod
    def _tile(sch, producers: list, anchor, geometry) -> tuple[list, object]:
        """Schedule `anchor` in vector tiles with the `producers` it reads at its own positions computed per
        tile. Returns (the producers left, the next anchor): where the anchor reads the rest at other positions
        (the bf16 packing reads two channels at a shift), the last of them becomes the tile of the ones before
        it, rather than every one a separate pass over the whole tensor (eight passes of 15 MB each in a Snake
        before a bf16 conv, the kernel memory-bound at 13 ms)."""
        block = anchor.block_rv
        lanes = geometry.lanes(sch.get(block).writes[0].source.dtype.bits)
        loops = sch.get_loops(block)
        inner = extent(sch, loops[-1]) if loops else None
        if len(loops) < 2 or not divides(lanes, inner):
            for info in producers:
                elementwise_loops(sch, info.block_rv, lanes)
            if not _chunks_along_a_long_axis(sch, block, loops):
                elementwise_loops(sch, block, lanes)
            return [], None
        sch.parallel(sch.fuse(*loops[:-1]))
        chunk, vector = sch.split(loops[-1], [None, lanes])
        sch.vectorize(vector)
        left = _compute_at_tile(sch, producers, chunk, outputs(sch, block), lanes)
        order = [info for info in producers if info in left]
        sized = [info for info in order if not fewer(outputs(sch, info.block_rv), outputs(sch, block))]
        if not sized:
            for info in order:
                elementwise_loops(sch, info.block_rv, lanes)
            return [], None
        following = sized[-1]
        return [info for info in order if info is not following], following
