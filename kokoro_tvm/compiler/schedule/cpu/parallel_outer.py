"""`ParallelOuter`: the last resort, the outermost spatial loops of every block in parallel."""

from __future__ import annotations

from kokoro_tvm.compiler.schedule.cpu.base import CPURule


class ParallelOuter(CPURule):
    def schedule(self, sch, infos, geometry):
        for block in infos:
            loops = sch.get_loops(block.block_rv)
            spatial = [loop for loop, kind in zip(loops, block.dom_kind(), strict=True) if kind == "S"]
            if spatial and spatial == loops[: len(spatial)]:
                sch.parallel(sch.fuse(*spatial) if len(spatial) > 1 else spatial[0])
        return sch
