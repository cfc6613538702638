"""`AlignConvRows`: on a CPU with 16 vector registers (AVX2) the conv kernel's best register tile is 6 output
channels x 2 vectors, 12 accumulators (kokoro_tvm.compiler.schedule.cpu.contraction); the model's channel
counts (128, 256, 1024) are not multiples of 6. Zero weight rows are added to reach one (128 -> 132) and the
extra output channels sliced off: the kept channels are computed exactly as before. It runs before the
weight-only work is lifted (kokoro_tvm.compiler.pipeline.lift_weight_transforms), so the padded weights are
made once, at load.
"""

from __future__ import annotations

from tvm import relax

from kokoro_tvm.compiler.passes.base import call_rewriting_pass, ints, static_shape

MIN_ALIGNED_ROWS = 24  # fewer output channels (the 22-channel harmonic conv) stay: padding would add up to a quarter


def padded_rows(rows: int, multiple: int) -> int:
    """The output channels AlignConvRows gives a conv of `rows`: the next multiple of `multiple`, or `rows` itself
    below MIN_ALIGNED_ROWS."""
    return rows if rows < MIN_ALIGNED_ROWS else rows + -rows % multiple


def AlignConvRows(rows: int):  # noqa: N802 (TVM pass naming)
    """Every conv1d with a static weight of at least MIN_ALIGNED_ROWS output channels computes a multiple of
    `rows` channels and keeps its own."""
    return call_rewriting_pass("AlignConvRows", "relax.nn.conv1d", lambda call, m: _aligned_rows(call, m, rows), True)


def _aligned_rows(call, mutator, rows: int):
    attrs, w_shape = call.attrs, static_shape(call.args[1])
    if w_shape is None or attrs.kernel_layout != "OIW" or attrs.data_layout != "NCW" or int(attrs.groups) != 1:
        return call
    extra = padded_rows(w_shape[0], rows) - w_shape[0]
    if not extra:
        return call
    w = mutator.builder_.emit(relax.op.nn.pad(call.args[1], pad_width=[0, extra, 0, 0, 0, 0]))
    wide = mutator.builder_.emit(
        relax.op.nn.conv1d(
            call.args[0],
            w,
            strides=ints(attrs.strides),
            padding=ints(attrs.padding),
            dilation=ints(attrs.dilation),
            out_dtype=attrs.out_dtype,
        )
    )
    return relax.op.strided_slice(wide, axes=[1], begin=[0], end=[w_shape[0]], assume_inbound=True)
