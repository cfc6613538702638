"""A running sum (cumsum) as a GPU kernel: one thread per column, a serial loop along the summed axis, the
sum kept in a wider accumulator, each output rounded to the input's dtype.

This is PyTorch's CPU cumsum, order and rounding: a float32 input summed in a float64 accumulator
(`kokoro_tvm.compiler.passes.CumsumInFloat64` gets the same on the CPU). The decoder's one running sum is
SineGen's phase, nine harmonics over the whole utterance, so nine threads each walk the frames in order.

TVM's GPU scan (what a GPU build's dispatch phase makes of `relax.cumsum`) works in log2(N) passes and divides
by N: with a symbolic length its arithmetic analysis stops the build ("Find divide by zero"). This kernel has
no such step, so the decoder's symbolic-length build gets past it (`kokoro_tvm.compiler.passes.
gpu_running_sum.UseGPURunningSum` puts it in place of every cumsum it can take).

Written with the thread loops as a parameter, as `lstm_gpu`: `bind_threads=False` gives the same loops serial,
which runs on the CPU and is how the tests check the arithmetic on a machine with no GPU.
"""

from __future__ import annotations

from tvm.script import tirx as T

from kokoro_tvm.compiler.passes.base import OPAQUE

THREADS_PER_BLOCK = 128


def gpu_running_sum_kernel(outer: int, inner: int, dtype: str, accumulator: str, bind_threads: bool = True):
    """PrimFunc(x [outer, N, inner], out [outer, N, inner]) for any N: out[o, t, i] = sum of x[o, :t+1, i],
    accumulated in `accumulator` and rounded to `dtype` at each step."""
    columns = outer * inner
    per_block = min(columns, THREADS_PER_BLOCK)
    blocks_needed = (columns + per_block - 1) // per_block

    def blocks(extent):
        return T.thread_binding(extent, thread="blockIdx.x") if bind_threads else T.serial(extent)

    def threads(extent):  # one thread per column
        return T.thread_binding(extent, thread="threadIdx.x") if bind_threads else T.serial(extent)

    scope = "local" if bind_threads else "global"

    @T.prim_func(private=True, s_tir=True)
    def running_sum_gpu(x_handle: T.handle, out_handle: T.handle):
        T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True, "op_pattern": OPAQUE})
        steps = T.int64()
        x = T.match_buffer(x_handle, (outer, steps, inner), dtype)
        out = T.match_buffer(out_handle, (outer, steps, inner), dtype)
        # in block form: relax's reshape analysis of a one-input kernel reads the body as a root block
        with T.sblock("root"):
            for block in blocks(blocks_needed):
                for thread in threads(per_block):
                    with T.sblock("running_sum"):
                        column = T.axis.spatial(blocks_needed * per_block, block * per_block + thread)
                        T.where(block * per_block + thread < columns)
                        T.reads(x[column // inner, 0:steps, column % inner])
                        T.writes(out[column // inner, 0:steps, column % inner])
                        total = T.alloc_buffer((1,), accumulator, scope=scope)
                        total[0] = T.cast(0, accumulator)
                        for t in range(steps):
                            total[0] = total[0] + T.cast(x[column // inner, t, column % inner], accumulator)
                            out[column // inner, t, column % inner] = T.cast(total[0], dtype)

    return running_sum_gpu
