"""Each export fix against what it replaces, on the real model: the masked LSTM, the exportable STFT, the
explicit SineGen noise and the component wrappers (notebook 01)."""

from __future__ import annotations

import torch

from kokoro_tvm.compiler.export import component_module
from kokoro_tvm.compiler.ops.lstm import masked_lstm
from kokoro_tvm.compiler.patches import ExportableCustomSTFT, export_patches
from kokoro_tvm.reference.pt_dynamic import ExplicitNoiseSource, default_dtype


def _largest(*differences: torch.Tensor) -> float:
    return float(max(d.abs().max() for d in differences))


def _masked_lstm(model, g, seed: int, tokens: int, frames: int) -> float:
    lstm = model.text_encoder.lstm
    x = torch.randn(3, tokens, lstm.input_size, generator=g)
    lengths = torch.tensor([tokens, 1, tokens // 2])
    want = [
        torch.nn.functional.pad(lstm(x[b : b + 1, :n])[0], (0, 0, 0, tokens - n))
        for b, n in enumerate(lengths.tolist())
    ]
    return _largest(masked_lstm(x, lengths, lstm) - torch.cat(want))


def _stft(model, g, seed: int, tokens: int, frames: int) -> float:
    stft = model.decoder.generator.stft
    wave = torch.randn(2, 600, generator=g)
    (m0, p0), (m1, p1) = stft.transform(wave), ExportableCustomSTFT(stft).transform(wave)
    return _largest(m0 - m1, p0 - p1)


def _sine_noise(model, g, seed: int, tokens: int, frames: int) -> float:
    source = model.decoder.generator.m_source
    f0 = torch.rand(1, 1200, 1, generator=g) * 300
    torch.manual_seed(seed)
    stock, _, _ = source.l_sin_gen(f0)
    torch.manual_seed(seed)  # the draws SineGen made, in its order
    phase = torch.rand(1, 9)
    phase[:, 0] = 0
    additive = torch.empty(1, 9, 1200).transpose(1, 2).normal_()
    ours, _ = ExplicitNoiseSource(source, phase, additive).sine_waves(f0)
    return _largest(stock - ours)


def _text_encoder(model, g, seed: int, tokens: int, frames: int) -> float:
    ids = torch.randint(1, 178, (1, tokens), generator=g)
    full = torch.tensor([tokens])
    stock = model.text_encoder(ids, full, torch.zeros(1, tokens, dtype=torch.bool))
    with export_patches(model):
        ours = component_module(model, "text_encoder")(ids, full)
    return _largest(stock - ours)


def _f0n(model, g, seed: int, tokens: int, frames: int) -> float:
    en = torch.randn(1, 640, frames, generator=g)
    style = torch.randn(1, 128, generator=g)
    f0_stock, n_stock = model.predictor.F0Ntrain(en, style)
    f0_ours, n_ours = component_module(model, "f0n")(en, style, torch.tensor([frames]))
    return _largest(f0_stock - f0_ours, n_stock - n_ours)


FIXES = {  # what each fix is checked against, and the check
    "masked_lstm vs nn.LSTM per sample (lengths T, 1, T/2)": _masked_lstm,
    "ExportableCustomSTFT (torch.where) vs CustomSTFT (bool index_put)": _stft,
    "ExplicitNoiseSource vs stock SineGen (same draws)": _sine_noise,
    "text_encoder wrapper vs kokoro TextEncoder (pack_padded)": _text_encoder,
    "f0n wrapper vs kokoro F0Ntrain": _f0n,
}


def fix_checks(model, seed: int = 0, tokens: int = 12, frames: int = 10) -> list[dict]:
    """Each export fix against what it replaces, on `model` (float32): the maximum absolute difference."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad(), default_dtype(torch.float32):
        return [{"fix": fix, "max_abs_diff": check(model, g, seed, tokens, frames)} for fix, check in FIXES.items()]
