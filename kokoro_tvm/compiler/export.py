"""torch side of compilation: one wrapper module per component of kokoro_tvm.components, and export.

The registry says what each component takes and returns; here each becomes a torch.nn.Module that calls
kokoro's own sub-modules. Only the glue around the six LSTMs is rewritten, because kokoro packs sequences
inline (`pack_padded_sequence` does not export): each LSTM becomes the length-aware custom op
`kokoro_tvm::masked_lstm`, which export keeps whole. Host-side steps (durations -> alignment) stay outside.
The reversible swaps export needs are in kokoro_tvm.compiler.patches.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from kokoro_tvm.compiler.ops.lstm import masked_lstm
from kokoro_tvm.compiler.ops.masked_norm import (
    PAD_TAILS,
    masked_adain_resblock,
    masked_adain_resblock1,
    nearest_repeat,
    zero_tail,
)
from kokoro_tvm.compiler.patches import ExportableCustomSTFT, export_patches
from kokoro_tvm.components import REGISTRY, component
from kokoro_tvm.config import SAMPLES_PER_FRAME
from kokoro_tvm.reference.pt_dynamic import ExplicitNoiseSource, default_dtype

# The generator's time axes are padded to a multiple of this (its 120F + 1 stage would otherwise leave every
# kernel a ragged vector tail); the masks make the extra frames invisible to the valid ones.
GENERATOR_ALIGN = 32


def _aligned(steps: int) -> int:
    return -(-steps // GENERATOR_ALIGN) * GENERATOR_ALIGN


def _pad_right(x: torch.Tensor, steps: int) -> torch.Tensor:
    return F.pad(x, (0, steps - x.shape[-1])) if steps > x.shape[-1] else x


def padding_mask(lengths: torch.Tensor, steps: int) -> torch.Tensor:
    """[B, steps] bool, True where the step is padding (index >= length)."""
    return torch.arange(steps, device=lengths.device)[None, :] >= lengths[:, None]


def linear_resample(x: torch.Tensor, steps, scale: float) -> torch.Tensor:
    """`F.interpolate(x, scale_factor=s, mode="linear")` (align_corners=False) on [B, C, L] -> [B, C, steps],
    written as the same arithmetic PyTorch's CPU kernel does: source position (j + 0.5) / s - 0.5 in x's
    dtype, clamped at 0, its two neighbours gathered and mixed. It exports with a symbolic length, where
    interpolate's float output size does not (`sym_float`, `truediv`, `trunc`)."""
    length = x.shape[-1]
    ratio = float(np.asarray(1.0 / scale, dtype=str(x.dtype).removeprefix("torch.")))  # in x's dtype, as torch
    # one rounding to x's dtype at the end, as torch's fused multiply-add (float64 holds the float32 case exactly)
    position = ((torch.arange(steps, device=x.device, dtype=torch.float64) + 0.5) * ratio - 0.5).to(x.dtype)
    position = position.clamp(min=0)
    # torch clamps the left neighbour to L - 1; for SineGen's integer scales it never exceeds it (the last
    # position is L - 1/2 - 1/(2s) up, (L/s - 1/2) s - 1/2 down), and the right neighbour past the end is
    # the last sample again: x gets one replicated sample instead of a clamp to a symbolic bound
    left = position.floor().to(torch.int64)
    weight = (position - left.to(x.dtype)).clamp(0, 1)
    extended = torch.cat([x, x[..., length - 1 :]], dim=-1)
    return mix_neighbours(extended.index_select(-1, left), extended.index_select(-1, left + 1), weight)


def mix_neighbours(left: torch.Tensor, right: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """left * (1 - weight) + right * weight rounded as PyTorch's CPU kernel (its AVX2 / AVX-512 build) rounds it:
    the right product rounded, then the left product added to it in one fused multiply-add. In float32 that
    is computed in float64, where the left product of two float32 is exact, and rounded to float32 (which
    differs from the fused rounding only where the float64 sum falls exactly half-way between two float32
    values: none of 3.85 million phase samples in tests/test_symbolic.py's check). It matters for
    SineGen's upsampled phase, which reaches 1e6 rad: one float32 ulp there is 0.06-0.125 rad, and the other
    roundings (unfused, or fused the other way round, as LLVM and nvcc may contract the plain expression) put
    17-22% of the samples one ulp off PyTorch's."""
    right_product = right * weight
    if left.dtype != torch.float32:  # float64 builds: the verification reference, already exact to 1e-12
        return left * (1 - weight) + right_product
    fused = left.double() * (1 - weight).double() + right_product.double()
    return fused.to(torch.float32)


class ExportableNoiseSource(ExplicitNoiseSource):
    """ExplicitNoiseSource with SineGen's two interpolations as `linear_resample` (same arithmetic)."""

    def downsample(self, x):
        return linear_resample(x, x.shape[-1] // self.upsample_scale, 1 / self.upsample_scale)

    def upsample(self, x):
        return linear_resample(x, x.shape[-1] * self.upsample_scale, self.upsample_scale)


class AlbertComponent(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.bert, self.bert_encoder = model.bert, model.bert_encoder

    def forward(self, input_ids, attention_mask):
        # position and token-type ids passed explicitly (the values ALBERT would take from its 512-long
        # buffers): slicing a buffer to a symbolic length does not import
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)[None, :].expand_as(input_ids)
        hidden = self.bert(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=torch.zeros_like(input_ids),
            position_ids=positions,
        )
        return self.bert_encoder(hidden).transpose(-1, -2)


class DurationComponent(torch.nn.Module):
    """predictor.text_encoder (DurationEncoder) + predictor.lstm + duration_proj."""

    def __init__(self, model):
        super().__init__()
        self.encoder = model.predictor.text_encoder
        self.lstm, self.duration_proj = model.predictor.lstm, model.predictor.duration_proj

    def forward(self, d_en, style, token_lengths):
        steps = d_en.shape[-1]
        pad = padding_mask(token_lengths, steps)  # [B, T]
        s = style[None].expand(steps, -1, -1)  # [T, B, 128]
        x = torch.cat([d_en.permute(2, 0, 1), s], dim=-1)  # [T, B, 640]
        x = x.masked_fill(pad.T[..., None], 0.0).permute(1, 2, 0)  # [B, 640, T]
        for block in self.encoder.lstms:
            if isinstance(block, torch.nn.LSTM):
                x = masked_lstm(x.transpose(-1, -2), token_lengths, block).transpose(-1, -2)  # [B, 512, T]
            else:  # AdaLayerNorm, then the style is appended again
                x = block(x.transpose(-1, -2), style).transpose(-1, -2)
                x = torch.cat([x, s.permute(1, 2, 0)], dim=1).masked_fill(pad[:, None, :], 0.0)
        d = x.transpose(-1, -2)  # [B, T, 640]
        duration_logits = self.duration_proj(masked_lstm(d, token_lengths, self.lstm))
        return duration_logits, d


class F0NComponent(torch.nn.Module):
    """predictor.F0Ntrain, padding-invariant: shared LSTM over each sample's frames, then the F0 and N AdaIN
    branches with masked InstanceNorm and re-zeroed tails (x2 upsampling inside: 2F valid outputs)."""

    def __init__(self, model):
        super().__init__()
        p = model.predictor
        self.shared, self.F0, self.N, self.F0_proj, self.N_proj = p.shared, p.F0, p.N, p.F0_proj, p.N_proj

    def forward(self, en, style, frame_lengths):
        x = masked_lstm(en.transpose(-1, -2), frame_lengths, self.shared).transpose(-1, -2)  # [B, 512, F]
        f0, f0_lengths = x, frame_lengths
        for block in self.F0:
            f0, f0_lengths = masked_adain_resblock(block, f0, style, f0_lengths)
        n, n_lengths = x, frame_lengths
        for block in self.N:
            n, n_lengths = masked_adain_resblock(block, n, style, n_lengths)
        f0 = zero_tail(self.F0_proj(f0), f0_lengths)
        return f0.squeeze(1), zero_tail(self.N_proj(n), n_lengths).squeeze(1)


class TextEncoderComponent(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.text_encoder = model.text_encoder

    def forward(self, input_ids, token_lengths):
        enc = self.text_encoder
        pad = padding_mask(token_lengths, input_ids.shape[1])[:, None, :]  # [B, 1, T]
        x = enc.embedding(input_ids).transpose(1, 2).masked_fill(pad, 0.0)  # [B, 512, T]
        for cnn in enc.cnn:
            x = cnn(x).masked_fill(pad, 0.0)
        x = masked_lstm(x.transpose(1, 2), token_lengths, enc.lstm).transpose(-1, -2)
        return x.masked_fill(pad, 0.0)


class DecoderComponent(torch.nn.Module):
    """kokoro's Decoder and iSTFTNet Generator, padding-invariant, with SineGen's randomness as inputs.

    Resolutions, with F = frame_lengths: asr and decoder blocks F, F0/N curves and the generator input 2F,
    SineGen 600F samples (2F at its coarse phase), STFT frames 120F + 1, first upsample 20F, second upsample
    120F (+1 after the reflection pad), audio 600F. At each, the tail past the valid length is re-zeroed (or,
    before the STFT's centre pad, filled as that pad fills it), so valid outputs equal the unpadded model's.
    The two upsampled stages are zero-padded to a multiple of GENERATOR_ALIGN (the same masks hide the extra
    frames) and the audio is cut back to 600F.
    """

    def __init__(self, model):
        super().__init__()
        self.decoder = model.decoder

    def forward(self, asr, F0, N, style, initial_phase, additive_noise, frame_lengths):
        dec = self.decoder
        curve_lengths = 2 * frame_lengths
        asr = zero_tail(asr, frame_lengths)
        f0_curve = zero_tail(F0[:, None, :], curve_lengths)  # [B, 1, 2F]
        f0 = zero_tail(dec.F0_conv(f0_curve), frame_lengths)
        n = zero_tail(dec.N_conv(zero_tail(N[:, None, :], curve_lengths)), frame_lengths)
        x, lengths = masked_adain_resblock(dec.encode, torch.cat([asr, f0, n], dim=1), style, frame_lengths)
        asr_res = zero_tail(dec.asr_res(asr), frame_lengths)
        residual = True
        for block in dec.decode:
            if residual:
                x = torch.cat([x, asr_res, f0, n], dim=1)
            x, lengths = masked_adain_resblock(block, x, style, lengths)
            residual = block.upsample_type == "none"
        audio = self._generate(x, style, f0_curve, frame_lengths, initial_phase, additive_noise)
        return audio.reshape(audio.shape[0], -1)

    def _generate(self, x, style, f0_curve, frame_lengths, initial_phase, additive_noise):
        gen = self.decoder.generator
        stft = gen.stft.stft if isinstance(gen.stft, ExportableCustomSTFT) else gen.stft  # under export_patches
        samples = frame_lengths * SAMPLES_PER_FRAME
        stft_frames = samples // stft.hop_length + 1
        source = ExportableNoiseSource(gen.m_source, initial_phase, additive_noise)
        f0 = nearest_repeat(f0_curve, int(gen.f0_upsamp.scale_factor)).transpose(1, 2)  # [B, 600F, 1]
        sine_waves, _ = source.sine_waves(f0, valid_steps=2 * frame_lengths)
        har_source = source.l_tanh(source.l_linear(sine_waves)).transpose(1, 2).squeeze(1)  # [B, 600F]
        spec, phase = ExportableCustomSTFT(stft).transform(PAD_TAILS[stft.pad_mode](har_source, samples))
        har = zero_tail(torch.cat([spec, phase], dim=1), stft_frames)
        lengths = 2 * frame_lengths
        for i in range(gen.num_upsamples):
            x = F.leaky_relu(x, negative_slope=0.1)
            x = gen.ups[i](x)
            lengths = lengths * gen.ups[i].stride[0]
            if i == gen.num_upsamples - 1:
                x, lengths = gen.reflection_pad(x), lengths + 1
            conv = gen.noise_convs[i]
            source_lengths = (stft_frames + 2 * conv.padding[0] - conv.kernel_size[0]) // conv.stride[0] + 1
            x_source = conv(har)
            steps = _aligned(max(x.shape[-1], x_source.shape[-1]))
            x_source = zero_tail(_pad_right(x_source, steps), source_lengths)
            x_source = masked_adain_resblock1(gen.noise_res[i], x_source, style, source_lengths)
            x = zero_tail(_pad_right(x, steps), lengths) + x_source
            blocks = gen.resblocks[i * gen.num_kernels : (i + 1) * gen.num_kernels]
            x = sum(masked_adain_resblock1(b, x, style, lengths) for b in blocks) / gen.num_kernels
        x = gen.conv_post(F.leaky_relu(x))
        spec = zero_tail(torch.exp(x[:, : gen.post_n_fft // 2 + 1, :]), lengths)
        phase = torch.sin(x[:, gen.post_n_fft // 2 + 1 :, :])
        audio = stft.inverse(spec, phase)[..., : SAMPLES_PER_FRAME * f0_curve.shape[-1] // 2]  # drop alignment
        return zero_tail(audio, samples)


@dataclass(frozen=True)
class ComponentShape:
    """Static shape of one build: batch and the component's length (tokens T or frames F: its registry axis)."""

    component: str
    length: int
    batch: int = 1

    def __post_init__(self):
        component(self.component)  # a clear error for an unknown name
        if self.length < 1 or self.batch < 1:
            raise ValueError(f"length and batch must be positive, got {self.length}, {self.batch}")


def component_module(model, name: str) -> torch.nn.Module:
    """The registry's wrapper for component `name`, around `model`'s sub-modules, in eval mode."""
    return globals()[component(name).wrapper](model).eval()


def example_inputs(shape: ComponentShape, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """Inputs of the registry's shapes in `dtype` (values arbitrary but valid: full lengths, token ids < 178),
    drawn in input order from one seeded generator."""
    b, n = shape.batch, shape.length
    g = torch.Generator().manual_seed(0)
    tensors = []
    for spec in REGISTRY[shape.component].inputs:
        size = spec.concrete_shape(b, n)
        if spec.values == "ids":
            tensors.append(torch.randint(0, 178, size, generator=g))
        elif spec.values == "ones":
            tensors.append(torch.ones(size, dtype=torch.int64))
        elif spec.values == "lengths":
            tensors.append(torch.full(size, n, dtype=torch.int64))
        elif spec.values == "phase":
            tensors.append(torch.rand(size, generator=g, dtype=dtype))
        elif spec.values == "f0":
            tensors.append(torch.randn(size, generator=g, dtype=dtype).abs() * 200)
        else:
            tensors.append(torch.randn(size, generator=g, dtype=dtype))
    return tuple(tensors)


def export_component(model, shape: ComponentShape) -> torch.export.ExportedProgram:
    """torch.export one component at a static shape in the model's dtype, under export_patches.

    The model's dtype is also torch's default dtype while tracing, as in pt.dynamic: kokoro computes
    `rsqrt(torch.tensor(2))` in the default dtype, so a float64 graph traced under float32 would carry a
    float32-rounded constant (F0/N off by 4e-8 relative)."""
    dtype = next(model.parameters()).dtype
    module = component_module(model, shape.component)
    with export_patches(model), torch.no_grad(), default_dtype(dtype):
        return torch.export.export(module, example_inputs(shape, dtype))
