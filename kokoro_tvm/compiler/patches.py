"""Reversible patches export needs, on one model instance: nothing global is touched, nothing at import.

- `ExportableCustomSTFT`: kokoro's CustomSTFT with its boolean `index_put` written as `torch.where`.
- `folded_weight_norm`: weight-normed convs hold their computed weight (same values) instead of a hook.
- `export_patches`: both, undone on exit.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch.nn.utils.weight_norm import WeightNorm


class ExportableCustomSTFT(torch.nn.Module):
    """kokoro's CustomSTFT.transform with `phase[mask] = pi` written as `torch.where` (the importer rejects a
    boolean index_put); same values. Shares the wrapped module's bases; `inverse` is kokoro's own."""

    def __init__(self, stft):
        super().__init__()
        self.stft = stft

    def transform(self, waveform):
        s = self.stft
        if s.center:
            waveform = F.pad(waveform, (s.n_fft // 2, s.n_fft // 2), mode=s.pad_mode)
        x = waveform.unsqueeze(1)
        real = F.conv1d(x, s.weight_forward_real, stride=s.hop_length)
        imag = F.conv1d(x, s.weight_forward_imag, stride=s.hop_length)
        magnitude = torch.sqrt(real**2 + imag**2 + 1e-14)
        phase = torch.atan2(imag, real)
        phase = torch.where((imag == 0) & (real < 0), torch.full_like(phase, math.pi), phase)
        return magnitude, phase

    def inverse(self, magnitude, phase):
        return self.stft.inverse(magnitude, phase)


@contextlib.contextmanager
def folded_weight_norm(model):
    """Every weight-normed conv of `model` with its weight computed once (`torch._weight_norm(v, g)`, the
    very function kokoro's forward pre-hook calls each forward, so the values are identical) and stored as a
    plain parameter; the hooks and the g/v parameters are restored on exit. The compiled graph then holds
    weights instead of recomputing ~100 norms (a per-call cost independent of the utterance length)."""

    folded = []
    with torch.no_grad():
        for module in model.modules():
            for key, hook in list(module._forward_pre_hooks.items()):
                if not isinstance(hook, WeightNorm):
                    continue
                g, v = module._parameters.pop(hook.name + "_g"), module._parameters.pop(hook.name + "_v")
                del module._forward_pre_hooks[key]
                if hook.name in module.__dict__:
                    delattr(module, hook.name)  # the hook's last computed weight
                module.register_parameter(hook.name, torch.nn.Parameter(torch._weight_norm(v, g, hook.dim)))
                folded.append((module, key, hook, g, v))
    try:
        yield model
    finally:
        for module, key, hook, g, v in reversed(folded):
            del module._parameters[hook.name]
            module.register_parameter(hook.name + "_g", g)
            module.register_parameter(hook.name + "_v", v)
            module._forward_pre_hooks[key] = hook
            setattr(module, hook.name, hook.compute_weight(module))


@contextlib.contextmanager
def export_patches(model):
    """Export-friendly swaps on one model instance, undone on exit. Nothing global is touched."""
    generator = model.decoder.generator
    stock_stft = generator.stft
    if not hasattr(stock_stft, "weight_forward_real"):
        raise ValueError("export needs kokoro's CustomSTFT: load the model with disable_complex=True")
    generator.stft = ExportableCustomSTFT(stock_stft)
    try:
        with folded_weight_norm(model):
            yield model
    finally:
        generator.stft = stock_stft
