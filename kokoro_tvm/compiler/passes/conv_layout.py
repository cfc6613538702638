"""Conv layout rewrites: the same values as the graph they replace (only the order of additions may change).

- `PolyphaseConvTranspose`: TOPI lowers ConvTranspose1d(stride s) to a convolution over the input dilated with
  s-1 zeros between samples, so s-1 of every s multiply-adds are by zero (the generator's x10 and x6
  upsamplers, the iSTFT's hop-5 overlap-add). Written as one ordinary conv with s*C_out output channels (one
  phase of the output per group of channels) and an interleave, it does only the useful work.
- `AlignConvLengths`: the CPU conv kernel (kokoro_tvm.compiler.schedule.cpu.contraction) tiles the output time
  axis in whole vectors; a length that is not a multiple of the tile would scalarize the kernel. The conv's right
  padding is extended so its output length is a multiple of ALIGN, and the extra outputs are sliced off (they
  read only zeros past the end, so the kept outputs are unchanged).
- `AlignConvRows`: on a CPU with 16 vector registers (AVX2) the conv kernel's best register tile is 6 output
  channels x 2 vectors, 12 accumulators (kokoro_tvm.compiler.schedule.cpu.contraction); the model's channel
  counts (128, 256, 1024) are not multiples of 6. Zero weight rows are added to reach one (128 -> 132) and the
  extra output channels sliced off: the kept channels are computed exactly as before. It runs before the
  weight-only work is lifted (kokoro_tvm.compiler.pipeline.lift_weight_transforms), so the padded weights are
  made once, at load.
"""

from __future__ import annotations

import tvm
from tvm import relax, te
from tvm.relax.expr_functor import PyExprMutator, mutator

from kokoro_tvm.compiler.passes.base import (
    ALIGN,
    alignment_pad,
    ints,
    rewriting_pass,
    shape_of,
    slice_last_axis,
    static_shape,
)

MIN_ALIGNED_ROWS = 24  # fewer output channels (the 22-channel harmonic conv) stay: padding would add up to a quarter


def padded_rows(rows: int, multiple: int) -> int:
    """The output channels AlignConvRows gives a conv of `rows`: the next multiple of `multiple`, or `rows` itself
    below MIN_ALIGNED_ROWS."""
    return rows if rows < MIN_ALIGNED_ROWS else rows + -rows % multiple


@mutator
class _ConvRewriter(PyExprMutator):
    def __init__(self, mod, polyphase: bool, align: int | None, rows: int | None = None):
        super().__init__(mod)
        self.polyphase, self.align, self.rows = polyphase, align, rows
        self.conv1d = tvm.ir.Op.get("relax.nn.conv1d")
        self.conv1d_transpose = tvm.ir.Op.get("relax.nn.conv1d_transpose")

    def visit_call_(self, call):
        call = super().visit_call_(call)
        rewritten = None
        if self.polyphase and call.op.same_as(self.conv1d_transpose):
            rewritten = self._polyphase(call)
        elif self.align and call.op.same_as(self.conv1d):
            rewritten = self._aligned(call)
        elif self.rows and call.op.same_as(self.conv1d):
            rewritten = self._aligned_rows(call)
        return call if rewritten is None else rewritten

    def _aligned_rows(self, call):
        attrs, w_shape = call.attrs, static_shape(call.args[1])
        if w_shape is None or attrs.kernel_layout != "OIW" or attrs.data_layout != "NCW" or int(attrs.groups) != 1:
            return None
        extra = padded_rows(w_shape[0], self.rows) - w_shape[0]
        if not extra:
            return None
        w = self.builder_.emit(relax.op.nn.pad(call.args[1], pad_width=[0, extra, 0, 0, 0, 0]))
        wide = self.builder_.emit(
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

    def _aligned(self, call):
        attrs = call.attrs
        x_shape, w_shape = shape_of(call.args[0]), static_shape(call.args[1])
        if x_shape is None or w_shape is None or attrs.data_layout != "NCW" or attrs.kernel_layout != "OIW":
            return None
        (stride,), (dilation,) = ints(attrs.strides), ints(attrs.dilation)
        left, right = ints(attrs.padding)
        length = (x_shape[2] + left + right - dilation * (w_shape[2] - 1) - 1) // stride + 1
        extra = alignment_pad(length, self.align)
        if not extra:
            return None
        wide = self.builder_.emit(
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

    def _polyphase(self, call):
        attrs = call.attrs
        x_shape, w_shape = shape_of(call.args[0]), static_shape(call.args[1])
        if x_shape is None or w_shape is None or int(attrs.groups) != 1:
            return None
        if attrs.data_layout != "NCW" or attrs.kernel_layout != "IOW" or ints(attrs.dilation) != [1]:
            return None
        (s,) = ints(attrs.strides)
        if s == 1:
            return None
        left, right = ints(attrs.padding)
        (output_padding,) = ints(attrs.output_padding)
        _, steps = x_shape[0], x_shape[2]
        c_in, c_out, k = w_shape
        length = (steps - 1) * s - left - right + k + output_padding
        taps = -(-(k + max(0, output_padding - right)) // s)  # taps per phase: ceil
        emit, op = self.builder_.emit, relax.op
        w = call.args[1]
        if taps * s > k:  # zero taps so every phase has the same count
            w = emit(op.nn.pad(w, pad_width=[0, 0, 0, 0, 0, taps * s - k]))
        # w[ci, co, j*s + r] -> W[co*s + r, ci, taps-1-j]
        w = emit(op.reshape(w, (c_in, c_out, taps, s)))
        w = emit(op.permute_dims(w, [1, 3, 0, 2]))
        w = emit(op.flip(w, axis=3))
        w = emit(op.reshape(w, (c_out * s, c_in, taps)))
        phases = emit(
            op.nn.conv1d(call.args[0], w, padding=(taps - 1, taps - 1), out_dtype=attrs.out_dtype)
        )  # [B, c_out*s, Q] with Q = steps + taps - 1; output y = q*s + r - left
        z = self.builder_.emit_te(interleave_phases, phases, s, primfunc_name_hint="polyphase_interleave")
        return slice_last_axis(z, left, left + length)


def interleave_phases(phases: te.Tensor, stride: int) -> te.Tensor:
    """[B, C * s, Q] (channel c's phase r in row c s + r) -> [B, C, Q s], out[b, c, q s + r] = phases[b, c s + r,
    q]: one gather pass that fuses with the slice and the add after it. As reshape -> transpose -> reshape, a
    symbolic length (tiles x 160 + 1) kept both reshapes as copies with a division per element: 21 ms of the int8
    decoder's 1.05 s at 416 frames for the x6 upsampler alone (2 threads, Zen 4)."""
    batch, rows, steps = phases.shape
    return te.compute(
        (batch, rows // stride, steps * stride),
        lambda b, c, j: phases[b, c * stride + j % stride, j // stride],
        name="polyphase_interleave",
    )


def PolyphaseConvTranspose():  # noqa: N802 (TVM pass naming)
    return rewriting_pass("PolyphaseConvTranspose", lambda mod: _ConvRewriter(mod, polyphase=True, align=None))


def AlignConvRows(rows: int):  # noqa: N802 (TVM pass naming)
    """Every conv1d with a static weight of at least MIN_ALIGNED_ROWS output channels computes a multiple of
    `rows` channels and keeps its own."""
    return rewriting_pass("AlignConvRows", lambda mod: _ConvRewriter(mod, polyphase=False, align=None, rows=rows))


def AlignConvLengths(align: int = ALIGN):  # noqa: N802 (TVM pass naming)
    return rewriting_pass("AlignConvLengths", lambda mod: _ConvRewriter(mod, polyphase=False, align=align))
