"""The packed conv steps alone: a compiled loop that issues nothing but `vpdpbusd` (kokoro_tvm.compiler.int8) or
`vdpbf16ps` (compiler.bf16) on register accumulators, so its rate is the rate this CPU issues the instruction
at: what no conv of ours can pass. `kokoro_tvm.commands.bench_kernels.instruction_peak` times it and `--conv-rates`
reports the model's convs against it.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm.script import tirx as T

from kokoro_tvm.compiler import bf16, int8
from kokoro_tvm.compiler.passes.llvm_kernels import ImportLLVMKernels
from kokoro_tvm.compiler.targets import host_target


@dataclass(frozen=True)
class PackedStep:
    """One 16-lane packed step as the convs use it."""

    mark: str  # the name FuseTIR keeps in a fused conv function's name
    extern: str  # the LLVM function of one step (ImportLLVMKernels)
    accumulator: str  # the accumulator's scalar type
    operations: int  # multiplies and adds per step
    words: tuple[int, int]  # the operands the peak loop feeds it (small values: float sums stay normal)


PACKED_STEPS = {
    "int8": PackedStep("int8_conv1d", "kokoro_dpbusd16", "int32", 16 * 4 * 2, (0x01020304, 0x01010101)),
    "bf16": PackedStep("bf16_conv1d", "kokoro_dpbf16ps16", "float32", 16 * 2 * 2, (0x3C003C00, 0x3C003C00)),
}
PEAK_CHAINS = 12  # independent accumulators: more than the instruction's latency x its issue rate on Zen 4
LANES = 16


def peak_loop(kind: str, threads: int = 2):
    """The compiled loop for `kind` ("int8" or "bf16"): `(out, count)`, each of `threads` threads issuing the
    step on PEAK_CHAINS register accumulators `count` times (no loads, no stores), then writing them to
    out [threads, PEAK_CHAINS x 16] (so nothing is dead code). Its function is named after the step's mark."""
    step = PACKED_STEPS[kind]
    chains, scalar, vector = PEAK_CHAINS, step.accumulator, f"{step.accumulator}x{LANES}"
    a_word, b_word = step.words

    @T.prim_func
    def peak(out: T.Buffer((threads, chains * LANES), scalar), count: T.int32):
        T.func_attr({"global_symbol": step.mark, "tirx.noalias": True})
        for thread in T.parallel(threads):
            acc = T.alloc_buffer((chains * LANES,), scalar, scope="local")
            for c in T.unroll(chains):
                acc[T.ramp(c * LANES, 1, LANES)] = T.broadcast(T.Cast(scalar, thread + c), LANES)
            for i in range(count):
                for c in T.unroll(chains):
                    acc[T.ramp(c * LANES, 1, LANES)] = T.call_pure_extern(
                        vector,
                        step.extern,
                        acc[T.ramp(c * LANES, 1, LANES)],
                        T.broadcast(a_word + T.Cast("int32", i % 2), LANES),
                        T.broadcast(b_word + thread, LANES),
                    )
            for c in range(chains * LANES):
                out[thread, c] = acc[c]

    kernels = {step.mark: int8.LLVM_KERNEL if kind == "int8" else bf16.LLVM_KERNEL}
    module = ImportLLVMKernels(kernels)(tvm.IRModule({step.mark: peak}))
    return tvm.compile(module, target=tvm.target.Target(host_target()))
