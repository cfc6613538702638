"""Padding experiments behind notebooks 03 (masked LSTM) and 04 (masked AdaIN): the failure of padded
semantics, and the masked versions that fix it. float64 throughout, so every error shown is the method's,
not rounding's."""

from __future__ import annotations

import time

import numpy as np
import torch

from kokoro_tvm.compiler.export import component_module
from kokoro_tvm.compiler.ops.lstm import masked_lstm
from kokoro_tvm.compiler.ops.masked_norm import masked_instance_norm
from kokoro_tvm.compiler.patches import export_patches
from kokoro_tvm.compiler.pipeline import compile_stock
from kokoro_tvm.reference.pt_dynamic import default_dtype, explicit_sine_noise_tensors

F64 = torch.float64


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.linalg.norm(a - b) / torch.linalg.norm(b))


def lstm_padding_sweep(valid: int = 32, pad_fractions=(0.0, 0.25, 0.5, 0.75, 0.9), seed: int = 0) -> list[dict]:
    """A bidirectional LSTM run over a zero-padded sequence (padded semantics) against the same LSTM on the
    valid steps only; forward and reverse halves separately, then the masked LSTM."""
    g = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        lstm = torch.nn.LSTM(16, 8, batch_first=True, bidirectional=True, dtype=F64)
    x = torch.randn(1, valid, 16, dtype=F64, generator=g)
    rows = []
    with torch.no_grad():
        want, _ = lstm(x)
        for fraction in pad_fractions:
            total = int(round(valid / (1 - fraction))) if fraction < 1 else valid
            padded = torch.cat([x, torch.zeros(1, total - valid, 16, dtype=F64)], dim=1)
            plain, _ = lstm(padded)
            ours = masked_lstm(padded, torch.tensor([valid]), lstm)
            rows.append(
                {
                    "pad_fraction": round(1 - valid / total, 3),
                    "bucket": total,
                    "forward_rel_err": _rel(plain[..., :8][:, :valid], want[..., :8]),
                    "reverse_rel_err": _rel(plain[..., 8:][:, :valid], want[..., 8:]),
                    "masked_rel_err": _rel(ours[:, :valid], want),
                }
            )
    return rows


class _MaskedLSTM(torch.nn.Module):
    def __init__(self, lstm: torch.nn.LSTM):
        super().__init__()
        self.lstm = lstm

    def forward(self, x, lengths):
        return masked_lstm(x, lengths, self.lstm)


def masked_lstm_build_cost(steps_list=(64, 1024), hidden: int = 256) -> list[dict]:
    """Relax lines and build seconds of one masked LSTM (Kokoro's size) at several T: both flat in T."""
    from kokoro_tvm.compiler.converters import to_relax

    rows = []
    for steps in steps_list:
        with torch.random.fork_rng():
            torch.manual_seed(0)
            module = _MaskedLSTM(torch.nn.LSTM(2 * hidden, hidden, batch_first=True, bidirectional=True))
        start = time.perf_counter()
        mod = to_relax(torch.export.export(module, (torch.randn(1, steps, 2 * hidden), torch.tensor([steps]))))
        compile_stock(mod)
        rows.append(
            {
                "T": steps,
                "relax_lines": len(mod.script().splitlines()),
                "build_s": round(time.perf_counter() - start, 2),
            }
        )
    return rows


def instance_norm_drift(valid: int = 64, pad_fractions=(0.0, 0.25, 0.5, 0.75, 0.9), seed: int = 0) -> list[dict]:
    """InstanceNorm over a zero-padded signal: how its statistics drift from the valid frames' own, and the
    resulting error on the valid frames, against the masked norm."""
    g = torch.Generator().manual_seed(seed)
    norm = torch.nn.InstanceNorm1d(8).eval()
    x = 0.5 + torch.randn(1, 8, valid, dtype=F64, generator=g)
    rows = []
    with torch.no_grad():
        want = norm(x)
        for fraction in pad_fractions:
            total = int(round(valid / (1 - fraction)))
            padded = torch.cat([x, torch.zeros(1, 8, total - valid, dtype=F64)], dim=-1)
            rows.append(
                {
                    "pad_fraction": round(1 - valid / total, 3),
                    "mean_ratio": float(padded.mean() / x.mean()),
                    "std_ratio": float(padded.std() / x.std()),
                    "plain_rel_err": _rel(norm(padded)[..., :valid], want),
                    "masked_rel_err": _rel(
                        masked_instance_norm(norm, padded, torch.tensor([valid]))[..., :valid], want
                    ),
                }
            )
    return rows


def decoder_inputs(frames: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Plausible decoder inputs (asr, F0 with an unvoiced start, N, style, phase, additive noise), float64."""
    g = torch.Generator().manual_seed(seed)
    asr = torch.randn(1, 512, frames, dtype=F64, generator=g)
    f0 = 100 + 50 * torch.rand(1, 2 * frames, dtype=F64, generator=g)
    f0[:, : max(1, frames // 3)] = 0
    phase = torch.rand(1, 9, dtype=F64, generator=g)
    phase[:, 0] = 0
    return (
        asr,
        f0,
        torch.randn(1, 2 * frames, dtype=F64, generator=g),
        torch.randn(1, 128, dtype=F64, generator=g),
        phase,
        torch.randn(1, 600 * frames, 9, dtype=F64, generator=g),
    )


def decoder_padding_sweep(model, frames: int, buckets, seed: int = 0, garbage_seed: int | None = None) -> list[dict]:
    """kokoro's decoder on zero-padded inputs (padded semantics) and our padding-invariant decoder component
    on padded inputs (zeros, or garbage when garbage_seed is set), each against kokoro on the valid frames.
    `model` must be float64 and on CustomSTFT."""

    asr, f0, n, s, phase, additive = decoder_inputs(frames, seed)
    component = component_module(model, "decoder")
    g = torch.Generator().manual_seed(garbage_seed or 0)
    rows = []
    with torch.no_grad(), default_dtype(F64):
        with explicit_sine_noise_tensors(model.decoder, phase, additive):
            want = model.decoder(asr, f0, n, s).reshape(-1)
        for bucket in buckets:
            pad = bucket - frames

            def tail(*shape):
                if garbage_seed is None:
                    return torch.zeros(*shape, dtype=F64)
                return 100 * torch.randn(*shape, dtype=F64, generator=g)

            padded = (
                torch.cat([asr, tail(1, 512, pad)], -1),
                torch.cat([f0, tail(1, 2 * pad).abs()], -1),
                torch.cat([n, tail(1, 2 * pad)], -1),
                s,
                phase,
                torch.cat([additive, tail(1, 600 * pad, 9)], 1),
            )
            with explicit_sine_noise_tensors(model.decoder, phase, padded[-1]):
                stock = model.decoder(*padded[:4]).reshape(-1)[: want.shape[0]]
            with export_patches(model):
                ours = component(*padded, torch.tensor([frames])).reshape(-1)[: want.shape[0]]
            rows.append(
                {
                    "bucket": bucket,
                    "pad_fraction": round(pad / bucket, 3),
                    "stock_corr": float(np.corrcoef(stock.numpy(), want.numpy())[0, 1]),
                    "stock_snr_db": float(10 * torch.log10((want**2).sum() / ((stock - want) ** 2).sum())),
                    "masked_snr_db": float(10 * torch.log10((want**2).sum() / ((ours - want) ** 2).sum())),
                }
            )
    return rows
