"""`CompactSymbolicBuffers`: tile buffers of symbolic-length PrimFuncs compacted to a fixed size (why:
kokoro_tvm.compiler.symbolic). Runs in the pipeline's schedule phase, after the schedule rules."""

from __future__ import annotations


def CompactSymbolicBuffers():  # noqa: N802 (TVM pass naming)
    """A module pass for the scheduled module: every PrimFunc whose buffers have a symbolic shape gets its
    blocks lowered and its buffers compacted to the region each loop nest touches, not clipped by the
    buffer's extent (`CompactBufferAllocation(is_strict=False)`), so tile buffers have a fixed size. PrimFuncs
    with static shapes are left to TVM's lowering as before (their builds are unchanged)."""
    import tvm
    from tvm import s_tir, tirx

    compact = tvm.transform.Sequential(
        [
            # first, as in TVM's own lowering: a GPU reduction across threads is found by its block, which the
            # steps below make opaque (after them a CUDA build summed into shared memory from every thread at
            # once, a race that gave the symbolic duration and text encoder wrong outputs on an H200)
            s_tir.transform.LowerCrossThreadReduction(),
            s_tir.transform.LowerInitBlock(),
            s_tir.transform.PlanAndUpdateBufferAllocationLocation(),
            s_tir.transform.ConvertBlocksToOpaque(),
            s_tir.transform.CompactBufferAllocation(is_strict=False),
        ]
    )

    def symbolic(func) -> bool:  # a size variable is passed as a scalar parameter beside the buffers
        return any(isinstance(param.ty, tvm.ir.PrimType) for param in func.params)

    @tvm.transform.module_pass(opt_level=0, name="CompactSymbolicBuffers")
    def _pass(mod, _ctx):
        updates = {}
        for gv, func in mod.functions_items():
            if isinstance(func, tirx.PrimFunc) and symbolic(func):
                updates[gv] = compact(tvm.IRModule({gv: func}))[gv]
        for gv, func in updates.items():
            mod[gv] = func
        return mod

    return _pass
