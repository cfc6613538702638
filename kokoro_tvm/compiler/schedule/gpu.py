"""GPU builds (Metal, CUDA) from the same Relax modules as the CPU build.

The CPU build's Relax rewrites that change only how work is laid out (polyphase ConvTranspose, aligned conv
lengths) are kept; `VectorizableSine` is not (it reduces the argument in float64, which Metal lacks; GPUs
have a native vector `sin`). Every fused PrimFunc is then scheduled by dlight's GPU rules (Matmul, GEMV,
Reduction, GeneralReduction, Fallback, which binds any injective or leftover loop nest to threads, and, where
TVM cannot lower Fallback's schedule of batched element-wise work, our BatchRowsOnGridY: gpu_batch_rows), and
our masked-LSTM recurrence, a serial loop the rules cannot schedule, is swapped for its hand-written GPU
kernel (`kokoro_tvm.compiler.ops.lstm_gpu`), which is marked as already scheduled. So is every running sum
(SineGen's phase): a serial GPU kernel with a float64 accumulator (`kokoro_tvm.compiler.ops.running_sum_gpu`)
takes the place of TVM's GPU scan, which cannot be built for a symbolic length.
"""

from __future__ import annotations

import contextlib
import inspect
import linecache
import logging
import sys

import tvm
from tvm import s_tir, tirx
from tvm.s_tir import dlight

from kokoro_tvm.compiler.schedule.gpu_batch_rows import BatchRowsOnGridY
from kokoro_tvm.compiler.sizes import size_analyzer

log = logging.getLogger(__name__)


def _frames_without_source_lookup(context: int = 1) -> list[inspect.FrameInfo]:
    """`inspect.stack()` for TVMScript's parser: the same frames and current lines, read with linecache
    instead of `inspect.getmodule` (which scans every loaded module per frame)."""
    frames, frame = [], sys._getframe(1)
    while frame is not None:
        filename, lineno = frame.f_code.co_filename, frame.f_lineno
        line = linecache.getline(filename, lineno)
        frames.append(
            inspect.FrameInfo(
                frame, filename, lineno, frame.f_code.co_name, [line] if line else None, 0 if line else None
            )
        )
        frame = frame.f_back
    return frames


@contextlib.contextmanager
def fast_tvmscript_stack():
    """Reversible: while active, `inspect.stack` is `_frames_without_source_lookup`. dlight's GPU Matmul rule
    imports `tvm.s_tir.tensor_intrin`, 530 TVMScript functions, and the parser calls `inspect.stack()` for
    each; with torch loaded (thousands of modules) that import took 115-190 s, once per process."""
    original = inspect.stack
    inspect.stack = _frames_without_source_lookup
    try:
        yield
    finally:
        inspect.stack = original


HAND_WRITTEN = "masked LSTM (hand-written)"


class CountingRule:
    """A dlight rule that counts the functions it schedules into `counts[name]` (the GPU schedule coverage)."""

    def __init__(self, rule, counts: dict[str, int]):
        self.rule, self.counts = rule, counts
        while hasattr(rule, "rule"):  # the dlight rule's name, through its guards
            rule = rule.rule
        self.name = type(rule).__name__

    def apply(self, func, target, tunable):
        schedule = self.rule.apply(func, target, tunable)
        if schedule is not None:
            self.counts[self.name] = self.counts.get(self.name, 0) + 1
        return schedule


# What a thread block may hold in static shared memory where the target does not say (CUDA's and dlight's
# default; ptxas refuses more: "uses too much shared data").
DEFAULT_SHARED_BYTES = 48 * 1024

# The lowering steps that give each block's shared buffers their final (compacted) size; the module stays in
# block form.
_COMPACTING = (
    s_tir.transform.LowerCrossThreadReduction,
    s_tir.transform.LowerInitBlock,
    s_tir.transform.PlanAndUpdateBufferAllocationLocation,
    s_tir.transform.ConvertBlocksToOpaque,
    s_tir.transform.CompactBufferAllocation,
)


def _blocks(stmt):
    """Every block of a block-form statement."""
    if isinstance(stmt, s_tir.SBlockRealize):
        stmt = stmt.block
    if isinstance(stmt, s_tir.SBlock):
        yield stmt
        children = [stmt.init, stmt.body]
    elif isinstance(stmt, tirx.SeqStmt):
        children = list(stmt.seq)
    elif isinstance(stmt, tirx.IfThenElse):
        children = [stmt.then_case, stmt.else_case]
    else:
        children = [getattr(stmt, "body", None)]
    for child in children:
        if isinstance(child, tirx.Stmt):
            yield from _blocks(child)


def _largest(size) -> int:
    """A size at its largest: a symbolic one for tile counts up to 2**40, so a size that grows with the length is
    far over any limit, and one that is bounded (`min(960 s + 32, 32)`, a tile at the end of a symbolic row)
    counts its bound."""
    return int(size) if isinstance(size, tirx.IntImm) else size_analyzer(size).const_int_bound(size).max_value


def _most_bytes(buffer) -> int:
    """The most bytes `buffer` can take, each size at its largest."""
    elements = 1
    for size in buffer.shape:
        elements *= _largest(size)
    dtype = tvm.DataType(str(buffer.dtype))
    return elements * dtype.bits * dtype.lanes // 8


def shared_bytes(mod: tvm.IRModule) -> int:
    """The most shared memory any function of a scheduled module allocates per block once its buffers are
    compacted, a symbolic size counted at its largest. (TVM's own count, `calculate_allocated_bytes`, counts a
    symbolic size as 0 bytes: dlight's GEMV rule cached a whole symbolic-length row of the F0 conv's input,
    which CUDA code generation then refused, "Can only handle constant size stack allocation".)"""
    compacted = tvm.transform.Sequential([make() for make in _COMPACTING])(mod)
    return max(
        (
            sum(
                _most_bytes(buffer)
                for block in _blocks(func.body)
                for buffer in block.alloc_buffers
                if buffer.scope().startswith("shared")
            )
            for func in compacted.functions.values()
            if isinstance(func, tirx.PrimFunc)
        ),
        default=0,
    )


class _RefusesSchedules:
    """A dlight rule whose schedule is returned unless `refuses` says no; then the next rule tries."""

    def __init__(self, rule):
        self.rule = rule

    def refuses(self, schedule, target) -> bool:
        raise NotImplementedError

    def apply(self, func, target, tunable):
        schedule = self.rule.apply(func, target, tunable)
        return None if schedule is None or self.refuses(schedule, target) else schedule


class WithinSharedMemory(_RefusesSchedules):
    """A dlight rule whose schedule is refused where it needs more shared memory than one block may have, a
    symbolic size counted at its largest. dlight's GEMV rule caches whole rows in shared memory: the masked
    AdaIN's mean over 7712 decoder frames took 482 KiB, and ptxas refused the decoder; in a symbolic-length
    build such a row (the F0 conv's input) has no bound at all."""

    def refuses(self, schedule, target) -> bool:
        limit = int(target.attrs.get("max_shared_memory_per_block", DEFAULT_SHARED_BYTES))
        candidates = schedule if isinstance(schedule, list) else [schedule]
        return any(shared_bytes(c.mod) > limit for c in candidates)


def _rows_and_length(func: tirx.PrimFunc) -> tuple[int, int]:
    """How many values `func`'s longest reduction computes (its spatial extents) and over how many elements
    each (its reduced extents), symbolic extents at their largest; (0, 0) without a reduction."""
    found = (0, 0)
    for block in _blocks(func.body):
        extents = {"rows": 1, "length": 1}
        for var in block.iter_vars:
            extents["length" if var.iter_type == tirx.IterVar.CommReduce else "rows"] *= _largest(var.dom.extent)
        if any(var.iter_type == tirx.IterVar.CommReduce for var in block.iter_vars) and extents["length"] > found[1]:
            found = (extents["rows"], extents["length"])
    return found


class FewLongRows:
    """A rule (dlight's GEMV) refused where its function reduces rows longer than there are rows. GEMV gives
    each row one warp: the masked AdaIN's sums over the audio-rate rows (128 channels, 171,872 samples for
    36 s of speech) ran on 8 blocks of an H100's 132 multiprocessors, 2 x 24 calls took 27.5 ms of the
    decoder's 211. Refused, dlight's Reduction rule takes them: a block of 1024 threads per row."""

    def __init__(self, rule):
        self.rule = rule

    def apply(self, func, target, tunable):
        rows, length = _rows_and_length(func)
        return None if length > rows else self.rule.apply(func, target, tunable)


class DeclinesWhereItCannotApply:
    """A dlight rule that declines (the next rule tries) where one of its schedule primitives refuses the function
    its analysis accepted. dlight's Matmul folds a conv's batch into its rows; in the batch-4 decoder the strided
    conv over the harmonic source (stride 5, a symbolic length) then indexes rows by a floor division that
    `pad_einsum` cannot pad ("An error occurred in the schedule primitive 'pad-einsum'"), which stopped the whole
    build. Declined, a later rule takes that conv (11 output channels, 20 taps of one input channel)."""

    def __init__(self, rule):
        self.rule = rule

    def apply(self, func, target, tunable):
        try:
            return self.rule.apply(func, target, tunable)
        except (s_tir.schedule.ScheduleError, AssertionError) as exc:  # dlight's refusals: a primitive's, its asserts
            log.debug("%s declines (a primitive refused): %s", type(self.rule).__name__, exc)
            return None


class LowersOrDeclines(_RefusesSchedules):
    """A dlight rule (Fallback) whose schedule is refused where TVM's TIR lowering fails on it.
    Fallback fuses every spatial loop into one; for a batch of B > 1 utterances that fuses the batch with the
    symbolic length, and the polyphase interleave of the x300 upsampling (`x[b, i % 5, i // 5]`) then has an
    index FlattenBuffer cannot prove exact ("The padding factor (s * 4800 + 175) * 5 is not divisible by
    s * 4800 + 175"): the batch-4 decoder for CUDA stopped there. Refused, BatchRowsOnGridY takes it. Every
    function Fallback schedules at batch 1 flattens, so batch-1 kernels are Fallback's as before."""

    def refuses(self, schedule, target) -> bool:
        lowering, _, _ = tvm.tirx.get_default_tir_pipeline(target)  # what the VM's build runs on every function
        exported = {gv: f.with_attr("global_symbol", gv.name_hint) for gv, f in schedule.mod.functions.items()}
        try:  # as the VM's build sees it: a function with its own symbol (Relax attaches them), bound to the target
            lowering(tvm.tirx.transform.BindTarget(target)(tvm.IRModule(exported)))
        except tvm.error.InternalError as exc:
            log.debug("%s's schedule does not lower (the next rule tries): %s", type(self.rule).__name__, exc)
            return True
        return False


def rules(counts: dict[str, int] | None = None):
    """dlight's GPU rules, in the order TVM's own GPU pipeline tries them, each within the shared-memory limit and
    declining where its primitives refuse; with `counts`, each counts the functions it schedules."""

    chosen = [
        dlight.gpu.Matmul(),
        FewLongRows(dlight.gpu.GEMV()),
        dlight.gpu.Reduction(),
        dlight.gpu.GeneralReduction(),
        LowersOrDeclines(dlight.gpu.Fallback()),
        BatchRowsOnGridY(),
    ]
    guarded = [WithinSharedMemory(DeclinesWhereItCannotApply(rule)) for rule in chosen]
    return guarded if counts is None else [CountingRule(rule, counts) for rule in guarded]


def import_tensor_intrinsics() -> None:
    """Import `tvm.s_tir.tensor_intrin` and its Metal module once, quickly (dlight's GPU Matmul rules import them
    inside a rule; the package does not import `metal`, so MetalMatmul parsed it without the fast stack: ALBERT's
    Metal schedule phase took 9.0 s so and 6.0 s this way, in a fresh process, `kokoro-tvm gpu-build --target
    metal --components albert --tokens 16` on a 2-core Zen 2)."""
    with fast_tvmscript_stack():
        import tvm.s_tir.tensor_intrin  # noqa: F401  (deferred: it must run under fast_tvmscript_stack)
        import tvm.s_tir.tensor_intrin.metal  # noqa: F401  (deferred: MetalMatmul's own import, under the stack too)
