"""`UseGPURecurrence`: every CPU masked-LSTM recurrence kernel replaced by the hand-written GPU kernel of the same
shape (kokoro_tvm.compiler.ops.lstm_gpu), a serial loop dlight's rules cannot schedule."""

from __future__ import annotations

import tvm
from tvm import tirx

from kokoro_tvm.compiler.ops.lstm_gpu import gpu_recurrence_kernel, recurrence_shape


@tvm.transform.module_pass(opt_level=0, name="UseGPURecurrence")
def UseGPURecurrence(mod: tvm.IRModule, _ctx) -> tvm.IRModule:  # noqa: N802 (TVM pass naming)
    """Replace every CPU masked-LSTM recurrence kernel by the GPU kernel of the same shape."""
    updates = {}
    for gvar, func in mod.functions.items():
        shape = recurrence_shape(func) if isinstance(func, tirx.PrimFunc) else None
        if shape is not None:
            updates[gvar] = gpu_recurrence_kernel(*shape)
    if not updates:
        return mod
    mod = mod.clone()  # a pass leaves its input as it was
    for gvar, func in updates.items():
        mod[gvar] = func
    return mod
