"""`CountHandWritten`: how many functions of a GPU build are the hand-written recurrence kernel, not a dlight rule's."""

from __future__ import annotations

import tvm
from tvm import tirx

from kokoro_tvm.compiler.ops.lstm_gpu import recurrence_shape
from kokoro_tvm.compiler.schedule.gpu import HAND_WRITTEN


def CountHandWritten(counts: dict[str, int]):  # noqa: N802 (TVM pass naming)
    """Counts, into `counts[HAND_WRITTEN]`, the recurrence kernels the hand-written GPU kernel takes: the GPU
    build's schedule coverage (kokoro_tvm.compiler.gpu_sources shows it) names them beside dlight's rules."""

    @tvm.transform.module_pass(opt_level=0, name="CountHandWritten")
    def _pass(mod, _ctx):
        found = sum(isinstance(f, tirx.PrimFunc) and recurrence_shape(f) is not None for f in mod.functions.values())
        if found:
            counts[HAND_WRITTEN] = counts.get(HAND_WRITTEN, 0) + found
        return mod

    return _pass
