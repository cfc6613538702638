"""`UseGPURunningSum`: every running sum (SineGen's phase) as a serial GPU kernel with a float64 accumulator
(kokoro_tvm.compiler.ops.running_sum_gpu), in place of TVM's GPU scan, which cannot be built for a symbolic length."""

from __future__ import annotations

import functools
import math

from tvm import relax

from kokoro_tvm.compiler.ops.running_sum_gpu import gpu_running_sum_kernel
from kokoro_tvm.compiler.passes.base import call_rewriting_pass, shape_of


def _running_sum(call: relax.Call, mutator, accumulator: str):
    """`call` (a relax.cumsum) as a call of the serial GPU kernel, or `call` itself where the kernel does not
    apply (no axis, an exclusive sum, a change of dtype, a symbolic size off the summed axis)."""
    x, attrs = call.args[0], call.attrs
    dtype, shape = str(x.ty.dtype), shape_of(x)
    if attrs.axis is None or attrs.exclusive or str(attrs.dtype or dtype) != dtype or shape is None:
        return call
    if dtype not in ("float32", "float64"):
        return call
    axis = int(attrs.axis) % len(shape)
    others = shape[:axis] + shape[axis + 1 :]
    if not all(isinstance(size, int) for size in others):
        return call
    outer, inner = math.prod(shape[:axis]), math.prod(shape[axis + 1 :])
    kernel = mutator.builder_.add_func(gpu_running_sum_kernel(outer, inner, dtype, accumulator), "running_sum_gpu")
    columns = [outer, shape[axis], inner]
    if len(shape) == 3 and axis == 1:  # already [outer, N, inner]: no reshape (each would be a copy kernel)
        return relax.call_tir(kernel, [x], relax.TensorType(columns, dtype))
    summed = relax.call_tir(kernel, [relax.op.reshape(x, columns)], relax.TensorType(columns, dtype))
    return relax.op.reshape(summed, x.ty.shape)


def UseGPURunningSum(accumulator: str = "float64"):  # noqa: N802 (TVM pass naming)
    """Every running sum the serial GPU kernel can take, computed by it with an `accumulator` sum (float64:
    PyTorch's CPU cumsum bit for bit, but for rare last-bit ties)."""
    return call_rewriting_pass(
        "UseGPURunningSum", "relax.cumsum", functools.partial(_running_sum, accumulator=accumulator), with_mutator=True
    )
