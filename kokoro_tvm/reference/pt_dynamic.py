"""PyTorch reference "pt.dynamic": `KModel.forward_with_tokens` on exact-length tensors, every stage exposed.

Differences from stock kokoro, each deliberate:
- SineGen's randomness comes from a `NoiseSource` (zero, seeded or given arrays) through
  `explicit_sine_noise`, a reversible swap of the decoder's source module. Given the arrays stock kokoro draws,
  the audio is bit-identical to stock (tests/test_reference.py checks it).
- Any dtype: in float64 the whole forward runs with float64 as torch's default dtype, because kokoro allocates
  scratch tensors (`torch.zeros` pads, the alignment) in the default dtype and would round through float32.
- `stock_forward` keeps stock random kokoro available for comparison (run-to-run noise floor).
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch
import torch.nn.functional as F

from kokoro_tvm.config import SAMPLES_PER_FRAME
from kokoro_tvm.reference.noise import NoiseSource, SineNoise, ZeroNoise
from kokoro_tvm.reference.stages import Stages


class ExplicitNoiseSource(torch.nn.Module):
    """`SourceModuleHnNSF` with SineGen's two random draws replaced by given tensors.

    Same arithmetic as kokoro's SineGen (including its float32 voiced/unvoiced mask); shares the wrapped
    module's `l_linear` weights. The noise branch output, which Generator discards, is returned as zeros.
    """

    def __init__(self, source: torch.nn.Module, initial_phase: torch.Tensor, additive: torch.Tensor):
        super().__init__()
        self.l_linear, self.l_tanh = source.l_linear, source.l_tanh
        gen = source.l_sin_gen
        self.sampling_rate, self.upsample_scale = gen.sampling_rate, gen.upsample_scale
        self.sine_amp, self.noise_std, self.voiced_threshold = gen.sine_amp, gen.noise_std, gen.voiced_threshold
        self.n_harmonics = gen.dim
        self.initial_phase = initial_phase  # [B, 9]
        self.additive = additive  # [B, L, 9]

    def sine_waves(self, f0: torch.Tensor, valid_steps: torch.Tensor | None = None):
        """f0 [B, L, 1] (already upsampled to the sample rate) -> (sine waves [B, L, 9], uv [B, L, 1]).

        valid_steps [B] (padded buckets): the number of valid steps at the coarse resolution (L / 300);
        the coarse phase past it is replaced by its last valid value, so the final upsampling interpolates
        exactly as the unpadded model's clamped index does at its end."""
        harmonics = torch.arange(1, self.n_harmonics + 1, dtype=f0.dtype, device=f0.device)
        rad = (f0 * harmonics / self.sampling_rate) % 1
        rad = torch.cat([rad[:, :1, :] + self.initial_phase[:, None, :], rad[:, 1:, :]], dim=1)
        rad = self.downsample(rad.transpose(1, 2))
        phase = torch.cumsum(rad.transpose(1, 2), dim=1) * 2 * torch.pi  # [B, L / 300, 9], causal
        if valid_steps is not None:
            steps = torch.arange(phase.shape[1], device=phase.device)[None, :, None]
            last = phase.gather(1, (valid_steps - 1)[:, None, None].expand(-1, 1, phase.shape[2]))
            phase = torch.where(steps < valid_steps[:, None, None], phase, last)
        phase = self.upsample(phase.transpose(1, 2) * self.upsample_scale).transpose(1, 2)
        uv = (f0 > self.voiced_threshold).type(torch.float32)
        noise_amp = uv * self.noise_std + (1 - uv) * self.sine_amp / 3
        return torch.sin(phase) * self.sine_amp * uv + noise_amp * self.additive, uv

    def downsample(self, x: torch.Tensor) -> torch.Tensor:
        """[B, C, L] -> [B, C, L / 300], SineGen's linear interpolation."""
        return F.interpolate(x, scale_factor=1 / self.upsample_scale, mode="linear")

    def upsample(self, x: torch.Tensor) -> torch.Tensor:
        """[B, C, L] -> [B, C, 300 L], SineGen's linear interpolation."""
        return F.interpolate(x, scale_factor=self.upsample_scale, mode="linear")

    def forward(self, f0: torch.Tensor):
        sine_waves, uv = self.sine_waves(f0)
        return self.l_tanh(self.l_linear(sine_waves)), torch.zeros_like(uv), uv


@contextlib.contextmanager
def explicit_sine_noise_tensors(decoder: torch.nn.Module, initial_phase: torch.Tensor, additive: torch.Tensor):
    """Run `decoder` with SineGen's randomness taken from the given tensors; restores the stock module."""
    generator = decoder.generator
    stock = generator.m_source
    generator.m_source = ExplicitNoiseSource(stock, initial_phase, additive)
    try:
        yield generator.m_source
    finally:
        generator.m_source = stock


def explicit_sine_noise(decoder: torch.nn.Module, noise: SineNoise):
    """explicit_sine_noise_tensors with a SineNoise, cast to the decoder's dtype."""
    dtype = next(decoder.parameters()).dtype
    return explicit_sine_noise_tensors(
        decoder, torch.as_tensor(noise.initial_phase, dtype=dtype), torch.as_tensor(noise.additive, dtype=dtype)
    )


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype):
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy()


def _duration_stage(model, input_ids: torch.Tensor, ref_s: torch.Tensor, speed: float):
    """ALBERT, the duration encoder, LSTM and projection at exact length: (d_en, d, logits, durations)."""
    n_tokens = input_ids.shape[1]
    input_lengths = torch.full((1,), n_tokens, dtype=torch.long)
    text_mask = torch.zeros((1, n_tokens), dtype=torch.bool)
    bert_dur = model.bert(input_ids, attention_mask=(~text_mask).int())
    d_en = model.bert_encoder(bert_dur).transpose(-1, -2)
    d = model.predictor.text_encoder(d_en, ref_s[:, 128:], input_lengths, text_mask)
    x, _ = model.predictor.lstm(d)
    duration_logits = model.predictor.duration_proj(x)
    duration = torch.sigmoid(duration_logits).sum(dim=-1) / speed
    return d_en, d, duration_logits, torch.round(duration).clamp(min=1).long().reshape(-1)


@torch.no_grad()
def predict_durations(model, padded_ids, style: np.ndarray, speed: float = 1.0) -> np.ndarray:
    """Frames per token as pt.dynamic predicts them (what sets the aligned-frame length), without the decoder."""
    dtype = next(model.parameters()).dtype
    with default_dtype(dtype):
        input_ids = torch.as_tensor(np.asarray(padded_ids, dtype=np.int64))[None]
        ref_s = torch.as_tensor(np.asarray(style).reshape(1, -1), dtype=dtype)
        return _np(_duration_stage(model, input_ids, ref_s, speed)[3])


@torch.no_grad()
def run_stages(
    model,
    padded_ids,
    style: np.ndarray,
    speed: float = 1.0,
    noise: NoiseSource | None = None,
    stream: int = 0,
) -> Stages:
    """pt.dynamic: forward_with_tokens semantics for one utterance, batch 1, in the model's dtype.

    padded_ids: token ids with the pad token at both ends; style: the voice's [1, 256] row.
    """
    noise = noise or ZeroNoise()
    dtype = next(model.parameters()).dtype
    with default_dtype(dtype):
        input_ids = torch.as_tensor(np.asarray(padded_ids, dtype=np.int64))[None]  # [1, T]
        n_tokens = input_ids.shape[1]
        ref_s = torch.as_tensor(np.asarray(style).reshape(1, -1), dtype=dtype)
        input_lengths = torch.full((1,), n_tokens, dtype=torch.long)
        text_mask = torch.zeros((1, n_tokens), dtype=torch.bool)  # exact length: nothing is padding
        d_en, d, duration_logits, durations = _duration_stage(model, input_ids, ref_s, speed)
        s = ref_s[:, 128:]
        alignment = torch.repeat_interleave(torch.arange(n_tokens), durations)
        one_hot = torch.zeros((n_tokens, alignment.shape[0]), dtype=dtype)
        one_hot[alignment, torch.arange(alignment.shape[0])] = 1
        en = d.transpose(-1, -2) @ one_hot[None]
        F0, N = model.predictor.F0Ntrain(en, s)
        t_en = model.text_encoder(input_ids, input_lengths, text_mask)
        asr = t_en @ one_hot[None]
        sine_noise = noise.sine_noise(alignment.shape[0] * SAMPLES_PER_FRAME, batch=1, stream=stream)
        with explicit_sine_noise(model.decoder, sine_noise):
            audio = model.decoder(asr, F0, N, ref_s[:, :128]).reshape(-1)
    return Stages(
        token_ids=_np(input_ids[0]),
        style=_np(ref_s),
        d_en=_np(d_en),
        d=_np(d),
        duration_logits=_np(duration_logits),
        durations=_np(durations),
        alignment=_np(alignment),
        en=_np(en),
        F0=_np(F0),
        N=_np(N),
        t_en=_np(t_en),
        asr=_np(asr),
        audio=_np(audio),
        noise=noise.description,
    )


@torch.no_grad()
def stock_forward(model, padded_ids, style: np.ndarray, speed: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Stock kokoro `forward_with_tokens` (random SineGen noise from torch's global RNG): (audio, durations)."""
    input_ids = torch.as_tensor(np.asarray(padded_ids, dtype=np.int64))[None]
    ref_s = torch.as_tensor(np.asarray(style).reshape(1, -1), dtype=torch.float32)
    audio, durations = model.forward_with_tokens(input_ids, ref_s, speed)
    return _np(audio.reshape(-1)), _np(durations.reshape(-1))
