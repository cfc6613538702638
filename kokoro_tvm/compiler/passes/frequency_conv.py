"""`FrequencyDomainConvs`: a float32 conv with a long kernel (the generator's 7- and 11-tap resblock convs) as
products in the frequency domain, overlap-save.

A conv of C input and O output channels with k taps does k multiply-adds per output step and channel pair;
the same outputs from N-point DFTs of input tiles cost, per bin, one complex C x O product, (N/2 + 1) bins for m
outputs per tile: 4 (N/2 + 1) / m real multiply-adds per step and channel pair, 2.75 for N = 64, m = 48, against
11 taps. The DFTs (small matmuls by constant matrices) add 2 N (N + 2) / m flops per step and channel,
which the product's O-fold reuse pays for when k is long. Each step is a contraction that the CPU kernel
(kokoro_tvm.compiler.schedule.cpu.contraction) tiles with a broadcast row operand and a vector column operand:

    frames    F[c, n, t] = x[c, t m + n - pad]                       (zero outside x)
    forward   X[c, j, t] = sum_n D[j, n] F[c, n, t]                  j = 2 b + s: bin b, re / im s
    product   Y[b, r, t] = sum_(s, c) W[b, r, s C + c] X[c, 2b + s, t]  W[b] = [[Gr, -Gi], [Gi, Gr]], 2O' x 2C
    inverse   y[o, t, q] = sum_(b, s) Y[b, s O' + o, t] E[2b + s, q] q < m: the valid outputs of tile t

(O' >= O: on AVX2 each half of the product's rows is padded with zero rows to whole 6-row register tiles.)
A batch of B utterances of T tiles each runs as one utterance of B T tiles: the frames are F[c, n, u, t], read as
[C, N, B T] through a view, and y, viewed as [O, B, T m], is transposed to the conv's [B, O, T m]. Decoder at 256
frames, batch 2 against two batch-1 calls, fp32 on the Zen 5: 1.05x, where it cost 1.24x with every long conv
direct (NOTES/performance.md, "Batching").
A conv wider than HALF_SPECTRA_ABOVE channels keeps half those spectra, W[b] = [Gr, -Gi] (O' x 2C), and its
forward DFT gives three rows per bin, Re, Im and -Re (j = 3 b + u), so that both halves of the product read the
same weights: Y[b, h O' + o, t] = sum_(s, c) W[b, o, s C + c] X[c, 3b + h + s, t] is Gr Re - Gi Im for h = 0 and
Gr Im + Gi Re for h = 1, the -Re row carrying the sign (on AVX2 the 3B rows are padded to whole 6-row tiles).

G = conj(DFT(w)) per channel pair (a correlation, as conv1d computes) is computed from the weights alone, so
`lift_weight_transforms` makes it once, at load. The values are the conv's to float32 rounding (about 4e-7 of
the output's norm against a float64 conv, as the direct kernel's 7e-7; tests/test_frequency_conv.py), not bit for
bit: only fp32 builds take it (kokoro_tvm.compiler.pipeline.frequency_domain_convs), for the shapes this CPU's
tuning record measured faster so (kokoro_tvm.compiler.tuning.frequency), or by the heuristic `tiling` on x86.
"""

from __future__ import annotations

import math

import numpy as np
from tvm import relax, te, tirx

from kokoro_tvm.compiler.passes.base import (
    OPAQUE,
    call_rewriting_pass,
    from_weights_alone,
    ints,
    shape_of,
    static_shape,
)
from kokoro_tvm.compiler.tuning import record as tuning

# The heuristic, for a CPU whose tuning record did not time these convs. Per dilation: (fewest taps taken, DFT points
# N, outputs per tile m), with N - m + 1 >= the kernel's span and m a whole number of 16-column tiles. On a 2-core
# Zen 2 (the Zen 4's tuner took each of these shapes too), against the direct kernel, one conv
# at a time (`python -m kokoro_tvm.studies.frequency_convs --all`; NOTES/performance.md): undilated 11 taps
# 1.6-1.8x, 7 taps 1.1x; 11 taps at dilation 3 1.1-1.4x; 3 taps, and 7 taps dilated, slower; 11 at dilation 5
# within 15%.
TILINGS = {1: (7, 64, 48), 3: (11, 128, 96)}
# A conv wider than WIDE_CHANNELS had whole spectra of 35-69 MB (B x 2O x 2C floats; half since HALF_SPECTRA_ABOVE),
# read from memory at every call: in the decoder only the 11-tap undilated ones paid for theirs (the bench sentence
# 3.49 s without any of the 256-channel ones, 3.31 s with those, 3.23 s with all, for 1.59 / 1.73 / 2.09 GB peak).
WIDE_CHANNELS, WIDE_TILINGS = 128, {1: (11, 64, 48)}
# Half spectra, for 3 forward rows a bin instead of 2 (module docstring): on the Zen 4 (2 threads, each conv shape of
# the decoder at its length of 256 frames, interleaved) as fast as the whole ones at 256 channels (15.6 against 15.7
# ms for 11 taps, 15.7 / 15.8 for 7, 20.0 / 20.6 at dilation 3), where the weights are read at every call, and 5-15%
# slower at 128 channels (33.1 / 31.4 ms, 34.0 / 29.5 for 7 taps), whose 6x longer inputs make the forward DFT weigh.
HALF_SPECTRA_ABOVE = 128
MIN_CHANNELS = 64  # narrower convs (the 22-channel harmonic one) stay direct: not measured, the DFTs weigh more
TILE_COLUMNS = 16  # the tile axis T in whole column tiles of the contraction kernel
# What the tuner times against the direct kernel (kokoro_tvm.compiler.tuning.frequency), per dilation: a tile whose
# span N - m + 1 holds an 11-tap kernel. Convs of fewer than MEASURED_TAPS taps are not timed: at 3 taps the
# direct kernel was 1.6-2.1x faster on the Zen 2 and on the Zen 4 (the DFTs alone cost more than 3 taps).
MEASURED_TILINGS, MEASURED_TAPS = {1: (64, 48), 3: (128, 96), 5: (128, 64)}, 7


def tiling(taps: int, dilation: int, channels: int, length=None) -> tuple[int, int] | None:
    """The heuristic: (N, m) for a conv of `taps` taps at `dilation` whose wider side has `channels` channels, or
    None where the direct kernel is kept (`length`, the conv's steps, is not used)."""
    rule = (TILINGS if channels <= WIDE_CHANNELS else WIDE_TILINGS).get(dilation)
    if rule is None:
        return None
    fewest, points, step = rule
    return (points, step) if taps >= fewest and dilation * (taps - 1) + 1 <= points - step + 1 else None


def measured_tiling(taps: int, dilation: int) -> tuple[int, int] | None:
    """The tiles the tuner times a conv of `taps` taps at `dilation` with, or None where it keeps it direct."""
    points, step = MEASURED_TILINGS.get(dilation, (0, 0))
    return (points, step) if taps >= MEASURED_TAPS and dilation * (taps - 1) + 1 <= points - step + 1 else None


def conv_key(channels: int, taps: int, dilation: int) -> str:
    """A conv shape as a tuning record names it: "c128-k11-d1" (the wider side's channels, taps, dilation)."""
    return f"c{channels}-k{taps}-d{dilation}"


def chosen_tiling(taps: int, dilation: int, channels: int, length=None) -> tuple[int, int] | None:
    """What a build takes: the tuning record's measured decision for this shape where the record in use measured
    this CPU's convs (a shape it did not time stays direct), else the heuristic `tiling`."""
    record = tuning.active()
    if record is None or not record.frequency:
        return tiling(taps, dilation, channels)
    chosen = record.frequency.get(conv_key(channels, taps, dilation))
    return (int(chosen[0]), int(chosen[1])) if chosen else None


def dft_matrices(points: int, step: int) -> tuple[np.ndarray, np.ndarray]:
    """D [2B, N] (row 2b: cos, 2b + 1: -sin of bin b: the real DFT, re / im interleaved by bin) and E [2B, m]
    (the inverse DFT's first m samples from the same interleaved rows), B = N / 2 + 1, in float64."""
    bins = np.arange(points // 2 + 1)
    angle = 2 * np.pi * np.outer(bins, np.arange(points)) / points
    forward = np.stack([np.cos(angle), -np.sin(angle)], axis=1).reshape(2 * len(bins), points)
    weight = np.where((bins == 0) | (bins == points // 2), 1.0, 2.0)[:, None] / points
    back = 2 * np.pi * np.outer(bins, np.arange(step)) / points
    inverse = np.stack([weight * np.cos(back), -weight * np.sin(back)], axis=1).reshape(2 * len(bins), step)
    return forward, inverse


def spectrum_floats(channels: int, points: int) -> int:
    """The floats of one conv's kernel spectra, `channels` in and out: B x 2O x 2C, or half that (module docstring)."""
    return (points // 2 + 1) * (2 if channels > HALF_SPECTRA_ABOVE else 4) * channels**2


def forward_rows(forward: np.ndarray) -> np.ndarray:
    """[3B, N]: D's rows per bin b as Re, Im, -Re, for a product from half spectra (module docstring)."""
    real, imag = forward[0::2], forward[1::2]
    return np.stack([real, imag, -real], axis=1).reshape(3 * len(real), forward.shape[1])


def kernel_spectra(taps: int, dilation: int, points: int) -> tuple[np.ndarray, np.ndarray]:
    """[k, B] cos and sin of tap j's phase at bin b (tap j sits at j * dilation): conj(DFT(w)) = w @ cos + i w @ sin."""
    phase = 2 * np.pi * np.outer(np.arange(taps) * dilation, np.arange(points // 2 + 1)) / points
    return np.cos(phase), np.sin(phase)


def _frames(x: te.Tensor, points: int, step: int, tiles, left: int) -> te.Tensor:
    """F[c, n, u, t] = x[u, c, t * step + n - left], zero outside x: utterance u's T = `tiles` tiles; reshaped to
    [C, N, B T] (a view) the DFTs and the product run a batch as one wider utterance."""
    length = x.shape[2]

    def value(c, n, utterance, tile):
        at = tile * step + n - left
        inside = tirx.all(at >= 0, at < length)
        return tirx.if_then_else(inside, x[utterance, c, tirx.if_then_else(inside, at, 0)], tirx.const(0, x.dtype))

    return te.compute((x.shape[1], points, x.shape[0], tiles), value, name="frames")


def _forward(dft: te.Tensor, frames: te.Tensor) -> te.Tensor:
    """X[c, j, t] = sum_n D[j, n] F[c, n, t] (rows: j, broadcast from D; columns: t)."""
    n = te.reduce_axis((0, frames.shape[1]), name="n")
    shape = (frames.shape[0], dft.shape[0], frames.shape[2])
    return te.compute(shape, lambda c, j, t: te.sum(dft[j, n] * frames[c, n, t], axis=n), name="forward_dft")


def _product(weights: te.Tensor, spectra: te.Tensor, halves: int) -> te.Tensor:
    """Y[b, r, t] = sum_(s, c) W[b, r, s C + c] X[c, 2 b + s, t]: each bin's complex product as one real one; from
    half spectra (`halves` = 2), Y[b, h O' + o, t] = sum_(s, c) W[b, o, s C + c] X[c, 3 b + h + s, t]."""
    channels, rows = spectra.shape[0], weights.shape[1]
    s, c = te.reduce_axis((0, 2), name="s"), te.reduce_axis((0, channels), name="c")

    def value(b, r, t):
        if halves == 1:
            return te.sum(weights[b, r, s * channels + c] * spectra[c, 2 * b + s, t], axis=[s, c])
        return te.sum(weights[b, r % rows, s * channels + c] * spectra[c, 3 * b + r // rows + s, t], axis=[s, c])

    return te.compute((weights.shape[0], halves * rows, spectra.shape[2]), value, name="spectral_product")


def _inverse(products: te.Tensor, idft: te.Tensor, outputs: int) -> te.Tensor:
    """y[o, t, q] = sum_(b, s) Y[b, s O' + o, t] E[2 b + s, q] for o < `outputs` (rows: tiles t; columns: a
    tile's outputs q); O' >= O: the product's rows per half, padded."""
    padded = products.shape[1] // 2
    b, s = te.reduce_axis((0, products.shape[0]), name="b"), te.reduce_axis((0, 2), name="s")
    shape = (outputs, products.shape[2], idft.shape[1])
    return te.compute(
        shape,
        lambda o, t, q: te.sum(products[b, s * padded + o, t] * idft[2 * b + s, q], axis=[b, s]),
        name="inverse_dft",
    )


def _keep_producers_out(builder, frames) -> None:
    """Mark the frames function opaque, so FuseOps leaves the elementwise work before the conv (AdaIN, Snake) in
    its own kernel: fused into the frames it ran once per frame sample, N / m = 4/3 times per input sample, and
    as a strided gather. Decoder alone, interleaved, on a Zen 2: 645 -> 638 ms at 96 frames, 2860 -> 2821 ms at
    416 (NOTES/performance.md)."""
    function = builder.lookup_binding(frames).args[0]
    builder.update_func(function, builder.get()[function].with_attr("op_pattern", OPAQUE))


def _chosen(call, mutator, choose):
    """(N, m, dilation, left pad) for a conv1d the pass takes, or None."""
    attrs, x, w = call.attrs, call.args[0], call.args[1]
    w_shape, x_shape = static_shape(w), shape_of(x)
    if w_shape is None or x_shape is None or not isinstance(x_shape[0], int) or int(attrs.groups) != 1:
        return None
    if attrs.data_layout != "NCW" or attrs.kernel_layout != "OIW" or ints(attrs.strides) != [1]:
        return None
    if str(x.ty.dtype) != "float32" or str(w.ty.dtype) != "float32" or min(w_shape[:2]) < MIN_CHANNELS:
        return None
    if attrs.out_dtype is not None and str(attrs.out_dtype) not in ("", "void", "float32"):
        return None
    if not from_weights_alone(mutator, w):
        return None
    (dilation,), (left, right) = ints(attrs.dilation), ints(attrs.padding)
    span = dilation * (w_shape[2] - 1) + 1
    chosen = choose(w_shape[2], dilation, max(w_shape[:2]), x_shape[2])
    return None if chosen is None or left + right != span - 1 else (*chosen, dilation, left)


def _product_weights(emit, w, points: int, dilation: int, rows: int | None, halves: int):
    """The product's weights from the conv's: [B, 2O', 2C] = [[Gr, -Gi], [Gi, Gr]] per bin, or [B, O', 2C] =
    [Gr, -Gi] where `halves` = 2, with zero rows so that each half fills whole register tiles of `rows`."""
    outputs, _, taps = static_shape(w)
    cos, sin = (relax.const(m.astype("float32")) for m in kernel_spectra(taps, dilation, points))
    real = emit(relax.op.permute_dims(relax.op.matmul(w, cos), [2, 0, 1]))  # [B, O, C]
    imag = emit(relax.op.permute_dims(relax.op.matmul(w, sin), [2, 0, 1]))
    if halves == 2:
        extra = -outputs % rows if rows else 0
        top = emit(relax.op.concat([real, relax.op.negative(imag)], axis=2))
        return emit(relax.op.nn.pad(top, pad_width=[0, 0, 0, extra, 0, 0])) if extra else top
    if extra := (-outputs % (rows // math.gcd(rows, 2)) if rows else 0):
        real, imag = (emit(relax.op.nn.pad(v, pad_width=[0, 0, 0, extra, 0, 0])) for v in (real, imag))
    top = relax.op.concat([real, relax.op.negative(imag)], axis=2)
    return emit(relax.op.concat([top, relax.op.concat([imag, real], axis=2)], axis=1))


def _in_frequency_domain(call, mutator, choose, rows: int | None, halved_above: int):
    """The conv1d `call` as overlap-save DFT products (module docstring), or the call itself."""
    chosen = _chosen(call, mutator, choose)
    if chosen is None:
        return call
    points, step, dilation, left = chosen
    x, w = call.args
    outputs, channels, _ = static_shape(w)
    length = shape_of(x)[2]
    builder = mutator.builder_
    halves = 2 if max(outputs, channels) > halved_above else 1
    product = _product_weights(builder.emit, w, points, dilation, rows, halves)
    forward, inverse = dft_matrices(points, step)
    if halves == 2:  # three rows a bin, zero rows after them to whole register tiles of `rows` (AVX2: 99 -> 102)
        forward = forward_rows(forward)
        forward = np.pad(forward, [(0, -len(forward) % rows if rows else 0), (0, 0)])
    forward, inverse = (relax.const(m.astype("float32")) for m in (forward, inverse))
    block = TILE_COLUMNS * step
    tiles = (length + block - 1) // block * TILE_COLUMNS
    frames = builder.emit_te(_frames, x, points, step, tiles, left, primfunc_name_hint="frames")
    _keep_producers_out(builder, frames)
    frames = builder.emit(relax.op.memory.view(frames, (channels, points, shape_of(x)[0] * tiles)))  # no copy
    spectra = builder.emit_te(_forward, forward, frames, primfunc_name_hint="forward_dft")
    mixed = builder.emit_te(_product, product, spectra, halves, primfunc_name_hint="spectral_product")
    full = builder.emit_te(_inverse, mixed, inverse, outputs, primfunc_name_hint="inverse_dft")
    batch = shape_of(x)[0]
    by_output = (1, outputs, tiles * step) if batch == 1 else (outputs, batch, tiles * step)
    full = builder.emit(relax.op.memory.view(full, by_output))  # no copy, as the frames'
    if batch > 1:  # utterance-major, as the conv's output
        full = builder.emit(relax.op.permute_dims(full, [1, 0, 2]))
    return relax.op.strided_slice(full, axes=[2], begin=[0], end=[length], assume_inbound=True)


def FrequencyDomainConvs(  # noqa: N802 (TVM pass naming)
    choose=None, rows: int | None = None, halved_above: int = HALF_SPECTRA_ABOVE
):
    """Every float32 conv1d (a static batch, stride 1, no groups, output as long as the input, 64 channels or
    more) by a kernel computed from the function's weights alone for whose taps, dilation, channels and length
    `choose` (default: `chosen_tiling`) gives tiles (N, m), as overlap-save products of N-point DFTs, from half
    spectra where the conv is wider than `halved_above` channels. `rows`: the register tile's rows where the
    product's rows are padded to whole tiles (pipeline.aligned_conv_rows)."""
    choose = choose or chosen_tiling
    return call_rewriting_pass(
        "FrequencyDomainConvs",
        "relax.nn.conv1d",
        lambda call, m: _in_frequency_domain(call, m, choose, rows, halved_above),
        with_mutator=True,
    )
