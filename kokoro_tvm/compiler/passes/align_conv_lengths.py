"""`AlignConvLengths`: the CPU conv kernel (kokoro_tvm.compiler.schedule.cpu.contraction) tiles the output time
axis in whole vectors; a length that is not a multiple of the tile would scalarize the kernel. The conv's right
padding is extended so its output length is a multiple of ALIGN, and the extra outputs are sliced off (they
read only zeros past the end, so the kept outputs are unchanged).
"""

from __future__ import annotations

from tvm import relax

from kokoro_tvm.compiler.passes.base import (
    ALIGN,
    alignment_pad,
    call_rewriting_pass,
    ints,
    shape_of,
    slice_last_axis,
    static_shape,
)


def AlignConvLengths(align: int = ALIGN):  # noqa: N802 (TVM pass naming)
    """Every conv1d's output length a whole number of `align`-step column tiles (module docstring)."""
    return call_rewriting_pass("AlignConvLengths", "relax.nn.conv1d", lambda call, m: _aligned(call, m, align), True)


def _aligned(call, mutator, align: int):
    attrs = call.attrs
    x_shape, w_shape = shape_of(call.args[0]), static_shape(call.args[1])
    if x_shape is None or w_shape is None or attrs.data_layout != "NCW" or attrs.kernel_layout != "OIW":
        return call
    (stride,), (dilation,) = ints(attrs.strides), ints(attrs.dilation)
    left, right = ints(attrs.padding)
    length = (x_shape[2] + left + right - dilation * (w_shape[2] - 1) - 1) // stride + 1
    extra = alignment_pad(length, align)
    if not extra:
        return call
    wide = mutator.builder_.emit(
        relax.op.nn.conv1d(
            call.args[0],
            call.args[1],
            strides=stride,
            padding=(left, right + extra * stride),
            dilation=dilation,
            groups=int(attrs.groups),
            out_dtype=attrs.out_dtype,
        )
    )
    return slice_last_axis(wide, 0, length)
